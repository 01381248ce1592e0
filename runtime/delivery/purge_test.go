package delivery

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// A purge removes every waiting message in one Apply with the caller's
// mutations; later sends are delivered as usual.
func TestPurgeRemovesEveryMessageInOneApply(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.send("q", "a", "b", "c")
	h.sendDelay("q", "later", 600)
	marker := store.PutOperation{Operation: store.Operation{ID: "op-purge", State: store.OpSucceeded, Effect: store.EffectApplied}}
	n, err := h.e.Purge(h.ctx, "q", func(removed int) []store.Mutation {
		if removed != 4 {
			t.Errorf("extra told %d removed, want 4", removed)
		}
		return []store.Mutation{marker}
	})
	if err != nil || n != 4 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if h.count("q") != 0 {
		t.Fatal("messages left after the purge")
	}
	log := h.st.applyLog()
	last := log[len(log)-1]
	if len(last) != 2 || last[0] != (store.DropQueue{Queue: "q"}) || last[1].(store.PutOperation).Operation.ID != "op-purge" {
		t.Fatalf("the purge's Apply was %#v, want DropQueue and the caller's mutation", last)
	}
	// Nothing purged is delivered; a message sent afterwards is.
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.advance(time.Hour)
	if h.delivered() != 0 {
		t.Fatal("a purged message was delivered")
	}
	h.send("q", "after")
	h.advance(0)
	if b := r.next(t); len(b.Messages) != 1 || string(b.Messages[0].Body) != "after" {
		t.Fatalf("delivered %v after the purge", bodies(b))
	}
	// A failed write purges nothing.
	h.st.setFail(func(muts []store.Mutation) error {
		if _, ok := muts[0].(store.DropQueue); ok {
			return errors.New("disk on fire")
		}
		return nil
	})
	h.sendDelay("q", "kept", 600)
	if _, err := h.e.Purge(h.ctx, "q", nil); !errors.Is(err, abi.ErrBackendUnavailable) {
		t.Fatalf("Purge with a failing store: %v", err)
	}
	h.st.setFail(nil)
	h.waitFinished(1)
	if h.count("q") != 1 {
		t.Fatalf("a failed purge changed the queue: %d messages", h.count("q"))
	}
	if _, err := h.e.Purge(h.ctx, "nope", nil); !errors.Is(err, abi.ErrUnknownQueue) {
		t.Fatalf("Purge of an unknown queue: %v", err)
	}
}

// A message held by a running batch is not acknowledged by a purge: the
// handler still holds it, its settlement resolves as for a message removed
// while in flight, and it is never delivered again.
func TestPurgeLeavesInFlightSettlementsToTheirBatch(t *testing.T) {
	for _, kind := range []abi.SettleKind{abi.Acknowledge, abi.Retry} {
		t.Run(fmt.Sprint(kind), func(t *testing.T) {
			h := newHarness(t)
			h.addQueue("q", 0, 3600)
			h.start()
			got := make(chan *abi.Batch, 1)
			release := make(chan struct{})
			h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), newRecorder(func(ctx context.Context, b *abi.Batch) error {
				got <- b
				<-release
				return nil
			}))
			h.send("q", "held")
			h.advance(0)
			b := <-got
			h.send("q", "waiting")
			n, err := h.e.Purge(h.ctx, "q", nil)
			if err != nil || n != 2 {
				t.Fatalf("Purge = %d, %v", n, err)
			}
			if sn, _ := h.st.MessageCount(h.ctx, "q"); sn != 0 {
				t.Fatalf("the store holds %d after the purge", sn)
			}
			if err := h.e.Settle(h.ctx, b.ID, abi.Settlement{Kind: kind, MessageID: b.Messages[0].ID}); err != nil {
				t.Fatalf("settling a purged in-flight message: %v", err)
			}
			close(release)
			h.waitFinished(1)
			h.advance(time.Hour)
			if h.delivered() != 1 {
				t.Fatalf("%d deliveries: a purged message came back", h.delivered())
			}
			if h.count("q") != 0 {
				t.Fatal("the queue still counts a purged message")
			}
		})
	}
}

