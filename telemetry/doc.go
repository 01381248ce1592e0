// Package telemetry traces the host's messages with OpenTelemetry: a span
// per send, per batch delivery, per attempt to process a message and per
// settlement, after the OTel messaging semantic conventions, exported over
// OTLP (HTTP/protobuf) to a collector. It is off unless the host is told
// where to export (takohost -otlp-endpoint, or the standard
// OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variables); off, the host builds no tracer and the engine's hooks are one
// nil test each.
//
// Why the shape: the question users ask of a queue is "what happened to
// this message, across its retries?". A message's attempts run in
// different batches, possibly after a restart or in a dead-letter queue,
// so no single parent/child tree holds them. Each attempt's span is
// therefore a child of the message's send span (its trace is the
// message's trace, the one a console links to), and carries links to the
// send, to the previous attempt's span and to the batch delivery that ran
// it. The send's trace context is stored with the message
// (store.Message.TraceParent), so the links survive restarts and
// dead-letter moves; the previous attempt's is kept in the engine's
// memory only, so the first attempt after a restart links to the send
// alone. Worker code never sees any of it: a batch's messages carry no
// trace context (the Forms define none), only the handler's context does,
// so that a send made while handling a batch is a child of its delivery.
//
// The engine (runtime/delivery) knows only its small Tracer interface,
// which this package implements; the SDK stays out of the engine.
//
// Spans (spec/peers.md §Tracing has the attribute table):
//
//   - "send Q" (producer): one Send or publish of 1..100 messages to
//     queue Q, the child of the incoming request's traceparent (a fetch
//     handler's Binding send, POST …/messages) or of the delivery whose
//     handler sent.
//   - "receive Q" (consumer): one batch handed to a consumer's handler; a
//     new trace, linked to each message's send.
//   - "process Q" (consumer): one attempt at one message, from the
//     handler's start to the message's settlement; child of the send,
//     linked to the send, the previous attempt and the receive span.
//   - "ack Q", "retry Q", "dead_letter Q", "discard Q", "expired Q"
//     (client, operation type settle): how the attempt ended; child of
//     the attempt's span.
package telemetry
