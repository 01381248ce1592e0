package delivery

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

// walkByState counts a queue's messages by state by walking its expiry
// index: what Inspect did before it kept counts. mu held.
func walkByState(q *queue, now int64) map[string]int {
	by := map[string]int{MsgAvailable: 0, MsgDelayed: 0, MsgRetryWaiting: 0, MsgInFlight: 0, MsgRemoving: 0}
	counted := 0
	visit := func(en entry) {
		if q.expiry.isLive(en) {
			by[stateOf(en.m, now)]++
			counted++
		}
	}
	for i := range q.expiry.run.Len() {
		visit(*q.expiry.run.At(i))
	}
	for _, en := range q.expiry.heap {
		visit(en)
	}
	by[MsgRemoving] += q.held - counted
	return by
}

// TestInspectCountsMatchAWalk: after random sequences of sends (with and
// without delay), deliveries, acknowledgements, retries (with delays),
// dead-lettering, discards, expiry, purges and pauses, on a plain and on a
// serialized queue, the counts Inspect keeps equal a full walk of the
// queue, checked under the queue's lock after every step.
func TestInspectCountsMatchAWalk(t *testing.T) {
	for _, serial := range []bool{false, true} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("serial=%v/seed=%d", serial, seed), func(t *testing.T) { inspectCountsMatch(t, serial, seed) })
		}
	}
}

func inspectCountsMatch(t *testing.T, serial bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 41))
	var rmu sync.Mutex
	intn := func(n int) int { rmu.Lock(); defer rmu.Unlock(); return rng.IntN(n) }
	h := newHarness(t)
	cfg := QueueConfig{UID: "q", Name: "q", MessageRetentionSeconds: 600, Serialized: serial}
	if err := h.e.AddQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.addQueue("dlq", 0, 3600)
	h.start()
	// Each message is acknowledged, retried (with or without a delay),
	// left to the batch's outcome, or its batch throws.
	handler := func(ctx context.Context, b *abi.Batch) error {
		if intn(6) == 0 {
			return errThrow
		}
		for _, m := range b.Messages {
			switch intn(4) {
			case 0:
				b.Acknowledge(ctx, m.ID)
			case 1:
				b.Retry(ctx, m.ID, intp(intn(3)*30))
			case 2:
				b.Retry(ctx, m.ID, nil)
			}
		}
		return nil
	}
	dlq := "dlq"
	if seed%2 == 1 {
		dlq = "" // discard after the last retry
	}
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) {
		c.MaxBatchSize, c.MaxConcurrency, c.MaxRetries, c.RetryDelaySeconds, c.DeadLetterQueueUID = 4, 3, 2, 10, dlq
	}), newRecorder(handler))
	q := h.e.queue("q")
	check := func(step int, op string) {
		t.Helper()
		q.mu.Lock()
		now := h.e.nowMs()
		want := walkByState(q, now)
		got := q.countByState(now)
		q.mu.Unlock()
		if !maps.Equal(got, want) {
			t.Fatalf("step %d (%s): kept counts %v, a walk counts %v", step, op, got, want)
		}
	}
	paused := false
	for step := range 300 {
		var op string
		switch r := intn(20); {
		case r < 8:
			n := 1 + intn(5)
			msgs := make([]abi.OutgoingMessage, n)
			for i := range msgs {
				msgs[i].Body = []byte("b")
				if intn(3) == 0 {
					msgs[i].Delay = intp(intn(4) * 40)
				}
			}
			if _, err := h.e.Send(h.ctx, "q", msgs); err != nil {
				t.Fatal(err)
			}
			op = fmt.Sprintf("send %d", n)
		case r < 15:
			d := time.Duration(intn(90)) * time.Second
			h.clk.Advance(d)
			op = fmt.Sprintf("advance %v", d)
		case r < 16:
			if _, err := h.e.Purge(h.ctx, "q", nil); err != nil {
				t.Fatal(err)
			}
			op = "purge"
		case r < 18:
			paused = !paused
			cfg.Paused = paused
			if err := h.e.UpdateQueue(h.ctx, cfg); err != nil {
				t.Fatal(err)
			}
			op = fmt.Sprintf("paused=%v", paused)
		default:
			// Check while batches may be running.
			op = "look"
		}
		if op != "look" {
			h.quiesce()
		}
		check(step, op)
	}
	if in, err := h.e.Inspect(h.ctx, "q"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("final: %v (%d messages)", in.ByState, in.Messages)
	}
}