// A redrive step moves the oldest message back to the queue it was
// dead-lettered from, as a new message, in one Apply with the caller's
// progress; a message with no known source is skipped; messages accepted
// after the limit are left.
func TestMoveNextRedrivesToTheSource(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 0; c.DeadLetterQueueUID = "dlq" }), newRecorder(throwing))
	h.send("q", "d1", "d2")
	h.advance(0)
	h.waitFinished(1)
	h.send("dlq", "direct")
	if h.count("dlq") != 3 {
		t.Fatalf("dlq holds %d", h.count("dlq"))
	}
	by := h.e.nowMs()
	h.advance(time.Second)
	late := h.send("dlq", "late")[0]
	if err := h.e.Detach(h.ctx, "c"); err != nil {
		t.Fatal(err)
	}
	req := MoveRequest{From: "dlq", AcceptedBy: by,
		Target: func(dl *store.DeadLetter) string {
			if dl == nil {
				return ""
			}
			return dl.SourceQueue
		},
	}
	steps := 0
	var moved []string
	for {
		req.Extra = func(newID, target string) []store.Mutation {
			return []store.Mutation{store.PutOperation{Operation: store.Operation{ID: "op", State: store.OpRunning, Effect: store.EffectPartial,
				Progress: []byte(fmt.Sprintf(`{"moved":%d}`, len(moved)+1))}}}
		}
		res, err := h.e.MoveNext(h.ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome == MoveDone {
			break
		}
		if steps++; steps > 10 {
			t.Fatal("the redrive does not end")
		}
		if res.ID == late {
			t.Fatal("a message accepted after the limit was considered")
		}
		req.After = res.Next
		switch res.Outcome {
		case Moved:
			if res.Target != "q" || res.NewID == "" || res.NewID == res.ID {
				t.Fatalf("moved %+v", res)
			}
			moved = append(moved, res.NewID)
			log := h.st.applyLog()
			last := log[len(log)-1]
			if len(last) != 3 {
				t.Fatalf("a move's Apply: %#v, want accept, removal and progress together", last)
			}
			if a, ok := last[0].(store.AcceptMessage); !ok || a.Message.Queue != "q" || a.Message.ID != res.NewID || a.Message.DeadLetter != nil || a.Message.Attempts != 0 {
				t.Fatalf("a move's accept: %#v", last[0])
			}
			if r, ok := last[1].(store.RemoveMessages); !ok || r.Queue != "dlq" || r.IDs[0] != res.ID || r.Reason != store.RemovedRedriven {
				t.Fatalf("a move's removal: %#v", last[1])
			}
		case MoveSkipped:
			if b, _ := store.Body(h.ctx, h.st, "dlq", res.ID); string(b) != "direct" {
				t.Fatalf("skipped %s (%q): %s", res.ID, b, res.Why)
			}
		}
	}
	if len(moved) != 2 || h.count("q") != 2 || h.count("dlq") != 2 {
		t.Fatalf("moved %d; q holds %d, dlq %d", len(moved), h.count("q"), h.count("dlq"))
	}
	// The moved messages are delivered from q as new messages.
	r := newRecorder(nil)
	h.attach(consumerCfg("c2", "q", "w2"), r)
	h.advance(0)
	b := r.next(t)
	if len(b.Messages) != 2 || b.Messages[0].Attempts != 1 {
		t.Fatalf("redriven delivery %+v", b.Messages)
	}
	if _, err := h.e.MoveNext(h.ctx, MoveRequest{From: "dlq", AcceptedBy: h.e.nowMs(), Target: func(*store.DeadLetter) string { return "dlq" }}); !errors.Is(err, ErrMoveToSelf) {
		t.Fatalf("a move to the same queue: %v", err)
	}
	if _, err := h.e.MoveNext(h.ctx, MoveRequest{From: "dlq", AcceptedBy: h.e.nowMs(), Target: func(*store.DeadLetter) string { return "gone" }}); !errors.Is(err, ErrUnknownTarget) {
		t.Fatalf("a move to an unknown queue: %v", err)
	}
	if h.count("dlq") != 2 {
		t.Fatal("a refused move changed the dead-letter queue")
	}
}

// A move whose write fails leaves the message where it was, deliverable:
// never in both queues, never in neither.
func TestMoveNextFailedWriteKeepsTheMessage(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	id := h.send("dlq", "only")[0]
	h.st.setFail(func(muts []store.Mutation) error {
		for _, m := range muts {
			if r, ok := m.(store.RemoveMessages); ok && r.Reason == store.RemovedRedriven {
				return errors.New("fsync failed")
			}
		}
		return nil
	})
	req := MoveRequest{From: "dlq", AcceptedBy: h.e.nowMs(), Target: func(*store.DeadLetter) string { return "q" }}
	if _, err := h.e.MoveNext(h.ctx, req); !errors.Is(err, abi.ErrBackendUnavailable) {
		t.Fatalf("a move with a failing store: %v", err)
	}
	if h.count("q") != 0 || h.count("dlq") != 1 {
		t.Fatalf("after a failed move q holds %d, dlq %d", h.count("q"), h.count("dlq"))
	}
	if page, _, _, _ := h.e.MessagePage(h.ctx, "dlq", Cursor{}, 10); len(page) != 1 || page[0].ID != id || page[0].State != MsgAvailable {
		t.Fatalf("after a failed move the message reads %+v", page)
	}
	h.st.setFail(nil)
	res, err := h.e.MoveNext(h.ctx, req)
	if err != nil || res.Outcome != Moved {
		t.Fatalf("the move again: %+v, %v", res, err)
	}
	if h.count("q") != 1 || h.count("dlq") != 0 {
		t.Fatalf("after the move q holds %d, dlq %d", h.count("q"), h.count("dlq"))
	}
}

// Messages redriven into a serialized queue take their places in its
// accept order when they move, before and after a restart.
func TestMoveNextIntoASerializedQueueKeepsAcceptOrder(t *testing.T) {
	h := newHarness(t)
	h.addSerial("s", 0, 3600)
	h.addQueue("d", 0, 3600)
	h.start()
	h.send("s", "s00")
	h.send("d", nums("d", 5)...)
	req := MoveRequest{From: "d", AcceptedBy: h.e.nowMs(), Target: func(*store.DeadLetter) string { return "s" }}
	for {
		res, err := h.e.MoveNext(h.ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome == MoveDone {
			break
		}
		req.After = res.Next
	}
	h.send("s", "s99")
	want := []string{"s00", "d00", "d01", "d02", "d03", "d04", "s99"}
	check := func(when string) {
		t.Helper()
		page, _, _, err := h.e.MessagePage(h.ctx, "s", Cursor{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range page {
			b, _ := store.Body(h.ctx, h.st, "s", m.ID)
			got = append(got, string(b))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the serialized queue lists %v, want %v", when, got, want)
		}
	}
	check("after the moves")
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	h.e.Stop(stop)
	h.e = h.newEngine()
	h.addSerial("s", 0, 3600)
	h.addQueue("d", 0, 3600)
	h.start()
	check("after a restart")
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "s", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 10 }), r)
	h.advance(0)
	if b := r.next(t); !reflect.DeepEqual(bodies(b), want) {
		t.Fatalf("delivered %v, want %v", bodies(b), want)
	}
}
