// Package problem is the host's RFC 9457 problems: one table of codes and
// titles (spec/host-api.md §Errors), the Problem error the controller
// returns and the server renders, and the constructors both use.
//
// Why a package of its own: admission (controller) decides which problem a
// refused request gets, and the HTTP layer (server) renders it. Keeping the
// codes and their titles in one table here means a code cannot exist
// without a title, which is how header_too_large once went untitled.
package problem

import (
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
	// CodeTooManyConnections is the 503 a connection over the listener's
	// caps is answered with (server.LimitListener).
	CodeTooManyConnections = "too_many_connections"
	// CodeNotAQueue: a queue extension route (spec/peers.md) on a resource
	// that is not a queue (or, for a change, not the queue itself).
	CodeNotAQueue = "not_a_queue"
	// CodeQueueNotIdle: a conditional delete (ifIdle) of a queue that
	// holds messages or runs a batch.
	CodeQueueNotIdle = "queue_not_idle"
	// CodeLastAdmin: revoking the last principal that may manage
	// principals (spec/host-api.md §Principals).
	CodeLastAdmin = "last_admin"
	// CodeOperationCancelled: the error of a redrive Operation cancelled
	// before it finished (spec/peers.md §Redrive).
	CodeOperationCancelled = "operation_cancelled"
	// CodeNotCancellable: a cancel of an Operation that is not a redrive,
	// or that has finished.
	CodeNotCancellable = "operation_not_cancellable"
	// CodePayloadTooLarge: a worker fetch route's request body over the
	// 8 MiB limit, or over the host's memory share for one worker (413).
	CodePayloadTooLarge = "payload_too_large"
	// CodeMemoryBudgetInUse: the host's memory for bodies in flight (its
	// total, the principal's or the worker's share) is in use; retry
	// after Retry-After (503, runtime/membudget).
	CodeMemoryBudgetInUse = "memory_budget_in_use"
	// The producer Binding's codes (spec/runtime-abi.md §Producer
	// Bindings), which the publish extension answers with (spec/peers.md
	// §Publish): 0 or more than 100 messages; an empty body, one that is
	// not what its encoding says or a delay out of range; a body over
	// 127000 bytes.
	CodeBatchTooLarge   = "batch_too_large"
	CodeInvalidBody     = "invalid_body"
	CodeMessageTooLarge = "message_too_large"
	// The pull consumer codes (spec/peers.md §Pull consumers): a lease
	// route on a resource that is not a PullConsumer (404); a lease ID the
	// consumer was never issued (404); a lease whose visibility timeout
	// ended (409); a lease every message of which is settled (409); a
	// lease issued to another pull consumer (409); a message not in the
	// lease (409); a message settled already (409).
	CodeNotAPullConsumer = "not_a_pull_consumer"
	CodeUnknownLease     = "unknown_lease"
	CodeLeaseExpired     = "lease_expired"
	CodeLeaseSettled     = "lease_settled"
	CodeWrongConsumer    = "wrong_consumer"
	CodeUnknownMessage   = "unknown_message"
	CodeAlreadySettled   = "already_settled"
)

// TypeBase prefixes every problem's type URI.
const TypeBase = "https://queuehost.takoform.dev/problems/"

// Titles is the one table of problem codes and their titles: every code
// above has exactly one entry (problem_test.go checks it).
var Titles = map[string]string{
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
	CodeHeaderTooLarge:      "Request header fields too large",
	CodeTooManyConnections:  "Too many connections",
	CodeNotAQueue:           "Not a queue",
	CodeQueueNotIdle:        "Queue not idle",
	CodeLastAdmin:           "Last administrator",
	CodeOperationCancelled:  "Operation cancelled",
	CodeNotCancellable:      "Operation not cancellable",
	CodePayloadTooLarge:     "Payload too large",
	CodeMemoryBudgetInUse:   "Memory budget in use",
	CodeBatchTooLarge:       "Batch too large",
	CodeInvalidBody:         "Invalid body",
	CodeMessageTooLarge:     "Message too large",
	CodeNotAPullConsumer:    "Not a pull consumer",
	CodeUnknownLease:        "Unknown lease",
	CodeLeaseExpired:        "Lease expired",
	CodeLeaseSettled:        "Lease settled",
	CodeWrongConsumer:       "Lease of another consumer",
	CodeUnknownMessage:      "Message not in the lease",
	CodeAlreadySettled:      "Message already settled",
}

