package delivery

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

func TestDetachWaitsForRunningHandlerAndDoesNotAcknowledge(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w"), r)
	sent := h.send("q", "settled", "unsettled")
	b := r.next(t)
	detached := make(chan error, 1)
	go func() { detached <- h.e.Detach(context.Background(), "c") }()
	h.waitUntil("the consumer is detaching", func() bool {
		q := h.e.queue("q")
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.consumer != nil && q.consumer.detaching
	})
	h.send("q", "after")
	h.quiesce()
	select {
	case err := <-detached:
		t.Fatalf("Detach returned %v while the handler was running", err)
	default:
	}
	if h.delivered() != 1 {
		t.Fatal("a detaching consumer got a new batch")
	}
	if err := b.Acknowledge(h.ctx, sent[0]); err != nil {
		t.Fatalf("explicit settlement while detaching: %v", err)
	}
	release <- nil // returns normally: must NOT acknowledge "unsettled"
	if err := <-detached; err != nil {
		t.Fatal(err)
	}
	if err := b.Acknowledge(h.ctx, sent[1]); err != abi.ErrUnknownBatch {
		t.Fatalf("settlement after detach: %v", err)
	}
	if _, ok := h.storedMsg("q", sent[1]); !ok {
		t.Fatal("detach acknowledged an unsettled message")
	}
	if _, ok := h.storedMsg("q", sent[0]); ok {
		t.Fatal("explicit acknowledgement lost")
	}
	// a new consumer gets the unsettled message again, attempts 2
	r2 := newRecorder(nil)
	h.attach(consumerCfg("c2", "q", "w2"), r2)
	b2 := r2.next(t)
	if len(b2.Messages) != 2 || b2.Messages[0].ID != sent[1] || b2.Messages[0].Attempts != 2 || string(b2.Messages[1].Body) != "after" {
		t.Fatalf("redelivery %+v", b2.Messages)
	}
}

func TestDetachClosesBatchesWhenContextEnds(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	causes := make(chan error, 1)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	sent := h.send("q", "a")
	b := r.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.e.Detach(ctx, "c"); err != nil {
		t.Fatalf("Detach with an ended context: %v (closing the batch proves the boundary)", err)
	}
	if err := b.AcknowledgeAll(h.ctx); err != abi.ErrUnknownBatch {
		t.Fatalf("settlement of a closed batch: %v", err)
	}
	if c := <-causes; !errors.Is(c, errBatchClosed) {
		t.Fatalf("handler context cause %v", c)
	}
	h.quiesce()
	if m, ok := h.storedMsg("q", sent[0]); !ok || m.Attempts != 1 {
		t.Fatal("closed batch acknowledged its message")
	}
	if err := h.e.UpdateConsumer(h.ctx, consumerCfg("c", "q", "w")); !errors.Is(err, ErrUnknownConsumer) {
		t.Fatalf("consumer still attached: %v", err)
	}
}

func TestShutdownLeavesUnsettledForRedelivery(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	fn, _ := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w"), r)
	sent := h.send("q", "a", "b")
	b := r.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.e.Stop(ctx); err == nil {
		t.Fatal("Stop reported a clean stop with a handler still running")
	}
	if err := b.AcknowledgeAll(h.ctx); err != abi.ErrUnknownBatch {
		t.Fatalf("settlement after shutdown: %v", err)
	}
	for _, id := range sent {
		if m, ok := h.storedMsg("q", id); !ok || m.Lease != b.ID || m.Attempts != 1 {
			t.Fatalf("after shutdown %s: %+v %v", id, m, ok)
		}
	}
	if _, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("x")}}); !errors.Is(err, abi.ErrBackendUnavailable) {
		t.Fatalf("send after shutdown: %v", err)
	}

	// restart on the same store
	h.e = h.newEngine()
	h.addQueue("q", 0, 3600)
	r2 := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r2)
	h.start()
	b2 := r2.next(t)
	if len(b2.Messages) != 2 || b2.Messages[0].Attempts != 2 || b2.ID == b.ID {
		t.Fatalf("redelivery after restart %+v", b2)
	}
	h.waitFinished(1)
	if h.count("q") != 0 {
		t.Fatal("not acknowledged after restart")
	}
}

func TestShutdownGraceLetsHandlersFinish(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	h.send("q", "a", "b")
	r.next(t)
	done := make(chan error, 1)
	go func() { done <- h.e.Stop(context.Background()) }()
	h.waitUntil("shutdown began", func() bool { return h.e.stopping.Load() })
	release <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.delivered() != 1 {
		t.Fatal("a new batch started during shutdown")
	}
	if n, _ := h.st.MessageCount(h.ctx, "q"); n != 1 {
		t.Fatalf("%d stored; the finished batch must be acknowledged and the other left", n)
	}
}

