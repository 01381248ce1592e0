package storetest

import (
	"fmt"
	"strings"

	"github.com/takoform/queuehost/runtime/store"
)

// testAttemptHistory: a message's attempt history (store.Message.History)
// is durable with it: each RetryMessage with an Attempt appends one,
// trimmed and keeping the newest store.MaxAttempts; an accept carries a
// history (a dead-letter move, a compaction's rewrite) and replaces the
// one a replaced message had; removal and DropQueue drop it; a retry
// without an attempt leaves it as it is.
func testAttemptHistory(e *env) {
	e.apply(msg("q", "m", 1, "poison"), msg("q", "other", 2, "fine"))
	long := strings.Repeat("é", store.MaxErrorMessageByte) // 2 bytes a rune: cut on a rune boundary
	var stack strings.Builder
	stack.WriteString("Error: boom")
	for i := range 20 {
		fmt.Fprintf(&stack, "\n    at f%d (main.js:%d:3)", i, i+1)
	}
	for i := 1; i <= store.MaxAttempts+2; i++ {
		e.apply(store.DeliverMessages{Queue: "q", Batch: fmt.Sprintf("b%d", i), IDs: []string{"m"}})
		e.apply(store.RetryMessage{Queue: "q", ID: "m", VisibleAt: int64(100 * i), Attempt: &store.Attempt{
			Attempt: i, StartedAt: int64(1000 * i), DurationMs: int64(i), Host: "host-a", WorkerVersion: "v1",
			Outcome: store.OutcomeThrown, DelaySeconds: 3, ErrorName: "Error", ErrorMessage: long, ErrorStack: stack.String()}})
	}
	// A retry without an attempt (a restart's release) adds nothing.
	e.apply(store.RetryMessage{Queue: "q", ID: "m", VisibleAt: 5})
	e.reopen(func() {
		m, err := e.s.Message(e.ctx, "q", "m")
		if err != nil {
			e.Fatal(err)
		}
		if len(m.History) != store.MaxAttempts {
			e.Fatalf("history of %d attempts, want the newest %d: %#v", len(m.History), store.MaxAttempts, m.History)
		}
		for i, a := range m.History {
			n := i + 3 // the first two were dropped
			if a.Attempt != n || a.StartedAt != int64(1000*n) || a.DurationMs != int64(n) || a.Host != "host-a" ||
				a.WorkerVersion != "v1" || a.Outcome != store.OutcomeThrown || a.DelaySeconds != 3 || a.ErrorName != "Error" {
				e.Fatalf("attempt %d = %#v", i, a)
			}
			if len(a.ErrorMessage) > store.MaxErrorMessageByte || !strings.HasPrefix(long, a.ErrorMessage) || len(a.ErrorMessage) < store.MaxErrorMessageByte-1 {
				e.Fatalf("error message of %d bytes not trimmed on a rune boundary to %d", len(a.ErrorMessage), store.MaxErrorMessageByte)
			}
			if lines := strings.Count(a.ErrorStack, "\n") + 1; lines != store.MaxErrorStackFrames+1 || !strings.HasPrefix(stack.String(), a.ErrorStack) {
				e.Fatalf("stack of %d lines, want the error line and %d frames:\n%s", lines, store.MaxErrorStackFrames, a.ErrorStack)
			}
		}
		if o, _ := e.s.Message(e.ctx, "q", "other"); o.History != nil {
			e.Fatalf("a message never retried has a history: %#v", o.History)
		}
		// A read returns a copy.
		m.History[0].ErrorName = "changed by a reader"
		if again, _ := e.s.Message(e.ctx, "q", "m"); again.History[0].ErrorName != "Error" {
			e.Fatal("a reader changed the stored history")
		}
		all, err := e.s.Messages(e.ctx, "q")
		if err != nil || len(all) != 2 || len(all[0].History) != store.MaxAttempts {
			e.Fatalf("Messages(q) = %#v, %v", all, err)
		}
	})
	// The move into a dead-letter queue carries the history (one Apply).
	m, _ := e.s.Message(e.ctx, "q", "m")
	moved := msg("dlq", "d", 9, "poison")
	moved.Message.DeadLetter = &store.DeadLetter{SourceQueue: "q", Reason: store.ReasonRetriesExhausted, Attempts: 7, OriginalID: "m"}
	moved.Message.History = m.History
	e.apply(moved, store.RemoveMessages{Queue: "q", IDs: []string{"m"}, Reason: store.RemovedDeadLettered})
	sent := msg("dlq", "plain", 10, "x")
	sent.Message.History = []store.Attempt{{Attempt: 1, Outcome: store.OutcomeTimeLimit, DurationMs: 30000}}
	e.apply(sent)
	e.reopen(func() {
		d, err := e.s.Message(e.ctx, "dlq", "d")
		if err != nil || d.DeadLetter == nil || d.DeadLetter.OriginalID != "m" {
			e.Fatalf("Message(dlq, d) = %#v, %v", d, err)
		}
		same(e.T, "moved history", d.History, m.History)
		p, _ := e.s.Message(e.ctx, "dlq", "plain")
		same(e.T, "history without dead-letter metadata", p.History, []store.Attempt{{Attempt: 1, Outcome: store.OutcomeTimeLimit, DurationMs: 30000}})
		if _, err := e.s.Message(e.ctx, "q", "m"); err == nil {
			e.Fatal("the source message is still there")
		}
	})
	// Replacing without a history drops it; removing and accepting the
	// same ID again does not bring it back; DropQueue drops it.
	e.apply(msg("dlq", "plain", 10, "x"))
	e.apply(store.RemoveMessages{Queue: "dlq", IDs: []string{"d"}, Reason: store.RemovedRedriven})
	e.apply(msg("dlq", "d", 11, "again"))
	noHistory := func(ids ...string) {
		for _, id := range ids {
			if m, err := e.s.Message(e.ctx, "dlq", id); err != nil || m.History != nil {
				e.Fatalf("Message(dlq, %s) = %#v, %v; want no history", id, m, err)
			}
		}
	}
	e.reopen(func() { noHistory("d", "plain") })
	e.apply(sent)
	e.apply(store.DropQueue{Queue: "dlq"})
	e.apply(msg("dlq", "plain", 12, "after the drop"))
	e.reopen(func() { noHistory("plain") })
}
