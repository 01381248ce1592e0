// Package apiclient is the one Host API client of the tests and tools: the
// end-to-end tests, the torture driver, the benchmarks and the server and
// host tests. It is built on the conformance kit's client
// (features/hostapi: requests made by the request builders oapi-codegen
// generates from the same OpenAPI bundle as the server, the bearer token,
// problem decoding, Do for the requests a conformance test must be able to
// send that a generated client would not), and adds what the host's own
// tests want: waiting for an Operation to succeed, the resources' view.
//
// The kit imports nothing of the host, so the host's tests may build on
// it; the reverse would make the kit a test of this host only.
package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/takoform/queuehost/features/hostapi"
	"github.com/takoform/queuehost/gen/api"
)

// Form URLs, matched exactly by the host.
const (
	FormQueue    = api.FormAtLeastOnceQueue
	FormConsumer = api.FormQueueConsumer
	FormWorker   = api.FormModuleWorker
	FormVersion  = api.FormWorkerVersion
)

// Response is one Host API answer: the kit's (features/hostapi), with the
// conveniences of the host's tests. JSON decodes numbers as float64 (the
// kit's keeps them exact).
type Response struct{ *hostapi.Response }

// Problem is an RFC 9457 problem with the Host API's extension members
// (gen/api's).
type Problem = hostapi.Problem

// Code is the problem code, "" when the answer is not a problem.
func (r *Response) Code() string {
	if r == nil || r.Response == nil || r.Problem == nil {
		return ""
	}
	return r.Problem.Code
}

// Detail is the problem's detail, "" when there is none.
func (r *Response) Detail() string {
	if r == nil || r.Response == nil || r.Problem == nil {
		return ""
	}
	return hostapi.Str(r.Problem.Detail)
}

// RequestID is the problem's requestId, "" when there is none.
func (r *Response) RequestID() string {
	if r == nil || r.Response == nil || r.Problem == nil {
		return ""
	}
	return hostapi.Str(r.Problem.RequestId)
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
	return r.Response.String()
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

// New is a client of the host at base with token.
func New(base, token string) *Client { return &Client{Base: base, Token: token} }

// With returns a copy of c using another token.
func (c *Client) With(token string) *Client {
	cc := *c
	cc.Token = token
	return &cc
}

var defaultHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 5 * time.Second}}

// kit is the kit's client with c's base, token, HTTP client and timeout.
func (c *Client) kit() *hostapi.Client {
	k := &hostapi.Client{Base: func() string { return c.Base }, Token: c.Token, HTTP: c.HTTP, Timeout: c.Timeout}
	if k.HTTP == nil {
		k.HTTP = defaultHTTP
	}
	if k.Timeout == 0 {
		k.Timeout = 30 * time.Second
	}
	if rec := c.Record; rec != nil {
		k.Record = func(r *hostapi.Response) { rec(&Response{r}) }
	}
	return k
}

func wrap(r *hostapi.Response, err error) (*Response, error) {
	if err != nil {
		return nil, err
	}
	return &Response{r}, nil
}

// send sends a request a generated builder (gen/api) made.
func (c *Client) send(ctx context.Context, req *http.Request, err error) (*Response, error) {
	if err != nil {
		return nil, err
	}
	return wrap(c.kit().Send(ctx, req, nil))
}

// server is the base URL as the generated request builders want it.
func (c *Client) server() string { return strings.TrimRight(c.Base, "/") + "/" }

// Do sends one request as given. body is nil, []byte, string or a value
// encoded as JSON (then Content-Type is application/json unless hdr says
// otherwise).
func (c *Client) Do(ctx context.Context, method, path string, body any, hdr http.Header) (*Response, error) {
	return wrap(c.kit().Do(ctx, method, path, body, hdr))
}

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

// Operation is a Host API Operation (the kit's: Terminal when succeeded
// or failed, PairOK for the state/effect pairing).
type Operation = hostapi.Operation

func rawJSON(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(v)
}

func resourcesPath(space string) string { return "/v2/spaces/" + space + "/resources" }

// Post creates a resource (the generated client's CreateResource) and
// returns the answer, without waiting. private is nil when absent.
func (c *Client) Post(ctx context.Context, space, name, form string, spec, private any) (*Response, error) {
	return c.PostIn(ctx, space, name, form, "", spec, private)
}

// PostIn is Post in an offering ("": the host's default).
func (c *Client) PostIn(ctx context.Context, space, name, form, offering string, spec, private any) (*Response, error) {
	body := api.CreateResourceRequest{Name: name, FormUrl: form}
	if offering != "" {
		body.Offering = &offering
	}
	var err error
	if body.Spec, err = rawJSON(spec); err != nil {
		return nil, err
	}
	if private != nil {
		pi, err := rawJSON(private)
		if err != nil {
			return nil, err
		}
		body.PrivateInputs = &pi
	}
	req, err := api.NewCreateResourceRequest(c.server(), space, nil, body)
	return c.send(ctx, req, err)
}

// Replace puts a resource's spec (UpdateResource) without waiting.
func (c *Client) Replace(ctx context.Context, space, uid string, spec any) (*Response, error) {
	raw, err := rawJSON(spec)
	if err != nil {
		return nil, err
	}
	req, err := api.NewUpdateResourceRequest(c.server(), space, uid, nil, api.UpdateResourceRequest{Spec: raw})
	return c.send(ctx, req, err)
}

