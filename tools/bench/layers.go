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
		b.e2eLayer(ctx, []handlerKind{goKind, jsKind})
	}
	if run("overhead") {
		b.overheadLayer(ctx)
	}
	if run("latency") {
		b.latencyLayer(ctx)
	}
	if run("host") {
		b.hostLayer(ctx)
	}
	if run("idle") {
		pending("Idle cost of 10 000 queues with a consumer", "not written yet")
	}
	if run("backlog") {
		pending("Backlog memory and restart-to-first-delivery", "not written yet")
	}
}
