package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/membudget"
)

// WorkerBaseURL is the origin of the Request a worker's fetch handler sees.
const WorkerBaseURL = "http://worker.invalid/"

// serveFetch is ANY /v2/spaces/{space}/resources/{uid}/fetch[/{path...}]:
// it invokes the worker's selected version's fetch handler.
//
// The request body is reserved in the host's memory budget before it is
// read (its Content-Length, or as it arrives), held in one buffer the
// runtime takes as it is, and released when the response has been
// written; the worker's response body is reserved too before it is
// written to the client (runtime/membudget, spec/host-api.md §Worker fetch
// route).
func (s *Server) serveFetch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	space, uid := r.PathValue("space"), r.PathValue("uid")
	v, err := s.ctl.FetchTarget(ctx, principal(ctx), space, uid)
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	hold := membudget.Holder{Principal: principal(ctx).ID, Worker: uid}
	body, res, err := s.readFetchBody(w, r, hold)
	defer res.Release()
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	target := WorkerBaseURL + workerPath(r, space, uid)
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	wreq, err := http.NewRequestWithContext(ctx, r.Method, target, nil)
	if err != nil {
		s.writeProblem(w, r, invalidRequest("the request cannot be passed to the worker: %v", err))
		return
	}
	wreq.Body, wreq.ContentLength = http.NoBody, 0
	if len(body) > 0 {
		wreq.Body, wreq.ContentLength = newBytesBody(body), int64(len(body))
	}
	wreq.Header = r.Header.Clone()
	for _, h := range inboundStripped {
		wreq.Header.Del(h)
	}
	// The worker's producer Binding calls during this invocation need the
	// invoking principal's rights as well as its creator's.
	wreq = wreq.WithContext(abi.WithInvoker(ctx, principal(ctx).ID))
	resp, err := s.workers.Fetch(wreq.Context(), v, wreq)
	if err != nil {
		if errors.Is(err, membudget.ErrBusy) || errors.Is(err, membudget.ErrTooLarge) {
			s.writeProblem(w, r, budgetProblem(w, err))
			return
		}
		s.writeProblem(w, r, problem.New(http.StatusInternalServerError, problem.CodeWorkerError, "the worker's fetch handler failed; its log says why"))
		return
	}
	defer resp.Body.Close()
	// A response the runtime holds whole is charged before it is written
	// (the client may read it slowly); one it streams holds a chunk at a
	// time.
	if resp.ContentLength > 0 {
		out, err := s.budget.Reserve(hold, resp.ContentLength)
		if err != nil {
			s.writeProblem(w, r, budgetProblem(w, err))
			return
		}
		defer out.Release()
	}
	for k, vs := range resp.Header {
		ck := http.CanonicalHeaderKey(k)
		for _, v := range vs {
			if workerHeaderAllowed(ck, v) {
				w.Header().Add(ck, v)
			}
		}
	}
	for _, kv := range workerResponseSecurity {
		w.Header().Set(kv[0], kv[1])
	}
	w.Header().Set(ResponseSourceHeader, "worker")
	status := resp.StatusCode
	if status < 200 || status > 599 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.Copy(w, resp.Body)
}

// readFetchBody reads the fetch route's request body into one buffer,
// reserving it in the budget before reading: all of a declared
// Content-Length at once, else each growth of the buffer before it is
// made. The reservation is the caller's to release (also on error).
func (s *Server) readFetchBody(w http.ResponseWriter, r *http.Request, hold membudget.Holder) (_ []byte, _ *membudget.Reservation, err error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, nil, nil
	}
	if r.ContentLength > MaxBodyBytes {
		return nil, nil, payloadTooLarge()
	}
	res, rerr := s.budget.Reserve(hold, 0)
	if rerr != nil {
		return nil, nil, budgetProblem(w, rerr)
	}
	// A refused body is read and dropped (up to the limit, 32 KiB at a
	// time), so that the client, still sending it, reads the 503 instead
	// of a reset connection.
	defer func() {
		if err != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, MaxBodyBytes))
		}
	}()
	body, err := membudget.ReadBody(http.MaxBytesReader(w, r.Body, MaxBodyBytes), r.ContentLength, MaxBodyBytes, res)
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return body, res, nil
	case errors.Is(err, membudget.ErrOverLimit) || errors.As(err, &tooLarge):
		return nil, res, payloadTooLarge()
	case errors.Is(err, membudget.ErrBusy) || errors.Is(err, membudget.ErrTooLarge):
		return nil, res, budgetProblem(w, err)
	}
	return nil, res, invalidRequest("the request body could not be read: %v", err)
}

func payloadTooLarge() error {
	return problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the request body is larger than %d bytes (8 MiB), the limit of the fetch route", MaxBodyBytes)
}

// budgetProblem is the problem of a reservation that failed: 413 when it
// could never fit, else 503 with Retry-After.
func budgetProblem(w http.ResponseWriter, err error) error {
	if errors.Is(err, membudget.ErrTooLarge) {
		return problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the body is %v; nothing was passed to the worker", err)
	}
	w.Header().Set("Retry-After", "1")
	return problem.New(http.StatusServiceUnavailable, problem.CodeMemoryBudgetInUse, "%v; nothing was passed to the worker", err)
}

