package main

import (
	"context"
)

// e2eResult is one end-to-end point, kept for the targets.
type e2eResult struct {
	MsgsPerSec float64
	Journal    float64 // what the journal alone sustained for the same records
}

// layers runs every layer above the journal, in order.
func (b *bench) layers(ctx context.Context, run func(string) bool) {
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
		b.idleLayer(ctx, b.queues)
	}
	if run("backlog") {
		b.backlogLayer(ctx, b.backlog)
	}
}
