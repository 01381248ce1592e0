package delivery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

// TestRealClockDeadline: with the real clock the handler's context carries
// the deadline, ends at the limit with ErrHandlerTimeout, and the batch is
// retried. Bounded by the limit (50 ms), not synchronised by sleeping.
func TestRealClockDeadline(t *testing.T) {
	st := newMemStore()
	res := &resolver{handlers: map[string]abi.Handler{}}
	got := make(chan error, 1)
	second := make(chan int, 1)
	res.set("w", abi.HandlerFunc(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts > 1 {
			second <- b.Messages[0].Attempts
			return nil
		}
		if _, ok := ctx.Deadline(); !ok {
			got <- errors.New("no deadline on the handler context")
			return nil
		}
		<-ctx.Done()
		got <- context.Cause(ctx)
		return ctx.Err()
	}))
	e := New(st, res, Options{HandlerTimeout: 50 * time.Millisecond})
	defer e.Stop(context.Background())
	ctx := context.Background()
	if err := e.AddQueue(ctx, QueueConfig{UID: "q", Name: "q", MessageRetentionSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	if err := e.Attach(ctx, consumerCfg("c", "q", "w")); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Send(ctx, "q", []abi.OutgoingMessage{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrHandlerTimeout) {
			t.Fatalf("cause %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("no timeout")
	}
	select {
	case n := <-second:
		if n != 2 {
			t.Fatal(n)
		}
	case <-time.After(waitLimit):
		t.Fatal("not retried")
	}
}
