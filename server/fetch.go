package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"

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
	wreq.Header.Del("Authorization")
	wreq.ContentLength = int64(len(body))
	resp, err := s.workers.Fetch(ctx, v, wreq)
	if err != nil {
		s.writeProblem(w, r, problem.New(http.StatusInternalServerError, problem.CodeWorkerError, "the worker's fetch handler failed; its log says why"))
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if strings.EqualFold(k, "X-Request-Id") {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := resp.StatusCode
	if status < 200 || status > 599 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.Copy(w, resp.Body)
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
	entries, err := s.workers.Logs(ctx, wr.UID, after, limit)
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	if entries == nil {
		entries = []api.LogEntry{}
	}
	return api.GetWorkerLogs200JSONResponse{Items: entries}, nil
}
