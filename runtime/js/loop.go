package js

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// ErrTimeout is wrapped by the error of an invocation that ran out of time
// (the Options' limit or the caller's deadline, whichever came first).
var ErrTimeout = errors.New("the invocation exceeded its time limit")

var errStartupTimeout = errors.New("the startup time limit was exceeded")

const (
	maxCallStack     = 2000  // goja frames; deeper recursion throws a RangeError-like uncatchable error
	maxPendingTimers = 10000 // setTimeout calls pending in one invocation
)

// invocation is one run of a handler on an instance: it owns the queue of
// Go-completed work that must run on the loop goroutine and the timers
// created while it runs. When it ends, pending work and timers are dropped
// and the context handed to Go work is cancelled.
type invocation struct {
	inst  *instance
	ctx   context.Context
	limit time.Duration

	mu     sync.Mutex
	tasks  []func() error
	closed bool
	wake   chan struct{}
	waiter Waiter // Options.Waiter, nil: wait on wake

	// loop goroutine only:
	timers map[int64]*time.Timer
	waits  []*goja.Promise
}

// post queues f to run on the loop goroutine; from any goroutine. After the
// invocation has ended f is dropped.
func (inv *invocation) post(f func() error) {
	inv.mu.Lock()
	if inv.closed {
		inv.mu.Unlock()
		return
	}
	inv.tasks = append(inv.tasks, f)
	inv.mu.Unlock()
	inv.notify()
}

// notify wakes the loop goroutine waiting for work (from any goroutine).
func (inv *invocation) notify() {
	select {
	case inv.wake <- struct{}{}:
	default:
	}
	if inv.waiter != nil {
		inv.waiter.Wake(inv.ctx)
	}
}

// wait blocks until work is posted or the invocation ends (or earlier:
// see Waiter).
func (inv *invocation) wait() {
	if inv.waiter != nil {
		inv.waiter.Wait(inv.ctx, inv.wake)
		return
	}
	select {
	case <-inv.wake:
	case <-inv.ctx.Done():
	}
}

func (inv *invocation) take() []func() error {
	inv.mu.Lock()
	t := inv.tasks
	inv.tasks = nil
	inv.mu.Unlock()
	return t
}

func (inv *invocation) close() {
	inv.mu.Lock()
	inv.closed = true
	inv.tasks = nil
	inv.mu.Unlock()
	for id, t := range inv.timers {
		t.Stop()
		delete(inv.timers, id)
	}
}

func (inv *invocation) waitsDone() bool {
	for len(inv.waits) > 0 {
		if inv.waits[0].State() == goja.PromiseStatePending {
			return false
		}
		inv.waits = inv.waits[1:]
	}
	return true
}

// invoke runs one invocation on the calling goroutine, which owns in.vm
// until invoke returns. start calls into JavaScript and returns the
// handler's result; when that is a Promise the loop runs Go completions and
// timers until it settles (and every ctx.waitUntil promise has settled) or
// the deadline passes. finish, if not nil, then converts the fulfilled value
// while the loop still owns the runtime. Any error other than a JavaScript
// exception marks the instance broken.
func (in *instance) invoke(ctx context.Context, limit time.Duration, start func(inv *invocation) (goja.Value, error), finish func(v goja.Value) error) (err error) {
	deadline := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ictx, cancel := context.WithDeadlineCause(ctx, deadline, ErrTimeout)
	inv := &invocation{inst: in, ctx: ictx, limit: limit, wake: make(chan struct{}, 1), timers: map[int64]*time.Timer{}}
	if in.rt != nil {
		inv.waiter = in.rt.opts.Waiter
	}
	in.cur = inv
	stopWatch := context.AfterFunc(ictx, func() {
		in.vm.Interrupt(ErrTimeout)
		inv.notify()
	})
	defer func() {
		if !stopWatch() {
			// The interrupt fired or is firing: never reuse this runtime.
			in.broken = true
		}
		cancel()
		inv.close()
		in.cur = nil
		if r := recover(); r != nil {
			in.broken = true
			err = fmt.Errorf("js: runtime panic: %v", r)
		}
	}()

	res, err := start(inv)
	if err != nil {
		return in.failure(inv, err)
	}
	var p *goja.Promise
	if res != nil {
		if pr, ok := res.Export().(*goja.Promise); ok {
			p = pr
		}
	}
	defer in.reportUnhandled(p)
	for {
		in.reportUnhandled(p)
		if ictx.Err() != nil {
			return in.failure(inv, ictx.Err())
		}
		if (p == nil || p.State() != goja.PromiseStatePending) && inv.waitsDone() {
			break
		}
		tasks := inv.take()
		if len(tasks) == 0 {
			inv.wait()
			continue
		}
		for _, t := range tasks {
			if err := t(); err != nil {
				return in.failure(inv, err)
			}
		}
	}
	if p != nil {
		if p.State() == goja.PromiseStateRejected {
			return in.scriptError(p.Result())
		}
		res = p.Result()
	}
	if finish != nil {
		if err := finish(res); err != nil {
			return in.failure(inv, err)
		}
	}
	return nil
}

