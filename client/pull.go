package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/takoform/queuehost/gen/api"
)

// Pulling (spec/peers.md §Pull consumers): a queue given a PullConsumer
// instead of a QueueConsumer is consumed by applications over HTTP. Pull
// leases a batch of visible messages for a visibility timeout, waiting up
// to a long poll for one to arrive; each leased message counts one
// delivery. Settle acknowledges (removes) or retries each message of the
// lease at most once, durably; Extend hides the lease's unsettled
// messages for longer while work runs. A lease that expires makes its
// unsettled messages visible again, and after 1 + maxRetries deliveries
// the host dead-letters (or discards) them, as for a worker's batch. A
// message may therefore be delivered more than once: handle it
// idempotently.
//
// Pulling needs a token of an editor of PullConsumer, or of a principal
// with a consumer grant naming the queue (tako tokens create app -grant
// SPACE:consumer:QUEUE), which may do nothing else.

// FormPullConsumer is the Form URL of the host's pull consumers.
const FormPullConsumer = "https://queuehost.takoform.com/forms/PullConsumer/0.1.0/"

// PulledMessage is one leased message.
type PulledMessage struct {
	ID string
	// Timestamp is when the queue accepted it.
	Timestamp time.Time
	// Attempts counts its deliveries, this one included (1 the first time).
	Attempts int
	Body     []byte
}

// Lease is a leased batch. An empty lease (no ID, no messages) means
// nothing became visible within the wait.
type Lease struct {
	ID        string
	ExpiresAt time.Time
	Messages  []PulledMessage
}

// PullOptions shape one lease; zero values take the pull consumer's
// settings (maxBatchSize, visibilityTimeoutSeconds) and wait for nothing.
type PullOptions struct {
	MaxMessages int
	Visibility  time.Duration // whole seconds, 1 s .. 12 h
	Wait        time.Duration // whole seconds, 0 .. 20 s
}

func seconds(what string, d time.Duration) (*int, error) {
	if d == 0 {
		return nil, nil
	}
	if d%time.Second != 0 {
		return nil, fmt.Errorf("client: %s is whole seconds, not %s", what, d)
	}
	s := int(d / time.Second)
	return &s, nil
}

