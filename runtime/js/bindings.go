package js

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/dop251/goja"
	"github.com/takoform/queuehost/abi"
)

// bindingObject is env[name] of a producer Binding: exactly send and
// sendBatch. Every argument is validated on the loop before Sender.Send is
// called (off the loop); an invalid sendBatch sends nothing.
func (in *instance) bindingObject(b abi.Binding) *goja.Object {
	o := in.vm.NewObject()
	_ = o.Set("send", in.method("send", 1, func(call goja.FunctionCall) goja.Value {
		msg, err := in.outgoing(call.Argument(0), call.Argument(1), "options")
		if err != nil {
			return in.rejected(in.codeError(err))
		}
		return in.send(b, []abi.OutgoingMessage{msg}, false)
	}))
	_ = o.Set("sendBatch", in.method("sendBatch", 1, func(call goja.FunctionCall) goja.Value {
		arr, ok := call.Argument(0).(*goja.Object)
		if !ok || arr.ClassName() != "Array" {
			return in.rejected(in.codeError(fmt.Errorf("sendBatch: messages must be an array: %w", abi.ErrInvalidBody)))
		}
		n := arr.Get("length").ToInteger()
		if n < 1 || n > abi.MaxSendBatch { // mutate:send-batch-101-1
			return in.rejected(in.codeError(fmt.Errorf("sendBatch: %d messages: %w", n, abi.ErrBatchTooLarge)))
		}
		msgs := make([]abi.OutgoingMessage, n)
		for i := int64(0); i < n; i++ {
			mo, ok := arr.Get(strconv.FormatInt(i, 10)).(*goja.Object)
			if !ok || !in.plainObject(mo) {
				return in.rejected(in.codeError(fmt.Errorf("sendBatch: message %d must be an object {body, delaySeconds?}: %w", i, abi.ErrInvalidBody)))
			}
			for _, k := range mo.Keys() {
				if k != "body" && k != "delaySeconds" {
					return in.rejected(in.codeError(fmt.Errorf("sendBatch: message %d has the unknown field %q: %w", i, k, abi.ErrInvalidBody)))
				}
			}
			m, err := in.outgoingBody(mo.Get("body"))
			if err == nil {
				m.Delay, err = sendDelay(mo.Get("delaySeconds"))
			}
			if err != nil { // mutate:send-batch-not-atomic
				return in.rejected(in.codeError(fmt.Errorf("sendBatch: message %d: %w", i, err)))
			}
			msgs[i] = m
		}
		return in.send(b, msgs, true)
	}))
	return o
}

// outgoing validates send(body, options).
func (in *instance) outgoing(body, options goja.Value, what string) (abi.OutgoingMessage, error) {
	m, err := in.outgoingBody(body)
	if err != nil {
		return m, err
	}
	if options == nil || goja.IsUndefined(options) {
		return m, nil
	}
	oo, ok := options.(*goja.Object)
	if !ok || !in.plainObject(oo) {
		return m, fmt.Errorf("%s must be undefined or an object {delaySeconds?}: %w", what, abi.ErrInvalidBody)
	}
	for _, k := range oo.Keys() {
		if k != "delaySeconds" { // mutate:send-options-open
			return m, fmt.Errorf("%s has the unknown field %q: %w", what, k, abi.ErrInvalidBody)
		}
	}
	m.Delay, err = sendDelay(oo.Get("delaySeconds"))
	return m, err
}

