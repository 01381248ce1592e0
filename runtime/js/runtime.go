package js

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dop251/goja"
	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/membudget"
)

// Defaults of Options.
const (
	DefaultInvocationTimeout = 30 * time.Second
	DefaultStartupTimeout    = 5 * time.Second
	DefaultMaxRuntimes       = 250 // QueueConsumer's largest maxConcurrency
	DefaultMaxBodyBytes      = 16 << 20
	DefaultMaxAllocBytes     = 64 << 20
	DefaultLogEntries        = 1000
	maxLogMessageBytes       = 16 << 10
)

// Errors of the runtime.
var (
	ErrClosed           = errors.New("js: the runtime is closed")
	ErrNoQueueHandler   = errors.New("js: the worker's default export has no queue handler")
	ErrNoFetchHandler   = errors.New("js: the worker's default export has no fetch handler")
	ErrRequestTooLarge  = errors.New("js: the request body is larger than the limit")
	ErrRuntimeExhausted = errors.New("js: no runtime of the version became free before the deadline")
)

// Options configure a Runtime. Zero values take the defaults.
type Options struct {
	// Sender carries producer Binding sends; nil makes every send reject
	// backend_unavailable.
	Sender abi.Sender
	// AllowedFetchHosts lists the hosts outbound fetch may reach: a host
	// name or IP literal ("api.example.com", "127.0.0.1", "::1") matching any
	// port, "host:port" matching one port, or "*.example.com" matching
	// subdomains of example.com (not example.com itself). Empty denies all.
	AllowedFetchHosts []string
	// InvocationTimeout is the wall-time limit of one handler invocation
	// (default 30 s); the caller's context deadline applies when earlier.
	InvocationTimeout time.Duration
	// StartupTimeout bounds the modules' top-level code (default 5 s).
	StartupTimeout time.Duration
	// MaxModuleBytes limits the total size of a version's modules, names
	// included (default 4 MiB).
	MaxModuleBytes int
	// MaxRuntimes caps the runtimes of one version (default 250). The pool
	// grows with demand, so a queue consumer's runtimes never exceed its
	// maxConcurrency (plus concurrent fetch invocations).
	MaxRuntimes int
	// MaxBodyBytes limits a Request or Response body built in JavaScript,
	// an inbound fetch request body and an outbound fetch response body
	// (default 16 MiB).
	MaxBodyBytes int
	// BodyBudget bounds the outbound fetches' response bodies the runtime
	// holds at once (runtime/membudget); nil: no bound.
	BodyBudget *membudget.Budget
	// MaxAllocBytes limits one ArrayBuffer or typed array allocation and
	// the result of String.prototype.repeat/padStart/padEnd made in
	// JavaScript (default 64 MiB): beyond it they throw a RangeError.
	MaxAllocBytes int
	// LogEntries is the size of each worker's log ring (default 1000).
	LogEntries int
	// Logs, when set, is the LogBook the runtime keeps worker logs in
	// (a host passes a durable one, OpenLogBook); a new in-memory book of
	// LogEntries per worker when nil.
	Logs *LogBook
	// Logger receives the host-side events (runtime discarded, compile
	// failures); nil discards them.
	Logger *slog.Logger
	// LogSink, when set, receives every worker log line instead of the
	// Runtime's own LogBook (Runtime.Logs then stays empty): a sandbox
	// process forwards its lines to the host this way.
	// The context is the invocation's that logged the line, the one its
	// handler was called with (context.Background() for a line logged
	// outside any invocation).
	LogSink func(ctx context.Context, workerUID, versionUID, level, message string)
	// Transport, when set, replaces the outbound fetch transport. The host
	// allow-list is still checked for every request and redirect, but the
	// dial-time address checks are then the transport's job. For tests.
	Transport http.RoundTripper
	// Waiter, when set, is how an invocation's event loop waits while it
	// has nothing to run; nil waits on a channel. See Waiter.
	Waiter Waiter
}

// A Waiter is how an invocation's event loop waits while it has nothing to
// run (Options.Waiter).
//
// Why: by default Go work started from JavaScript (a send, a settlement, a
// fetch) runs on a goroutine of its own, and its completion wakes the loop
// goroutine through a channel: two goroutine hand-offs per operation. A
// sandbox whose sends are answered on a pipe that belongs to the
// invocation (a lane) does better when the loop goroutine starts the send
// itself (SendStarter) and reads the answer itself while it waits: the
// reply then wakes the goroutine that runs its JavaScript, and nothing
// else.
type Waiter interface {
	// Wait blocks until wake receives, ctx (the invocation's) is done or
	// Wake(ctx) is called, whichever comes first; it may return earlier
	// (the loop checks its work and calls it again). Meanwhile it may do
	// the work whose completions the loop waits for.
	Wait(ctx context.Context, wake <-chan struct{})
	// Wake makes a Wait for ctx return, or the next one if none is
	// running: the loop calls it, from any goroutine, after posting work
	// for the loop and when ctx ends.
	Wake(ctx context.Context)
}

