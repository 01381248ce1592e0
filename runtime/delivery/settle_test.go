package delivery

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// blocking returns a handler body that waits for a value on release and
// returns it, and reports the batch on started.
func blocking() (fn func(ctx context.Context, b *abi.Batch) error, release chan error) {
	release = make(chan error, 100)
	return func(ctx context.Context, b *abi.Batch) error { return <-release }, release
}

func TestDefaultAndExplicitRetryDelays(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 86400)
	h.start()
	first := true
	var mu sync.Mutex
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		mu.Lock()
		f := first
		first = false
		mu.Unlock()
		if f {
			return errThrow // default retry delay
		}
		if b.Messages[0].Attempts == 2 {
			return b.Retry(ctx, b.Messages[0].ID, intp(30)) // explicit
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 10 }), r)
	id := h.send("q", "a")[0]
	h.waitFinished(1)
	if m, _ := h.storedMsg("q", id); m.VisibleAt != t0.Add(10*time.Second).UnixMilli() || m.Lease != "" {
		t.Fatalf("stored after throw: %+v", m)
	}
	h.advance(9999 * time.Millisecond)
	if h.delivered() != 1 {
		t.Fatal("redelivered before retryDelaySeconds")
	}
	h.advance(time.Millisecond)
	h.waitFinished(2)
	if h.delivered() != 2 {
		t.Fatal("not redelivered at retryDelaySeconds")
	}
	h.advance(29999 * time.Millisecond)
	if h.delivered() != 2 {
		t.Fatal("redelivered before the explicit retry delay")
	}
	h.advance(time.Millisecond)
	h.waitFinished(3)
	b := r.all()[2]
	if b.Messages[0].Attempts != 3 {
		t.Fatalf("attempts %d", b.Messages[0].Attempts)
	}
	if h.count("q") != 0 {
		t.Fatal("not acknowledged")
	}
}

func TestRetryAllWithDelay(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 86400)
	h.start()
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts == 1 {
			if err := b.RetryAll(ctx, intp(7)); err != nil {
				return err
			}
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 1000 }), r)
	h.send("q", "a", "b")
	h.waitFinished(1)
	h.advance(6999 * time.Millisecond)
	if h.delivered() != 1 {
		t.Fatal("retryAll delay not honoured")
	}
	h.advance(time.Millisecond)
	h.waitFinished(2)
	if got := bodies(r.all()[1]); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("redelivered %v", got)
	}
}

func TestDoubleSettlement(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	errs := make(chan []error, 1)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		a, c := b.Messages[0].ID, b.Messages[1].ID
		errs <- []error{
			b.Acknowledge(ctx, a),
			b.Acknowledge(ctx, a),
			b.Retry(ctx, a, nil),
			b.Retry(ctx, c, intp(100)),
			b.Acknowledge(ctx, c),
			b.AcknowledgeAll(ctx), // everything settled: a no-op
			b.RetryAll(ctx, nil),
			b.Retry(ctx, c, intp(43201)),
		}
		return errThrow // nothing left unsettled; a stays acknowledged
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	ids := h.send("q", "a", "c")
	got := <-errs
	want := []error{nil, abi.ErrAlreadySettled, abi.ErrAlreadySettled, nil, abi.ErrAlreadySettled, nil, nil, abi.ErrInvalidDelay}
	for i := range want {
		if !errors.Is(got[i], want[i]) || (want[i] == nil) != (got[i] == nil) {
			t.Errorf("call %d: %v, want %v", i, got[i], want[i])
		}
	}
	if abi.Code(got[1]) != "already_settled" || abi.Code(got[7]) != "RangeError" {
		t.Errorf("codes %q %q", abi.Code(got[1]), abi.Code(got[7]))
	}
	h.waitFinished(1)
	if _, ok := h.storedMsg("q", ids[0]); ok {
		t.Error("acknowledged message still stored")
	}
	if m, ok := h.storedMsg("q", ids[1]); !ok || m.VisibleAt != t0.Add(100*time.Second).UnixMilli() {
		t.Errorf("retried message: %+v %v (the handler's throw must not re-retry it)", m, ok)
	}
}

func TestSettleIDFromAnotherBatch(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1; c.MaxConcurrency = 2 }), r)
	h.send("q", "a", "b")
	b1, b2 := r.next(t), r.next(t)
	ctx := context.Background()
	if err := b1.Acknowledge(ctx, b2.Messages[0].ID); err != abi.ErrUnknownMessage || abi.Code(err) != "unknown_message" {
		t.Fatalf("ack of another batch's message: %v", err)
	}
	if err := b1.Retry(ctx, "nope", nil); err != abi.ErrUnknownMessage {
		t.Fatalf("retry of an unknown ID: %v", err)
	}
	release <- nil
	release <- nil
	h.waitFinished(2)
	if h.count("q") != 0 {
		t.Fatal("batches not acknowledged")
	}
}

