package delivery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

func pullCfg(uid, queue string, mod ...func(*ConsumerConfig)) ConsumerConfig {
	c := ConsumerConfig{UID: uid, QueueUID: queue, Pull: true, MaxBatchSize: 1, MaxConcurrency: 1, MaxRetries: 2}
	for _, f := range mod {
		f(&c)
	}
	return c
}

func (h *harness) pullSetup(mod ...func(*ConsumerConfig)) {
	h.t.Helper()
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	if err := h.e.Attach(h.ctx, pullCfg("pc", "q", mod...)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) lease(max int, vis time.Duration) PullLease {
	h.t.Helper()
	l, err := h.e.Lease(h.ctx, "pc", max, vis, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// A lease hides its messages until it expires; expired, they are leased
// again with the attempt counted; after 1 + maxRetries deliveries the
// message is dead-lettered under a new ID.
func TestPullLeaseExpiresAndDeadLetters(t *testing.T) {
	h := newHarness(t)
	h.pullSetup(func(c *ConsumerConfig) { c.MaxRetries, c.DeadLetterQueueUID = 1, "dlq" })
	sent := h.send("q", "a", "b")
	l := h.lease(10, 30*time.Second)
	if len(l.Messages) != 2 || l.Messages[0].Attempts != 1 || l.ExpiresAt != t0.UnixMilli()+30000 {
		t.Fatalf("first lease = %+v", l)
	}
	if again := h.lease(10, 30*time.Second); len(again.Messages) != 0 {
		t.Fatalf("a second lease took leased messages: %+v", again)
	}
	h.advance(29 * time.Second)
	if again := h.lease(10, 30*time.Second); len(again.Messages) != 0 {
		t.Fatalf("leased before the visibility timeout ended: %+v", again)
	}
	h.advance(time.Second)
	l2 := h.lease(10, 30*time.Second)
	if len(l2.Messages) != 2 || l2.Messages[0].Attempts != 2 || l2.ID == l.ID {
		t.Fatalf("after expiry: %+v", l2)
	}
	if err := h.e.SettleLease(h.ctx, "pc", l.ID, sent[:1], nil); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("settling the expired lease: %v", err)
	}
	h.advance(30 * time.Second)
	if n, _ := h.e.QueueStats(h.ctx, "q"); n != 0 {
		t.Fatalf("q holds %d after the last delivery expired", n)
	}
	if n, _ := h.e.QueueStats(h.ctx, "dlq"); n != 2 {
		t.Fatalf("dlq holds %d", n)
	}
	ms, _ := h.st.Messages(h.ctx, "dlq")
	for _, m := range ms {
		if m.ID == sent[0] || m.ID == sent[1] {
			t.Fatalf("dead-lettered message kept its ID %s", m.ID)
		}
	}
}

// Acknowledge and retry settle per message in one write; a message is
// settled at most once; bad settlements change nothing.
func TestPullSettle(t *testing.T) {
	h := newHarness(t)
	h.pullSetup(func(c *ConsumerConfig) { c.RetryDelaySeconds = 5 })
	sent := h.send("q", "a", "b", "c")
	l := h.lease(10, time.Minute)
	zero := 0
	for _, tc := range []struct {
		acks    []string
		retries []PullRetry
		want    error
	}{
		{[]string{"nope"}, nil, abi.ErrUnknownMessage},
		{[]string{sent[0]}, []PullRetry{{ID: sent[0]}}, ErrDuplicateMessage},
		{nil, []PullRetry{{ID: sent[1], Delay: new(int(-1))}}, abi.ErrInvalidDelay},
	} {
		if err := h.e.SettleLease(h.ctx, "pc", l.ID, tc.acks, tc.retries); !errors.Is(err, tc.want) {
			t.Fatalf("SettleLease(%v, %v) = %v, want %v", tc.acks, tc.retries, err, tc.want)
		}
	}
	if n, _ := h.e.QueueStats(h.ctx, "q"); n != 3 {
		t.Fatalf("a refused settlement changed the queue: %d held", n)
	}
	if err := h.e.SettleLease(h.ctx, "pc", l.ID, []string{sent[0]}, []PullRetry{{ID: sent[1], Delay: &zero}}); err != nil {
		t.Fatal(err)
	}
	if err := h.e.SettleLease(h.ctx, "pc", l.ID, []string{sent[0]}, nil); !errors.Is(err, abi.ErrAlreadySettled) {
		t.Fatalf("second ack: %v", err)
	}
	l2 := h.lease(10, time.Minute)
	if len(l2.Messages) != 1 || l2.Messages[0].ID != sent[1] || l2.Messages[0].Attempts != 2 {
		t.Fatalf("retry with delay 0 not leased again at once: %+v", l2)
	}
	// the last message of the first lease: retried with the consumer's
	// delay (5 s); the lease is then fully settled.
	if err := h.e.SettleLease(h.ctx, "pc", l.ID, nil, []PullRetry{{ID: sent[2]}}); err != nil {
		t.Fatal(err)
	}
	h.quiesce()
	if err := h.e.SettleLease(h.ctx, "pc", l.ID, []string{sent[2]}, nil); !errors.Is(err, ErrLeaseSettled) {
		t.Fatalf("settling a settled lease: %v", err)
	}
	if l3 := h.lease(10, time.Minute); len(l3.Messages) != 0 {
		t.Fatalf("retried before retryDelaySeconds: %+v", l3)
	}
	h.advance(5 * time.Second)
	if l3 := h.lease(10, time.Minute); len(l3.Messages) != 1 || l3.Messages[0].ID != sent[2] {
		t.Fatalf("after retryDelaySeconds: %+v", l3)
	}
	if err := h.e.SettleLease(h.ctx, "pc", "pl_never", nil, nil); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("unknown lease: %v", err)
	}
	if err := h.e.SettleLease(h.ctx, "pc", leaseTag("pc")+"0123", nil, nil); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("unknown lease with the consumer's tag: %v", err)
	}
	if err := h.e.SettleLease(h.ctx, "other", l.ID, nil, nil); !errors.Is(err, ErrUnknownConsumer) {
		t.Fatalf("settling through an unknown consumer: %v", err)
	}
	// Another pull consumer is told the lease is not its own, from the
	// lease ID alone (so any host of a cluster tells it alike).
	if err := h.e.Attach(h.ctx, pullCfg("pc2", "dlq")); err != nil {
		t.Fatal(err)
	}
	if err := h.e.SettleLease(h.ctx, "pc2", l.ID, nil, nil); !errors.Is(err, ErrLeaseOfOtherConsumer) {
		t.Fatalf("settling through another consumer: %v", err)
	}
}

