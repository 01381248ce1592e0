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

// fillBatches accepts batches of 100 messages of 100 B (as one sendBatch
// writes them, one frame each) into queue "q" and returns the IDs of each
// batch in accept order.
func fillBatches(b *testing.B, s *Journaled, batches int) [][]string {
	body := make([]byte, 100)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	out := make([][]string, batches)
	for bi := range batches {
		muts := make([]Mutation, 100)
		ids := make([]string, 100)
		for i := range muts {
			ids[i] = fmt.Sprintf("%032x", uint64(bi)*0x9e3779b97f4a7c15+uint64(i)*0xbf58476d1ce4e5b9)
			muts[i] = AcceptMessage{Message: Message{Queue: "q", ID: ids[i], Size: len(body)}, Body: body}
		}
		if err := s.Apply(context.Background(), muts...); err != nil {
			b.Fatal(err)
		}
		out[bi] = ids
	}
	return out
}

// BenchmarkBodyBatch reads the bodies of one 100-message batch in ID
// (accept) order, one Body call each, as the delivery engine does; the
// batches were sent 100 messages per Apply. "backlog" cycles through 2,000
// batches (200,000 messages) so that reads are not all of the newest frame.
func BenchmarkBodyBatch(b *testing.B) {
	for _, batches := range []int{1, 2000} {
		b.Run(fmt.Sprintf("batches=%d", batches), func(b *testing.B) {
			s, _, err := Open(context.Background(), benchDir(b), Options{Logger: benchLog, DisableCompaction: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			all := fillBatches(b, s, batches)
			ctx := context.Background()
			n := 0
			for b.Loop() {
				for _, id := range all[n%len(all)] {
					if body, err := Body(ctx, s, "q", id); err != nil || len(body) != 100 {
						b.Fatal(len(body), err)
					}
				}
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*100), "ns/body")
		})
	}
}

// BenchmarkBodyRandom reads single bodies of a 200,000-message backlog in
// random order: the access pattern read-ahead must not make worse.
func BenchmarkBodyRandom(b *testing.B) {
	s, _, err := Open(context.Background(), benchDir(b), Options{Logger: benchLog, DisableCompaction: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	all := fillBatches(b, s, 2000)
	ctx := context.Background()
	x := uint64(1)
	for b.Loop() {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		id := all[x%2000][(x>>32)%100]
		if body, err := Body(ctx, s, "q", id); err != nil || len(body) != 100 {
			b.Fatal(len(body), err)
		}
	}
}

// BenchmarkLookup finds messages of a 1,000,000-message queue by their
// 32-hex IDs, as every Body, Message, DeliverMessages and RemoveMessages
// does.
func BenchmarkLookup(b *testing.B) {
	const n = 1_000_000
	st := newState(false)
	meta := []recMeta{{bodyOff: 40, size: 1100}}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15)
		m := AcceptMessage{Message: Message{Queue: "q", ID: ids[i], AcceptedAt: int64(i)}}
		st.apply([]Mutation{m}, 1, int64(i)*1100, meta)
	}
	q := st.queues["q"]
	i := 0
	for b.Loop() {
		if _, ok := q.lookup(ids[i%n], nil); !ok {
			b.Fatal(i)
		}
		i++
	}
}

// BenchmarkHexID decodes one 32-hex message ID.
func BenchmarkHexID(b *testing.B) {
	id := "0123456789abcdef0f1e2d3c4b5a6978"
	for b.Loop() {
		if _, ok := hexID(id); !ok {
			b.Fatal()
		}
	}
}

// BenchmarkAcceptDeliverRemove applies the index side of one message's
// life (accept, deliver, remove) in batches of 100, with 1,000,000 others
// in the queue, as a restart with a backlog and then steady traffic does.
func BenchmarkAcceptDeliverRemove(b *testing.B) {
	const backlog = 1_000_000
	st := newState(false)
	meta := []recMeta{{bodyOff: 40, size: 200}}
	for i := range backlog {
		m := AcceptMessage{Message: Message{Queue: "q", ID: fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15)}}
		st.apply([]Mutation{m}, 1, int64(i)*200, meta)
	}
	batchMeta := make([]recMeta, 100)
	for i := range batchMeta {
		batchMeta[i] = recMeta{bodyOff: int32(i) * 200, size: 200}
	}
	ids := make([]string, 100)
	accept := make([]Mutation, 100)
	n := 0
	for b.Loop() {
		for i := range ids {
			ids[i] = fmt.Sprintf("%032x", uint64(n*100+i)*0xbf58476d1ce4e5b9+1)
			accept[i] = AcceptMessage{Message: Message{Queue: "q", ID: ids[i]}}
		}
		st.apply(accept, 1, 0, batchMeta)
		st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "b", IDs: ids}}, 1, 0, nil)
		st.apply([]Mutation{RemoveMessages{Queue: "q", IDs: ids}}, 1, 0, nil)
		n++
	}
	if got := st.queues["q"].count(); got != backlog {
		b.Fatal(got)
	}
}
