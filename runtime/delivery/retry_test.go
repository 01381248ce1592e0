package delivery

import (
	"bytes"
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

func TestMaxRetriesZeroDeadLettersWithNewIdentity(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 4, 3600)
	h.start()
	src := newRecorder(throwing)
	dl := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 0; c.DeadLetterQueueUID = "dlq"; c.RetryDelaySeconds = 1 }), src)
	h.attach(consumerCfg("cd", "dlq", "wd"), dl)
	id := h.send("q", "payload")[0]
	h.advance(0)
	moveTime := t0
	h.waitFinished(1)
	if h.delivered() != 1 {
		t.Fatal("source delivered more than once")
	}
	if h.count("q") != 0 {
		t.Fatal("source still holds the dead-lettered message")
	}
	if got := h.st.removals("q", store.RemovedDeadLettered); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("dead-lettered %v", got)
	}
	// the move is one Apply: the removal and the accept together
	var moveApply []store.Mutation
	for _, g := range h.st.applyLog() {
		for _, m := range g {
			if r, ok := m.(store.RemoveMessages); ok && r.Reason == store.RemovedDeadLettered {
				moveApply = g
			}
		}
	}
	if len(moveApply) != 2 {
		t.Fatalf("move Apply %#v, want RemoveMessages + AcceptMessage in one Apply", moveApply)
	}
	h.quiesce()
	if h.count("dlq") != 1 {
		t.Fatal("DLQ does not hold the moved message")
	}
	h.advance(3999 * time.Millisecond)
	if h.delivered() != 1 {
		t.Fatal("DLQ's deliveryDelaySeconds not applied to the moved message")
	}
	h.advance(time.Millisecond)
	b := dl.next(t)
	m := b.Messages[0]
	if m.ID == id || m.ID == "" {
		t.Fatalf("dead-lettered message kept its ID %q", m.ID)
	}
	if m.Attempts != 1 || string(m.Body) != "payload" || m.TimestampMillis != moveTime.UnixMilli() || b.Queue != "name-dlq" {
		t.Fatalf("DLQ message %+v queue %s", m, b.Queue)
	}
	h.waitFinished(2)
	if h.count("dlq") != 0 {
		t.Fatal("DLQ batch not acknowledged")
	}
}

func TestDeadLetterGetsNewAcceptTime(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 1; c.DeadLetterQueueUID = "dlq"; c.RetryDelaySeconds = 60 }), newRecorder(throwing))
	dl := newRecorder(nil)
	h.attach(consumerCfg("cd", "dlq", "wd"), dl)
	h.send("q", "x")
	h.waitFinished(1)
	h.advance(60 * time.Second)
	m := dl.next(t).Messages[0]
	if m.TimestampMillis != t0.Add(60*time.Second).UnixMilli() || m.Attempts != 1 {
		t.Fatalf("DLQ message %+v: want the move time as accept time and attempts 1", m)
	}
}

func TestDiscardWithoutDeadLetterQueue(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error { return b.Retry(ctx, b.Messages[0].ID, nil) })
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 0 }), r)
	id := h.send("q", "a")[0]
	h.waitFinished(1)
	h.advance(time.Hour)
	if h.delivered() != 1 || h.count("q") != 0 {
		t.Fatalf("delivered %d, count %d", h.delivered(), h.count("q"))
	}
	if got := h.st.removals("q", store.RemovedDiscarded); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("discarded %v", got)
	}
}

func TestDeadLetterStoreFailureMovesNothingAndRetries(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	h.st.setFail(func(muts []store.Mutation) error {
		for _, m := range muts {
			if r, ok := m.(store.RemoveMessages); ok && r.Reason == store.RemovedDeadLettered {
				return errThrow
			}
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 0; c.DeadLetterQueueUID = "dlq" }), newRecorder(throwing))
	id := h.send("q", "a")[0]
	h.waitFinished(1)
	if h.count("q") != 1 || h.count("dlq") != 0 {
		t.Fatal("a failed move moved something")
	}
	h.st.setFail(nil)
	// redelivering it would exceed 1+maxRetries: the engine dead-letters
	// it once the consumer looks again (after the retry delay / backoff)
	h.advance(time.Minute)
	if h.delivered() != 1 {
		t.Fatal("exhausted message delivered again")
	}
	if h.count("q") != 0 || h.count("dlq") != 1 {
		t.Fatal("not moved after the store recovered")
	}
	if got := h.st.removals("q", store.RemovedDeadLettered); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("dead-lettered %v", got)
	}
}

