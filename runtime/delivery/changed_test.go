package delivery

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

// TestChangedQueuesListsEachChangeOnce: ChangedQueues lists a queue once
// after its message count or its existence changed, and nothing for a
// queue nothing happened to (what the controller's observer relies on to
// skip idle queues).
func TestChangedQueuesListsEachChangeOnce(t *testing.T) {
	h := newHarness(t)
	h.addQueue("a", 0, 3600)
	h.addQueue("b", 0, 3600)
	h.addQueue("idle", 0, 3600)
	h.start()
	got := h.e.ChangedQueues()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b", "idle"}) {
		t.Fatalf("after adding: %v", got)
	}
	if got := h.e.ChangedQueues(); len(got) != 0 {
		t.Fatalf("nothing happened, listed %v", got)
	}
	h.send("a", "1", "2", "3")
	h.send("a", "4")
	if got := h.e.ChangedQueues(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after sends to a: %v", got)
	}
	// A delayed message becoming visible changes no count.
	h.sendDelay("b", "later", 30)
	if got := h.e.ChangedQueues(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after a delayed send to b: %v", got)
	}
	h.advance(31 * time.Second)
	if got := h.e.ChangedQueues(); len(got) != 0 {
		t.Fatalf("a message became visible, listed %v", got)
	}
	// Acknowledged messages leave the count: listed again.
	r := newRecorder(func(context.Context, *abi.Batch) error { return nil })
	h.attach(consumerCfg("c", "a", "w"), r)
	h.waitUntil("a drained", func() bool { return h.count("a") == 0 })
	if got := h.e.ChangedQueues(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after a drained: %v", got)
	}
	if err := h.e.RemoveQueue(h.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got := h.e.ChangedQueues(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after removing b: %v", got)
	}
	if got := h.e.ChangedQueues(); len(got) != 0 {
		t.Fatalf("listed %v twice", got)
	}
}
