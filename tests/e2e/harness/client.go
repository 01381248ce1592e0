package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Form URLs, matched exactly by the host.
const (
	FormQueue    = "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/"
	FormConsumer = "https://edge.forms.takoform.com/forms/QueueConsumer/0.3.0/"
	FormWorker   = "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/"
	FormVersion  = "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/"
)

// Response is one Host API answer.
type Response struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         []byte
	Problem      *Problem
}

// Problem is an RFC 9457 problem with the Host API's extension members.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	Code      string `json:"code"`
	RequestID string `json:"requestId"`
	Errors    []struct {
		Pointer string `json:"pointer"`
		Detail  string `json:"detail"`
	} `json:"errors"`
}

// Code is the problem code, "" when the answer is not a problem.
func (r *Response) Code() string {
	if r == nil || r.Problem == nil {
		return ""
	}
	return r.Problem.Code
}

// IsProblem reports whether the answer is application/problem+json with a
// decodable body.
func (r *Response) IsProblem() bool {
	return r.Problem != nil && strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json")
}

// JSON decodes the body into v.
func (r *Response) JSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("%s %s: body is not JSON (%v): %.300s", r.Method, r.Path, err, r.Body)
	}
	return nil
}

func (r *Response) String() string {
	if r == nil {
		return "<nil response>"
	}
	return fmt.Sprintf("%s %s -> %d %.400s", r.Method, r.Path, r.Status, r.Body)
}

// Client talks to the Host API with one bearer token.
type Client struct {
	Base  string
	Token string // "" sends no Authorization header
	HTTP  *http.Client
	// Timeout bounds one request; 30 s when zero.
	Timeout time.Duration
	// Record, when set, sees every response (the secrets test greps them).
	Record func(*Response)
}

// With returns a copy of c using another token.
func (c *Client) With(token string) *Client {
	cc := *c
	cc.Token = token
	return &cc
}

// Do sends one request. body is nil, []byte, string or a value encoded as
// JSON (then Content-Type is application/json).
func (c *Client) Do(ctx context.Context, method, path string, body any, hdr http.Header) (*Response, error) {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		case string:
			rd = strings.NewReader(b)
		default:
			enc, err := json.Marshal(b)
			if err != nil {
				return nil, err
			}
			rd = bytes.NewReader(enc)
		}
	}
	to := c.Timeout
	if to == 0 {
		to = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, vs := range hdr {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	r := &Response{Method: method, Path: path, Status: res.StatusCode, Header: res.Header, Body: b}
	if res.StatusCode >= 400 && strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		var p Problem
		if json.Unmarshal(b, &p) == nil {
			r.Problem = &p
		}
	}
	if c.Record != nil {
		c.Record(r)
	}
	return r, nil
}

var defaultHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 5 * time.Second}}

// Resource is the part of a resource the tests read.
type Resource struct {
	UID        string         `json:"uid"`
	Name       string         `json:"name"`
	Space      string         `json:"space"`
	FormURL    string         `json:"formUrl"`
	Spec       map[string]any `json:"spec"`
	Observed   map[string]any `json:"observed"`
	State      string         `json:"state"`
	Generation int64          `json:"generation"`
	ETag       string         `json:"etag"`
}

// Operation is a Host API Operation.
type Operation struct {
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	ResourceUID string   `json:"resourceUid"`
	State       string   `json:"state"`
	Effect      string   `json:"effect"`
	Error       *Problem `json:"error"`
}

// Terminal reports whether the Operation ended (succeeded or failed) or
// stays reconciling, the three end states the Forms allow.
func (o *Operation) Terminal() bool {
	return o.State == "succeeded" || o.State == "failed" || o.State == "reconciling"
}

// PairOK checks the state/effect pairing of spec/host-api.md §Operations.
func (o *Operation) PairOK() bool {
	switch o.State {
	case "pending":
		return o.Effect == "none"
	case "running":
		return o.Effect == "none" || o.Effect == "partial" || o.Effect == "unknown"
	case "reconciling":
		return o.Effect == "unknown"
	case "succeeded":
		return o.Effect == "applied" || o.Effect == "none"
	case "failed":
		return o.Effect == "none" || o.Effect == "partial"
	}
	return false
}

