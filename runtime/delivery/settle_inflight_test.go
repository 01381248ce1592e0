package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// slowRetryStore holds every Apply holding a RetryMessage until released
// (a slow sync or a compaction holding the journal's gate back), then
// passes it to the wrapped store, which honours ctx at that point, as the
// journal does before it queues a frame.
type slowRetryStore struct {
	*memStore
	entered chan struct{}
	release chan struct{}
}

func (s *slowRetryStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	for _, m := range muts {
		if _, ok := m.(store.RetryMessage); ok {
			s.entered <- struct{}{}
			<-s.release
			break
		}
	}
	return s.memStore.Apply(ctx, muts...)
}

// A settlement the engine accepted while the batch was running is in
// flight when the invocation ends: closing the batch waits for it, and it
// must then count as made, with its own delay. The handler context, which
// the engine cancels when it closes the batch, must not abort it: that
// turned batch.retry(id, 30) into a retry after retryDelaySeconds (0:
// redelivered at once) when the time limit struck, and into an
// acknowledgement when the handler returned without awaiting it.
func TestSettlementInFlightWhenTheInvocationEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout bool // the handler time limit ends the invocation; else the handler returns
	}{
		{"handler time limit", true},
		{"handler returns", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			st := &slowRetryStore{memStore: h.st, entered: make(chan struct{}, 1), release: make(chan struct{})}
			h.e = New(st, h.res, Options{Clock: h.clk, HandlerTimeout: 10 * time.Second})
			t.Cleanup(func() {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				h.e.Stop(ctx)
			})
			h.addQueue("q", 0, 3600)
			h.start()
			retried := make(chan error, 1)
			hctx := make(chan context.Context, 1)
			ret := make(chan struct{})
			r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
				if b.Messages[0].Attempts > 1 {
					return nil
				}
				hctx <- ctx
				go func() { retried <- b.Retry(ctx, b.Messages[0].ID, intp(30)) }()
				if tc.timeout {
					<-ctx.Done()
					return context.Cause(ctx)
				}
				<-ret
				return nil // does not await the retry
			})
			h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 0 }), r)
			id := h.send("q", "a")[0]
			r.next(t)
			ctx := <-hctx
			<-st.entered // the retry is accepted and its write in flight
			if tc.timeout {
				h.clk.Advance(10 * time.Second)
			} else {
				close(ret)
			}
			// The engine closes the batch (and cancels the handler's
			// context) while the retry is still in flight.
			select {
			case <-ctx.Done():
			case <-time.After(waitLimit):
				t.Fatal("the invocation did not end")
			}
			close(st.release)
			if err := <-retried; err != nil {
				t.Fatalf("retry in flight when the invocation ended: %v, want nil (it was accepted while the batch ran)", err)
			}
			h.waitFinished(1)
			want := t0.Add(30 * time.Second).UnixMilli() // the retry was made at t0
			if m, ok := h.storedMsg("q", id); !ok || m.VisibleAt != want || m.Lease != "" {
				t.Fatalf("stored %+v (present %v), want visible at the retry's own delay (%d)", m, ok, want)
			}
			h.advance(time.Duration(want-h.clk.Now().UnixMilli()-1) * time.Millisecond)
			if h.delivered() != 1 {
				t.Fatalf("redelivered before the retry's delay of 30 s (%d deliveries)", h.delivered())
			}
			h.advance(time.Millisecond)
			h.waitFinished(2)
			if b := r.all()[1]; b.Messages[0].ID != id || b.Messages[0].Attempts != 2 {
				t.Fatalf("redelivery %+v", b.Messages[0])
			}
		})
	}
}
