package delivery

import (
	"testing"
	"time"
)

// TestPausedQueue: while a queue is paused (the inactive-delivery host
// extension) sends are accepted, no batch starts, a running batch finishes
// and settles, and retention keeps removing expired messages; resuming
// delivers what is left at once.
func TestPausedQueue(t *testing.T) {
	h := newHarness(t)
	cfg := QueueConfig{UID: "q", Name: "name-q", MessageRetentionSeconds: 60}
	if err := h.e.AddQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	first := h.send("q", "running")
	b := r.next(t)
	if b.Messages[0].ID != first[0] {
		t.Fatalf("first batch %v", ids(b))
	}

	cfg.Paused = true
	if err := h.e.UpdateQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.send("q", "expires")
	h.advance(30 * time.Second)
	kept := h.send("q", "kept")
	release <- nil // the running batch finishes and acknowledges
	h.waitFinished(1)
	h.advance(time.Second)
	if got := h.delivered(); got != 1 {
		t.Fatalf("a paused queue started a batch: %d delivered", got)
	}
	if n := h.count("q"); n != 2 {
		t.Fatalf("after the running batch acknowledged: %d messages, want 2", n)
	}
	// Retention keeps running while paused: "expires" is 61 s old.
	h.advance(30 * time.Second)
	if n := h.count("q"); n != 1 {
		t.Fatalf("retention while paused: %d messages, want 1", n)
	}
	if h.delivered() != 1 {
		t.Fatal("a paused queue started a batch after retention ran")
	}

	cfg.Paused = false
	if err := h.e.UpdateQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	b2 := r.next(t)
	if len(b2.Messages) != 1 || b2.Messages[0].ID != kept[0] {
		t.Fatalf("after resume: %v, want [%s]", ids(b2), kept[0])
	}
	release <- nil
	h.waitFinished(2)
	if n := h.count("q"); n != 0 {
		t.Fatalf("after resume and acknowledgement: %d messages", n)
	}
}

// TestPausedAtStart: a queue added paused (a restart while paused) delivers
// nothing of its stored messages until it is resumed.
func TestPausedAtStart(t *testing.T) {
	h := newHarness(t)
	cfg := QueueConfig{UID: "q", Name: "name-q", MessageRetentionSeconds: 3600, Paused: true}
	if err := h.e.AddQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.send("q", "a", "b")
	h.advance(time.Minute)
	if h.delivered() != 0 {
		t.Fatal("a queue added paused delivered")
	}
	cfg.Paused = false
	if err := h.e.UpdateQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if b := r.next(t); len(b.Messages) != 2 {
		t.Fatalf("after resume: %v", bodies(b))
	}
}
