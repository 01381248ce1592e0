package delivery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

func newRemoteStub() *remoteStub {
	return &remoteStub{queues: map[string]int{}, accepted: map[string][]string{}}
}

// adoptAfter makes every Apply that accepts into queue run a re-read of
// the store and an Adopt by e between its commit and its return: the
// owner's periodic re-read (or an announcement of another host) landing
// between a write's commit and its insert into memory.
func adoptAfter(h *harness, e *Engine, queue string) {
	h.st.setAfter(func(muts []store.Mutation) {
		for _, m := range muts {
			if a, ok := m.(store.AcceptMessage); ok && a.Message.Queue == queue {
				sms, err := h.st.Messages(context.Background(), queue)
				if err != nil {
					h.t.Error(err)
					return
				}
				e.Adopt(queue, sms)
				return
			}
		}
	})
}

// TestAdoptBetweenSendCommitAndInsert (issue #35, defect 1): a re-read of
// the store that adopts between a send's commit and its insert into
// memory must not give the message a second copy; before the fix the
// queue held two and delivered the message twice, both as attempt 1.
func TestAdoptBetweenSendCommitAndInsert(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Remote = newRemoteStub() })
	h.addQueue("q", 0, 3600)
	h.start()
	adoptAfter(h, h.e, "q")
	sent := h.send("q", "one", "two")
	h.st.setAfter(nil)
	if n := h.count("q"); n != 2 {
		t.Fatalf("the queue holds %d messages, want 2", n)
	}
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.waitFinished(1)
	h.quiesce()
	seen := map[string]int{}
	for _, b := range r.all() {
		for _, m := range b.Messages {
			seen[m.ID]++
			if m.Attempts != 1 {
				t.Errorf("message %s delivered with attempts %d", m.ID, m.Attempts)
			}
		}
	}
	for _, id := range sent {
		if seen[id] != 1 {
			t.Errorf("message %s delivered %d times, want once", id, seen[id])
		}
	}
	if n := h.count("q"); n != 0 {
		t.Fatalf("after the acknowledgement the queue holds %d", n)
	}
}

// TestAdoptBetweenDeadLetterCommitAndInsert: the same for a dead-letter
// move into a held queue (one place decides what memory holds).
func TestAdoptBetweenDeadLetterCommitAndInsert(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Remote = newRemoteStub() })
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	h.send("q", "poison")
	adoptAfter(h, h.e, "dlq")
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 0; c.DeadLetterQueueUID = "dlq" }), newRecorder(throwing))
	h.waitFinished(1)
	h.quiesce()
	h.st.setAfter(nil)
	if n := h.count("dlq"); n != 1 {
		t.Fatalf("the dead-letter queue holds %d messages, want 1", n)
	}
}

// TestSendAfterLeaseLossIsAnnounced (issue #35): a send through the
// owner whose commit lands after the queue's lease ran out (another
// engine may have taken and loaded the queue already) is announced, so
// that the new owner adopts it at once, not at its periodic re-read.
func TestSendAfterLeaseLossIsAnnounced(t *testing.T) {
	rs := newRemoteStub()
	h := newHarness(t, func(o *Options) { o.Remote = rs })
	h.addQueue("q", 0, 3600)
	h.start()
	h.send("q", "before")
	if len(rs.accepted["q"]) != 0 {
		t.Fatalf("a send under a current lease was announced: %v", rs.accepted["q"])
	}
	h.st.setAfter(func([]store.Mutation) {
		rs.mu.Lock()
		rs.lost = map[string]bool{"q": true}
		rs.mu.Unlock()
	})
	ids := h.send("q", "during")
	h.st.setAfter(nil)
	rs.mu.Lock()
	got := append([]string(nil), rs.accepted["q"]...)
	rs.mu.Unlock()
	if len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("a send committed after the lease ran out was announced as %v, want %v", got, ids)
	}
}

