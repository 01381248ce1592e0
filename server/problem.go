package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/takoform/queuehost/problem"
)

func invalidRequest(format string, args ...any) *problem.Problem {
	return problem.InvalidRequest(format, args...)
}

// writeProblem is the one place problems are rendered: handlers, the
// strict server's error hooks, the router's 404/405 and the middleware all
// come here. A 500 and a 503 log their cause, which the client never sees.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problem.As(err)
	switch {
	case p.Code == problem.CodeInternal:
		s.log.ErrorContext(r.Context(), "internal error", "err", err, "requestId", requestID(r.Context()))
	case p.Status == http.StatusServiceUnavailable && p.Cause != nil:
		s.log.WarnContext(r.Context(), "backend unavailable", "err", p.Cause, "path", r.URL.Path, "requestId", requestID(r.Context()))
	}
	doc := p.Document(r.URL.Path, requestID(r.Context()))
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(doc)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(buf.Bytes())
}