func TestRestartRespectsMaxDeliveries(t *testing.T) {
	h := newHarness(t)
	run := func(r *recorder) {
		h.e = h.newEngine()
		h.addQueue("q", 0, 3600)
		h.addQueue("dlq", 0, 3600)
		h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 1; c.DeadLetterQueueUID = "dlq" }), r)
		h.start()
	}
	crash := func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		h.e.Stop(ctx) // the handler never returns: like a crash, nothing settles
	}
	hang := func(ctx context.Context, b *abi.Batch) error { select {} }

	r1 := newRecorder(hang)
	run(r1)
	id := h.send("q", "poison")[0]
	if b := r1.next(t); b.Messages[0].Attempts != 1 {
		t.Fatal(b.Messages[0].Attempts)
	}
	crash()

	r2 := newRecorder(hang)
	run(r2)
	if b := r2.next(t); b.Messages[0].Attempts != 2 || b.Messages[0].ID != id {
		t.Fatalf("second run %+v", b.Messages[0])
	}
	crash()

	r3 := newRecorder(hang)
	run(r3)
	h.quiesce()
	if h.delivered() != 0 {
		t.Fatal("message delivered a third time with maxRetries 1")
	}
	if _, ok := h.storedMsg("q", id); ok {
		t.Fatal("exhausted message left in the queue")
	}
	if h.count("dlq") != 1 {
		t.Fatal("exhausted message not dead-lettered on restart")
	}
	if got := h.st.removals("q", store.RemovedDeadLettered); len(got) != 1 || got[0] != id {
		t.Fatalf("dead-lettered %v", got)
	}
}

func TestManyIdleQueuesCostNothing(t *testing.T) {
	h := newHarness(t)
	const n = 10000
	before := runtime.NumGoroutine()
	for i := 0; i < n; i++ {
		h.addQueue(fmt.Sprintf("q%d", i), 0, 3600)
		h.attach(consumerCfg(fmt.Sprintf("c%d", i), fmt.Sprintf("q%d", i), "w"), newRecorder(nil))
	}
	h.start()
	h.quiesce()
	if p := h.clk.Pending(); p != 0 {
		t.Fatalf("%d timers armed for %d empty queues; want 0", p, n)
	}
	if g := runtime.NumGoroutine() - before; g > 5 {
		t.Fatalf("%d goroutines for %d idle queues", g, n)
	}
	// one message with a delay: exactly one timer, on that queue
	h.sendDelay("q42", "x", 30)
	if p := h.clk.Pending(); p != 1 {
		t.Fatalf("%d timers armed, want 1", p)
	}
	h.advance(30 * time.Second)
	h.waitFinished(1)
	if p := h.clk.Pending(); p != 0 {
		t.Fatalf("%d timers left armed after the queue drained", p)
	}
	if g := runtime.NumGoroutine() - before; g > 5 {
		t.Fatalf("%d goroutines after one delivery", g)
	}
	h.advance(time.Hour)
	if h.clk.Fired() > 3 {
		t.Fatalf("%d timer callbacks for one delayed message in an hour", h.clk.Fired())
	}
}

func TestStartLoadsStoredMessages(t *testing.T) {
	h := newHarness(t)
	// a message stored by an earlier run, not delivered
	ctx := context.Background()
	h.st.Apply(ctx, store.AcceptMessage{Message: store.Message{Queue: "q", ID: "old", AcceptedAt: t0.Add(-time.Minute).UnixMilli(), VisibleAt: t0.Add(time.Minute).UnixMilli(), Size: 1}, Body: []byte("o")})
	h.st.Apply(ctx, store.AcceptMessage{Message: store.Message{Queue: "q", ID: "gone", AcceptedAt: t0.Add(-2 * time.Hour).UnixMilli(), VisibleAt: t0.Add(-2 * time.Hour).UnixMilli(), Size: 1}, Body: []byte("g")})
	h.addQueue("q", 0, 3600)
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.start()
	h.quiesce()
	if _, ok := h.storedMsg("q", "gone"); ok {
		t.Fatal("message past retention at start not removed")
	}
	if h.delivered() != 0 {
		t.Fatal("stored visibleAt not honoured")
	}
	h.advance(time.Minute)
	if b := r.next(t); b.Messages[0].ID != "old" || b.Messages[0].Attempts != 1 {
		t.Fatalf("%+v", b.Messages[0])
	}
}
