package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// BenchmarkEndToEnd sends batches of 100 messages of 100 B from 16
// goroutines into a queue over the journaled store and measures durable
// acknowledgements by a Go handler that reads every body and returns: the
// engine's and the store's cost per message, the disk included. One op is
// one acknowledged message. tools/bench reports the same path against the
// disk's limits; this is its profiling harness.
func BenchmarkEndToEnd(b *testing.B) {
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("maxConcurrency=%d", conc), func(b *testing.B) {
			benchEndToEnd(b, conc, store.Options{Logger: slog.New(slog.DiscardHandler)})
		})
	}
}

type benchResolver struct{ h abi.Handler }

func (r benchResolver) Resolve(context.Context, string) (abi.Handler, error) { return r.h, nil }

func benchEndToEnd(b *testing.B, conc int, opts store.Options) {
	ctx := context.Background()
	st, _, err := store.Open(ctx, b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var acked atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	h := abi.HandlerFunc(func(ctx context.Context, bt *abi.Batch) error {
		n := 0
		for _, m := range bt.Messages {
			n += len(m.Body)
		}
		if n == 0 {
			return fmt.Errorf("empty bodies")
		}
		return nil
	})
	obs := &ackCounter{Store: st, acked: &acked, target: target, done: done}
	e := New(obs, benchResolver{h}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err := e.AddQueue(ctx, QueueConfig{UID: "q1", Name: "bench", MessageRetentionSeconds: 1209600}); err != nil {
		b.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		e.Stop(sctx)
	}()
	if err := e.Attach(ctx, ConsumerConfig{UID: "c1", QueueUID: "q1", WorkerUID: "w1", MaxBatchSize: 100,
		MaxConcurrency: conc, MaxRetries: 3}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 100)
	msgs := make([]abi.OutgoingMessage, 100)
	for i := range msgs {
		msgs[i].Body = body
	}
	var sent atomic.Int64
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0, syncs0, t0 := processCPU(), st.Stats().Syncs, time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pctx.Err() == nil && sent.Load() < target {
				if sent.Load()-acked.Load() > 20000 {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				if _, err := e.Send(pctx, "q1", msgs); err != nil {
					if pctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				sent.Add(100)
			}
		}()
	}
	<-done
	b.StopTimer()
	// CPU time is steadier than wall time on a shared machine.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(st.Stats().Syncs-syncs0)/time.Since(t0).Seconds(), "syncs/s")
	stop()
	wg.Wait()
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ackCounter counts acknowledged messages as their removal becomes durable.
type ackCounter struct {
	store.Store
	acked  *atomic.Int64
	target int64
	done   chan struct{}
	once   sync.Once
}

func (s *ackCounter) Apply(ctx context.Context, muts ...store.Mutation) error {
	if err := s.Store.Apply(ctx, muts...); err != nil {
		return err
	}
	for _, m := range muts {
		if r, ok := m.(store.RemoveMessages); ok && r.Reason == store.RemovedAcknowledged {
			if s.acked.Add(int64(len(r.IDs))) >= s.target {
				s.once.Do(func() { close(s.done) })
			}
		}
	}
	return nil
}