// TestSendToUnloadedQueueGoesRemote (issue #35, defect 5): once the
// engine has unloaded a queue (its delivery moved on) a send into it is
// a send into a queue held elsewhere, and only a queue that exists
// nowhere is refused as "the queue does not exist".
func TestSendToUnloadedQueueGoesRemote(t *testing.T) {
	rs := newRemoteStub()
	rs.queues["q"] = 0
	h := newHarness(t, func(o *Options) { o.Remote = rs })
	h.addQueue("q", 0, 3600)
	h.start()
	if err := h.e.Unload(h.ctx, "q"); err != nil {
		t.Fatal(err)
	}
	ids, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("after")}})
	if err != nil {
		t.Fatalf("send after the unload: %v", err)
	}
	if _, ok := h.storedMsg("q", ids[0]); !ok {
		t.Fatal("the send after the unload is not stored")
	}
	delete(rs.queues, "q")
	if _, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("x")}}); !errors.Is(err, abi.ErrUnknownQueue) {
		t.Fatalf("send to a deleted queue: %v", err)
	}
}

// TestNoAttemptCountedWhileTheLeaseRunsOut (issue #35, defect 4): while
// the queue's lease estimate has run out (a renewal is late; the store
// still takes the owner's writes) the engine records no delivery: before
// the fix each batch recorded an attempt and did not run its handler, at
// once and again, until the message was discarded after its last retry
// without any handler having run it.
func TestNoAttemptCountedWhileTheLeaseRunsOut(t *testing.T) {
	rs := newRemoteStub()
	h := newHarness(t, func(o *Options) { o.Remote = rs })
	h.addQueue("q", 0, 3600)
	h.start()
	id := h.send("q", "m")[0]
	rs.set(&rs.lost, "q", true)
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 1 }), r)
	h.quiesce()
	for range 4 {
		h.advance(leaseWait)
	}
	if n := len(r.all()); n != 0 {
		t.Fatalf("%d batches ran without a current lease", n)
	}
	sm, ok := h.storedMsg("q", id)
	if !ok {
		t.Fatalf("the message was removed (discarded: %v) while no handler ran", h.st.removals("q", store.RemovedDiscarded))
	}
	if sm.Attempts != 0 {
		t.Fatalf("%d attempts counted while the lease had run out", sm.Attempts)
	}
	rs.set(&rs.lost, "q", false)
	h.advance(leaseWait)
	b := r.next(t)
	if b.Messages[0].Attempts != 1 {
		t.Fatalf("first handler run with attempts %d, want 1", b.Messages[0].Attempts)
	}
}

// TestStalledBatchIsDroppedAndGivenBack (issue #35, defects 2 and 4): a
// host that stalls past its lease between recording a delivery and
// invoking its handler does not run the handler (its successor may have
// delivered and acknowledged the messages meanwhile), and the recorded
// attempt is given back: the next handler run is attempt 1. Before the
// fix the attempt stayed counted (the next run was attempt 2).
func TestStalledBatchIsDroppedAndGivenBack(t *testing.T) {
	rs := newRemoteStub()
	h := newHarness(t, func(o *Options) { o.Remote = rs })
	h.addQueue("q", 0, 3600)
	h.start()
	id := h.send("q", "m")[0]
	// The host stalls past its lease while the delivery is being recorded.
	h.st.setAfter(func(muts []store.Mutation) {
		if _, ok := muts[0].(store.DeliverMessages); ok {
			h.st.setAfter(nil)
			rs.set(&rs.lost, "q", true)
		}
	})
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.quiesce()
	if n := len(r.all()); n != 0 {
		t.Fatalf("the handler ran %d times after the lease ran out", n)
	}
	sm, ok := h.storedMsg("q", id)
	if !ok || sm.Attempts != 0 || sm.Lease != "" {
		t.Fatalf("stored after the dropped batch: %+v (found %v), want attempts 0 and no lease", sm, ok)
	}
	rs.set(&rs.lost, "q", false)
	h.advance(leaseWait)
	b := r.next(t)
	if b.Messages[0].Attempts != 1 {
		t.Fatalf("first handler run with attempts %d, want 1", b.Messages[0].Attempts)
	}
}

