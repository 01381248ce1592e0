package main

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// e2eResult is one end-to-end point, kept for the targets.
type e2eResult struct {
	MsgsPerSec float64
	Journal    float64 // what the journal alone sustained for the same records
	CPUPerMsg  float64 // CPU seconds per acknowledged message, the whole process
	FsyncPerS  float64 // the raw fdatasync rate measured before the layer
	// Share of the window the journal's writer spent busy, and in
	// applying to memory and syncing.
	WriterBusy, WriterApply, WriterSync float64
}

// layers runs every layer above the journal, in order.
func (b *bench) layers(ctx context.Context, run func(string) bool) {
	if run("store") {
		b.withLimits("store", func() { b.storeLayer(ctx) })
	}
	if run("pg") {
		b.withLimits("pgstore", func() { b.pgLayer(ctx); b.e2ePgLayer(ctx); b.failoverLayer(ctx) })
	}
	if run("cluster") {
		b.withLimits("cluster", func() { b.clusterLayer(ctx) })
	}
	if run("cluster-real") {
		b.withLimits("cluster, real binaries", func() { b.clusterBinLayer(ctx) })
	}
	if run("engine") {
		b.withLimits("Engine.Send", func() { b.engineSendLayer(ctx) })
		b.withLimits("end-to-end", func() { b.e2eLayer(ctx, []handlerKind{goKind, jsKind}) })
	}
	if run("serial") {
		b.withLimits("serialized queue", func() { b.serialLayer(ctx) })
	}
	if run("overhead") {
		b.overheadLayer(ctx)
	}
	if run("latency") {
		b.withLimits("latency", func() { b.latencyLayer(ctx) })
	}
	if run("host") {
		b.withLimits("host producer", func() { b.hostLayer(ctx) })
	}
	if run("admission") {
		b.withLimits("admission", func() { b.admissionLayer(ctx) })
	}
	if run("isolation") {
		b.withLimits("isolation", func() { b.isolationLayer(ctx) })
	}
	if run("miniflare") {
		b.withLimits("miniflare", func() { b.miniflareLayer(ctx) })
	}
	if run("idle") {
		b.idleLayer(ctx, b.queues)
	}
	if run("backlog") {
		b.backlogLayer(ctx, b.backlog)
	}
}

// limitProbe is one measurement of the raw disk limits during the run.
type limitProbe struct {
	Before string
	At     time.Time
	Lim    diskLimits
}

// withLimits measures the raw disk limits again right before a layer, so
// that its ratios are to the disk as it was then (on a shared machine the
// fsync rate can move by a factor of two within minutes), then runs the
// layer and notes the limits in every section it added.
func (b *bench) withLimits(name string, layer func()) {
	d := 500 * time.Millisecond
	if b.quick {
		d = 200 * time.Millisecond
	}
	c := b.prog.phase("disk limits before "+name, "fdatasyncs")
	lim, err := medianDisk(b.dir, d, 3, c)
	b.prog.end()
	if err == nil {
		b.rep.Limits = lim
		b.probes = append(b.probes, limitProbe{Before: name, At: time.Now(), Lim: lim})
	}
	first := len(b.rep.Sections)
	layer()
	for _, s := range b.rep.Sections[first:] {
		if err != nil {
			s.note("Re-measuring the disk limits before this section failed (%v); its ratios use the previous ones: %s fdatasync/s, %s MiB/s synced.",
				err, num(b.rep.Limits.FsyncPerSec), num(b.rep.Limits.SyncWriteMBps))
			continue
		}
		s.note("Ratios in this section are to the raw disk limits measured right before it (the median of 3 probes of %s each): %s fdatasync/s, %s MiB/s synced sequential write.",
			d, num(lim.FsyncPerSec), num(lim.SyncWriteMBps))
	}
}

// medianDisk runs measureDisk n times and keeps the median of each limit,
// so that another tenant's burst during one probe does not become the
// limit of a whole section.
func medianDisk(dir string, d time.Duration, n int, c *atomic.Int64) (diskLimits, error) {
	var fs, bw []float64
	var last diskLimits
	for i := 0; i < n; i++ {
		lim, err := measureDisk(dir, d, c)
		if err != nil {
			return lim, err
		}
		fs, bw = append(fs, lim.FsyncPerSec), append(bw, lim.SyncWriteMBps)
		last = lim
	}
	slices.Sort(fs)
	slices.Sort(bw)
	last.FsyncPerSec, last.SyncWriteMBps = fs[n/2], bw[n/2]
	return last, nil
}