func TestAcknowledgeOneThenThrow(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts == 1 {
			if err := b.Acknowledge(ctx, b.Messages[0].ID); err != nil {
				return err
			}
			return errThrow
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 5 }), r)
	sent := h.send("q", "a", "b")
	h.waitFinished(1)
	if got := h.st.removals("q", store.RemovedAcknowledged); !reflect.DeepEqual(got, sent[:1]) {
		t.Fatalf("acknowledged %v", got)
	}
	h.advance(5 * time.Second)
	h.waitFinished(2)
	b := r.all()[1]
	if !reflect.DeepEqual(ids(b), sent[1:]) || b.Messages[0].Attempts != 2 {
		t.Fatalf("redelivered %v attempts %d; want only the unsettled one, attempts 2", ids(b), b.Messages[0].Attempts)
	}
}

func TestStoreFailureDuringSettlement(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	results := make(chan error, 4)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts > 1 {
			return nil
		}
		h.st.setFail(func(muts []store.Mutation) error {
			if _, ok := muts[0].(store.RemoveMessages); ok {
				return errors.New("disk full")
			}
			return nil
		})
		err := b.Acknowledge(ctx, b.Messages[0].ID)
		results <- err
		results <- b.AcknowledgeAll(ctx)
		h.st.setFail(nil)
		return errThrow
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	id := h.send("q", "a")[0]
	if err := <-results; !errors.Is(err, abi.ErrBackendUnavailable) || abi.Code(err) != "backend_unavailable" {
		t.Fatalf("ack with a failing store: %v", err)
	}
	if err := <-results; !errors.Is(err, abi.ErrBackendUnavailable) {
		t.Fatalf("acknowledgeAll with a failing store: %v (the message must still be unsettled)", err)
	}
	h.waitFinished(2)
	b := r.all()[1]
	if b.Messages[0].ID != id || b.Messages[0].Attempts != 2 {
		t.Fatalf("redelivery %+v", b.Messages[0])
	}
	if h.count("q") != 0 {
		t.Fatal("not acknowledged on the second delivery")
	}
}

func TestStoreFailureThenSettleAgainSucceeds(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	results := make(chan error, 2)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		h.st.setFail(func([]store.Mutation) error { return errors.New("io error") })
		results <- b.Acknowledge(ctx, b.Messages[0].ID)
		h.st.setFail(nil)
		results <- b.Acknowledge(ctx, b.Messages[0].ID)
		return errThrow
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	h.send("q", "a")
	if err := <-results; !errors.Is(err, abi.ErrBackendUnavailable) {
		t.Fatal(err)
	}
	if err := <-results; err != nil {
		t.Fatalf("second acknowledge after a failed one: %v, want nil (the failed one settled nothing)", err)
	}
	h.waitFinished(1)
	if h.count("q") != 0 || h.delivered() != 1 {
		t.Fatal("acknowledged message was retried")
	}
}

func TestConcurrentSettlementsExactlyOneWins(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	const n = 32
	results := make(chan error, n)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					results <- b.Acknowledge(ctx, b.Messages[0].ID)
				} else {
					results <- b.Retry(ctx, b.Messages[0].ID, intp(50))
				}
			}()
		}
		wg.Wait()
		return nil
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	h.send("q", "a")
	h.waitFinished(1)
	wins := 0
	for i := 0; i < n; i++ {
		err := <-results
		switch {
		case err == nil:
			wins++
		case err != abi.ErrAlreadySettled:
			t.Fatalf("unexpected %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d settlements won, want exactly 1", wins)
	}
}

func TestHandlerTimeoutCountsAsThrow(t *testing.T) {
	h := newHarness(t)
	h.e = h.newEngine(func(o *Options) { o.HandlerTimeout = 10 * time.Second })
	h.addQueue("q", 0, 3600)
	h.start()
	causes := make(chan error, 1)
	late := make(chan error, 1)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts > 1 {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		late <- b.Acknowledge(context.Background(), b.Messages[0].ID)
		select {} // never returns: the engine must proceed anyway
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 3 }), r)
	id := h.send("q", "a")[0]
	r.next(t)
	h.advance(9999 * time.Millisecond)
	if h.e.finished.Load() != 0 {
		t.Fatal("closed before the time limit")
	}
	h.advance(time.Millisecond)
	h.waitFinished(1)
	if c := <-causes; !errors.Is(c, ErrHandlerTimeout) || !errors.Is(c, context.DeadlineExceeded) {
		t.Fatalf("handler context cause %v", c)
	}
	if err := <-late; err != abi.ErrUnknownBatch {
		t.Fatalf("settlement after the time limit: %v", err)
	}
	if m, _ := h.storedMsg("q", id); m.VisibleAt != t0.Add(13*time.Second).UnixMilli() || m.Lease != "" {
		t.Fatalf("timed-out message not retried after retryDelaySeconds: %+v", m)
	}
	h.advance(3 * time.Second)
	h.waitFinished(2)
	if b := r.all()[1]; b.Messages[0].Attempts != 2 {
		t.Fatalf("attempts %d", b.Messages[0].Attempts)
	}
}

func TestPanickingHandlerRetries(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if b.Messages[0].Attempts == 1 {
			panic("boom")
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	h.send("q", "a")
	h.waitFinished(2)
	if h.count("q") != 0 || r.all()[1].Messages[0].Attempts != 2 {
		t.Fatal("panic not treated as a throw")
	}
}