// Create posts a resource and waits for its Operation to succeed; it
// returns the resource UID.
func (c *Client) Create(ctx context.Context, space, name, form string, spec, private any) (string, error) {
	body := map[string]any{"name": name, "formUrl": form, "spec": spec}
	if private != nil {
		body["privateInputs"] = private
	}
	r, err := c.Do(ctx, "POST", "/v2/spaces/"+space+"/resources", body, nil)
	if err != nil {
		return "", err
	}
	if r.Status != 202 {
		return "", fmt.Errorf("create %s: %s", name, r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return "", err
	}
	fin, err := c.WaitOp(ctx, space, op.ID, 30*time.Second)
	if err != nil {
		return "", err
	}
	if fin.State != "succeeded" {
		return "", fmt.Errorf("create %s: operation %s ended %s/%s: %+v", name, op.ID, fin.State, fin.Effect, fin.Error)
	}
	return op.ResourceUID, nil
}

// Put replaces a resource's spec and waits for the Operation to succeed.
func (c *Client) Put(ctx context.Context, space, uid string, spec any) error {
	r, err := c.Do(ctx, "PUT", "/v2/spaces/"+space+"/resources/"+uid, map[string]any{"spec": spec}, nil)
	if err != nil {
		return err
	}
	if r.Status != 202 {
		return fmt.Errorf("put %s: %s", uid, r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return err
	}
	fin, err := c.WaitOp(ctx, space, op.ID, 30*time.Second)
	if err != nil {
		return err
	}
	if fin.State != "succeeded" {
		return fmt.Errorf("put %s: operation ended %s/%s: %+v", uid, fin.State, fin.Effect, fin.Error)
	}
	return nil
}

// Delete deletes a resource and waits for the Operation to succeed.
func (c *Client) Delete(ctx context.Context, space, uid string) error {
	r, err := c.Do(ctx, "DELETE", "/v2/spaces/"+space+"/resources/"+uid, nil, nil)
	if err != nil {
		return err
	}
	if r.Status != 202 {
		return fmt.Errorf("delete %s: %s", uid, r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return err
	}
	fin, err := c.WaitOp(ctx, space, op.ID, 30*time.Second)
	if err != nil {
		return err
	}
	if fin.State != "succeeded" {
		return fmt.Errorf("delete %s: operation ended %s/%s: %+v", uid, fin.State, fin.Effect, fin.Error)
	}
	return nil
}

// WaitOp long-polls an Operation until it is terminal or timeout passes
// (then it returns the last state read).
func (c *Client) WaitOp(ctx context.Context, space, id string, timeout time.Duration) (*Operation, error) {
	deadline := time.Now().Add(timeout)
	var last *Operation
	for {
		wait := int(time.Until(deadline).Seconds())
		if wait > 10 {
			wait = 10
		}
		if wait < 0 {
			wait = 0
		}
		r, err := c.Do(ctx, "GET", fmt.Sprintf("/v2/spaces/%s/operations/%s?wait=%d", space, id, wait), nil, nil)
		if err == nil {
			if r.Status != 200 {
				return nil, fmt.Errorf("get operation %s: %s", id, r)
			}
			var op Operation
			if err := r.JSON(&op); err != nil {
				return nil, err
			}
			last = &op
			if op.State == "succeeded" || op.State == "failed" {
				return &op, nil
			}
		}
		if time.Now().After(deadline) {
			if last == nil {
				return nil, fmt.Errorf("operation %s: %v", id, err)
			}
			return last, nil
		}
		if err != nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Get reads one resource.
func (c *Client) Get(ctx context.Context, space, uid string) (*Resource, *Response, error) {
	r, err := c.Do(ctx, "GET", "/v2/spaces/"+space+"/resources/"+uid, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != 200 {
		return nil, r, fmt.Errorf("get %s: %s", uid, r)
	}
	var res Resource
	if err := r.JSON(&res); err != nil {
		return nil, r, err
	}
	return &res, r, nil
}

// List lists a space's resources.
func (c *Client) List(ctx context.Context, space string) ([]Resource, error) {
	r, err := c.Do(ctx, "GET", "/v2/spaces/"+space+"/resources", nil, nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 200 {
		return nil, fmt.Errorf("list %s: %s", space, r)
	}
	var l struct {
		Items []Resource `json:"items"`
	}
	if err := r.JSON(&l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Ref is a {resourceUid} reference.
func Ref(uid string) map[string]any { return map[string]any{"resourceUid": uid} }

// Principal is one host.json principal with its clear token.
type Principal struct {
	Name   string
	Token  string
	Grants []Grant
}

// Grant is one host.json grant.
type Grant struct {
	Space string   `json:"space"`
	Role  string   `json:"role"`
	Forms []string `json:"forms,omitempty"`
}

// NewToken returns a random bearer token.
func NewToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "tok-" + hex.EncodeToString(b)
}

// WriteHostJSON writes <dataDir>/host.json with the principals (tokens
// stored as SHA-256 hex, the documented format) and allowed fetch hosts.
func WriteHostJSON(dataDir string, ps []Principal, allowFetch []string) error {
	type jp struct {
		Name        string  `json:"name"`
		TokenSha256 string  `json:"tokenSha256"`
		Grants      []Grant `json:"grants"`
	}
	doc := struct {
		Principals        []jp     `json:"principals"`
		AllowedFetchHosts []string `json:"allowedFetchHosts"`
	}{AllowedFetchHosts: allowFetch}
	if doc.AllowedFetchHosts == nil {
		doc.AllowedFetchHosts = []string{}
	}
	for _, p := range ps {
		sum := sha256.Sum256([]byte(p.Token))
		doc.Principals = append(doc.Principals, jp{Name: p.Name, TokenSha256: hex.EncodeToString(sum[:]), Grants: p.Grants})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dataDir, "host.json"), append(b, '\n'), 0o600)
}

// Poll calls check every 50 ms until it returns nil or timeout passes.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Counter is a goroutine-safe string counter.
type Counter struct {
	mu sync.Mutex
	m  map[string]int
}

// Add adds one to k.
func (c *Counter) Add(k string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	c.mu.Unlock()
}

// Snapshot copies the counts.
func (c *Counter) Snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}