// Pull leases messages of the pull consumer of UID consumerUID. A refusal
// is an *Error: not_a_pull_consumer, invalid_request, forbidden,
// operation_in_progress, backend_unavailable.
func (c *Client) Pull(ctx context.Context, consumerUID string, o PullOptions) (Lease, error) {
	var req api.PullRequest
	var err error
	if o.MaxMessages != 0 {
		req.MaxMessages = &o.MaxMessages
	}
	if req.VisibilityTimeoutSeconds, err = seconds("a visibility timeout", o.Visibility); err != nil {
		return Lease{}, err
	}
	if req.WaitSeconds, err = seconds("a wait", o.Wait); err != nil {
		return Lease{}, err
	}
	r, err := c.api.PullMessagesWithResponse(ctx, c.space, consumerUID, req)
	if err != nil {
		return Lease{}, fmt.Errorf("client: pull from %s: %w", consumerUID, err)
	}
	if r.JSON200 == nil {
		return Lease{}, errorOf("pull from "+consumerUID, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	var l Lease
	if r.JSON200.LeaseId != nil {
		l.ID = *r.JSON200.LeaseId
	}
	if r.JSON200.ExpiresAt != nil {
		l.ExpiresAt = time.UnixMilli(int64(*r.JSON200.ExpiresAt))
	}
	for _, m := range r.JSON200.Messages {
		b := []byte(m.Body)
		if m.BodyEncoding == api.PulledMessageBodyEncodingBase64 {
			if b, err = base64.StdEncoding.DecodeString(m.Body); err != nil {
				return Lease{}, fmt.Errorf("client: pull from %s: message %s: %w", consumerUID, m.Id, err)
			}
		}
		l.Messages = append(l.Messages, PulledMessage{ID: m.Id, Timestamp: time.UnixMilli(int64(m.TimestampMillis)), Attempts: m.Attempts, Body: b})
	}
	return l, nil
}

// Retry is one message to retry; a zero Delay with HasDelay false takes
// the pull consumer's retryDelaySeconds.
type Retry struct {
	ID       string
	Delay    time.Duration
	HasDelay bool
}

// Settlement acknowledges and retries messages of one lease.
type Settlement struct {
	Acknowledge []string
	Retry       []Retry
}

// Settle applies s to the lease, in one durable write; it is refused as a
// whole (nothing settled) with an *Error: unknown_lease, lease_expired
// (the lease ran out: its unsettled messages are visible again),
// lease_settled, wrong_consumer, unknown_message, already_settled,
// invalid_request.
func (c *Client) Settle(ctx context.Context, consumerUID, leaseID string, s Settlement) error {
	var req api.PullSettleRequest
	if len(s.Acknowledge) > 0 {
		req.Acknowledge = &s.Acknowledge
	}
	if len(s.Retry) > 0 {
		items := make([]struct {
			DelaySeconds *int   `json:"delaySeconds,omitempty"`
			Id           string `json:"id"`
		}, len(s.Retry))
		for i, r := range s.Retry {
			items[i].Id = r.ID
			if r.HasDelay {
				d, err := seconds("a retry delay", r.Delay)
				if err != nil {
					return err
				}
				if d == nil {
					d = new(int)
				}
				items[i].DelaySeconds = d
			}
		}
		req.Retry = &items
	}
	r, err := c.api.SettleLeaseWithResponse(ctx, c.space, consumerUID, leaseID, req)
	if err != nil {
		return fmt.Errorf("client: settle lease %s: %w", leaseID, err)
	}
	if r.JSON200 == nil {
		return errorOf("settle lease "+leaseID, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	return nil
}

// Ack acknowledges messages of a lease: Settle with only acknowledgements.
func (c *Client) Ack(ctx context.Context, consumerUID, leaseID string, ids ...string) error {
	return c.Settle(ctx, consumerUID, leaseID, Settlement{Acknowledge: ids})
}

// Extend hides the lease's unsettled messages for visibility (whole
// seconds) from now and returns the new expiry.
func (c *Client) Extend(ctx context.Context, consumerUID, leaseID string, visibility time.Duration) (time.Time, error) {
	s, err := seconds("a visibility timeout", visibility)
	if err != nil || s == nil {
		if err == nil {
			err = fmt.Errorf("client: a visibility timeout of at least 1 s is required")
		}
		return time.Time{}, err
	}
	r, err := c.api.ExtendLeaseWithResponse(ctx, c.space, consumerUID, leaseID, api.PullExtendRequest{VisibilityTimeoutSeconds: *s})
	if err != nil {
		return time.Time{}, fmt.Errorf("client: extend lease %s: %w", leaseID, err)
	}
	if r.JSON200 == nil {
		return time.Time{}, errorOf("extend lease "+leaseID, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	return time.UnixMilli(int64(r.JSON200.ExpiresAt)), nil
}

// PullConsumerSpec is a PullConsumer 0.1.0 spec (the queue by UID).
type PullConsumerSpec struct {
	MaxBatchSize             int
	MaxRetries               int
	RetryDelaySeconds        int
	VisibilityTimeoutSeconds int
	DeadLetterQueueUID       string // "": discard after the last retry
}

// CreatePullConsumer gives the queue of UID queueUID a PullConsumer called
// name and returns its UID once the create has succeeded (editor of
// PullConsumer, and of the queues it reads and dead-letters into).
func (c *Client) CreatePullConsumer(ctx context.Context, name, queueUID string, spec PullConsumerSpec) (string, error) {
	sp := map[string]any{
		"queue": map[string]string{"resourceUid": queueUID}, "maxBatchSize": spec.MaxBatchSize, "maxRetries": spec.MaxRetries,
		"retryDelaySeconds": spec.RetryDelaySeconds, "visibilityTimeoutSeconds": spec.VisibilityTimeoutSeconds,
	}
	if spec.DeadLetterQueueUID != "" {
		sp["deadLetterQueue"] = map[string]string{"resourceUid": spec.DeadLetterQueueUID}
	}
	return c.create(ctx, "pull consumer "+name, name, FormPullConsumer, sp)
}