// A SendStarter is a Sender that can start a send without waiting for it:
// StartSend returns at once and calls done, once, from any goroutine
// (possibly during a Waiter's Wait), with what Send would have returned.
// The runtime uses it, when the Options' Sender is one, instead of
// calling Send on a goroutine of its own.
type SendStarter interface {
	StartSend(ctx context.Context, principal, space, queueUID string, msgs []abi.OutgoingMessage, done func(ids []string, err error))
}

func (o Options) withDefaults() Options {
	if o.InvocationTimeout <= 0 {
		o.InvocationTimeout = DefaultInvocationTimeout
	}
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = DefaultStartupTimeout
	}
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if o.MaxRuntimes <= 0 {
		o.MaxRuntimes = DefaultMaxRuntimes
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxAllocBytes <= 0 {
		o.MaxAllocBytes = DefaultMaxAllocBytes
	}
	if o.LogEntries <= 0 {
		o.LogEntries = DefaultLogEntries
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Runtime runs the workers of one host: compiled programs and runtime pools
// per version, outbound fetch, and the per-worker log rings.
type Runtime struct {
	opts   Options
	client *http.Client
	logs   *LogBook

	mu       sync.Mutex
	closed   bool
	versions map[string]*version
}

// New makes a Runtime.
func New(opts Options) *Runtime {
	opts = opts.withDefaults()
	logs := opts.Logs
	if logs == nil {
		logs = newLogBook(opts.LogEntries)
	}
	rt := &Runtime{opts: opts, versions: map[string]*version{}, logs: logs}
	rt.client = rt.newFetchClient()
	return rt
}

func (rt *Runtime) addLog(ctx context.Context, worker, versionUID, level, msg string) {
	if rt.opts.LogSink != nil {
		rt.opts.LogSink(ctx, worker, versionUID, level, msg)
		return
	}
	rt.logs.Add(worker, versionUID, level, msg)
}

// Close evicts every version: idle runtimes are dropped at once, busy ones
// when their invocation ends. Later calls fail with ErrClosed.
func (rt *Runtime) Close() {
	rt.mu.Lock()
	rt.closed = true
	vs := rt.versions
	rt.versions = map[string]*version{}
	rt.mu.Unlock()
	for _, v := range vs {
		v.close()
	}
}

// Evict forgets a version's program and runtimes (for example once the
// version is deleted). Running invocations finish; their runtimes are then
// dropped. A later use compiles the version again.
func (rt *Runtime) Evict(versionUID string) {
	rt.mu.Lock()
	v := rt.versions[versionUID]
	delete(rt.versions, versionUID)
	rt.mu.Unlock()
	if v != nil {
		v.close()
	}
}

// ForgetWorker drops what the runtime keeps for a deleted ModuleWorker:
// its log ring. (Its versions are evicted one by one as they are deleted.)
func (rt *Runtime) ForgetWorker(workerUID string) { rt.logs.Forget(workerUID) }

// version is the cache entry of one WorkerVersion: its program and pool.
type version struct {
	rt    *Runtime
	v     abi.Version
	ready chan struct{}
	prog  *Program
	err   error
	pool  *pool
	// secrets hides the version's secret values in its log lines, which
	// viewers read (an exception's message may quote one).
	secrets *strings.Replacer
}

// MinRedactedSecret is the shortest secret value redacted from log lines;
// shorter ones would hide ordinary text.
const MinRedactedSecret = 4

// secretRedactor replaces each secret value of v (MinRedactedSecret bytes
// or more) with "[secret NAME]", longest first, or nil when there is none.
func secretRedactor(v *abi.Version) *strings.Replacer {
	type kv struct{ name, value string }
	var list []kv
	for name, value := range v.Secrets {
		if len(value) >= MinRedactedSecret {
			list = append(list, kv{name, value})
		}
	}
	if len(list) == 0 {
		return nil
	}
	sort.Slice(list, func(i, j int) bool {
		if len(list[i].value) != len(list[j].value) {
			return len(list[i].value) > len(list[j].value)
		}
		return list[i].name < list[j].name
	})
	pairs := make([]string, 0, 2*len(list))
	for _, p := range list {
		pairs = append(pairs, p.value, "[secret "+p.name+"]")
	}
	return strings.NewReplacer(pairs...)
}

// logLine adds msg to the worker's log with the version's secrets hidden.
func (e *version) logLine(ctx context.Context, level, msg string) {
	if e.secrets != nil {
		msg = e.secrets.Replace(msg)
	}
	e.rt.addLog(ctx, e.v.WorkerUID, e.v.UID, level, msg)
}

// Compile returns v's Program, compiling it once per version UID (versions
// are immutable). A *CompileError reports what is wrong with the modules.
func (rt *Runtime) Compile(v *abi.Version) (*Program, error) {
	e, err := rt.version(v)
	if err != nil {
		return nil, err
	}
	return e.prog, nil
}

func (rt *Runtime) version(v *abi.Version) (*version, error) {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil, ErrClosed
	}
	e, ok := rt.versions[v.UID]
	if !ok {
		e = &version{rt: rt, v: copyVersion(v), ready: make(chan struct{})}
		e.secrets = secretRedactor(&e.v)
		e.pool = newPool(rt.opts.MaxRuntimes, e.newInstance)
		rt.versions[v.UID] = e
		rt.mu.Unlock()
		e.prog, e.err = compile(&e.v, rt.opts)
		if e.err != nil {
			rt.opts.Logger.Info("js: version does not compile", "version", v.UID, "error", e.err)
			rt.mu.Lock()
			if rt.versions[v.UID] == e {
				delete(rt.versions, v.UID) // do not cache failures: limits may change
			}
			rt.mu.Unlock()
		}
		close(e.ready)
	} else {
		rt.mu.Unlock()
		<-e.ready
	}
	if e.err != nil {
		return nil, e.err
	}
	return e, nil
}

func copyVersion(v *abi.Version) abi.Version {
	c := *v
	c.Modules = append([]abi.Module(nil), v.Modules...)
	c.Bindings = append([]abi.Binding(nil), v.Bindings...)
	c.Vars = make(map[string]string, len(v.Vars))
	for k, x := range v.Vars {
		c.Vars[k] = x
	}
	c.Secrets = make(map[string]string, len(v.Secrets))
	for k, x := range v.Secrets {
		c.Secrets[k] = x
	}
	return c
}

func (e *version) close() { e.pool.close() }

// newInstance makes a runtime for the version: globals, env, and the
// modules evaluated (top-level code under the startup limit) for the
// invocation of ctx, which its top-level log lines belong to.
func (e *version) newInstance(ctx context.Context) (*instance, error) {
	in, err := newBareInstance(e.rt, e)
	if err != nil {
		return nil, err
	}
	in.callCtx = ctx
	defer func() { in.callCtx = nil }()
	def, err := evalProgram(in.vm, e.prog, e.rt.opts.StartupTimeout)
	if err != nil {
		return nil, err
	}
	in.def = def
	in.env = in.buildEnv(&e.v)
	return in, nil
}

// instance is one goja runtime of a version. The goroutine that holds it
// (checked out of the pool) owns it; JavaScript runs only there.
type instance struct {
	vm  *goja.Runtime
	rt  *Runtime // nil in the compile probe
	ver *version // nil in the compile probe

	cur       *invocation     // the running invocation, nil between invocations
	callCtx   context.Context // the context of the call holding the instance (its log lines')
	broken    bool            // interrupted or abandoned: never reuse
	nextTimer int64

	h                                        helpers
	errorCtor, typeErrorCtor, rangeErrorCtor goja.Value
	def                                      *goja.Object // the default export
	env                                      *goja.Object
	objProto                                 *goja.Object
	unhandled                                map[*goja.Promise]struct{} // rejected promises without a handler
}

func (in *instance) log(level, msg string) {
	if in.rt == nil || in.ver == nil {
		return
	}
	ctx := in.callCtx
	if ctx == nil {
		ctx = context.Background()
	}
	in.ver.logLine(ctx, level, msg)
}

// run checks an instance out of the version's pool, runs f on it and
// returns it (or discards it when broken).
func (e *version) run(ctx context.Context, f func(in *instance) error) error {
	in, err := e.pool.get(ctx)
	if err != nil {
		return err
	}
	in.callCtx = ctx
	err = f(in)
	in.callCtx = nil
	if in.broken {
		e.rt.opts.Logger.Info("js: runtime discarded", "version", e.v.UID, "worker", e.v.WorkerUID, "error", err)
		e.pool.discard()
	} else {
		e.pool.put(in)
	}
	return err
}

// pool holds a version's runtimes: slots bounds the runtimes in existence
// (idle or busy); idle ones are reused, newest first.
type pool struct {
	slots  chan struct{}
	create func(context.Context) (*instance, error)

	mu     sync.Mutex
	idle   []*instance
	closed bool
}

func newPool(max int, create func(context.Context) (*instance, error)) *pool {
	return &pool{slots: make(chan struct{}, max), create: create}
}

func (p *pool) get(ctx context.Context) (*instance, error) {
	select {
	case p.slots <- struct{}{}:
	default:
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrRuntimeExhausted, context.Cause(ctx))
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		in := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return in, nil
	}
	p.mu.Unlock()
	in, err := p.create(ctx)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return in, nil
}

func (p *pool) put(in *instance) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, in)
	}
	p.mu.Unlock()
	<-p.slots
}

func (p *pool) discard() { <-p.slots }

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.idle = nil
	p.mu.Unlock()
}

// Idle and total counts, for tests and metrics.
func (p *pool) stats() (idle, busy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle), len(p.slots)
}