// An extension pushes the expiry out, durably.
func TestPullExtend(t *testing.T) {
	h := newHarness(t)
	h.pullSetup()
	h.send("q", "a")
	l := h.lease(1, 10*time.Second)
	h.advance(9 * time.Second)
	exp, err := h.e.ExtendLease(h.ctx, "pc", l.ID, 20*time.Second)
	if err != nil || exp != t0.UnixMilli()+29000 {
		t.Fatalf("extend = %d, %v", exp, err)
	}
	m, _ := h.st.Message(h.ctx, "q", l.Messages[0].ID)
	if m.VisibleAt != exp || m.Lease != l.ID {
		t.Fatalf("stored after the extension: %+v", m)
	}
	h.advance(19 * time.Second)
	if again := h.lease(1, time.Minute); len(again.Messages) != 0 {
		t.Fatalf("the extended lease expired early: %+v", again)
	}
	h.advance(time.Second)
	if _, err := h.e.ExtendLease(h.ctx, "pc", l.ID, time.Minute); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("extending an expired lease: %v", err)
	}
	if again := h.lease(1, time.Minute); len(again.Messages) != 1 {
		t.Fatalf("not visible after the extended expiry: %+v", again)
	}
}

// The long poll answers as soon as a message arrives, and empty at its
// end.
func TestPullLongPoll(t *testing.T) {
	h := newHarness(t)
	h.pullSetup()
	got := make(chan PullLease, 1)
	go func() {
		l, err := h.e.Lease(h.ctx, "pc", 5, time.Minute, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, func() bool {
		h.e.queue("q").mu.Lock()
		defer h.e.queue("q").mu.Unlock()
		return h.e.queue("q").pullWaiters == 1
	})
	h.sendDelay("q", "later", 3)
	h.advance(2 * time.Second)
	select {
	case l := <-got:
		t.Fatalf("answered before the message was visible: %+v", l)
	default:
	}
	h.clk.Advance(time.Second)
	select {
	case l := <-got:
		if len(l.Messages) != 1 {
			t.Fatalf("long poll: %+v", l)
		}
	case <-time.After(waitLimit):
		t.Fatal("long poll not woken")
	}
	go func() {
		l, _ := h.e.Lease(h.ctx, "pc", 5, time.Minute, 20*time.Second)
		got <- l
	}()
	waitFor(t, func() bool {
		h.e.queue("q").mu.Lock()
		defer h.e.queue("q").mu.Unlock()
		return h.e.queue("q").pullWaiters == 1
	})
	h.clk.Advance(20 * time.Second)
	select {
	case l := <-got:
		if l.ID != "" || len(l.Messages) != 0 {
			t.Fatalf("empty long poll: %+v", l)
		}
	case <-time.After(waitLimit):
		t.Fatal("long poll did not end")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// Concurrent pullers never hold one message at once.
func TestPullConcurrentPullersDisjoint(t *testing.T) {
	h := newHarness(t)
	h.pullSetup()
	for range 10 {
		bodies := make([]string, 50)
		for i := range bodies {
			bodies[i] = "m"
		}
		h.send("q", bodies...)
	}
	var mu sync.Mutex
	held := map[string]string{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				l, err := h.e.Lease(h.ctx, "pc", 7, time.Minute, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if len(l.Messages) == 0 {
					return
				}
				mu.Lock()
				for _, m := range l.Messages {
					if other, dup := held[m.ID]; dup {
						t.Errorf("message %s in leases %s and %s", m.ID, other, l.ID)
					}
					held[m.ID] = l.ID
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(held) != 500 {
		t.Fatalf("leased %d of 500", len(held))
	}
}

// A lease survives a restart: its messages stay hidden until its expiry,
// its ID still settles them, attempts stay counted.
func TestPullLeaseSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	h.pullSetup()
	sent := h.send("q", "a", "b")
	l := h.lease(10, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := h.e.Stop(ctx); err != nil {
		t.Fatalf("stop waited for the pull lease: %v", err)
	}
	h.clk.Advance(10 * time.Second)
	h.e = h.newEngine()
	h.pullSetup()
	if again := h.lease(10, time.Minute); len(again.Messages) != 0 {
		t.Fatalf("a restart redelivered a leased message before the lease expired: %+v", again)
	}
	if err := h.e.SettleLease(h.ctx, "pc", l.ID, []string{sent[0]}, nil); err != nil {
		t.Fatalf("settling with the lease after a restart: %v", err)
	}
	h.advance(50 * time.Second)
	l2 := h.lease(10, time.Minute)
	if len(l2.Messages) != 1 || l2.Messages[0].ID != sent[1] || l2.Messages[0].Attempts != 2 {
		t.Fatalf("after the recovered lease expired: %+v", l2)
	}
}

// One consumer per queue: a pull consumer and a QueueConsumer exclude
// each other; a pull call on a QueueConsumer is refused.
func TestPullConsumerKindsExclusive(t *testing.T) {
	h := newHarness(t)
	h.pullSetup()
	if err := h.e.Attach(h.ctx, consumerCfg("c", "q", "w")); !errors.Is(err, ErrConsumerConflict) {
		t.Fatalf("QueueConsumer on a pulled queue: %v", err)
	}
	h.attach(consumerCfg("c", "dlq", "w"), abi.HandlerFunc(func(context.Context, *abi.Batch) error { return nil }))
	if _, err := h.e.Lease(h.ctx, "c", 1, time.Minute, 0); !errors.Is(err, ErrNotPullConsumer) {
		t.Fatalf("lease on a QueueConsumer: %v", err)
	}
	if err := h.e.Attach(h.ctx, pullCfg("pc2", "dlq")); !errors.Is(err, ErrConsumerConflict) {
		t.Fatalf("pull consumer on a consumed queue: %v", err)
	}
}

// Detaching a pull consumer makes its leased messages visible again at
// once, durably; it does not wait for the lease.
func TestPullDetachReleases(t *testing.T) {
	h := newHarness(t)
	h.pullSetup()
	h.send("q", "a")
	l := h.lease(1, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.e.Detach(ctx, "pc"); err != nil {
		t.Fatal(err)
	}
	h.quiesce()
	m, _ := h.st.Message(h.ctx, "q", l.Messages[0].ID)
	if m.Lease != "" || m.VisibleAt > t0.UnixMilli() || m.Attempts != 1 {
		t.Fatalf("after detach: %+v", m)
	}
}