func TestConcurrencyCap(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	var mu sync.Mutex
	cur, peak := 0, 0
	release := make(chan struct{}, 100)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		mu.Lock()
		cur++
		if cur > peak {
			peak = cur
		}
		mu.Unlock()
		<-release
		mu.Lock()
		cur--
		mu.Unlock()
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1; c.MaxConcurrency = 3 }), r)
	for i := 0; i < 10; i++ {
		h.send("q", "m")
	}
	for i := 0; i < 3; i++ {
		r.next(t)
	}
	h.quiesce()
	if h.delivered() != 3 {
		t.Fatalf("%d batches in flight, cap 3", h.delivered())
	}
	for i := 0; i < 10; i++ {
		release <- struct{}{}
	}
	h.waitFinished(10)
	if peak != 3 {
		t.Fatalf("peak concurrency %d, want 3", peak)
	}
}

func TestUpdateConsumerAppliesToNextBatch(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	cfg := consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 2 })
	h.attach(cfg, r)
	h.send("q", "1", "2", "3", "4", "5", "6")
	b1 := r.next(t)
	cfg.MaxBatchSize = 3
	if err := h.e.UpdateConsumer(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	release <- nil
	b2 := r.next(t)
	release <- nil
	h.waitFinished(2)
	if len(b1.Messages) != 2 || len(b2.Messages) != 3 {
		t.Fatalf("batch sizes %d, %d; want 2 then 3", len(b1.Messages), len(b2.Messages))
	}
	cfg.WorkerUID = "other"
	if err := h.e.UpdateConsumer(h.ctx, cfg); err == nil {
		t.Fatal("worker change accepted")
	}
}

func TestResolverFailureDeliversNothingAndRetries(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.res.failN = 2
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	id := h.send("q", "a")[0]
	h.quiesce()
	if m, _ := h.storedMsg("q", id); m.Attempts != 0 || h.delivered() != 0 {
		t.Fatalf("resolution failure counted an attempt: %+v", m)
	}
	h.advance(time.Second) // first backoff
	if m, _ := h.storedMsg("q", id); m.Attempts != 0 || h.delivered() != 0 {
		t.Fatalf("second failure counted: %+v", m)
	}
	h.advance(2 * time.Second) // backoff doubled
	if b := r.next(t); b.Messages[0].Attempts != 1 {
		t.Fatalf("attempts %d, want 1", b.Messages[0].Attempts)
	}
}

func TestDeliveryRecordFailureCountsNothing(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.st.setFail(func(muts []store.Mutation) error {
		if _, ok := muts[0].(store.DeliverMessages); ok {
			return errThrow
		}
		return nil
	})
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.send("q", "a")
	h.quiesce()
	if h.delivered() != 0 {
		t.Fatal("handler ran although the delivery was not recorded")
	}
	h.st.setFail(nil)
	h.advance(time.Second)
	if b := r.next(t); b.Messages[0].Attempts != 1 {
		t.Fatalf("attempts %d", b.Messages[0].Attempts)
	}
}

func TestStableOrderVisibleThenAccepted(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.sendDelay("q", "late", 10)
	h.clk.Advance(time.Second)
	h.sendDelay("q", "early-2", 5)
	h.sendDelay("q", "early-1", 4)
	h.send("q", "now-a", "now-b")
	h.clk.Advance(20 * time.Second)
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	if got := bodies(r.next(t)); !reflect.DeepEqual(got, []string{"now-a", "now-b", "early-1", "early-2", "late"}) {
		t.Fatalf("order %v", got)
	}
}

func TestBodiesAreFreshCopies(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts > 1 {
			return nil
		}
		b.Messages[0].Body[0] = 'X'
		return errThrow
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	body := []byte("abc")
	if _, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: body}}); err != nil {
		t.Fatal(err)
	}
	body[0] = 'Z'
	h.waitFinished(2)
	if got := r.all()[1].Messages[0].Body; !bytes.Equal(got, []byte("abc")) {
		t.Fatalf("redelivered body %q", got)
	}
}