// Remove deletes a resource (DeleteResource) without waiting.
func (c *Client) Remove(ctx context.Context, space, uid string) (*Response, error) {
	req, err := api.NewDeleteResourceRequest(c.server(), space, uid, nil)
	return c.send(ctx, req, err)
}

// settle waits for the Operation an accepted mutation returned to succeed.
func (c *Client) settle(ctx context.Context, what string, r *Response) (*Operation, error) {
	if r.Status != 202 {
		return nil, fmt.Errorf("%s: %s", what, r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return nil, err
	}
	space := strings.Split(strings.TrimPrefix(r.Path, "/v2/spaces/"), "/")[0]
	fin, err := c.WaitOp(ctx, space, op.ID, 30*time.Second)
	if err != nil {
		return nil, err
	}
	if fin.State != "succeeded" {
		return nil, fmt.Errorf("%s: operation %s ended %s/%s: %+v", what, op.ID, fin.State, fin.Effect, fin.Error)
	}
	return fin, nil
}

// Create posts a resource and waits for its Operation to succeed; it
// returns the resource UID.
func (c *Client) Create(ctx context.Context, space, name, form string, spec, private any) (string, error) {
	return c.CreateIn(ctx, space, name, form, "", spec, private)
}

// CreateIn is Create in an offering ("": the host's default).
func (c *Client) CreateIn(ctx context.Context, space, name, form, offering string, spec, private any) (string, error) {
	r, err := c.PostIn(ctx, space, name, form, offering, spec, private)
	if err != nil {
		return "", err
	}
	op, err := c.settle(ctx, "create "+name, r)
	if err != nil {
		return "", err
	}
	return op.ResourceUID, nil
}

// Put replaces a resource's spec and waits for the Operation to succeed.
func (c *Client) Put(ctx context.Context, space, uid string, spec any) error {
	r, err := c.Replace(ctx, space, uid, spec)
	if err != nil {
		return err
	}
	_, err = c.settle(ctx, "put "+uid, r)
	return err
}

// Delete deletes a resource and waits for the Operation to succeed.
func (c *Client) Delete(ctx context.Context, space, uid string) error {
	r, err := c.Remove(ctx, space, uid)
	if err != nil {
		return err
	}
	_, err = c.settle(ctx, "delete "+uid, r)
	return err
}

// Operation reads an Operation, long-polling up to wait seconds.
func (c *Client) Operation(ctx context.Context, space, id string, wait int) (*Operation, *Response, error) {
	req, err := api.NewGetOperationRequest(c.server(), space, id, &api.GetOperationParams{Wait: &wait})
	r, err := c.send(ctx, req, err)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != 200 {
		return nil, r, fmt.Errorf("get operation %s: %s", id, r)
	}
	var op Operation
	if err := r.JSON(&op); err != nil {
		return nil, r, err
	}
	return &op, r, nil
}

// WaitOp long-polls an Operation until it is done or timeout passes (then
// it returns the last state read).
func (c *Client) WaitOp(ctx context.Context, space, id string, timeout time.Duration) (*Operation, error) {
	deadline := time.Now().Add(timeout)
	var last *Operation
	for {
		wait := min(max(int(time.Until(deadline).Seconds()), 0), 10)
		op, r, err := c.Operation(ctx, space, id, wait)
		if err != nil && r != nil {
			return nil, err
		}
		if err == nil {
			last = op
			if op.State == "succeeded" || op.State == "failed" {
				return op, nil
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
	req, err := api.NewGetResourceRequest(c.server(), space, uid)
	r, err := c.send(ctx, req, err)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != 200 {
		return nil, r, fmt.Errorf("get %s: %s", uid, r)
	}
	var out Resource
	if err := r.JSON(&out); err != nil {
		return nil, r, err
	}
	return &out, r, nil
}

// List lists a space's resources, every page (view=full).
func (c *Client) List(ctx context.Context, space string) ([]Resource, error) {
	full := api.Full
	params := &api.ListResourcesParams{View: &full}
	var out []Resource
	for {
		req, err := api.NewListResourcesRequest(c.server(), space, params)
		r, err := c.send(ctx, req, err)
		if err != nil {
			return nil, err
		}
		if r.Status != 200 {
			return nil, fmt.Errorf("list %s: %s", space, r)
		}
		var l struct {
			Items         []Resource `json:"items"`
			NextPageToken string     `json:"nextPageToken"`
		}
		if err := r.JSON(&l); err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
		if l.NextPageToken == "" {
			return out, nil
		}
		params.PageToken = &l.NextPageToken
	}
}

// Ref is a {resourceUid} reference.
func Ref(uid string) map[string]any { return map[string]any{"resourceUid": uid} }

// MessageCount reads a queue's observed.messageCount (-1 when absent).
func (c *Client) MessageCount(ctx context.Context, space, uid string) (int, error) {
	res, _, err := c.Get(ctx, space, uid)
	if err != nil {
		return -1, err
	}
	v, ok := res.Observed["messageCount"]
	if !ok {
		return -1, nil
	}
	f, ok := v.(float64)
	if !ok {
		return -1, fmt.Errorf("messageCount is %T", v)
	}
	return int(f), nil
}
