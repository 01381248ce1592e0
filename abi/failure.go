package abi

import (
	"context"
	"errors"
)

// How a handler invocation failed, for the attempt history an operator
// reads (store.Attempt). The layers that know (the JavaScript runtime, the
// sandbox pool) implement these on their errors; the delivery engine,
// which must not import them, asks with errors.As.

// ScriptFailure is implemented by an error that is a JavaScript exception
// or rejection: its name ("TypeError"; empty for a thrown non-Error), its
// message and its stack as the runtime formats it (may be empty).
type ScriptFailure interface {
	error
	Script() (name, message, stack string)
}

// SandboxFailure is implemented by an error that reports the end of the
// process running the handler (memory cap, crash, its time limit); the
// error's text says why.
type SandboxFailure interface {
	error
	SandboxEnded() bool
}

// VersionedHandler is implemented by a Handler that runs one WorkerVersion:
// the UID of that version, recorded with each attempt.
type VersionedHandler interface {
	Handler
	VersionUID() string
}

// Versioned wraps h so that it reports version as its VersionUID.
func Versioned(h Handler, version string) Handler {
	return versioned{h, version}
}

type versioned struct {
	Handler
	uid string
}

func (v versioned) VersionUID() string { return v.uid }

// Failure classes of a handler error (Describe).
const (
	FailureThrown       = "thrown"
	FailureSandboxEnded = "sandbox_ended"
	FailureTimeLimit    = "time_limit"
)

// Describe classifies a handler's error: a JavaScript exception (its
// name, message and stack), the end of its sandbox, a time limit, or any
// other error (class thrown, name empty, the error's text).
func Describe(err error) (class, name, message, stack string) {
	var sf ScriptFailure
	var sb SandboxFailure
	switch {
	case errors.As(err, &sf):
		name, message, stack = sf.Script()
		return FailureThrown, name, message, stack
	case errors.As(err, &sb) && sb.SandboxEnded():
		return FailureSandboxEnded, "", err.Error(), ""
	case errors.Is(err, context.DeadlineExceeded):
		return FailureTimeLimit, "", err.Error(), ""
	}
	return FailureThrown, "", err.Error(), ""
}
