package main

import (
	"context"
)

// e2eResult is one end-to-end point, kept for the targets.
type e2eResult struct {
	MsgsPerSec float64
	Journal    float64 // what the journal alone sustained for the same records
}

// layers runs every layer above the journal. A layer whose package has not
// landed yet says so in its section instead of showing a number.
func (b *bench) layers(ctx context.Context, run func(string) bool) {
	pending := func(title, why string) {
		s := b.rep.section(title, "")
		s.NotMeasured = why
	}
	if run("store") {
		b.storeLayer(ctx)
	}
	if run("engine") {
		b.engineSendLayer(ctx)
		b.e2eLayer(ctx, []handlerKind{goKind})
	}
	if run("overhead") {
		pending("JavaScript invocation overhead (runtime/js)", "the runtime/js QueueHandler has not landed yet")
	}
	if run("latency") {
		pending("Latency", "delivery.Engine and the runtime/js QueueHandler have not landed yet")
	}
	if run("host") {
		pending("Producer throughput through the full host over HTTP", "package host (host.New) has not landed yet")
	}
	if run("idle") {
		pending("Idle cost of 10 000 queues with a consumer", "delivery.Engine has not landed yet")
	}
	if run("backlog") {
		pending("Backlog memory and restart-to-first-delivery", "store.Open and delivery.Engine have not landed yet")
	}
}
