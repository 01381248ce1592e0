package js

import (
	"context"
	"fmt"
	"math"
	"regexp"

	"github.com/dop251/goja"
	"github.com/takoform/queuehost/abi"
)

// QueueHandler returns the abi.Handler running v's queue handler. The
// version is compiled once (cached by UID); ErrNoQueueHandler if its default
// export has no queue function, a *CompileError if it does not load.
func (rt *Runtime) QueueHandler(v *abi.Version) (abi.Handler, error) {
	e, err := rt.version(v)
	if err != nil {
		return nil, err
	}
	if !e.prog.HasHandler(HandlerQueue) {
		return nil, ErrNoQueueHandler
	}
	return queueHandler{e}, nil
}

type queueHandler struct{ e *version }

// HandleBatch runs queue(batch, env, ctx) on a runtime of the version, on
// the calling goroutine, and returns nil once the handler (and every
// ctx.waitUntil promise) has settled without the handler throwing or
// rejecting. A *ScriptError carries the handler's exception; an error
// wrapping ErrTimeout reports the time limit.
func (h queueHandler) HandleBatch(ctx context.Context, b *abi.Batch) error {
	return h.e.run(ctx, func(in *instance) error {
		err := in.invoke(ctx, in.rt.opts.InvocationTimeout, func(inv *invocation) (goja.Value, error) {
			return in.callQueue(inv, b)
		}, nil)
		if se, ok := err.(*ScriptError); ok {
			cloudflareHint(se)
		}
		if err != nil {
			in.log("error", "Uncaught (in queue handler) "+describeErr(err))
		}
		return err
	})
}

// cloudflareMethods are Cloudflare Queues' settlement methods a queue
// handler may call out of habit, with the method this host's batch has in
// their place (spec/runtime-abi.md §The queue handler).
var cloudflareMethods = map[string]string{
	"ack":      "batch.acknowledge(message.id)",
	"retry":    "batch.retry(message.id, delaySeconds)",
	"ackAll":   "batch.acknowledgeAll()",
	"retryAll": "batch.retryAll(delaySeconds)",
}

// cloudflareMember matches goja's message for a call of a missing member.
var cloudflareMember = regexp.MustCompile(`^Object has no member '(ack|retry|ackAll|retryAll)'$`)

// cloudflareHint adds to a TypeError from calling one of Cloudflare's
// settlement methods the method to call here. The error stays what it is
// (a TypeError, the batch's unsettled messages retried); only its message
// says more. retryAll exists on the batch, so it can only be missing from a
// message.
func cloudflareHint(se *ScriptError) {
	if se.Name != "TypeError" {
		return
	}
	m := cloudflareMember.FindStringSubmatch(se.Message)
	if m == nil {
		return
	}
	se.Message += fmt.Sprintf(" (%s() is Cloudflare Queues'; here messages are settled through the batch: %s)", m[1], cloudflareMethods[m[1]])
}

// callQueue builds the batch and calls the worker's queue handler, which
// runs until its first await.
func (in *instance) callQueue(inv *invocation, b *abi.Batch) (goja.Value, error) {
	queue, _ := goja.AssertFunction(in.def.Get(HandlerQueue))
	if queue == nil {
		return nil, &ScriptError{Name: "TypeError", Message: "the default export's queue is not a function"}
	}
	return queue(in.def, in.batchObject(b), in.env, in.ctxObject(inv))
}

func describeErr(err error) string {
	if se, ok := err.(*ScriptError); ok {
		return se.describe()
	}
	return err.Error()
}

// batchObject builds the JavaScript batch: id, queue, messages and the four
// settlement methods bound to b.
func (in *instance) batchObject(b *abi.Batch) *goja.Object {
	vm := in.vm
	o := vm.NewObject()
	_ = o.Set("id", b.ID)
	_ = o.Set("queue", b.Queue)
	_ = o.Set("messages", in.messagesArray(b.Messages))
	_ = o.Set("acknowledge", in.method("acknowledge", 1, func(call goja.FunctionCall) goja.Value {
		id, ok := call.Argument(0).Export().(string)
		if !ok {
			return in.rejected(in.newError("TypeError", "acknowledge: messageId must be a string"))
		}
		return in.settle(func(ctx context.Context) error { return b.Acknowledge(ctx, id) })
	}))
	_ = o.Set("retry", in.method("retry", 1, func(call goja.FunctionCall) goja.Value {
		id, ok := call.Argument(0).Export().(string)
		if !ok {
			return in.rejected(in.newError("TypeError", "retry: messageId must be a string"))
		}
		delay, ok := delayArg(call.Argument(1))
		if !ok {
			return in.rejected(in.newError("RangeError", "retry: "+abi.ErrInvalidDelay.Error()))
		}
		return in.settle(func(ctx context.Context) error { return b.Retry(ctx, id, delay) })
	}))
	_ = o.Set("acknowledgeAll", in.method("acknowledgeAll", 0, func(call goja.FunctionCall) goja.Value {
		return in.settle(func(ctx context.Context) error { return b.AcknowledgeAll(ctx) })
	}))
	_ = o.Set("retryAll", in.method("retryAll", 0, func(call goja.FunctionCall) goja.Value {
		delay, ok := delayArg(call.Argument(0))
		if !ok {
			return in.rejected(in.newError("RangeError", "retryAll: "+abi.ErrInvalidDelay.Error()))
		}
		return in.settle(func(ctx context.Context) error { return b.RetryAll(ctx, delay) })
	}))
	return o
}

