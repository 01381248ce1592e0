package hostapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"time"
)

// Operation is a Host API v2 Operation as a test reads it: the members of
// gen/api's Operation (schemas/operation.json), with the times as the host
// wrote them and progress as a map, so that a test can report a malformed
// value or a missing member of another host instead of failing to decode.
type Operation struct {
	ID             string   `json:"id"`
	Kind           string   `json:"kind"`
	ResourceUID    string   `json:"resourceUid"`
	State          string   `json:"state"`
	Effect         string   `json:"effect"`
	Error          *Problem `json:"error"`
	IdempotencyKey string   `json:"idempotencyKey"`
	CreateTime     string   `json:"createTime"`
	UpdateTime     string   `json:"updateTime"`
	// Progress is a host extension's report (@ext-purge, @ext-redrive,
	// @ext-forensics): its counts, a true flag as 1; ProgressGroup its
	// dead-letter group.
	Progress      Progress `json:"progress"`
	ProgressGroup string   `json:"-"`
}

// Progress is an Operation's progress: the numbers (and true flags, as 1)
// it reports; text members are dropped (Operation.ProgressGroup).
type Progress map[string]int

func (p *Progress) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*p = Progress{}
	for k, v := range raw {
		switch v := v.(type) {
		case float64:
			(*p)[k] = int(v)
		case bool:
			if v {
				(*p)[k] = 1
			}
		}
	}
	return nil
}

func (o *Operation) UnmarshalJSON(b []byte) error {
	type plain Operation
	var raw struct {
		plain
		Progress struct {
			Group string `json:"group"`
		} `json:"progress"`
	}
	if err := json.Unmarshal(b, &raw.plain); err != nil {
		return err
	}
	_ = json.Unmarshal(b, &raw)
	*o = Operation(raw.plain)
	o.ProgressGroup = raw.Progress.Group
	return nil
}

// Terminal reports whether the Operation is done: succeeded or failed. A
// reconciling Operation is not (spec/host-api.md §Operations: it answers
// with Retry-After, its resource stays busy, the reconciler re-drives it).
func (o *Operation) Terminal() bool { return o.State == "succeeded" || o.State == "failed" }

// PairOK reports whether state and effect pair as Host API v2 allows.
func (o *Operation) PairOK() bool { return o.CheckPair() == nil }

// allowedPairs is Host API v2's state/effect pairing.
var allowedPairs = map[string][]string{
	"pending":     {"none"},
	"running":     {"none", "partial", "unknown"},
	"reconciling": {"unknown"},
	"succeeded":   {"applied", "none"},
	"failed":      {"none", "partial"},
}

// CheckPair fails for a state/effect combination Host API v2 forbids.
func (o *Operation) CheckPair() error {
	for _, e := range allowedPairs[o.State] {
		if e == o.Effect {
			return nil
		}
	}
	return fmt.Errorf("operation %s has state %q with effect %q, which Host API v2 does not allow", o.ID, o.State, o.Effect)
}

var locationRE = regexp.MustCompile(`/v2/spaces/([a-z0-9-]+)/operations/([^/?#]+)$`)

// AcceptedOperation checks that r is 202 with an Operation and a Location
// naming it, and returns the Operation.
func AcceptedOperation(r *Response) (*Operation, error) {
	if r.Status != 202 {
		return nil, fmt.Errorf("want 202 Accepted, got %s", r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return nil, err
	}
	if op.ID == "" {
		return nil, fmt.Errorf("202 without an Operation id: %s", r)
	}
	if err := op.CheckPair(); err != nil {
		return nil, err
	}
	loc := r.Header.Get("Location")
	u, err := url.Parse(loc)
	if err != nil || !locationRE.MatchString(u.Path) {
		return nil, fmt.Errorf("202 Location %q is not /v2/spaces/{space}/operations/{id}", loc)
	}
	if m := locationRE.FindStringSubmatch(u.Path); m[2] != url.PathEscape(op.ID) && m[2] != op.ID {
		return nil, fmt.Errorf("Location %q does not name Operation %q", loc, op.ID)
	}
	return &op, nil
}

// GetOperation reads an Operation once, long-polling up to wait seconds.
func GetOperation(ctx context.Context, c *Client, space, id string, wait int) (*Operation, *Response, error) {
	r, err := c.GetOperation(ctx, space, id, wait)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != 200 {
		return nil, r, fmt.Errorf("reading operation %s: %s", id, r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return nil, r, err
	}
	if err := op.CheckPair(); err != nil {
		return nil, r, err
	}
	if !op.Terminal() && r.Header.Get("Retry-After") == "" {
		return nil, r, fmt.Errorf("non-terminal operation %s (%s) answered without Retry-After", id, op.State)
	}
	return &op, r, nil
}

// WaitOperation long-polls an Operation until it is terminal or timeout
// passes.
func WaitOperation(ctx context.Context, c *Client, space, id string, timeout time.Duration) (*Operation, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		wait := int(left / time.Second)
		if wait > 10 {
			wait = 10
		}
		if wait < 0 {
			wait = 0
		}
		op, _, err := GetOperation(ctx, c, space, id, wait)
		if err != nil {
			return nil, err
		}
		if op.Terminal() {
			return op, nil
		}
		if time.Now().After(deadline) {
			return op, fmt.Errorf("operation %s still %s/%s after %s", id, op.State, op.Effect, timeout)
		}
		if wait == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
}
