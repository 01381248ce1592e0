package delivery

import (
	"context"
	"reflect"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// A dead-letter move records where the message came from and why, durably
// with the new message; the listing shows it, also after a restart; the
// handler of the dead-letter queue sees only the Form's fields.
func TestDeadLetterMetadata(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) {
		c.Name = "tasks-consumer"
		c.MaxRetries = 1
		c.DeadLetterQueueUID = "dlq"
	}), newRecorder(throwing))
	orig := h.send("q", "payload")[0]
	h.advance(0)
	h.waitFinished(2)
	if h.count("q") != 0 || h.count("dlq") != 1 {
		t.Fatalf("q holds %d, dlq %d", h.count("q"), h.count("dlq"))
	}
	want := &store.DeadLetter{SourceQueue: "q", SourceQueueName: "name-q", Consumer: "c", ConsumerName: "tasks-consumer",
		Reason: store.ReasonRetriesExhausted, Attempts: 2, OriginalID: orig, DeadLetteredAt: t0.UnixMilli()}
	var direct string
	check := func(when string) string {
		t.Helper()
		page, _, more, err := h.e.MessagePage(h.ctx, "dlq", Cursor{}, 10)
		if err != nil || more {
			t.Fatalf("%s: page %+v, %v, %v", when, page, more, err)
		}
		var dead []MessageInfo
		for _, m := range page {
			if m.ID != direct {
				dead = append(dead, m)
			}
		}
		if len(dead) != 1 || !reflect.DeepEqual(dead[0].DeadLetter, want) {
			t.Fatalf("%s: listed %+v, want one with metadata %+v", when, dead, want)
		}
		sm, ok := h.storedMsg("dlq", dead[0].ID)
		if !ok || !reflect.DeepEqual(sm.DeadLetter, want) {
			t.Fatalf("%s: stored %+v", when, sm)
		}
		return dead[0].ID
	}
	id := check("after the move")
	// A message sent to the DLQ directly has none.
	direct = h.send("dlq", "direct")[0]
	if page, _, _, _ := h.e.MessagePage(h.ctx, "dlq", Cursor{}, 10); len(page) != 2 || page[1].ID != direct || page[1].DeadLetter != nil {
		t.Fatalf("directly sent message listed as %+v", page)
	}

	// Restart on the same store: the metadata is loaded with the message.
	stopCtx, cancel := context.WithCancel(context.Background())
	cancel()
	h.e.Stop(stopCtx)
	h.e = h.newEngine()
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	h.quiesce()
	if got := check("after a restart"); got != id {
		t.Fatalf("the dead-lettered message changed ID across a restart: %s, was %s", got, id)
	}

	// The DLQ's handler receives the Form's fields only.
	dl := newRecorder(nil)
	h.attach(consumerCfg("cd", "dlq", "wd"), dl)
	b := dl.next(t)
	for _, m := range b.Messages {
		if m.ID == orig {
			t.Fatal("the dead-lettered message kept its source ID")
		}
	}
	if n := reflect.TypeOf(abi.Message{}).NumField(); n != 4 {
		t.Fatalf("abi.Message has %d fields: a new one must not carry dead-letter metadata to a worker", n)
	}
}
