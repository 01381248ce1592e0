package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// Problem codes (spec/host-api.md §Errors).
const (
	CodeUnauthenticated     = "unauthenticated"
	CodeForbidden           = "forbidden"
	CodeNotFound            = "not_found"
	CodeInvalidRequest      = "invalid_request"
	CodeInvalidSpec         = "invalid_spec"
	CodeUnknownForm         = "unknown_form"
	CodeUnknownOffering     = "unknown_offering"
	CodeInvalidReference    = "invalid_reference"
	CodeConsumerConflict    = "consumer_conflict"
	CodeDeadLetterCycle     = "dead_letter_cycle"
	CodeMissingHandler      = "missing_handler"
	CodeNameConflict        = "name_conflict"
	CodeDependencyConflict  = "dependency_conflict"
	CodeOperationInProgress = "operation_in_progress"
	CodePreconditionFailed  = "precondition_failed"
	CodeIdempotencyKeyReuse = "idempotency_key_reuse"
	CodeBackendUnavailable  = "backend_unavailable"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeLimitExceeded       = "limit_exceeded"
	CodeWorkerError         = "worker_error"
	CodeInternal            = "internal_error"
	CodeHeaderTooLarge      = "header_too_large"
)

// ProblemTypeBase prefixes every problem's type URI.
const ProblemTypeBase = "https://queuehost.takoform.dev/problems/"

var titles = map[string]string{
	CodeUnauthenticated:     "Authentication required",
	CodeForbidden:           "Forbidden",
	CodeNotFound:            "Not found",
	CodeInvalidRequest:      "Invalid request",
	CodeInvalidSpec:         "Invalid spec",
	CodeUnknownForm:         "Unknown Form",
	CodeUnknownOffering:     "Unknown offering",
	CodeInvalidReference:    "Invalid reference",
	CodeConsumerConflict:    "The queue already has a consumer",
	CodeDeadLetterCycle:     "Dead-letter cycle",
	CodeMissingHandler:      "Missing handler",
	CodeNameConflict:        "Name conflict",
	CodeDependencyConflict:  "Dependency conflict",
	CodeOperationInProgress: "Operation in progress",
	CodePreconditionFailed:  "Precondition failed",
	CodeIdempotencyKeyReuse: "Idempotency key reused",
	CodeBackendUnavailable:  "Backend unavailable",
	CodeMethodNotAllowed:    "Method not allowed",
	CodeLimitExceeded:       "Limit exceeded",
	CodeWorkerError:         "Worker error",
	CodeInternal:            "Internal error",
}

// Problem is an RFC 9457 problem the server answers with. Handlers return
// it as an error; writeProblem renders every problem, whatever produced it.
type Problem struct {
	Status int
	Code   string
	Detail string
	Errors []api.ProblemError
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

func newProblem(status int, code, format string, args ...any) *Problem {
	return &Problem{Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

func invalidRequest(format string, args ...any) *Problem {
	return newProblem(http.StatusBadRequest, CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) *Problem {
	return newProblem(http.StatusNotFound, CodeNotFound, format, args...)
}

func forbidden(format string, args ...any) *Problem {
	return newProblem(http.StatusForbidden, CodeForbidden, format, args...)
}

func unprocessable(code, format string, args ...any) *Problem {
	return newProblem(http.StatusUnprocessableEntity, code, format, args...)
}

func conflict(code, format string, args ...any) *Problem {
	return newProblem(http.StatusConflict, code, format, args...)
}

// withPointer adds one input error.
func (p *Problem) withPointer(pointer, detail string) *Problem {
	p.Errors = append(p.Errors, api.ProblemError{Pointer: pointer, Detail: detail})
	return p
}

func fromViolations(status int, code, detail string, vs []schemas.Violation) *Problem {
	p := &Problem{Status: status, Code: code, Detail: detail}
	for _, v := range vs {
		p.Errors = append(p.Errors, api.ProblemError{Pointer: v.Pointer, Detail: v.Detail})
	}
	return p
}

func unavailable(err error) *Problem {
	return newProblem(http.StatusServiceUnavailable, CodeBackendUnavailable,
		"the host could not make the change durable; nothing was changed, retry later")
}

// asProblem maps any error to the problem to answer with.
func asProblem(err error) *Problem {
	var p *Problem
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrClosed):
		return unavailable(err)
	default:
		return newProblem(http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

// document renders p as the API's Problem for the request r (nil: no
// request, as in a recovered Operation's error).
func (p *Problem) document(instance, requestID string) api.Problem {
	title := titles[p.Code]
	if title == "" {
		title = http.StatusText(p.Status)
	}
	doc := api.Problem{Type: ProblemTypeBase + p.Code, Title: title, Status: p.Status, Code: p.Code}
	if p.Detail != "" {
		d := p.Detail
		doc.Detail = &d
	}
	if instance != "" {
		doc.Instance = &instance
	}
	if requestID != "" {
		doc.RequestId = &requestID
	}
	if len(p.Errors) > 0 {
		errs := append([]api.ProblemError(nil), p.Errors...)
		doc.Errors = &errs
	}
	return doc
}

// writeProblem is the one place problems are rendered: handlers, the
// strict server's error hooks, the router's 404/405 and the middleware all
// come here.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := asProblem(err)
	if p.Code == CodeInternal {
		s.log.ErrorContext(r.Context(), "internal error", "err", err, "requestId", requestID(r.Context()))
	}
	doc := p.document(r.URL.Path, requestID(r.Context()))
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
