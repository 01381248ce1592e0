package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/forensics"
	"github.com/takoform/queuehost/runtime/store"
)

// scriptErr is a handler error as the JavaScript runtime reports a throw.
type scriptErr struct{ name, msg, stack string }

func (e scriptErr) Error() string                         { return e.name + ": " + e.msg }
func (e scriptErr) Script() (name, message, stack string) { return e.name, e.msg, e.stack }

type endedErr struct{}

func (endedErr) Error() string      { return "the worker's sandbox ended: it exceeded its memory cap" }
func (endedErr) SandboxEnded() bool { return true }

// A poison message's attempts are recorded as they end: an explicit retry
// with its delay, a throw with the error's name, message and stack, the
// end of a sandbox, the time limit, each with its start, duration, host and
// worker version; the newest store.MaxAttempts are carried into the
// dead-letter queue with the move, and the source queue counts them by
// outcome and the dead letter by cause.
func TestAttemptHistory(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.HostID = "host-1"; o.HandlerTimeout = time.Minute })
	h.addQueue("q", 0, 86400)
	h.addQueue("dlq", 0, 86400)
	h.start()
	stack := "TypeError: order 7 has no customer\n    at charge (main.js:10:5)\n    at queue (main.js:3:9)"
	n := 0
	handler := abi.HandlerFunc(func(ctx context.Context, b *abi.Batch) error {
		n++
		h.clk.Advance(250 * time.Millisecond) // the handler runs a while
		switch n {
		case 1:
			return b.RetryAll(ctx, intp(7))
		case 2:
			return endedErr{}
		case 3:
			<-ctx.Done() // past the time limit
			return ctx.Err()
		default:
			return scriptErr{"TypeError", fmt.Sprintf("order %d has no customer", n), stack}
		}
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) {
		c.MaxRetries = 6
		c.RetryDelaySeconds = 2
		c.DeadLetterQueueUID = "dlq"
	}), abi.Versioned(handler, "version-9"))
	orig := h.send("q", "poison")[0]
	h.waitFinished(1)
	sm, _ := h.storedMsg("q", orig)
	if len(sm.History) != 1 || sm.History[0].Outcome != store.OutcomeRetried || sm.History[0].DelaySeconds != 7 ||
		sm.History[0].Attempt != 1 || sm.History[0].Host != "host-1" || sm.History[0].WorkerVersion != "version-9" ||
		sm.History[0].StartedAt != t0.UnixMilli() || sm.History[0].DurationMs != 250 {
		t.Fatalf("after an explicit retry: %+v", sm.History)
	}
	h.advance(7 * time.Second)
	h.waitFinished(2)
	h.advance(2 * time.Second) // the third delivery: held until the time limit
	h.waitUntil("the third delivery", func() bool { return n == 3 })
	h.advance(time.Minute)
	h.waitFinished(3)
	for i := 4; i <= 7; i++ {
		h.advance(2 * time.Second)
		h.waitFinished(int64(i))
	}
	if h.count("q") != 0 || h.count("dlq") != 1 {
		t.Fatalf("q holds %d, dlq %d", h.count("q"), h.count("dlq"))
	}
	page, _, _, _ := h.e.MessagePage(h.ctx, "dlq", Cursor{}, 10)
	dm, _ := h.storedMsg("dlq", page[0].ID)
	hist := dm.History
	if len(hist) != store.MaxAttempts {
		t.Fatalf("dead letter carries %d attempts, want the newest %d: %+v", len(hist), store.MaxAttempts, hist)
	}
	want := []struct {
		attempt int
		outcome string
	}{{3, store.OutcomeTimeLimit}, {4, store.OutcomeThrown}, {5, store.OutcomeThrown}, {6, store.OutcomeThrown}, {7, store.OutcomeThrown}}
	for i, w := range want {
		a := hist[i]
		if a.Attempt != w.attempt || a.Outcome != w.outcome || a.Host != "host-1" || a.WorkerVersion != "version-9" || a.DelaySeconds != 2 {
			t.Errorf("attempt %d: %+v, want attempt %d %s", i, a, w.attempt, w.outcome)
		}
	}
	if a := hist[0]; a.DurationMs < 60000 {
		t.Errorf("the time limit's attempt lasted %d ms", a.DurationMs)
	}
	last := hist[4]
	if last.ErrorName != "TypeError" || last.ErrorMessage != "order 7 has no customer" || last.ErrorStack != stack || last.DurationMs != 250 {
		t.Errorf("last attempt %+v", last)
	}
	// The second attempt (sandbox ended) was dropped from the moved
	// history, but was recorded while the message was retried.
	c := h.e.Counters()
	var qc QueueCounters
	for _, x := range c {
		if x.UID == "q" {
			qc = x
		}
	}
	wantOut := map[string]uint64{store.OutcomeAcknowledged: 0, store.OutcomeRetried: 1, store.OutcomeSandboxEnded: 1, store.OutcomeTimeLimit: 1, store.OutcomeThrown: 4}
	if fmt.Sprint(qc.Outcomes) != fmt.Sprint(wantOut) {
		t.Errorf("outcomes %v, want %v", qc.Outcomes, wantOut)
	}
	if len(qc.DeadLetteredBy) != 1 || qc.DeadLetteredBy[0].Count != 1 || qc.DeadLetteredBy[0].ErrorName != "TypeError" ||
		qc.DeadLetteredBy[0].Fingerprint != forensics.Fingerprint(hist) {
		t.Errorf("dead letters by cause %+v", qc.DeadLetteredBy)
	}
}

// A handler error that wraps the end of its sandbox is recorded as such.
func TestAttemptSandboxEnded(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 86400)
	h.start()
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 60 }),
		abi.HandlerFunc(func(context.Context, *abi.Batch) error { return fmt.Errorf("invocation: %w", endedErr{}) }))
	id := h.send("q", "x")[0]
	h.waitFinished(1)
	sm, _ := h.storedMsg("q", id)
	if len(sm.History) != 1 || sm.History[0].Outcome != store.OutcomeSandboxEnded || sm.History[0].ErrorMessage != "invocation: the worker's sandbox ended: it exceeded its memory cap" {
		t.Fatalf("history %+v", sm.History)
	}
}