// trackRejection is the runtime's promise rejection tracker: it keeps the
// rejected promises that have no handler yet.
func (in *instance) trackRejection(p *goja.Promise, op goja.PromiseRejectionOperation) {
	switch op {
	case goja.PromiseRejectionReject:
		if in.unhandled == nil {
			in.unhandled = map[*goja.Promise]struct{}{}
		}
		in.unhandled[p] = struct{}{}
	case goja.PromiseRejectionHandle:
		delete(in.unhandled, p)
	}
}

// reportUnhandled logs the rejections still unhandled once the microtasks
// have run (except the handler's own promise, which the caller reports).
func (in *instance) reportUnhandled(except *goja.Promise) {
	for p := range in.unhandled {
		delete(in.unhandled, p)
		if p == except {
			continue
		}
		in.log("error", "Uncaught (in promise) "+in.scriptError(p.Result()).describe())
	}
}

// failure turns an error that ended an invocation into the error the
// caller sees; everything but a JavaScript exception breaks the runtime.
func (in *instance) failure(inv *invocation, err error) error {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return in.scriptError(ex.Value())
	}
	var se *ScriptError
	if errors.As(err, &se) {
		return err
	}
	in.broken = true
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return &ScriptError{Name: "RangeError", Message: "Maximum call stack size exceeded"}
	}
	var ie *goja.InterruptedError
	if errors.As(err, &ie) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		cause := context.Cause(inv.ctx)
		if cause == nil || errors.Is(cause, ErrTimeout) || errors.Is(cause, context.DeadlineExceeded) {
			return fmt.Errorf("js: %w (%s)", ErrTimeout, inv.limit)
		}
		return fmt.Errorf("js: the invocation was cancelled: %w", cause)
	}
	return err
}

// ScriptError is a JavaScript exception or rejection that ended a handler.
type ScriptError struct {
	Name    string // the error's name ("Error", "TypeError", ...), empty for a thrown non-Error
	Message string
	Stack   string // the error's stack as goja formats it (original module lines), may be empty
}

// Script reports the exception for the attempt history (abi.ScriptFailure).
func (e *ScriptError) Script() (name, message, stack string) { return e.Name, e.Message, e.Stack }

func (e *ScriptError) Error() string {
	if e.Name == "" {
		return "Uncaught " + e.Message
	}
	return e.Name + ": " + e.Message
}

// framePC matches goja's bytecode offset after a frame's position
// ("main.js:3:9(12)"), which means nothing to a worker's author.
var framePC = regexp.MustCompile(`(:\d+:\d+)\(\d+\)`)

// scriptError describes a thrown JavaScript value.
func (in *instance) scriptError(v goja.Value) *ScriptError {
	se := &ScriptError{}
	if o, ok := v.(*goja.Object); ok && isErrorObject(in.vm, o) {
		se.Name = o.Get("name").String()
		se.Message = o.Get("message").String()
		if st := o.Get("stack"); st != nil && !goja.IsUndefined(st) {
			se.Stack = framePC.ReplaceAllString(st.String(), "$1")
		}
		return se
	}
	se.Message = exceptionMessage(v)
	return se
}

func isErrorObject(vm *goja.Runtime, o *goja.Object) bool {
	ctor := vm.Get("Error")
	if c, ok := ctor.(*goja.Object); ok {
		if ok, _ := safeInstanceOf(vm, o, c); ok {
			return true
		}
	}
	return false
}

func safeInstanceOf(vm *goja.Runtime, o *goja.Object, c *goja.Object) (res bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return vm.InstanceOf(o, c), nil
}

// exceptionMessage renders any thrown value without running user code
// beyond its toString.
func exceptionMessage(v goja.Value) (s string) {
	if v == nil {
		return "undefined"
	}
	defer func() {
		if r := recover(); r != nil {
			s = "(an exception that cannot be converted to a string)"
		}
	}()
	return v.String()
}

// async starts Go work off the loop and returns a Promise that is settled
// on the loop goroutine with ok(result) or fail(err) once work returns.
// work receives the invocation's context, cancelled when the invocation
// ends. Outside an invocation (top-level code) the Promise rejects.
func (in *instance) async(work func(ctx context.Context) (any, error), ok func(any) goja.Value, fail func(error) goja.Value) goja.Value {
	return in.started(func(ctx context.Context, done func(any, error)) {
		go func() { done(work(ctx)) }()
	}, ok, fail)
}

