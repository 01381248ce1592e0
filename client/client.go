// Package client is the Go client of the Takoform queue host for
// applications: it publishes messages to an AtLeastOnceQueue over the Host
// API (spec/peers.md §Publish), so that a program needs no worker in
// between, pulls messages from a queue given a PullConsumer (spec/peers.md
// §Pull consumers), and finds and creates queues and pull consumers for the
// programs that manage them.
//
// It is built on the client generated from the OpenAPI document
// (gen/api) and imports nothing else of the host, so that an application
// depends on the contract, not on the host's implementation.
//
// # Publishing
//
// A publish is the producer Binding's send over HTTP: 1..100 messages sent
// atomically, each body 1..127000 bytes, an optional delay of 0..43200
// seconds (the queue's deliveryDelaySeconds when none is given), durable
// when Publish returns their IDs. A consumer receives the body's bytes, as
// from a Binding send of the same bytes; the Forms carry no content type,
// so none travels with the message (a JSON body is its text). The client
// sends a body that is valid UTF-8 as text and any other in base64; the
// consumer cannot tell the difference.
//
// Retrying a publish whose answer was lost may send it twice, unless it
// carries an idempotency key (WithIdempotencyKey): the host then answers a
// retry with the same key and messages with the first publish's IDs, for
// 24 hours, and sends nothing again.
//
// # Authorization
//
// Publishing needs a token of an editor of AtLeastOnceQueue in the space,
// or of a principal with a publisher grant naming the queue (tako tokens
// create app -grant SPACE:publisher:QUEUE). A publisher may do nothing but
// publish: it cannot look a queue up by name, so it is given the queue's
// UID.
package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/takoform/queuehost/gen/api"
)

// Limits of a publish: the producer Binding's (AtLeastOnceQueue 0.2.0).
const (
	MaxBodyBytes    = 127000
	MaxBatch        = 100
	MaxDelaySeconds = 43200
)

// FormAtLeastOnceQueue is the Form URL of the queues this client publishes
// to.
const FormAtLeastOnceQueue = api.FormAtLeastOnceQueue

// Client talks to one space of a host.
type Client struct {
	api   *api.ClientWithResponses
	space string
}

// Option configures a Client.
type Option func(*options)

type options struct {
	http *http.Client
}

// WithHTTPClient sends the requests through hc instead of
// http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.http = hc } }

// New returns a client of the host at baseURL (http://127.0.0.1:8787)
// that acts in space with the bearer token.
func New(baseURL, token, space string, opts ...Option) (*Client, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if space == "" {
		return nil, errors.New("client: a space is required")
	}
	copts := []api.ClientOption{api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	})}
	if o.http != nil {
		copts = append(copts, api.WithHTTPClient(o.http))
	}
	c, err := api.NewClientWithResponses(strings.TrimRight(baseURL, "/"), copts...)
	if err != nil {
		return nil, fmt.Errorf("client: host URL %q: %w", baseURL, err)
	}
	return &Client{api: c, space: space}, nil
}

// Space is the space the client acts in.
func (c *Client) Space() string { return c.space }

// Message is one message of a batch.
type Message struct {
	// Body is the message's bytes, 1..127000 of them.
	Body []byte
	// Delay, when not nil, is how long the message stays invisible:
	// 0..43200 seconds, whole seconds. Nil: the queue's
	// deliveryDelaySeconds.
	Delay *time.Duration
}

// Text is a message whose body is s's UTF-8 bytes.
func Text(s string) Message { return Message{Body: []byte(s)} }

// JSON is a message whose body is v's JSON text (encoding/json).
func JSON(v any) (Message, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Message{}, fmt.Errorf("client: the message body: %w", err)
	}
	return Message{Body: b}, nil
}

// After returns m delayed by d.
func (m Message) After(d time.Duration) Message {
	m.Delay = &d
	return m
}

// PublishOption configures one publish.
type PublishOption func(*publishOptions)

type publishOptions struct {
	key   string
	delay *time.Duration
}

// WithIdempotencyKey makes the publish idempotent: a retry with the same key
// and the same messages answers the IDs of the first and sends nothing; the
// same key with other messages is an Error with Code
// "idempotency_key_reuse". A key is 1..255 visible ASCII characters and is
// remembered for 24 hours.
func WithIdempotencyKey(key string) PublishOption {
	return func(o *publishOptions) { o.key = key }
}

// WithDelay delays every message of the publish that has no Delay of its
// own.
func WithDelay(d time.Duration) PublishOption {
	return func(o *publishOptions) { o.delay = &d }
}

