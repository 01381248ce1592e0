package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
)

const latencyConc = 16 // maxConcurrency of the latency runs

// latencyRecorder collects send-to-handler-start (from the handler
// wrapper) and send-to-durable-ack (from the store wrapper) samples. The
// send time travels in the first 8 bytes of the body.
type latencyRecorder struct {
	mu      sync.Mutex
	sent    map[string]int64 // message ID → send time, until acknowledged
	start   []time.Duration
	ack     []time.Duration
	enabled atomic.Bool
}

func newLatencyRecorder() *latencyRecorder {
	return &latencyRecorder{sent: map[string]int64{}}
}

type timedHandler struct {
	inner abi.Handler
	rec   *latencyRecorder
}

func (h timedHandler) HandleBatch(ctx context.Context, b *abi.Batch) error {
	now := time.Now().UnixNano()
	if h.rec.enabled.Load() {
		h.rec.mu.Lock()
		for _, m := range b.Messages {
			if m.Attempts != 1 || len(m.Body) < 8 {
				continue
			}
			t := int64(binary.LittleEndian.Uint64(m.Body))
			if t == 0 {
				continue
			}
			h.rec.start = append(h.rec.start, time.Duration(now-t))
			h.rec.sent[m.ID] = t
		}
		h.rec.mu.Unlock()
	}
	return h.inner.HandleBatch(ctx, b)
}

func (r *latencyRecorder) onAck(ids []string, at time.Time) {
	now := at.UnixNano()
	r.mu.Lock()
	for _, id := range ids {
		if t, ok := r.sent[id]; ok {
			r.ack = append(r.ack, time.Duration(now-t))
			delete(r.sent, id)
		}
	}
	r.mu.Unlock()
}

func (r *latencyRecorder) take() (start, ack []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start, ack = r.start, r.ack
	r.start, r.ack, r.sent = nil, nil, map[string]int64{}
	return
}

