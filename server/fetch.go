package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
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
		if outboundStripped[http.CanonicalHeaderKey(k)] {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
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

// outboundStripped are the response headers the host sets itself or never
// lets a worker set: the framing (the host frames the body it copies; a
// worker's Content-Length that disagreed with its body would break the
// client's connection), hop-by-hop headers, the host's own request ID and
// response source, and cookies (the host's origin is shared by every
// worker, and it forwards no Cookie back).
var outboundStripped = map[string]bool{
	"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Trailer": true, "Upgrade": true,
	"X-Request-Id": true, ResponseSourceHeader: true, "Set-Cookie": true,
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
