package abi

import (
	"context"
	"fmt"
)

// Version is what the JavaScript runtime needs of a WorkerVersion 0.5.0
// resource: its modules, env and producer Bindings, and who it runs as.
// Every field is immutable for the life of the version.
type Version struct {
	UID        string
	Space      string
	WorkerUID  string // the ModuleWorker this version belongs to; logs are kept per worker
	Principal  string // the ID of the principal that created the version (auth.Principal.ID)
	MainModule string
	Modules    []Module
	Vars       map[string]string
	Secrets    map[string]string
	Bindings   []Binding
}

// Module is one ES module of a WorkerVersion.
type Module struct {
	Name    string
	Content string
}

// Binding is one queueProducerBindings entry: env[Name] sends to QueueUID.
type Binding struct {
	Name     string
	QueueUID string
}

// Sender is how producer Bindings reach the queues. The host's
// implementation authorises, at call time, creator (the version's
// Principal) and, when ctx carries one (Invoker), the principal whose
// request invoked the worker: both must be allowed to send. It then sends
// through the delivery engine and returns the host-issued IDs in input
// order only after the messages are durable. Its errors are the queue ABI's
// (Code names them). Runtimes pass the invocation's context, so that a send
// made during a fetch invocation carries its invoker; a queue delivery has
// none.
type Sender interface {
	Send(ctx context.Context, creator, space, queueUID string, msgs []OutgoingMessage) ([]string, error)
}

type invokerKey struct{}

// WithInvoker returns ctx carrying the ID of the principal whose request
// invokes a worker (the fetch route).
func WithInvoker(ctx context.Context, principalID string) context.Context {
	return context.WithValue(ctx, invokerKey{}, principalID)
}

// Invoker is the ID of the principal whose request invoked the worker, if
// ctx carries one.
func Invoker(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(invokerKey{}).(string)
	return id, ok
}

// CompileError reports modules that cannot be loaded: a syntax error, an
// unresolvable import, or a main module without a default export. File,
// Line (1-based) and Column (1-based) locate it when known.
type CompileError struct {
	File    string
	Line    int
	Column  int
	Message string
}

func (e *CompileError) Error() string {
	if e.File == "" {
		return e.Message
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
}