// Message bodies up to bodyChunk/4 bytes are copied into shared chunks of
// bodyChunk bytes, one allocation for many messages: a worker that keeps one
// body keeps at most its chunk alive. Larger bodies get their own copy.
const bodyChunk = 16 << 10

// messagesArray builds batch.messages: plain objects with the own data
// properties id, timestampMillis, body (a fresh ArrayBuffer copy) and
// attempts, in that order, each with its own values.
func (in *instance) messagesArray(ms []abi.Message) *goja.Object {
	vm := in.vm
	objs := make([]any, len(ms))
	var chunk []byte
	small := 0 // bytes of the small bodies not yet copied
	for i := range ms {
		if n := len(ms[i].Body); n <= bodyChunk/4 {
			small += n
		}
	}
	// Messages sent together share their accept time; numbers are
	// immutable, so one Value serves them all.
	var lastTS int64
	var lastTSV goja.Value
	for i := range ms {
		m := &ms[i]
		var body []byte
		if n := len(m.Body); n > bodyChunk/4 {
			body = append([]byte(nil), m.Body...)
		} else {
			if cap(chunk)-len(chunk) < n {
				chunk = make([]byte, 0, min(small, bodyChunk))
			}
			small -= n
			start := len(chunk)
			chunk = append(chunk, m.Body...)
			body = chunk[start:len(chunk):len(chunk)]
		}
		if lastTSV == nil || m.TimestampMillis != lastTS {
			lastTS, lastTSV = m.TimestampMillis, vm.ToValue(m.TimestampMillis)
		}
		o := vm.NewObject()
		_ = o.Set("id", vm.ToValue(m.ID))
		_ = o.Set("timestampMillis", lastTSV)
		_ = o.Set("body", vm.NewArrayBuffer(body))
		_ = o.Set("attempts", vm.ToValue(m.Attempts))
		objs[i] = o
	}
	return vm.NewArray(objs...)
}

// delayArg reads an optional delaySeconds: undefined means nil; otherwise
// a Number that is an integer in 0..MaxDelaySeconds.
func delayArg(v goja.Value) (*int, bool) {
	if v == nil || goja.IsUndefined(v) {
		return nil, true
	}
	if !goja.IsNumber(v) { // a primitive number: not a Number object, not "5"
		return nil, false
	}
	f := v.ToFloat()
	if math.IsNaN(f) || f != math.Trunc(f) || f < 0 || f > abi.MaxDelaySeconds {
		return nil, false
	}
	d := int(f)
	return &d, true
}

// settle runs a settlement off the loop; the Promise resolves with
// undefined or rejects with an Error named abi.Code(err).
func (in *instance) settle(call func(ctx context.Context) error) goja.Value {
	return in.async(func(ctx context.Context) (any, error) {
		return nil, call(ctx) // mutate:stale-batch-settles
	}, func(any) goja.Value { return goja.Undefined() }, in.codeError)
}

// codeError makes the rejection value of a delivery error.
func (in *instance) codeError(err error) goja.Value {
	return in.newError(abi.Code(err), abi.WorkerMessage(err))
}

// ctxObject is the handler's third argument: waitUntil(promise) extends the
// invocation until the promise settles (within the time limit);
// passThroughOnException is accepted and does nothing.
func (in *instance) ctxObject(inv *invocation) *goja.Object {
	o := in.vm.NewObject()
	_ = o.Set("waitUntil", in.method("waitUntil", 1, func(call goja.FunctionCall) goja.Value {
		if in.cur != inv {
			panic(in.newError("Error", "waitUntil: the invocation has ended"))
		}
		pv, err := in.h.toPromise(goja.Undefined(), call.Argument(0))
		if err != nil {
			panic(err)
		}
		if p, ok := pv.Export().(*goja.Promise); ok {
			inv.waits = append(inv.waits, p)
			// Report a rejection in the log; it does not fail the handler.
			then, _ := goja.AssertFunction(pv.ToObject(in.vm).Get("then"))
			if then != nil {
				_, _ = then(pv, goja.Undefined(), in.vm.ToValue(func(r goja.Value) {
					in.log("error", "Uncaught (in ctx.waitUntil promise) "+in.scriptError(r).describe())
				}))
			}
		}
		return goja.Undefined()
	}))
	_ = o.Set("passThroughOnException", in.method("passThroughOnException", 0, passThroughOnException))
	return o
}

// buildEnv makes env: vars and secrets (strings) and producer Bindings,
// each by name. Names share one namespace (the schema guarantees it);
// a Binding wins over a var or secret of the same name.
func (in *instance) buildEnv(v *abi.Version) *goja.Object {
	env := in.vm.NewObject()
	for k, x := range v.Vars {
		_ = env.Set(k, x)
	}
	for k, x := range v.Secrets {
		_ = env.Set(k, x)
	}
	for _, b := range v.Bindings {
		_ = env.Set(b.Name, in.bindingObject(b))
	}
	return env
}

// method makes a native function that reads like the method it is: its
// name and length are those of a JavaScript function of that name and
// arity, not goja's defaults (the Go symbol's name and 0), which would show
// host internals to worker code.
func (in *instance) method(name string, length int, f func(goja.FunctionCall) goja.Value) goja.Value {
	fn := in.vm.ToValue(f).(*goja.Object)
	_ = fn.DefineDataProperty("name", in.vm.ToValue(name), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_TRUE)
	_ = fn.DefineDataProperty("length", in.vm.ToValue(length), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_TRUE)
	return fn
}

// passThroughOnException does nothing: the host has no origin to pass to.
func passThroughOnException(goja.FunctionCall) goja.Value { return goja.Undefined() }
