package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
)

// WorkerBaseURL is the origin of the Request a worker's fetch handler sees.
const WorkerBaseURL = "http://worker.invalid/"

// serveFetch is ANY /v2/spaces/{space}/resources/{uid}/fetch[/{path...}]:
// it invokes the worker's selected version's fetch handler.
func (s *Server) serveFetch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	space, uid := r.PathValue("space"), r.PathValue("uid")
	v, err := s.ctl.FetchTarget(ctx, principal(ctx), space, uid)
	if err != nil {
		s.writeProblem(w, r, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		s.writeProblem(w, r, invalidRequest("the request body is larger than %d bytes (8 MiB) or could not be read", MaxBodyBytes))
		return
	}
	target := WorkerBaseURL + workerPath(r, space, uid)
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	wreq, err := http.NewRequestWithContext(ctx, r.Method, target, bytes.NewReader(body))
	if err != nil {
		s.writeProblem(w, r, invalidRequest("the request cannot be passed to the worker: %v", err))
		return
	}
	wreq.Header = r.Header.Clone()
	for _, h := range inboundStripped {
		wreq.Header.Del(h)
	}
	wreq.ContentLength = int64(len(body))
	// The worker's producer Binding calls during this invocation need the
	// invoking principal's rights as well as its creator's.
	wreq = wreq.WithContext(abi.WithInvoker(ctx, principal(ctx).ID))
	resp, err := s.workers.Fetch(wreq.Context(), v, wreq)
	if err != nil {
		s.writeProblem(w, r, problem.New(http.StatusInternalServerError, problem.CodeWorkerError, "the worker's fetch handler failed; its log says why"))
		return
	}
	defer resp.Body.Close()
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
