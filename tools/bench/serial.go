package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// serialLayer measures a serialized queue (the offering "serialized",
// spec/peers.md §Serialized queues). With one batch in flight nothing can
// share a group commit with the queue's own writes, so each batch costs a
// body read, the durable delivery record, the handler and the durable
// acknowledgement, one after the other. The bound is exactly that loop,
// run bare on the same store (no engine) in the same run; the engine's
// figure is reported as a ratio to it.
func (b *bench) serialLayer(ctx context.Context) {
	s := b.rep.section("Serialized queue: one batch in flight (runtime/delivery, offering serialized)",
		fmt.Sprintf("delivery.Engine over a fresh journaled store per point; queue q1 is serialized and prefilled with enough messages of %d B for the window "+
			"(sent before it, so no send shares the window's group commits); the consumer has maxConcurrency 16 (serialized: one batch in flight anyway), "+
			"maxBatchTimeoutSeconds 0, and the handler reads every body and returns, so the engine acknowledges the batch. The engine and the bound run in %d alternating rounds on the same store "+
			"(a shared disk drifts): a bound loop of %s, then the consumer attached for a window of %s (after 100 ms), then detached; messages/s counts durable "+
			"acknowledgements over the windows; the ratio per round compares each window with the loop right before it, and its median is the figure least moved by "+
			"another tenant's burst. Bound: the same handler in a bare loop on the same store with nothing else running, batches ÷ the loop's own time "+
			"(after a calibration loop that also sizes the prefill): read the batch's bodies "+
			"(Store.Bodies), Apply DeliverMessages (the durable delivery record), call the handler, Apply RemoveMessages (the durable acknowledgement); "+
			"that is what one batch of a serialized queue must cost (a handler round trip and two durable writes that nothing else can share). "+
			"Two fsyncs per batch, not one: the delivery is recorded before the handler sees the batch (so a batch that crashes the host still counts its "+
			"attempt, runtime/delivery §Choices 1), and the next batch may start only once the acknowledgement is durable (a retried head must stay the head).",
			e2eBody, serialRounds, b.pointDur/(2*serialRounds), b.pointDur/serialRounds),
		"handler", "maxBatchSize", "msgs/s", "batches/s", "bound: bare loop (batches/s)", "ratio to the bound", "ratio per round: median (range)", "fsyncs per batch (engine, bound)",
		"bound µs per batch: bodies, delivery write, handler, acknowledgement write")
	for _, k := range []handlerKind{goKind, jsKind} {
		for _, size := range []int{1, 10} {
			h, release, err := k.New(ctx)
			if err != nil {
				s.note("%s: %v", k.Name, err)
				break
			}
			c := b.prog.phase(fmt.Sprintf("serialized queue, %s, maxBatchSize %d", k.Name, size), "acks")
			r, err := b.runSerial(ctx, h, size, c)
			b.prog.end()
			release()
			if err != nil {
				s.note("%s, maxBatchSize %d: error: %v", k.Name, size, err)
				continue
			}
			batches := r.rate / float64(size)
			b.results[fmt.Sprintf("serial/%s/%d", k.Name, size)] = r.rate
			sort.Float64s(r.rounds)
			med := r.rounds[len(r.rounds)/2]
			s.row(k.Name, fmt.Sprint(size), num(r.rate), num(batches), num(r.bound), ratio(batches, r.bound),
				ratio(med, 1)+" ("+ratio(r.rounds[0], 1)+" – "+ratio(r.rounds[len(r.rounds)-1], 1)+")",
				fmt.Sprintf("%s, %s", num(r.syncsPerBatch), num(r.boundSyncsPerBatch)),
				fmt.Sprintf("%s, %s, %s, %s", usec(r.parts[0]), usec(r.parts[1]), usec(r.parts[2]), usec(r.parts[3])))
		}
	}
	s.note("A serialized queue trades throughput for order: the default offering with maxConcurrency > 1 overlaps batches and shares group commits " +
		"(section End-to-end), a serialized queue cannot. Larger batches (maxBatchSize) are how a serialized queue goes faster: the two writes are per batch.")
}

// serialRounds is how many (bound loop, engine window) pairs a point has.
const serialRounds = 8

func usec(d time.Duration) string { return num(float64(d.Nanoseconds())/1e3) + " µs" }

type serialRun struct {
	rate                              float64 // acknowledged messages/s through the engine
	bound                             float64 // batches/s of the bare loop
	syncsPerBatch, boundSyncsPerBatch float64
	parts                             [4]time.Duration // mean per batch of the bare loop's steps
	rounds                            []float64        // each round's engine batches/s ÷ its bound loop's
}