// outgoingBody copies a string (as UTF-8), an ArrayBuffer or the viewed
// bytes of an ArrayBufferView; anything else, or an empty body, is
// invalid_body; more than 127000 bytes is message_too_large.
func (in *instance) outgoingBody(v goja.Value) (abi.OutgoingMessage, error) {
	var b []byte
	switch {
	case v == nil || goja.IsUndefined(v) || goja.IsNull(v):
		return abi.OutgoingMessage{}, fmt.Errorf("the body is missing (%s): %w", abi.BodyRule, abi.ErrInvalidBody)
	default:
		// Not Export: goja's Export of an empty typed array at the end of
		// its buffer makes an out-of-bounds pointer (checkptr aborts under
		// -race), and it boxes the string.
		if goja.IsString(v) {
			b = []byte(v.String())
			break
		}
		vb, ok, err := in.viewBytes(v)
		if err != nil {
			return abi.OutgoingMessage{}, fmt.Errorf("%v: %w", err, abi.ErrInvalidBody)
		}
		if !ok {
			return abi.OutgoingMessage{}, fmt.Errorf("a body of type %s (%s): %w", jsType(v), abi.BodyRule, abi.ErrInvalidBody)
		}
		b = vb
	}
	if len(b) == 0 {
		return abi.OutgoingMessage{}, fmt.Errorf("the body is empty (%s): %w", abi.BodyRule, abi.ErrInvalidBody)
	}
	if len(b) > abi.MaxBodyBytes { // mutate:message-too-large-1
		return abi.OutgoingMessage{}, fmt.Errorf("%d bytes: %w", len(b), abi.ErrMessageTooLarge)
	}
	return abi.OutgoingMessage{Body: b}, nil
}

// sendDelay reads delaySeconds of a send: undefined means the queue's
// default; anything but an integer 0..43200 is invalid_body.
func sendDelay(v goja.Value) (*int, error) {
	d, ok := delayArg(v)
	if !ok {
		return nil, fmt.Errorf("delaySeconds must be an integer from 0 to %d: %w", abi.MaxDelaySeconds, abi.ErrInvalidBody)
	}
	return d, nil
}

// plainObject: an object whose prototype is Object.prototype or null (not
// an array, a class instance, a function...).
func (in *instance) plainObject(o *goja.Object) bool {
	if o.ClassName() != "Object" {
		return false
	}
	if _, isFn := goja.AssertFunction(o); isFn {
		return false
	}
	p := o.Prototype()
	if p == nil {
		return true
	}
	op := in.objectProto()
	return op != nil && p.SameAs(op)
}

func (in *instance) objectProto() *goja.Object {
	if in.objProto == nil {
		if c, ok := in.vm.Get("Object").(*goja.Object); ok {
			if p, ok := c.Get("prototype").(*goja.Object); ok {
				in.objProto = p
			}
		}
	}
	return in.objProto
}

func jsType(v goja.Value) string {
	switch {
	case goja.IsNull(v):
		return "null"
	case goja.IsUndefined(v):
		return "undefined"
	}
	if o, ok := v.(*goja.Object); ok {
		if _, fn := goja.AssertFunction(o); fn {
			return "function"
		}
		return o.ClassName()
	}
	switch v.Export().(type) {
	case int64, float64:
		return "number"
	case bool:
		return "boolean"
	}
	return v.ExportType().String()
}

var errBadIDs = errors.New("the sender returned the wrong number of message IDs")

// send calls Sender.Send off the loop with the invocation's context, or
// starts it on the loop when the Sender is a SendStarter.
func (in *instance) send(b abi.Binding, msgs []abi.OutgoingMessage, batch bool) goja.Value {
	ver := in.ver
	sender := in.rt.opts.Sender
	// Only the count is kept for the result: the bodies are the sender's,
	// free to go once it has sent them (a sandbox's, as soon as they are
	// written to the host).
	n := len(msgs)
	result := func(ids []string, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		if len(ids) != n {
			return nil, fmt.Errorf("%w: %d for %d messages", errBadIDs, len(ids), n)
		}
		return ids, nil
	}
	ok := func(r any) goja.Value {
		ids := r.([]string)
		if !batch {
			return in.vm.ToValue(ids[0])
		}
		out := make([]any, len(ids))
		for i, id := range ids {
			out[i] = id
		}
		return in.vm.NewArray(out...)
	}
	if st, isStarter := sender.(SendStarter); isStarter {
		return in.started(func(ctx context.Context, done func(any, error)) {
			st.StartSend(ctx, ver.v.Principal, ver.v.Space, b.QueueUID, msgs, func(ids []string, err error) {
				done(result(ids, err))
			})
		}, ok, in.codeError)
	}
	return in.async(func(ctx context.Context) (any, error) {
		if sender == nil {
			return nil, fmt.Errorf("no queue sender is configured: %w", abi.ErrBackendUnavailable)
		}
		return result(sender.Send(ctx, ver.v.Principal, ver.v.Space, b.QueueUID, msgs))
	}, ok, in.codeError)
}
