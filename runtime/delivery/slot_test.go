package delivery

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// heldAckStore holds every Apply that acknowledges messages until told how
// it ends (nil: applied; an error: failed, nothing applied).
type heldAckStore struct {
	*memStore
	entered chan []string
	outcome chan error
}

func (s *heldAckStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	for _, m := range muts {
		if r, ok := m.(store.RemoveMessages); ok && r.Reason == store.RemovedAcknowledged {
			s.entered <- r.IDs
			if err := <-s.outcome; err != nil {
				return err
			}
			break
		}
	}
	return s.memStore.Apply(ctx, muts...)
}

// maxConcurrency counts the batches whose handler runs (QC-INPUT-9, the
// number of batches run at once): a batch whose handler returned frees its slot while its
// acknowledgement is still being written, so that the next batch's delivery
// can share that write's sync. Its messages stay unavailable until the
// write ends, and a failed write still leads to their redelivery.
func TestSlotFreesWhenTheHandlerReturns(t *testing.T) {
	h := newHarness(t)
	st := &heldAckStore{memStore: h.st, entered: make(chan []string, 4), outcome: make(chan error)}
	h.e = New(st, h.res, Options{Clock: h.clk, HandlerTimeout: time.Hour})
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		h.e.Stop(ctx)
	})
	h.addQueue("q", 0, 3600)
	h.start()
	gate := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if bodies(b)[0] == "m2" {
			<-gate // the second batch's handler runs until released
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1; c.MaxConcurrency = 1 }), rec)
	m := h.send("q", "m1", "m2")

	if b := rec.next(t); !slices.Equal(ids(b), m[:1]) {
		t.Fatalf("first batch %v", ids(b))
	}
	if got := <-st.entered; !slices.Equal(got, m[:1]) {
		t.Fatalf("acknowledging %v", got)
	}
	// m1's acknowledgement is in flight: the slot is free, m2 runs.
	if b := rec.next(t); !slices.Equal(ids(b), m[1:]) {
		t.Fatalf("second batch %v", ids(b))
	}
	// The write fails: m1 is redelivered, but only once m2's handler,
	// which holds the only slot, has returned.
	st.outcome <- errors.New("disk gone")
	h.quiesce()
	select {
	case b := <-rec.ch:
		t.Fatalf("batch %v delivered while the only slot is taken", ids(b))
	default:
	}
	close(gate)
	if got := <-st.entered; !slices.Equal(got, m[1:]) {
		t.Fatalf("acknowledging %v", got)
	}
	if b := rec.next(t); !slices.Equal(ids(b), m[:1]) || b.Messages[0].Attempts != 2 {
		t.Fatalf("redelivery %v", ids(b))
	}
	st.outcome <- nil
	if got := <-st.entered; !slices.Equal(got, m[:1]) {
		t.Fatalf("acknowledging %v", got)
	}
	st.outcome <- nil
	h.quiesce()
	if n := h.count("q"); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}
