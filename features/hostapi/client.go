package hostapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/takoform/queuehost/gen/api"
)

// Response is one Host API answer, with its problem decoded when it is one.
type Response struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         []byte
	Problem      *Problem
}

// Problem is an RFC 9457 problem with the Host API v2 extension members:
// the contract's own type (schemas/problem.json, generated in gen/api).
type Problem = api.Problem

// ProblemError is one input error of a problem.
type ProblemError = api.ProblemError

// Str is the string p points to, "" for nil (a problem's optional
// members).
func Str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// ProblemErrors is the input errors of p; none for nil.
func ProblemErrors(p *Problem) []ProblemError {
	if p == nil || p.Errors == nil {
		return nil
	}
	return *p.Errors
}

// JSON decodes the body into v, keeping numbers exact.
func (r *Response) JSON(v any) error {
	d := json.NewDecoder(bytes.NewReader(r.Body))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%s %s: body is not JSON (%v): %.300s", r.Method, r.Path, err, r.Body)
	}
	return nil
}

// Map decodes a JSON object body.
func (r *Response) Map() (map[string]any, error) {
	var m map[string]any
	err := r.JSON(&m)
	return m, err
}

func (r *Response) String() string {
	if r == nil {
		return "<nil response>"
	}
	return fmt.Sprintf("%s %s -> %d %.600s", r.Method, r.Path, r.Status, r.Body)
}

// Client is the kit's only way to talk to the Host API: bearer token,
// JSON bodies, problem decoding. Well-formed Host API calls are built by the
// Host API client generated from the same OpenAPI bundle the host serves
// (gen/api, oapi-codegen): CreateResource, GetResource, UpdateResource,
// DeleteResource, ListResources, GetOperation, WorkerLogs. Do is for what
// a generated client cannot express on purpose: malformed paths and bodies,
// unknown routes, the test workers' fetch routes. The kit imports only the
// contract's generated code, never the reference host's rules.
type Client struct {
	Base  func() string // the host's base URL (it may move on restart)
	Token string        // "" sends no Authorization header
	HTTP  *http.Client  // http.DefaultClient when nil
	// Timeout bounds one request; 90 s when zero.
	Timeout time.Duration
	// Record, when set, sees every answer (a test that greps them all).
	Record func(*Response)
}

func bodyReader(body any) (io.Reader, error) {
	switch b := body.(type) {
	case nil:
		return nil, nil
	case []byte:
		return bytes.NewReader(b), nil
	case string:
		return strings.NewReader(b), nil
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		return bytes.NewReader(enc), nil
	}
}

// server is the base URL as the generated request builders want it.
func (c *Client) server() string { return strings.TrimRight(c.Base(), "/") + "/" }

