package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/takoform/queuehost/gen/api"
)

// Form URLs the manifest's kinds map to.
const (
	formQueue    = api.FormAtLeastOnceQueue
	formConsumer = api.FormQueueConsumer
	formWorker   = api.FormModuleWorker
	formVersion  = api.FormWorkerVersion
)

// client is the Host API of one space through the generated client
// (gen/api): every call the CLI makes goes through it.
type client struct {
	api   *api.ClientWithResponses
	space string
	base  string
	token string
	// wait bounds waiting for one Operation.
	wait time.Duration
}

func newClient(base, token, space string) (*client, error) {
	c, err := api.NewClientWithResponses(strings.TrimRight(base, "/"),
		api.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("host URL %q: %w", base, err)
	}
	return &client{api: c, space: space, base: strings.TrimRight(base, "/"), token: token, wait: 2 * time.Minute}, nil
}

// apiError is a Host API answer that is not the expected one: the
// problem's code and detail when the host sent one.
type apiError struct {
	What    string // "create queue tasks"
	Status  int
	Code    string
	Detail  string
	Pointer []string
	// Hint says what to do, when tako knows (which token a 401 used).
	Hint string
}

// Error is one sentence: what was refused, why (the problem's detail,
// else its title), the problem code and status, and the hint.
func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", e.What)
	detail := strings.TrimRight(e.Detail, ". ")
	for _, p := range e.Pointer {
		if detail != "" {
			detail += "; "
		}
		detail += p
	}
	if detail == "" {
		detail = "refused"
	}
	b.WriteString(detail)
	switch {
	case e.Code != "":
		fmt.Fprintf(&b, " (%s, HTTP %d)", e.Code, e.Status)
	default:
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "; %s", e.Hint)
	}
	return b.String()
}

// problemError makes the error of an answer that is not the expected
// one: from the problem document when the host sent one (parsed from body
// when p is nil), else from the body's first line when it is text. A body
// that is neither is never quoted: a cut-off JSON document helps nobody.
func problemError(what string, status int, p *api.Problem, body []byte) error {
	e := &apiError{What: what, Status: status}
	if p == nil && len(body) > 0 {
		var pp api.Problem
		if json.Unmarshal(body, &pp) == nil && pp.Code != "" {
			p = &pp
		}
	}
	if p != nil {
		e.Code = p.Code
		if p.Detail != nil {
			e.Detail = *p.Detail
		} else {
			e.Detail = p.Title
		}
		if p.Errors != nil {
			for _, pe := range *p.Errors {
				ptr := pe.Pointer
				if ptr == "" {
					ptr = "/"
				}
				e.Pointer = append(e.Pointer, ptr+": "+pe.Detail)
			}
		}
		return e
	}
	e.Detail = textDetail(body)
	return e
}

// textDetail is a plain-text body's first line, cut at a word to at most
// 200 characters, or "" when the body is not plain text (JSON, HTML).
func textDetail(body []byte) string {
	s := strings.TrimSpace(string(body))
	if s == "" || strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[") || strings.HasPrefix(s, "<") {
		return ""
	}
	s, _, _ = strings.Cut(s, "\n")
	s = escapeControl(strings.TrimSpace(s))
	if len(s) > 200 {
		cut := strings.LastIndexByte(s[:200], ' ')
		if cut < 100 {
			cut = 200
		}
		s = s[:cut] + " …"
	}
	return s
}

// unreachableError is what a request that got no answer says: which host,
// why in a few words, and what to do.
func unreachableError(host string, err error) error {
	reason := "no answer"
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "connection refused"
	case errors.As(err, &dns):
		reason = "no such host " + dns.Name
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		reason = "timed out"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		reason = "the connection was closed"
	case errors.As(err, &op):
		reason = op.Err.Error()
	default:
		var ue *url.Error
		if !errors.As(err, &ue) {
			return err
		}
		reason = ue.Err.Error()
	}
	return fmt.Errorf("no host answers at %s (%s); start one with `make run` or `tako dev`, or pick another with --host/--context", host, reason)
}

