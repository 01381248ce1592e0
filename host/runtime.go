package host

import (
	"context"
	"net/http"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/sandbox"
)

// Runtime is what the host needs of a JavaScript worker runtime. The
// sandboxed runtime (runtime/sandbox, NewSandboxRuntime) is the default;
// the in-process goja runtime (NewGojaRuntime) runs with
// Config.UnsafeInProcessWorkers; Config.Runtime can supply another.
type Runtime interface {
	Part
	// Compile loads v's modules without keeping them (admission compiles
	// versions that may still be refused) and returns the handlers its
	// default export provides. A *abi.CompileError reports modules that do
	// not load.
	Compile(ctx context.Context, v *abi.Version) ([]string, error)
	// QueueHandler is v's queue handler, for the delivery engine.
	QueueHandler(v *abi.Version) (abi.Handler, error)
	// Fetch invokes v's fetch handler with r (path is the worker's path).
	// A handler that threw or timed out is a 500 problem whose code starts
	// with "worker_".
	Fetch(ctx context.Context, v *abi.Version, r *http.Request, path string) (*http.Response, error)
	// Logs returns up to limit entries of the worker's log with seq > after.
	Logs(workerUID string, after int64, limit int) []api.LogEntry
	// Evict drops whatever the runtime caches for a deleted version.
	Evict(versionUID string)
	// ForgetWorker drops what the runtime keeps for a deleted ModuleWorker
	// (its log), so that churn does not grow memory.
	ForgetWorker(workerUID string)
}

// RuntimeOptions is what the host gives a runtime it builds.
type RuntimeOptions = js.Options

// gojaRuntime is runtime/js as a host.Runtime.
type gojaRuntime struct{ *js.Runtime }

// NewGojaRuntime is the in-process goja runtime.
func NewGojaRuntime(opts js.Options) Runtime { return gojaRuntime{js.New(opts)} }

func (gojaRuntime) Start(context.Context) error { return nil }

func (g gojaRuntime) Stop(context.Context) error {
	g.Runtime.Close()
	return nil
}

// Compile uses the runtime's uncached compile.
func (gojaRuntime) Compile(_ context.Context, v *abi.Version) ([]string, error) {
	p, err := js.Compile(v)
	if err != nil {
		return nil, err
	}
	return append([]string(nil), p.Handlers...), nil
}

func (g gojaRuntime) Logs(workerUID string, after int64, limit int) []api.LogEntry {
	return toAPILogs(g.Runtime.Logs(workerUID, after, limit))
}

// sandboxRuntime is runtime/sandbox as a host.Runtime: worker code runs in
// child processes of the host (the default).
type sandboxRuntime struct{ *sandbox.Pool }

// NewSandboxRuntime runs worker code in sandbox processes. The program
// must call sandbox.Main first (the sandboxes are its own executable).
func NewSandboxRuntime(opts sandbox.Options) (Runtime, error) {
	p, err := sandbox.New(opts)
	if err != nil {
		return nil, err
	}
	return sandboxRuntime{p}, nil
}

func (sandboxRuntime) Start(context.Context) error { return nil }

func (s sandboxRuntime) Stop(context.Context) error {
	s.Pool.Close()
	return nil
}

// Compile probes v in its space's admission sandbox.
func (s sandboxRuntime) Compile(ctx context.Context, v *abi.Version) ([]string, error) {
	return s.Pool.Probe(ctx, v)
}

// QueueHandler loads v in its worker's sandbox the first time (bounded by
// the sandbox's own load limit).
func (s sandboxRuntime) QueueHandler(v *abi.Version) (abi.Handler, error) {
	return s.Pool.QueueHandler(context.Background(), v)
}

func (s sandboxRuntime) Logs(workerUID string, after int64, limit int) []api.LogEntry {
	return toAPILogs(s.Pool.Logs(workerUID, after, limit))
}

func toAPILogs(entries []js.LogEntry) []api.LogEntry {
	out := make([]api.LogEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, api.LogEntry{Seq: e.Seq, TimeMillis: e.TimeMillis, Level: api.LogEntryLevel(e.Level), Message: e.Message, VersionUid: e.VersionUID})
	}
	return out
}