// latencyLayer: maxBatchSize 1, maxBatchTimeoutSeconds 0; first the
// maximum rate (closed loop), then open-loop sends at 10%, 50% and 90% of
// it, each message stamped with its scheduled send time.
func (b *bench) latencyLayer(ctx context.Context) {
	s := b.rep.section("Latency: send → handler start, send → durable acknowledgement (runtime/delivery + runtime/js)",
		fmt.Sprintf("delivery.Engine over a fresh journaled store, the goja handler, maxBatchSize 1, maxBatchTimeoutSeconds 0, maxConcurrency %d. "+
			"First the maximum rate: 64 closed-loop goroutines each sending one message at a time (at most 2 000 unacknowledged), for %s. "+
			"Then, each for %s, an open-loop pacer issues single-message Engine.Send calls at 10%%, 50%% and 90%% of that rate through a pool of 256 senders; "+
			"every body carries its scheduled send time, so a send that waits for a free sender counts the wait (no coordinated omission). "+
			"Handler start is taken when the engine calls the handler (a Go wrapper around the goja handler); durable acknowledgement when the store's Apply of "+
			"the acknowledgement returns. Ratio: p50 ÷ one raw fdatasync (1 / the raw fsync rate): a send that is durably delivered before the handler runs needs at least two.",
			latencyConc, b.pointDur, b.pointDur),
		"load", "offered msgs/s", "acknowledged msgs/s", "samples", "handler start p50 / p90 / p99 / max", "durable ack p50 / p90 / p99 / max", "handler-start p50 ÷ raw fsync", "ack p50 ÷ raw fsync", "the journal's own fdatasync calls in the point: n, p50 / p99 / max", "during the point (contention)")
	rec := newLatencyRecorder()
	rt, release, err := jsKind.New(ctx)
	if err != nil {
		s.NotMeasured = "goja handler: " + err.Error()
		return
	}
	defer release()
	h := timedHandler{inner: rt, rec: rec}
	env, err := b.newEngineEnv(ctx, "latency", resolverFunc(func(context.Context, string) (abi.Handler, error) { return h, nil }))
	if err != nil {
		s.NotMeasured = err.Error()
		return
	}
	defer env.close()
	env.obs.onAck = rec.onAck
	env.obs.ackHook.Store(true)
	if err := env.eng.Attach(ctx, delivery.ConsumerConfig{UID: "c1", QueueUID: "q1", WorkerUID: "w1",
		MaxBatchSize: 1, MaxBatchTimeoutSeconds: 0, MaxConcurrency: latencyConc, MaxRetries: 3, RetryDelaySeconds: 0}); err != nil {
		s.NotMeasured = err.Error()
		return
	}
	send := func(ctx context.Context, at int64) error {
		body := make([]byte, 100)
		binary.LittleEndian.PutUint64(body, uint64(at))
		_, err := env.eng.Send(ctx, "q1", []abi.OutgoingMessage{{Body: body}})
		return err
	}

	// Maximum rate, closed loop.
	c := b.prog.phase("latency: maximum rate (maxBatchSize 1)", "acks")
	var sent atomic.Int64
	a0 := env.obs.acked.Load()
	t0 := time.Now()
	deadline := t0.Add(b.pointDur)
	var wg sync.WaitGroup
	var sendErr atomic.Value
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if sent.Load()-(env.obs.acked.Load()-a0) > 2000 {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				if err := send(ctx, 0); err != nil {
					sendErr.CompareAndSwap(nil, err)
					return
				}
				sent.Add(1)
				c.Store(env.obs.acked.Load() - a0)
			}
		}()
	}
	wg.Wait()
	maxRate := float64(env.obs.acked.Load()-a0) / time.Since(t0).Seconds()
	b.prog.end()
	if e, ok := sendErr.Load().(error); ok {
		s.NotMeasured = "maximum rate: " + e.Error()
		return
	}
	b.waitDrained(env, sent.Load()+a0, 10*time.Second)
	s.note("Maximum rate measured: %s acknowledged msgs/s (%s per raw fsync).", num(maxRate), ratio(maxRate, b.rep.Limits.FsyncPerSec))
	b.results["latency/max"] = maxRate

	fsyncTime := time.Duration(float64(time.Second) / b.rep.Limits.FsyncPerSec)
	for _, load := range []int{10, 50, 90} {
		rate := maxRate * float64(load) / 100
		c := b.prog.phase(fmt.Sprintf("latency at %d%% load (%s msgs/s)", load, num(rate)), "sends")
		acked0 := env.obs.acked.Load()
		rec.enabled.Store(true)
		env.fs.takeSyncs()
		env.fs.timeSyncs.Store(true)
		var issued int64
		probe := startContention()
		point := func() {
			issued = b.paced(ctx, rate, b.pointDur, send, c)
			b.waitDrained(env, acked0+issued, 10*time.Second)
		}
		if load == 50 {
			if path, err := b.profile("latency-50", point); err == nil {
				b.profiles = append(b.profiles, profileRun{Name: "the latency point at 50% load", Path: path, Section: s})
			}
		} else {
			point()
		}
		cont := probe.end()
		env.fs.timeSyncs.Store(false)
		rec.enabled.Store(false)
		syncs := percentilesOf(env.fs.takeSyncs())
		achieved := float64(env.obs.acked.Load()-acked0) / b.pointDur.Seconds()
		b.prog.end()
		st, ak := rec.take()
		ps, pa := percentilesOf(st), percentilesOf(ak)
		fmtP := func(p percentiles) string {
			return fmt.Sprintf("%s / %s / %s / %s", dur(p.P50), dur(p.P90), dur(p.P99), dur(p.Max))
		}
		s.row(fmt.Sprintf("%d%%", load), num(rate), num(achieved), fmt.Sprintf("%d / %d", ps.N, pa.N), fmtP(ps), fmtP(pa),
			ratio(float64(ps.P50), float64(fsyncTime)), ratio(float64(pa.P50), float64(fsyncTime)),
			fmt.Sprintf("%d, %s / %s / %s", syncs.N, dur(syncs.P50), dur(syncs.P99), dur(syncs.Max)), cont.String())
		b.results[fmt.Sprintf("latency/%d/p99", load)] = float64(ps.P99)
	}
	s.note("The last column times every fdatasync the store's journal made during the point (from a wrapper of its file system): when its p99 and max are " +
		"close to the latencies' p99 and max, the tail is the disk's (on a shared machine, other tenants' writes), not the host's CPU. " +
		"The contention column comes from /proc/stat (every process on the machine), getrusage (this process) and runtime/metrics " +
		"(/sched/latencies: how long runnable goroutines waited for a CPU; /sched/pauses/total/gc: stop-the-world pauses): when the machine is busier than this " +
		"process, other tenants took CPU from it; a run-queue wait near the latency tail means the tail is waiting for a CPU, not work done by the host.")
	s.note("Raw fdatasync time (1 / rate): %s. \"Acknowledged msgs/s\" counts acknowledgements until the queue drained, divided by the %s of sending.", dur(fsyncTime), b.pointDur)
}

// paced issues sends at rate per second for d from a pool of 256
// goroutines, each send stamped with its scheduled time. It returns how
// many were issued.
func (b *bench) paced(ctx context.Context, rate float64, d time.Duration, send func(context.Context, int64) error, counter *atomic.Int64) int64 {
	jobs := make(chan int64, 1<<16)
	var wg sync.WaitGroup
	for w := 0; w < 256; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range jobs {
				if err := send(ctx, at); err == nil {
					counter.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	var n int64
	for {
		due := start.Add(time.Duration(n) * interval)
		if due.Sub(start) >= d {
			break
		}
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- due.UnixNano()
		n++
	}
	close(jobs)
	wg.Wait()
	return n
}

// waitDrained waits until the store has acknowledged target messages in
// total, or for at most max.
func (b *bench) waitDrained(env *engineEnv, target int64, max time.Duration) {
	deadline := time.Now().Add(max)
	for env.obs.acked.Load() < target && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}