// list returns the space's resources of one Form by name.
func (c *client) list(ctx context.Context, form string) (map[string]api.Resource, error) {
	out := map[string]api.Resource{}
	params := &api.ListResourcesParams{FormUrl: &form}
	for {
		r, err := c.api.ListResourcesWithResponse(ctx, c.space, params)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", kindOf(form), err)
		}
		if r.JSON200 == nil {
			return nil, problemError("list "+kindOf(form), r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		for _, it := range r.JSON200.Items {
			out[it.Name] = it
		}
		if r.JSON200.NextPageToken == nil {
			return out, nil
		}
		params.PageToken = r.JSON200.NextPageToken
	}
}

func (c *client) get(ctx context.Context, uid string) (*api.Resource, error) {
	r, err := c.api.GetResourceWithResponse(ctx, c.space, uid)
	if err != nil {
		return nil, err
	}
	if r.JSON200 == nil {
		return nil, problemError("get "+uid, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	return r.JSON200, nil
}

// create creates a resource and waits for its Operation; it answers the
// new resource's UID.
func (c *client) create(ctx context.Context, what, name, form string, spec, private any) (string, error) {
	body := api.CreateResourceRequest{Name: name, FormUrl: form}
	var err error
	if body.Spec, err = json.Marshal(spec); err != nil {
		return "", err
	}
	if private != nil {
		raw, err := json.Marshal(private)
		if err != nil {
			return "", err
		}
		rm := json.RawMessage(raw)
		body.PrivateInputs = &rm
	}
	r, err := c.api.CreateResourceWithResponse(ctx, c.space, nil, body)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if r.JSON202 == nil {
		return "", problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	op, err := c.waitOp(ctx, what, *r.JSON202)
	if err != nil {
		return "", err
	}
	return op.ResourceUid, nil
}

func (c *client) update(ctx context.Context, what, uid string, spec, private any) error {
	body := api.UpdateResourceRequest{}
	var err error
	if body.Spec, err = json.Marshal(spec); err != nil {
		return err
	}
	if private != nil {
		raw, err := json.Marshal(private)
		if err != nil {
			return err
		}
		rm := json.RawMessage(raw)
		body.PrivateInputs = &rm
	}
	r, err := c.api.UpdateResourceWithResponse(ctx, c.space, uid, nil, body)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.JSON202 == nil {
		return problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	_, err = c.waitOp(ctx, what, *r.JSON202)
	return err
}

func (c *client) delete(ctx context.Context, what, uid string) error {
	r, err := c.api.DeleteResourceWithResponse(ctx, c.space, uid, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.JSON202 == nil {
		return problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	_, err = c.waitOp(ctx, what, *r.JSON202)
	return err
}

// waitOp long-polls the Operation until it succeeded or failed (an
// Operation still reconciling is not done), within c.wait.
func (c *client) waitOp(ctx context.Context, what string, op api.Operation) (api.Operation, error) {
	ctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	for {
		switch op.State {
		case api.OperationStateSucceeded:
			return op, nil
		case api.OperationStateFailed:
			if op.Error != nil {
				return op, problemError(what+" (Operation "+op.Id+")", op.Error.Status, op.Error, nil)
			}
			return op, fmt.Errorf("%s: Operation %s failed", what, op.Id)
		}
		wait := 30
		r, err := c.api.GetOperationWithResponse(ctx, c.space, op.Id, &api.GetOperationParams{Wait: &wait})
		if err != nil {
			if ctx.Err() != nil {
				return op, fmt.Errorf("%s: Operation %s still %s after %s", what, op.Id, op.State, c.wait)
			}
			return op, fmt.Errorf("%s: Operation %s: %w", what, op.Id, err)
		}
		if r.JSON200 == nil {
			return op, problemError(what+": Operation "+op.Id, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		op = *r.JSON200
	}
}

func (c *client) operation(ctx context.Context, id string, wait int) (api.Operation, error) {
	r, err := c.api.GetOperationWithResponse(ctx, c.space, id, &api.GetOperationParams{Wait: &wait})
	if err != nil {
		return api.Operation{}, err
	}
	if r.JSON200 == nil {
		return api.Operation{}, problemError("Operation "+id, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	return *r.JSON200, nil
}

// logs reads the worker's log after the cursor; wait > 0 (seconds) lets
// the host hold the request until a line arrives (the follow mode).
func (c *client) logs(ctx context.Context, uid string, after int64, wait int) ([]api.LogEntry, error) {
	limit := 1000
	p := &api.GetWorkerLogsParams{After: &after, Limit: &limit}
	if wait > 0 {
		p.Wait = &wait
	}
	r, err := c.api.GetWorkerLogsWithResponse(ctx, c.space, uid, p)
	if err != nil {
		return nil, err
	}
	if r.JSON200 == nil {
		return nil, problemError("logs of "+uid, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	return r.JSON200.Items, nil
}

func kindOf(form string) string {
	switch form {
	case formQueue:
		return "queue"
	case formConsumer:
		return "consumer"
	case formWorker:
		return "worker"
	case formVersion:
		return "worker version"
	}
	return form
}

// worker finds a worker by name.
func (c *client) worker(ctx context.Context, name string) (api.Resource, error) {
	return c.named(ctx, formWorker, name)
}

// named finds the resource of form called name, or says the space has none.
func (c *client) named(ctx context.Context, form, name string) (api.Resource, error) {
	all, err := c.list(ctx, form)
	if err != nil {
		return api.Resource{}, err
	}
	r, ok := all[name]
	if !ok {
		kind := kindOf(form)
		return r, &apiError{What: kind + " " + name, Status: 404, Code: "not_found", Detail: fmt.Sprintf("space %s has no %s named %q", c.space, kind, name)}
	}
	return r, nil
}

// fetch sends one request to the worker's fetch route: POST with body,
// GET without.
func (c *client) fetch(ctx context.Context, uid, path, body string) (int, []byte, error) {
	method := http.MethodGet
	var rd io.Reader
	if body != "" {
		method, rd = http.MethodPost, strings.NewReader(body)
	}
	u := c.base + "/v2/spaces/" + url.PathEscape(c.space) + "/resources/" + url.PathEscape(uid) + "/fetch" + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	return res.StatusCode, b, err
}
