package journal

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// benchDir is where the benchmarks write: JOURNAL_BENCH_DIR picks the disk
// to measure, the default is the test's temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("JOURNAL_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "journal-bench-*")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// BenchmarkAppend measures durable appends of 1 KiB frames by concurrent
// writers. records/fsync is the group-commit factor; compare ns/op with
// BenchmarkFdatasync on the same disk.
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			j, _, err := Open(context.Background(), benchDir(b), Options{Logger: quiet}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			payload := make([]byte, 1024)
			b.SetBytes(int64(len(payload)))
			var wg sync.WaitGroup
			per := b.N / writers
			extra := b.N % writers
			b.ResetTimer()
			for w := range writers {
				n := per
				if w < extra {
					n++
				}
				wg.Go(func() {
					for range n {
						if _, err := j.Append(context.Background(), payload, nil); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			st := j.Stats()
			if st.Groups > 0 {
				b.ReportMetric(float64(st.Appends)/float64(st.Groups), "records/fsync")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkFdatasync is the raw rate of the disk: one 1 KiB append and one
// fdatasync per op, in the same directory as BenchmarkAppend.
func BenchmarkFdatasync(b *testing.B) {
	f, err := os.Create(benchDir(b) + "/probe")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1024)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fsyncs/s")
}

// BenchmarkReplay measures Open on a 64 MiB journal of 1 KiB frames.
func BenchmarkReplay(b *testing.B) {
	dir := benchDir(b)
	j, _, err := Open(context.Background(), dir, Options{SegmentSize: 16 << 20, Logger: quiet}, nil)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 1024 {
				j.Append(context.Background(), payload, nil)
			}
		})
	}
	wg.Wait()
	j.Close()
	b.SetBytes(64 << 20)
	for b.Loop() {
		j, rep, err := Open(context.Background(), dir, Options{Logger: quiet}, func(Pos, []byte) error { return nil })
		if err != nil || rep.Frames != 64*1024 {
			b.Fatal(err, rep.Frames)
		}
		j.Close()
	}
}