// bytesBody is a request body held in one buffer: a runtime that passes
// bodies on whole takes Bytes instead of copying it (runtime/sandbox).
type bytesBody struct {
	*bytes.Reader
	b []byte
}

func newBytesBody(b []byte) *bytesBody { return &bytesBody{Reader: bytes.NewReader(b), b: b} }

func (b *bytesBody) Bytes() []byte { return b.b }
func (b *bytesBody) Close() error  { return nil }

// ResponseSourceHeader marks every response the worker's fetch handler
// made, so that a client tells a worker's 401 problem from the host's.
const ResponseSourceHeader = "Takohost-Response-Source"

// inboundStripped are the request headers a worker never sees: the
// caller's credentials for the host (and any cookie of the host's origin)
// and the hop-by-hop headers of the client's connection.
var inboundStripped = []string{
	"Authorization", "Proxy-Authorization", "Cookie",
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// workerResponseHeaders is the allow-list of a worker's response headers
// (spec/host-api.md §Worker fetch route): the host's origin is shared by
// every worker and by the Host API, so a worker may set only headers that
// describe its own response and that a browser does not turn into
// authority over the origin. Everything else is dropped: framing and
// hop-by-hop headers (the host frames the body it copies), Set-Cookie,
// CORS (Access-Control-*), CSP and the other policy headers, HSTS,
// Refresh, Link, WWW-Authenticate, Alt-Svc, Clear-Site-Data, the host's
// own X-Request-Id and response source. Headers starting "X-" pass except
// workerXDenied.
var workerResponseHeaders = map[string]bool{
	"Content-Type": true, "Content-Language": true, "Content-Disposition": true, "Content-Encoding": true,
	"Content-Range": true, "Accept-Ranges": true, "Cache-Control": true, "Expires": true, "Pragma": true,
	"Etag": true, "Last-Modified": true, "Vary": true, "Age": true, "Retry-After": true,
	"Location": true, // relative references only: safeLocation
}

// workerXDenied are the X- headers browsers act on, or the host's own.
var workerXDenied = map[string]bool{
	"X-Request-Id": true, "X-Content-Type-Options": true, "X-Frame-Options": true, "X-Xss-Protection": true,
	"X-Dns-Prefetch-Control": true, "X-Permitted-Cross-Domain-Policies": true, "X-Download-Options": true,
}

// workerResponseSecurity are set on every worker response: whatever its
// Content-Type, a browser renders it as a sandboxed document of an opaque
// origin that runs no script and loads nothing, and never sniffs another
// type, so a worker's HTML cannot act as the host's origin.
var workerResponseSecurity = [][2]string{
	{"Content-Security-Policy", "sandbox; default-src 'none'"},
	{"X-Content-Type-Options", "nosniff"},
}

// workerHeaderAllowed reports whether a worker may set header k (canonical)
// to v on the host's origin.
func workerHeaderAllowed(k, v string) bool {
	if k == "Location" {
		return safeLocation(v)
	}
	if workerResponseHeaders[k] {
		return true
	}
	return strings.HasPrefix(k, "X-") && !workerXDenied[k] && !strings.HasPrefix(k, "X-Forwarded-")
}

// safeLocation admits a relative reference without scheme or authority
// ("next", "/v2/...", "?page=2"): a worker's redirect stays on the host,
// it cannot make the host's origin an open redirector.
func safeLocation(v string) bool {
	if v == "" || strings.HasPrefix(v, "//") || strings.ContainsAny(v, "\\\r\n\t") {
		return false
	}
	u, err := url.Parse(v)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil
}

// workerPath is the part of the escaped request path after .../fetch/.
func workerPath(r *http.Request, space, uid string) string {
	p := r.URL.EscapedPath()
	marker := "/resources/" + uid + "/fetch"
	i := strings.Index(p, marker)
	if i < 0 {
		return strings.TrimPrefix(r.PathValue("path"), "/")
	}
	return strings.TrimPrefix(p[i+len(marker):], "/")
}

func (s *Server) GetWorkerLogs(ctx context.Context, req api.GetWorkerLogsRequestObject) (api.GetWorkerLogsResponseObject, error) {
	wr, err := s.ctl.Worker(ctx, principal(ctx), req.Space, req.Uid, auth.Read)
	if err != nil {
		return nil, err
	}
	var after int64
	limit := 100
	if req.Params.After != nil {
		if after = *req.Params.After; after < 0 {
			return nil, invalidRequest("after must not be negative")
		}
	}
	if req.Params.Limit != nil {
		if limit = *req.Params.Limit; limit < 1 || limit > 1000 {
			return nil, invalidRequest("limit must be from 1 to 1000")
		}
	}
	wait := 0
	if req.Params.Wait != nil {
		if wait = *req.Params.Wait; wait < 0 || wait > MaxWaitSeconds {
			return nil, invalidRequest("wait must be an integer from 0 to %d", MaxWaitSeconds)
		}
	}
	entries, err := s.workers.Logs(ctx, wr.UID, after, limit, secondsDuration(wait))
	if rerr := revokedWhileWaiting(ctx); rerr != nil {
		return nil, rerr
	}
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	if entries == nil {
		entries = []api.LogEntry{}
	}
	return api.GetWorkerLogs200JSONResponse{Items: entries}, nil
}