// Problem is an RFC 9457 problem. The controller and the server return it
// as an error; the server renders every problem, whatever produced it.
type Problem struct {
	Status int
	Code   string
	Detail string
	Errors []api.ProblemError
	// Cause is the error behind the problem, for the log only: it is never
	// rendered (a 503's cause can name files and devices).
	Cause error
}

func (p *Problem) Error() string {
	if p.Cause != nil {
		return p.Code + ": " + p.Detail + ": " + p.Cause.Error()
	}
	return p.Code + ": " + p.Detail
}

// Unwrap is the cause.
func (p *Problem) Unwrap() error { return p.Cause }

// New is a problem with a formatted detail.
func New(status int, code, format string, args ...any) *Problem {
	return &Problem{Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// InvalidRequest is 400 invalid_request.
func InvalidRequest(format string, args ...any) *Problem {
	return New(http.StatusBadRequest, CodeInvalidRequest, format, args...)
}

// NotFound is 404 not_found.
func NotFound(format string, args ...any) *Problem {
	return New(http.StatusNotFound, CodeNotFound, format, args...)
}

// Forbidden is 403 forbidden.
func Forbidden(format string, args ...any) *Problem {
	return New(http.StatusForbidden, CodeForbidden, format, args...)
}

// Unprocessable is 422 with code.
func Unprocessable(code, format string, args ...any) *Problem {
	return New(http.StatusUnprocessableEntity, code, format, args...)
}

// Conflict is 409 with code.
func Conflict(code, format string, args ...any) *Problem {
	return New(http.StatusConflict, code, format, args...)
}

// PreconditionFailed is the 412 of an If-Match that does not match.
func PreconditionFailed() *Problem {
	return New(http.StatusPreconditionFailed, CodePreconditionFailed, "If-Match does not match the resource's current ETag")
}

// Unavailable is 503 backend_unavailable for a store that could not read or
// make a change durable. It keeps err as its cause, which the server logs.
func Unavailable(err error) *Problem {
	if errors.Is(err, store.ErrNoSpace) {
		p := New(http.StatusServiceUnavailable, CodeBackendUnavailable,
			"the host's disk is nearly full: new resources and messages are refused until messages are settled or resources deleted; nothing was changed")
		p.Cause = err
		return p
	}
	p := New(http.StatusServiceUnavailable, CodeBackendUnavailable,
		"the host could not make the change durable; nothing was changed, retry later")
	p.Cause = err
	return p
}

// WithPointer adds one input error.
func (p *Problem) WithPointer(pointer, detail string) *Problem {
	p.Errors = append(p.Errors, api.ProblemError{Pointer: pointer, Detail: detail})
	return p
}

// FromViolations is a problem listing schema violations.
func FromViolations(status int, code, detail string, vs []schemas.Violation) *Problem {
	p := &Problem{Status: status, Code: code, Detail: detail}
	for _, v := range vs {
		p.Errors = append(p.Errors, api.ProblemError{Pointer: v.Pointer, Detail: v.Detail})
	}
	return p
}

// As maps any error to the problem to answer with: a Problem is itself,
// a store that is unavailable or closed is 503, anything else is 500.
func As(err error) *Problem {
	var p *Problem
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrClosed):
		return Unavailable(err)
	default:
		return &Problem{Status: http.StatusInternalServerError, Code: CodeInternal, Detail: "internal error", Cause: err}
	}
}

// Document renders p as the API's Problem (instance and requestID may be
// empty, as in a recovered Operation's error).
func (p *Problem) Document(instance, requestID string) api.Problem {
	title := Titles[p.Code]
	if title == "" {
		title = http.StatusText(p.Status)
	}
	doc := api.Problem{Type: TypeBase + p.Code, Title: title, Status: p.Status, Code: p.Code}
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