// TestHandlerRefusingAStaleBatchGetsItsAttemptBack (issue #35, defect
// 2): the end of the lease as the host knows it reaches the handler
// (abi.StartBy), so that a handler that starts the batch elsewhere (a
// sandbox process, which runs on while the host is stopped) can refuse a
// batch whose lease ended before it got there (abi.ErrNotStarted); the
// engine then gives the attempt back: the next run is attempt 1.
func TestHandlerRefusingAStaleBatchGetsItsAttemptBack(t *testing.T) {
	rs := newRemoteStub()
	rs.until = time.Now().Add(time.Hour)
	h := newHarness(t, func(o *Options) { o.Remote = rs })
	h.addQueue("q", 0, 3600)
	h.start()
	id := h.send("q", "m")[0]
	var startBy []time.Time
	refuse := true
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		sb, _ := abi.StartBy(ctx)
		startBy = append(startBy, sb)
		if refuse {
			refuse = false
			return abi.ErrNotStarted
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	r.next(t)
	h.quiesce()
	b := r.next(t)
	if b.Messages[0].Attempts != 1 {
		t.Fatalf("the run after the refused one has attempts %d, want 1", b.Messages[0].Attempts)
	}
	h.waitUntil("acknowledged", func() bool { _, ok := h.storedMsg("q", id); return !ok })
	if len(startBy) != 2 || !startBy[0].Equal(rs.until) {
		t.Fatalf("the handler was given start-by %v, want the lease's end %v", startBy, rs.until)
	}
}

// TestCloseBatchesStopsRunningHandlers: a host whose lease estimate ran
// out closes its queue's running batches at once (issue #35: an
// invocation learns of a lost lease without waiting for the next
// renewal): the handler's context ends, its settlements answer
// unknown_batch, nothing is acknowledged, and the queue stays held.
func TestCloseBatchesStopsRunningHandlers(t *testing.T) {
	rs := newRemoteStub()
	h := newHarness(t, func(o *Options) { o.Remote = rs })
	h.addQueue("q", 0, 3600)
	h.start()
	id := h.send("q", "m")[0]
	settled := make(chan error, 1)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		<-ctx.Done()
		settled <- b.Acknowledge(context.Background(), b.Messages[0].ID)
		return nil
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	r.next(t)
	rs.set(&rs.lost, "q", true)
	if n := h.e.CloseBatches("q"); n != 1 {
		t.Fatalf("CloseBatches closed %d batches, want 1", n)
	}
	if err := <-settled; !errors.Is(err, abi.ErrUnknownBatch) {
		t.Fatalf("a settlement after the close: %v, want unknown_batch", err)
	}
	h.quiesce()
	if _, ok := h.storedMsg("q", id); !ok || !h.e.Holds("q") {
		t.Fatalf("after the close: message stored %v, queue held %v; want both", ok, h.e.Holds("q"))
	}
	rs.set(&rs.lost, "q", false)
	h.advance(leaseWait)
	if b := r.next(t); b.Messages[0].Attempts != 2 {
		t.Fatalf("redelivered with attempts %d, want 2 (the closed run counted)", b.Messages[0].Attempts)
	}
}

// TestQuiesceLetsRunningBatchesFinish: a queue being handed over to
// another engine stops forming batches and waits for the running ones,
// whose handlers keep a live context and settle as usual (issue #35: an
// Unload at once cut handlers before their first statement and kept
// their attempts counted); Resume forms batches again.
func TestQuiesceLetsRunningBatchesFinish(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Remote = newRemoteStub() })
	h.addQueue("q", 0, 3600)
	h.start()
	first := h.send("q", "one")[0]
	release := make(chan struct{})
	cut := make(chan error, 2)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].ID != first {
			return nil
		}
		select {
		case <-release:
		case <-ctx.Done():
			cut <- context.Cause(ctx)
		}
		return b.Acknowledge(context.Background(), first)
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	r.next(t)
	done := make(chan error, 1)
	go func() { done <- h.e.Quiesce(context.Background(), "q") }()
	for q := h.e.queue("q"); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		ok := q.quiesced
		q.mu.Unlock()
		if ok {
			break
		}
	}
	h.send("q", "two")
	h.quiesce()
	select {
	case err := <-done:
		t.Fatalf("Quiesce returned (%v) while a batch ran", err)
	case err := <-cut:
		t.Fatalf("the running handler was cut: %v", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := h.storedMsg("q", first); ok {
		t.Fatal("the running handler's acknowledge did not land")
	}
	h.quiesce()
	if n := len(r.all()); n != 1 {
		t.Fatalf("%d batches ran while the queue was quiesced, want 1", n)
	}
	h.e.Resume("q")
	if b := r.next(t); b.Messages[0].Attempts != 1 {
		t.Fatalf("after Resume: attempts %d, want 1", b.Messages[0].Attempts)
	}
}