// started is async for Go work that starts without blocking and reports
// its result through done, once, from any goroutine: no goroutine of its
// own (SendStarter).
func (in *instance) started(start func(ctx context.Context, done func(any, error)), ok func(any) goja.Value, fail func(error) goja.Value) goja.Value {
	p, resolve, reject := in.vm.NewPromise()
	inv := in.cur
	if inv == nil {
		_ = reject(in.newError("Error", "asynchronous I/O is only allowed inside a handler invocation"))
		return in.vm.ToValue(p)
	}
	c := &completion{resolve: resolve, reject: reject, ok: ok, fail: fail}
	start(inv.ctx, func(v any, err error) {
		c.v, c.err = v, err
		inv.post(c.settle)
	})
	return in.vm.ToValue(p)
}

// completion is the result of Go work started by async, settled on the
// loop goroutine: settling the Promise runs the JavaScript that awaited it
// (a named method, so that CPU profiles say so).
type completion struct {
	resolve, reject func(any) error
	ok              func(any) goja.Value
	fail            func(error) goja.Value
	v               any
	err             error
}

func (c *completion) settle() error {
	if c.err != nil {
		return c.reject(c.fail(c.err))
	}
	return c.resolve(c.ok(c.v))
}

// rejected returns a Promise already rejected with reason.
func (in *instance) rejected(reason goja.Value) goja.Value {
	p, _, reject := in.vm.NewPromise()
	_ = reject(reason)
	return in.vm.ToValue(p)
}

func (in *instance) resolved(v goja.Value) goja.Value {
	p, resolve, _ := in.vm.NewPromise()
	_ = resolve(v)
	return in.vm.ToValue(p)
}

// newError makes an Error (or TypeError, RangeError) object with the given
// name and message; name may be a Form code such as "unknown_batch".
func (in *instance) newError(name, msg string) *goja.Object {
	ctorName := "Error"
	switch name {
	case "TypeError", "RangeError":
		ctorName = name
	}
	o, err := in.vm.New(in.vm.Get(ctorName), in.vm.ToValue(msg))
	if err != nil {
		o = in.vm.NewObject()
		_ = o.Set("message", msg)
	}
	if ctorName != name {
		_ = o.Set("name", name)
	}
	return o
}

// setTimeout(fn, ms, ...args): the timer belongs to the current
// invocation and is dropped when the invocation ends.
func (in *instance) setTimeout(call goja.FunctionCall) goja.Value {
	fn, ok := goja.AssertFunction(call.Argument(0))
	if !ok {
		panic(in.vm.NewTypeError("setTimeout: the callback must be a function"))
	}
	ms := call.Argument(1).ToFloat()
	if math.IsNaN(ms) || ms < 0 {
		ms = 0
	}
	if ms > float64(24*time.Hour/time.Millisecond) {
		ms = float64(24 * time.Hour / time.Millisecond)
	}
	var args []goja.Value
	if len(call.Arguments) > 2 {
		args = append(args, call.Arguments[2:]...)
	}
	in.nextTimer++
	id := in.nextTimer
	inv := in.cur
	if inv == nil {
		return in.vm.ToValue(id) // top-level code: the timer never fires
	}
	if len(inv.timers) >= maxPendingTimers {
		panic(in.newError("RangeError", fmt.Sprintf("setTimeout: more than %d pending timers", maxPendingTimers)))
	}
	inv.timers[id] = time.AfterFunc(time.Duration(ms*float64(time.Millisecond)), func() {
		inv.post(func() error {
			if _, live := inv.timers[id]; !live {
				return nil
			}
			delete(inv.timers, id)
			_, err := fn(goja.Undefined(), args...)
			return in.uncaught(err, "in a setTimeout callback")
		})
	})
	return in.vm.ToValue(id)
}

func (in *instance) clearTimeout(call goja.FunctionCall) goja.Value {
	inv := in.cur
	if inv == nil {
		return goja.Undefined()
	}
	id := call.Argument(0).ToInteger()
	if t, ok := inv.timers[id]; ok {
		t.Stop()
		delete(inv.timers, id)
	}
	return goja.Undefined()
}

// uncaught logs a JavaScript exception that no caller can see and lets the
// invocation continue; other errors (interrupts) end it.
func (in *instance) uncaught(err error, where string) error {
	if err == nil {
		return nil
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		se := in.scriptError(ex.Value())
		in.log("error", "Uncaught "+where+": "+se.describe())
		return nil
	}
	return err
}

func (e *ScriptError) describe() string {
	if e.Stack != "" {
		return e.Stack
	}
	return e.Error()
}