// runSerial measures the bare loop (the bound) and the engine in
// alternating rounds on one fresh store.
func (b *bench) runSerial(ctx context.Context, h abi.Handler, size int, counter *atomic.Int64) (serialRun, error) {
	var run serialRun
	env, err := b.newEngineEnvQueue(ctx, "serial", resolverFunc(func(context.Context, string) (abi.Handler, error) { return h, nil }), true)
	if err != nil {
		return run, err
	}
	defer env.close()
	body := make([]byte, e2eBody)
	for i := range body {
		body[i] = 'x'
	}

	// The bound: the bare loop on queue qb of the same store, run for
	// half its time before the engine's window and half after it (a shared
	// disk drifts; both halves count).
	const rounds = serialRounds
	boundDur := b.pointDur / (2 * rounds)
	const boundMsgs = 400000
	var loaded []string
	next := 0
	load := func(n int) error {
		muts := make([]store.Mutation, 0, 100)
		now := time.Now().UnixMilli()
		for len(muts) < cap(muts) && n > 0 {
			id := fmt.Sprintf("b%015x", len(loaded))
			loaded = append(loaded, id)
			muts = append(muts, store.AcceptMessage{Message: store.Message{Queue: "qb", ID: id, AcceptedAt: now, VisibleAt: now, Size: len(body)}, Body: body})
			n--
		}
		return env.st.Apply(ctx, muts...)
	}
	var parts [4]time.Duration
	var elapsed time.Duration
	var loopSyncs uint64
	batches := 0
	loop := func() error {
		start := time.Now()
		// Group commits of the loop: the store's count across it, less
		// one per load (sequential Applies never share a group).
		loads, s0 := 0, env.st.Stats().Syncs
		defer func() { loopSyncs += env.st.Stats().Syncs - s0 - uint64(loads) }()
		for time.Since(start) < boundDur {
			for len(loaded)-next < size {
				if len(loaded) >= boundMsgs {
					return fmt.Errorf("the bound loop ran past %d messages", boundMsgs)
				}
				if err := load(100); err != nil {
					return err
				}
				loads++
			}
			ids := loaded[next : next+size]
			next += size
			t0 := time.Now()
			bodies, err := env.st.Bodies(ctx, "qb", ids)
			if err != nil {
				return err
			}
			t1 := time.Now()
			bid := fmt.Sprintf("bb%d", batches)
			if err := env.st.Apply(ctx, store.DeliverMessages{Queue: "qb", Batch: bid, IDs: ids}); err != nil {
				return err
			}
			t2 := time.Now()
			msgs := make([]abi.Message, len(ids))
			for i, id := range ids {
				msgs[i] = abi.Message{ID: id, TimestampMillis: start.UnixMilli(), Body: bodies[i], Attempts: 1}
			}
			if err := h.HandleBatch(ctx, abi.NewBatch(bid, "bound", msgs, abitest.Settler{})); err != nil {
				return err
			}
			t3 := time.Now()
			if err := env.st.Apply(ctx, store.RemoveMessages{Queue: "qb", IDs: ids, Reason: store.RemovedAcknowledged}); err != nil {
				return err
			}
			t4 := time.Now()
			parts[0] += t1.Sub(t0)
			parts[1] += t2.Sub(t1)
			parts[2] += t3.Sub(t2)
			parts[3] += t4.Sub(t3)
			elapsed += t4.Sub(t0)
			batches++
			counter.Add(int64(size))
		}
		return nil
	}
	// Calibrate (also warms the store up); not counted.
	if err := loop(); err != nil {
		return run, err
	}
	calib := float64(batches) / elapsed.Seconds()
	parts, elapsed, loopSyncs, batches = [4]time.Duration{}, 0, 0, 0

	// Prefill q1 for the engine's windows at 2 times the calibrated bound.
	want := int(calib*float64(size)*b.pointDur.Seconds()*2) + 1000
	out := make([]abi.OutgoingMessage, 100)
	for i := range out {
		out[i].Body = body
	}
	var wg sync.WaitGroup
	var sent atomic.Int64
	var firstErr atomic.Value
	for p := 0; p < e2eProducers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(100) <= int64(want) {
				if _, err := env.eng.Send(ctx, "q1", out); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return run, e
	}

	// Rounds of (bound loop, engine window), so that both see the disk
	// as it is at about the same time.
	var acked, syncs int64
	var wall time.Duration
	for r := 0; r < rounds; r++ {
		lb, le := batches, elapsed
		if err := loop(); err != nil {
			return run, err
		}
		roundBound := float64(batches-lb) / (elapsed - le).Seconds()
		if err := env.eng.Attach(ctx, delivery.ConsumerConfig{UID: "c1", QueueUID: "q1", WorkerUID: "w1",
			MaxBatchSize: size, MaxBatchTimeoutSeconds: 0, MaxConcurrency: 16, MaxRetries: 100, RetryDelaySeconds: 0}); err != nil {
			return run, err
		}
		time.Sleep(100 * time.Millisecond)
		a0, s0 := env.obs.acked.Load(), env.st.Stats().Syncs
		t0 := time.Now()
		last := a0
		for time.Since(t0) < b.pointDur/rounds {
			time.Sleep(50 * time.Millisecond)
			a := env.obs.acked.Load()
			counter.Add(a - last)
			last = a
		}
		a1, s1 := env.obs.acked.Load(), env.st.Stats().Syncs
		w := time.Since(t0)
		wall += w
		acked += a1 - a0
		syncs += int64(s1 - s0)
		if roundBound > 0 {
			run.rounds = append(run.rounds, float64(a1-a0)/float64(size)/w.Seconds()/roundBound)
		}
		if err := env.eng.Detach(ctx, "c1"); err != nil {
			return run, err
		}
	}
	if acked == 0 || batches == 0 {
		return run, fmt.Errorf("nothing was acknowledged in the windows")
	}
	run.rate = float64(acked) / wall.Seconds()
	run.syncsPerBatch = float64(syncs) / (float64(acked) / float64(size))
	run.bound = float64(batches) / elapsed.Seconds()
	run.boundSyncsPerBatch = float64(loopSyncs) / float64(batches)
	for i := range parts {
		run.parts[i] = parts[i] / time.Duration(batches)
	}
	return run, nil
}
