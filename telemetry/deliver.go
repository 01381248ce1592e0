package telemetry

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/takoform/queuehost/runtime/delivery"
)

// Link kinds (the takoform.link attribute of a link), so that a reader
// tells a process span's links apart without comparing span IDs.
const (
	LinkSend            = "send"
	LinkPreviousAttempt = "previous_attempt"
	LinkDelivery        = "delivery"
)

// Deliver implements delivery.Tracer: the batch's receive span, linked to
// each message's send, and one process span per message, the child of
// its send, linked to the send, the previous attempt and the receive span.
func (t *Tracing) Deliver(b delivery.TracedBatch) delivery.BatchSpans {
	links := make([]trace.Link, 0, len(b.Messages))
	for _, m := range b.Messages {
		if sc := t.spanContext(m.Send); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrLink.String(LinkSend), semMessageID.String(m.ID)}})
		}
	}
	attrs := append(queueAttrs(b.Queue, "receive", "receive"), semConsumerGroup.String(b.Consumer), attrBatchID.String(b.ID), semBatchCount.Int(len(b.Messages)))
	bctx, batch := t.tracer.Start(context.Background(), "receive "+b.Queue.Name, trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...), trace.WithLinks(links...))
	bs := &batchSpans{t: t, queue: b.Queue, batch: batch, bctx: bctx, items: make([]attempt, len(b.Messages)), byID: make(map[string]int, len(b.Messages))}
	for i, m := range b.Messages {
		send := t.spanContext(m.Send)
		links := make([]trace.Link, 0, 3)
		if send.IsValid() {
			links = append(links, trace.Link{SpanContext: send, Attributes: []attribute.KeyValue{attrLink.String(LinkSend)}})
		}
		if prev := t.spanContext(m.Previous); prev.IsValid() {
			links = append(links, trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{attrLink.String(LinkPreviousAttempt)}})
		}
		links = append(links, trace.Link{SpanContext: batch.SpanContext(), Attributes: []attribute.KeyValue{attrLink.String(LinkDelivery)}})
		// The attempt belongs to its message's trace (the send's); a
		// message with no stored send context starts its own under the
		// delivery.
		parent := bctx
		if send.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(context.Background(), send)
		}
		attrs := append(queueAttrs(b.Queue, "process", "process"), semConsumerGroup.String(b.Consumer), semMessageID.String(m.ID),
			attrAttempt.Int(m.Attempt), attrBatchID.String(b.ID))
		pctx, span := t.tracer.Start(parent, "process "+b.Queue.Name, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attrs...), trace.WithLinks(links...))
		bs.items[i] = attempt{ctx: pctx, span: span}
		bs.byID[m.ID] = i
	}
	return bs
}

type attempt struct {
	ctx   context.Context
	span  trace.Span
	ended bool
}

// batchSpans implements delivery.BatchSpans.
type batchSpans struct {
	t     *Tracing
	queue delivery.TracedQueue
	batch trace.Span
	bctx  context.Context
	byID  map[string]int // read-only after Deliver

	mu    sync.Mutex
	items []attempt
}

func (bs *batchSpans) Context(ctx context.Context) context.Context {
	return trace.ContextWithSpan(ctx, bs.batch)
}

func (bs *batchSpans) Attempt(i int) string { return traceParent(bs.items[i].span.SpanContext()) }

// Settled records a settle span, the child of the attempt's, and ends the
// attempt: an error status for every outcome but an acknowledgement.
func (bs *batchSpans) Settled(id string, how delivery.Settlement) {
	i, ok := bs.byID[id]
	if !ok {
		return
	}
	bs.mu.Lock()
	a := &bs.items[i]
	if a.ended {
		bs.mu.Unlock()
		return
	}
	a.ended = true
	bs.mu.Unlock()
	_, s := bs.t.tracer.Start(a.ctx, string(how)+" "+bs.queue.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(queueAttrs(bs.queue, "settle", string(how)), semMessageID.String(id))...))
	s.End()
	if how != delivery.SettledAck {
		a.span.SetStatus(codes.Error, string(how))
		a.span.SetAttributes(semErrorType.String(string(how)))
	}
	a.span.End()
}

// End ends the attempts still open (their messages went back unsettled:
// the batch was closed by the host) and the batch's span.
func (bs *batchSpans) End(outcome string, failed bool) {
	bs.mu.Lock()
	var open []trace.Span
	for i := range bs.items {
		if a := &bs.items[i]; !a.ended {
			a.ended = true
			open = append(open, a.span)
		}
	}
	bs.mu.Unlock()
	for _, s := range open {
		s.SetStatus(codes.Error, "released unsettled")
		s.SetAttributes(semErrorType.String("released"))
		s.End()
	}
	bs.batch.SetAttributes(attrOutcome.String(outcome))
	if failed {
		bs.batch.SetStatus(codes.Error, outcome)
		bs.batch.SetAttributes(semErrorType.String(outcome))
	}
	bs.batch.End()
}
