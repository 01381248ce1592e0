package delivery

import (
	"context"
)

// Tracer records the engine's spans (Options.Tracer). Package telemetry
// implements it with the OpenTelemetry SDK, after the OTel messaging
// semantic conventions; the engine knows only this interface, so that it
// does not depend on a tracing SDK and pays nothing when it has no
// tracer: every hook is behind one nil test.
//
// Trace contexts cross this interface as W3C traceparent strings: the
// send's is stored with each message (store.Message.TraceParent), so a
// delivery after a restart or a dead-letter move still links to it.
type Tracer interface {
	// Send starts the span of one send of n messages to a queue (a
	// producer span, the child of the span ctx carries, if any). It
	// returns the trace context to store with each message ("" to store
	// none) and a function that ends the span with the send's IDs and
	// error.
	Send(ctx context.Context, q TracedQueue, n int) (traceParent string, end func(ids []string, err error))
	// Deliver starts the spans of a batch handed to a handler: the
	// batch's own, and one per message linked to the message's send and
	// to its previous attempt's span. Its BatchSpans is used by one
	// batch only, and ended once.
	Deliver(b TracedBatch) BatchSpans
}

// TracedQueue names a queue in spans.
type TracedQueue struct{ UID, Name string }

// TracedBatch is what a span of a delivery says.
type TracedBatch struct {
	Queue    TracedQueue
	Consumer string // the QueueConsumer's name
	ID       string // the batch's ID
	Messages []TracedMessage
}

// TracedMessage is one message of a traced batch.
type TracedMessage struct {
	ID      string
	Attempt int // 1 on the first delivery
	// Send is the trace context of the message's send span, Previous
	// that of its previous attempt's span ("" when unknown: the first
	// attempt, or the engine restarted since).
	Send, Previous string
}

// BatchSpans are the open spans of one delivered batch.
type BatchSpans interface {
	// Context returns ctx carrying the batch's span, for the handler: a
	// send it makes is a child of the delivery.
	Context(ctx context.Context) context.Context
	// Attempt is the trace context of the span of message i's attempt,
	// which the message's next attempt links to.
	Attempt(i int) string
	// Settled records how the message of that ID was settled and ends its
	// attempt's span.
	Settled(id string, how Settlement)
	// End ends the batch's span (failed: the handler threw, timed out or
	// the batch was closed) and any attempt span still open (the
	// messages went back unsettled).
	End(outcome string, failed bool)
}

// Settlement is how an attempt ended, as the attempt's settle span names
// it.
type Settlement string

// Settlements.
const (
	SettledAck        Settlement = "ack"
	SettledRetry      Settlement = "retry"
	SettledDeadLetter Settlement = "dead_letter"
	SettledDiscard    Settlement = "discard"
	SettledExpired    Settlement = "expired"
	SettledGone       Settlement = "gone"
)

// msgTrace is the trace state of a message of a traced engine; nil on an
// engine without a Tracer. It is replaced, never changed, so that a
// dead-letter move can share it.
type msgTrace struct {
	send string // the send span's traceparent, as stored
	last string // the previous attempt's span; "" before the first, or after a restart
}

// traceParent is the trace context to store with a copy of m (a
// dead-letter move, a redrive, a give-back).
func (m *msg) traceParent() string {
	if m.tr == nil {
		return ""
	}
	return m.tr.send
}

// tracedFrom sets the trace state of a message read from the store.
func (m *msg) tracedFrom(traceParent string) {
	if traceParent != "" {
		m.tr = &msgTrace{send: traceParent}
	}
}

// traceQueue is q as spans name it. q.mu held or q not yet shared.
func (q *queue) traceQueue() TracedQueue { return TracedQueue{UID: q.uid, Name: q.cfg.Name} }

// startSpans starts the spans of a batch about to run and records each
// attempt's span as its message's last. q.mu held.
func (e *Engine) startSpans(b *batch) {
	tb := TracedBatch{Queue: b.q.traceQueue(), Consumer: b.c.cfg.Name, ID: b.id, Messages: make([]TracedMessage, len(b.items))}
	for i, bm := range b.items {
		tm := TracedMessage{ID: bm.m.id, Attempt: bm.m.attempts}
		if tr := bm.m.tr; tr != nil {
			tm.Send, tm.Previous = tr.send, tr.last
		}
		tb.Messages[i] = tm
	}
	b.spans = e.tracer.Deliver(tb)
	for i, bm := range b.items {
		send := ""
		if bm.m.tr != nil {
			send = bm.m.tr.send
		}
		bm.m.tr = &msgTrace{send: send, last: b.spans.Attempt(i)}
	}
}

// traceSettled records the settlements of a committed plan in b's spans.
func (b *batch) traceSettled(p *plan) {
	if b.spans == nil {
		return
	}
	for _, l := range []struct {
		ms  []*msg
		how Settlement
	}{{p.ack, SettledAck}, {p.retry, SettledRetry}, {p.dead, SettledDeadLetter}, {p.discard, SettledDiscard}, {p.expire, SettledExpired}, {p.gone, SettledGone}} {
		for _, m := range l.ms {
			b.spans.Settled(m.id, l.how)
		}
	}
}

// endSpans ends b's spans, once. q.mu held.
func (b *batch) endSpans() {
	if b.spans == nil {
		return
	}
	outcome, failed := "closed", true
	switch b.outcome {
	case outSuccess:
		outcome, failed = "returned", false
	case outFailure:
		outcome = "threw"
	case outTimeout:
		outcome = "time_limit"
	}
	b.spans.End(outcome, failed)
	b.spans = nil
}