// Publish sends one message with body to the queue of UID queueUID and
// returns its ID once it is durable.
func (c *Client) Publish(ctx context.Context, queueUID string, body []byte, opts ...PublishOption) (string, error) {
	ids, err := c.PublishBatch(ctx, queueUID, []Message{{Body: body}}, opts...)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// PublishBatch sends 1..100 messages to the queue of UID queueUID
// atomically (all or none) and returns their IDs, in order, once all are
// durable. A refusal is an *Error whose Code is the producer Binding's:
// batch_too_large, invalid_body, message_too_large, backend_unavailable;
// or forbidden, not_found, not_a_queue.
func (c *Client) PublishBatch(ctx context.Context, queueUID string, msgs []Message, opts ...PublishOption) ([]string, error) {
	var o publishOptions
	for _, f := range opts {
		f(&o)
	}
	req := api.PublishRequest{Messages: make([]api.PublishMessage, len(msgs))}
	for i, m := range msgs {
		pm := api.PublishMessage{Body: string(m.Body)}
		if !utf8.Valid(m.Body) {
			enc := api.PublishMessageBodyEncodingBase64
			pm.Body, pm.BodyEncoding = base64.StdEncoding.EncodeToString(m.Body), &enc
		}
		d := m.Delay
		if d == nil {
			d = o.delay
		}
		if d != nil {
			if *d%time.Second != 0 {
				return nil, fmt.Errorf("client: messages[%d]: a delay is whole seconds, not %s", i, *d)
			}
			s := int(*d / time.Second)
			pm.DelaySeconds = &s
		}
		req.Messages[i] = pm
	}
	var params api.PublishMessagesParams
	if o.key != "" {
		k := api.IdempotencyKey(o.key)
		params.IdempotencyKey = &k
	}
	r, err := c.api.PublishMessagesWithResponse(ctx, c.space, queueUID, &params, req)
	if err != nil {
		return nil, fmt.Errorf("client: publish to %s: %w", queueUID, err)
	}
	if r.JSON200 == nil {
		return nil, errorOf("publish to "+queueUID, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	if len(r.JSON200.MessageIds) != len(msgs) {
		return nil, fmt.Errorf("client: publish to %s: the host answered %d IDs for %d messages", queueUID, len(r.JSON200.MessageIds), len(msgs))
	}
	return r.JSON200.MessageIds, nil
}

// QueueUID finds the UID of the space's AtLeastOnceQueue called name
// (the token must be allowed to read queues; a publisher's is not).
func (c *Client) QueueUID(ctx context.Context, name string) (string, error) {
	form := FormAtLeastOnceQueue
	params := &api.ListResourcesParams{FormUrl: &form}
	for {
		r, err := c.api.ListResourcesWithResponse(ctx, c.space, params)
		if err != nil {
			return "", fmt.Errorf("client: list queues: %w", err)
		}
		if r.JSON200 == nil {
			return "", errorOf("list queues", r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		for _, q := range r.JSON200.Items {
			if q.Name == name {
				return q.Uid, nil
			}
		}
		if r.JSON200.NextPageToken == nil || *r.JSON200.NextPageToken == "" {
			return "", &Error{Op: "find queue " + name, Status: http.StatusNotFound, Code: "not_found", Detail: fmt.Sprintf("space %s has no queue named %q", c.space, name)}
		}
		params.PageToken = r.JSON200.NextPageToken
	}
}

// QueueSpec is an AtLeastOnceQueue 0.2.0 spec.
type QueueSpec struct {
	MessageRetentionSeconds int `json:"messageRetentionSeconds"`
	// DeliveryDelaySeconds is the delay of a message sent without one.
	DeliveryDelaySeconds int `json:"deliveryDelaySeconds,omitempty"`
}

// CreateQueue creates an AtLeastOnceQueue called name and returns its UID
// once the create has succeeded (editor of AtLeastOnceQueue).
func (c *Client) CreateQueue(ctx context.Context, name string, spec QueueSpec) (string, error) {
	return c.create(ctx, "queue "+name, name, FormAtLeastOnceQueue, spec)
}

// create creates a resource and waits for its Operation to end.
func (c *Client) create(ctx context.Context, what, name, form string, spec any) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	r, err := c.api.CreateResourceWithResponse(ctx, c.space, nil, api.CreateResourceRequest{Name: name, FormUrl: form, Spec: raw})
	if err != nil {
		return "", fmt.Errorf("client: create %s: %w", what, err)
	}
	if r.JSON202 == nil {
		return "", errorOf("create "+what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	op := api.Operation(*r.JSON202)
	for op.State != api.OperationStateSucceeded && op.State != api.OperationStateFailed {
		wait := 10
		g, err := c.api.GetOperationWithResponse(ctx, c.space, op.Id, &api.GetOperationParams{Wait: &wait})
		if err != nil {
			return "", fmt.Errorf("client: create %s: %w", what, err)
		}
		if g.JSON200 == nil {
			return "", errorOf("create "+what, g.StatusCode(), g.ApplicationproblemJSONDefault, g.Body)
		}
		op = *g.JSON200
	}
	if op.State == api.OperationStateFailed {
		e := &Error{Op: "create " + what, Code: "operation_failed"}
		if op.Error != nil {
			e.Status, e.Code = op.Error.Status, op.Error.Code
			if op.Error.RequestId != nil {
				e.RequestID = *op.Error.RequestId
			}
			if op.Error.Detail != nil {
				e.Detail = *op.Error.Detail
			}
		}
		return "", e
	}
	return op.ResourceUid, nil
}

// Error is a request the host refused: its RFC 9457 problem.
type Error struct {
	Op        string // what the client was doing: "publish to r-…"
	Status    int
	Code      string // the problem's stable code: "message_too_large", "forbidden", ...
	Detail    string
	RequestID string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %s: ", e.Op)
	if e.Code != "" {
		fmt.Fprintf(&b, "%s (%d)", e.Code, e.Status)
	} else {
		fmt.Fprintf(&b, "HTTP %d", e.Status)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	return b.String()
}

// Code is err's problem code when err is an *Error, "" otherwise.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func errorOf(op string, status int, p *api.Problem, body []byte) error {
	e := &Error{Op: op, Status: status}
	if p != nil {
		e.Code = p.Code
		if p.RequestId != nil {
			e.RequestID = *p.RequestId
		}
		if p.Detail != nil {
			e.Detail = *p.Detail
		}
		if p.Errors != nil {
			for _, pe := range *p.Errors {
				e.Detail += "; " + pe.Pointer + ": " + pe.Detail
			}
		}
	} else if len(body) > 0 {
		e.Detail = strings.TrimSpace(string(body[:min(len(body), 300)]))
	}
	return e
}