// Do sends one request to path. body is nil, []byte (sent as is) or a
// value encoded as JSON.
func (c *Client) Do(ctx context.Context, method, path string, body any, header http.Header) (*Response, error) {
	rd, err := bodyReader(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(method, strings.TrimRight(c.Base(), "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(ctx, req, path, header)
}

// built sends a request a generated builder made.
func (c *Client) built(ctx context.Context, req *http.Request, err error, header http.Header) (*Response, error) {
	if err != nil {
		return nil, err
	}
	return c.Send(ctx, req, header)
}

// Send sends req, built by a generated request builder (api.NewXRequest
// with the base URL Server returns), with the token and header.
func (c *Client) Send(ctx context.Context, req *http.Request, header http.Header) (*Response, error) {
	return c.send(ctx, req, req.URL.RequestURI(), header)
}

// Server is the base URL as the generated request builders want it.
func (c *Client) Server() string { return c.server() }

// CreateResource is POST /v2/spaces/{space}/resources with body as JSON.
func (c *Client) CreateResource(ctx context.Context, space string, body any, header http.Header) (*Response, error) {
	rd, err := bodyReader(body)
	if err != nil {
		return nil, err
	}
	req, err := api.NewCreateResourceRequestWithBody(c.server(), space, &api.CreateResourceParams{}, "application/json", rd)
	return c.built(ctx, req, err, header)
}

// GetResource is GET /v2/spaces/{space}/resources/{uid}.
func (c *Client) GetResource(ctx context.Context, space, uid string, header http.Header) (*Response, error) {
	req, err := api.NewGetResourceRequest(c.server(), space, uid)
	return c.built(ctx, req, err, header)
}

// UpdateResource is PUT /v2/spaces/{space}/resources/{uid} with body as JSON.
func (c *Client) UpdateResource(ctx context.Context, space, uid string, body any, header http.Header) (*Response, error) {
	rd, err := bodyReader(body)
	if err != nil {
		return nil, err
	}
	req, err := api.NewUpdateResourceRequestWithBody(c.server(), space, uid, &api.UpdateResourceParams{}, "application/json", rd)
	return c.built(ctx, req, err, header)
}

// DeleteResource is DELETE /v2/spaces/{space}/resources/{uid}.
func (c *Client) DeleteResource(ctx context.Context, space, uid string, header http.Header) (*Response, error) {
	req, err := api.NewDeleteResourceRequest(c.server(), space, uid, &api.DeleteResourceParams{})
	return c.built(ctx, req, err, header)
}

// ListResources is GET /v2/spaces/{space}/resources.
func (c *Client) ListResources(ctx context.Context, space string, header http.Header) (*Response, error) {
	req, err := api.NewListResourcesRequest(c.server(), space, &api.ListResourcesParams{})
	return c.built(ctx, req, err, header)
}

// GetOperation is GET /v2/spaces/{space}/operations/{id}?wait=N.
func (c *Client) GetOperation(ctx context.Context, space, id string, wait int) (*Response, error) {
	req, err := api.NewGetOperationRequest(c.server(), space, id, &api.GetOperationParams{Wait: &wait})
	return c.built(ctx, req, err, nil)
}

// WorkerLogs is GET /v2/spaces/{space}/resources/{uid}/logs?limit=N.
func (c *Client) WorkerLogs(ctx context.Context, space, uid string, limit int) (*Response, error) {
	req, err := api.NewGetWorkerLogsRequest(c.server(), space, uid, &api.GetWorkerLogsParams{Limit: &limit})
	return c.built(ctx, req, err, nil)
}

// send adds the token and the one-shot headers, sends, and reads the answer.
func (c *Client) send(ctx context.Context, req *http.Request, path string, header http.Header) (*Response, error) {
	method := req.Method
	to := c.Timeout
	if to == 0 {
		to = 90 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	req = req.WithContext(ctx)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, vs := range header {
		req.Header.Del(k)
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
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

// CheckProblem verifies that r is the problem status/code with the Host
// API's problem members.
func CheckProblem(r *Response, status int, code string) error {
	if r.Status != status {
		return fmt.Errorf("want %d %s, got %s", status, code, r)
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
		return fmt.Errorf("want Content-Type application/problem+json, got %q: %s", r.Header.Get("Content-Type"), r)
	}
	if r.Problem == nil {
		return fmt.Errorf("problem body does not decode: %s", r)
	}
	if r.Problem.Code != code {
		return fmt.Errorf("want code %q, got %q: %s", code, r.Problem.Code, r)
	}
	if r.Problem.Status != status {
		return fmt.Errorf("problem status member %d differs from HTTP status %d", r.Problem.Status, status)
	}
	if rid := r.Header.Get("X-Request-Id"); rid == "" || Str(r.Problem.RequestId) != rid {
		return fmt.Errorf("problem requestId %q does not match X-Request-Id %q", Str(r.Problem.RequestId), rid)
	}
	// The other members of spec/host-api.md §Errors: type names the code
	// (https://…/problems/<code>), a title, and instance is the request path.
	if !strings.HasSuffix(r.Problem.Type, "/problems/"+code) || !strings.HasPrefix(r.Problem.Type, "https://") {
		return fmt.Errorf("problem type %q is not https://…/problems/%s: %s", r.Problem.Type, code, r)
	}
	if r.Problem.Title == "" {
		return fmt.Errorf("problem has no title: %s", r)
	}
	path, _, _ := strings.Cut(r.Path, "?")
	if inst := Str(r.Problem.Instance); inst != path {
		if unesc, err := url.PathUnescape(path); err != nil || inst != unesc {
			return fmt.Errorf("problem instance %q is not the request path %q: %s", inst, path, r)
		}
	}
	return nil
}
