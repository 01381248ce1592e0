package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"testing"
)

var benchLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// BenchmarkIndexMemory reports the heap cost of one message in the index
// (the body stays in the journal): accept 1,000,000 messages of 1 KiB.
func BenchmarkIndexMemory(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st := newState(false)
		meta := []recMeta{{bodyOff: 40, size: 1100}}
		for i := range n {
			m := AcceptMessage{Message: Message{Queue: "queue-uid", ID: fmt.Sprintf("%032x", i), AcceptedAt: int64(i), VisibleAt: int64(i), Size: 1024}}
			st.apply([]Mutation{m}, 1, int64(i)*1100, meta)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/msg")
		ms := st.messages("queue-uid")
		if len(ms) != n {
			b.Fatal(len(ms))
		}
		runtime.KeepAlive(st)
	}
}

// BenchmarkMessages lists a queue of 1,000,000 messages, as the engine does
// at start-up.
func BenchmarkMessages(b *testing.B) {
	const n = 1_000_000
	st := newState(false)
	meta := []recMeta{{bodyOff: 40, size: 1100}}
	for i := range n {
		m := AcceptMessage{Message: Message{Queue: "q", ID: fmt.Sprintf("%032x", i), AcceptedAt: int64(i)}}
		st.apply([]Mutation{m}, 1, int64(i)*1100, meta)
	}
	for b.Loop() {
		if len(st.messages("q")) != n {
			b.Fatal()
		}
	}
}

// BenchmarkApply is durable Applies of one 1 KiB message by concurrent
// callers, through the whole store.
func BenchmarkApply(b *testing.B) {
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s, _, err := Open(context.Background(), benchDir(b), Options{Logger: benchLog, DisableCompaction: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			body := make([]byte, 1024)
			var wg sync.WaitGroup
			per, extra := b.N/writers, b.N%writers
			b.ResetTimer()
			for w := range writers {
				n := per
				if w < extra {
					n++
				}
				wg.Go(func() {
					for i := range n {
						m := AcceptMessage{Message: Message{Queue: "q", ID: fmt.Sprint(w, "-", i)}, Body: body}
						if err := s.Apply(context.Background(), m); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(st.Appends)/float64(max(st.Syncs, 1)), "records/fsync")
		})
	}
}

// BenchmarkRecovery reopens a journal of 200,000 messages of 1 KiB.
func BenchmarkRecovery(b *testing.B) {
	dir := benchDir(b)
	if err := FillForBenchmark(context.Background(), dir, Options{Logger: benchLog}, "q", 200_000, 1024); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		rs, err := MeasureRecovery(context.Background(), dir, Options{Logger: benchLog})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rs.Stats.Messages)/rs.Duration.Seconds(), "msgs/s")
		b.ReportMetric(float64(rs.Stats.Bytes)/(1<<20)/rs.Duration.Seconds(), "MiB/s")
	}
}

func benchDir(b *testing.B) string {
	if d := os.Getenv("JOURNAL_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "store-bench-*")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}
