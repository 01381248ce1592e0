// Package apiclient is the one Host API client of the tests and tools: the
// end-to-end tests, the torture driver, the benchmarks and the server and
// host tests. It wraps the client oapi-codegen generates from the same
// OpenAPI bundle as the server (gen/api), with a bearer token, helpers that
// wait for Operations, and Do for the requests a conformance test must be
// able to send that the generated client would not (a malformed body, an
// odd header, a route outside the OpenAPI document).
//
// The conformance kit (features/) has its own client on gen/api: it is a
// test of other hosts and must not share code with this host's tests.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/takoform/queuehost/gen/api"
)

// Form URLs, matched exactly by the host.
const (
	FormQueue    = api.FormAtLeastOnceQueue
	FormConsumer = api.FormQueueConsumer
	FormWorker   = api.FormModuleWorker
	FormVersion  = api.FormWorkerVersion
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

// New is a client of the host at base with token.
func New(base, token string) *Client { return &Client{Base: base, Token: token} }

// With returns a copy of c using another token.
func (c *Client) With(token string) *Client {
	cc := *c
	cc.Token = token
	return &cc
}

var defaultHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 5 * time.Second}}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
}

// API is the generated client (gen/api) with c's base, token and HTTP
// client.
func (c *Client) API() *api.Client {
	g, err := api.NewClient(strings.TrimRight(c.Base, "/"), api.WithHTTPClient(c.httpClient()),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if c.Token != "" {
				req.Header.Set("Authorization", "Bearer "+c.Token)
			}
			return nil
		}))
	if err != nil {
		panic(fmt.Sprintf("apiclient: %v", err)) // only a malformed base URL
	}
	return g
}

func (c *Client) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	to := c.Timeout
	if to == 0 {
		to = 30 * time.Second
	}
	return context.WithTimeout(ctx, to)
}

// read turns an answer into a Response.
func (c *Client) read(method, path string, res *http.Response, err error) (*Response, error) {
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

// Do sends one request as given. body is nil, []byte, string or a value
// encoded as JSON (then Content-Type is application/json unless hdr says
// otherwise).
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
	ctx, cancel := c.timeout(ctx)
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
	res, err := c.httpClient().Do(req)
	return c.read(method, path, res, err)
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

// Operation is a Host API Operation.
type Operation struct {
	ID          string   `json:"id"`
	Kind        string   `json:"kind"`
	ResourceUID string   `json:"resourceUid"`
	State       string   `json:"state"`
	Effect      string   `json:"effect"`
	Error       *Problem `json:"error"`
	// Progress is a purge's or a redrive's report (spec/peers.md).
	Progress map[string]int `json:"progress"`
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
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	res, err := c.API().CreateResource(ctx, space, nil, body)
	return c.read("POST", resourcesPath(space), res, err)
}

// Replace puts a resource's spec (UpdateResource) without waiting.
func (c *Client) Replace(ctx context.Context, space, uid string, spec any) (*Response, error) {
	raw, err := rawJSON(spec)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	res, err := c.API().UpdateResource(ctx, space, uid, nil, api.UpdateResourceRequest{Spec: raw})
	return c.read("PUT", resourcesPath(space)+"/"+uid, res, err)
}

// Remove deletes a resource (DeleteResource) without waiting.
func (c *Client) Remove(ctx context.Context, space, uid string) (*Response, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	res, err := c.API().DeleteResource(ctx, space, uid, nil)
	return c.read("DELETE", resourcesPath(space)+"/"+uid, res, err)
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
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	res, err := c.API().GetOperation(ctx, space, id, &api.GetOperationParams{Wait: &wait})
	r, err := c.read("GET", fmt.Sprintf("/v2/spaces/%s/operations/%s?wait=%d", space, id, wait), res, err)
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
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	res, err := c.API().GetResource(ctx, space, uid)
	r, err := c.read("GET", resourcesPath(space)+"/"+uid, res, err)
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
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	full := api.Full
	params := &api.ListResourcesParams{View: &full}
	var out []Resource
	for {
		res, err := c.API().ListResources(ctx, space, params)
		r, err := c.read("GET", resourcesPath(space), res, err)
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
