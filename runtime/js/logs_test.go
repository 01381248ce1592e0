package js

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openBook(t *testing.T, dir string, size int, clock *time.Time) *LogBook {
	t.Helper()
	b, err := OpenLogBook(dir, size)
	if err != nil {
		t.Fatal(err)
	}
	b.now = func() time.Time { return *clock }
	t.Cleanup(func() { b.Close() })
	return b
}

// A durable book reopened (the host restarted) has the same entries, and
// its seq goes on above the last one even when the clock stepped back, so
// after= the last seq read misses nothing and repeats nothing.
func TestLogBookSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	clock := time.UnixMicro(0) // seq from 1
	b := openBook(t, dir, 10, &clock)
	for _, m := range []string{"one", "two", "three"} {
		b.Add("w1", "v", "log", m)
	}
	b.Close()

	clock = time.UnixMicro(0) // a clock that went back changes nothing
	b2 := openBook(t, dir, 10, &clock)
	got := b2.List("w1", 0, 10)
	if len(got) != 3 || got[0].Message != "one" || got[0].Seq != 1 || got[2].Seq != 3 || got[2].VersionUID != "v" {
		t.Fatalf("reopened: %+v", got)
	}
	b2.Add("w1", "v", "log", "four")
	if got := b2.List("w1", 3, 10); len(got) != 1 || got[0].Message != "four" || got[0].Seq != 4 {
		t.Fatalf("after the last seq: %+v", got)
	}
	// With a clock that moved on, seq jumps to it: lines a power failure
	// took from the file's tail are never numbered again.
	b2.Close()
	clock = time.UnixMicro(5_000_000)
	b3 := openBook(t, dir, 10, &clock)
	b3.Add("w1", "v", "log", "five")
	if got := b3.List("w1", 4, 10); len(got) != 1 || got[0].Seq != 5_000_000 {
		t.Fatalf("seq after a reopen later: %+v", got)
	}
}

// A torn last line (the host died while writing it) is dropped and cut off
// the file; the entries before it stay.
func TestLogBookDropsATornLine(t *testing.T) {
	dir := t.TempDir()
	clock := time.UnixMicro(0)
	b := openBook(t, dir, 10, &clock)
	b.Add("w", "v", "log", "whole")
	b.Close()
	name := filepath.Join(dir, "w.log")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":2,"timeMillis":0,"lev`)
	f.Close()
	b2 := openBook(t, dir, 10, &clock)
	if got := b2.List("w", 0, 10); len(got) != 1 || got[0].Message != "whole" {
		t.Fatalf("%+v", got)
	}
	b2.Add("w", "v", "log", "next")
	b2.Close()
	b3 := openBook(t, dir, 10, &clock)
	if got := b3.List("w", 0, 10); len(got) != 2 || got[1].Message != "next" || got[1].Seq != 2 {
		t.Fatalf("after the torn line: %+v", got)
	}
}

// The oldest entries go first beyond the entry count and the byte bound,
// and a worker's file never grows past about twice the bounds: it is
// rewritten with the kept entries.
func TestLogBookBounds(t *testing.T) {
	dir := t.TempDir()
	clock := time.UnixMicro(0)
	b := openBook(t, dir, 5, &clock)
	for i := range 23 {
		b.Add("w", "v", "log", strings.Repeat("x", i))
	}
	got := b.List("w", 0, 100)
	if len(got) != 5 || got[0].Seq != 19 || got[4].Seq != 23 {
		t.Fatalf("count bound: %+v", got)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "w.log"))
	if n := strings.Count(string(raw), "\n"); n > 10 || n < 5 {
		t.Fatalf("the file holds %d lines, bound 2×5", n)
	}
	b.Close()
	b2 := openBook(t, dir, 5, &clock)
	if again := b2.List("w", 0, 100); len(again) != 5 || again[0].Seq != 19 {
		t.Fatalf("reopened after eviction: %+v", again)
	}

	big := openBook(t, t.TempDir(), 1000, &clock)
	big.maxBytes = 1000
	for range 50 {
		big.Add("w", "v", "log", strings.Repeat("y", 100))
	}
	if got := big.List("w", 0, 1000); len(got) != 10 || got[9].Seq != 50 {
		t.Fatalf("byte bound 1000 over 100-byte lines keeps %d", len(got))
	}
	fi, _ := os.Stat(filepath.Join(big.dir, "w.log"))
	if fi.Size() > int64(2*big.maxBytes+maxLogMessageBytes+1024) {
		t.Fatalf("file %d bytes", fi.Size())
	}
}

// Forget removes the worker's file and drops lines that still arrive; a
// sweep removes the files of workers that are gone.
func TestLogBookForgetAndSweep(t *testing.T) {
	dir := t.TempDir()
	clock := time.UnixMicro(0)
	b := openBook(t, dir, 10, &clock)
	b.Add("gone", "v", "log", "x")
	b.Add("kept", "v", "log", "x")
	b.Add("odd/name", "v", "log", "x")
	b.Forget("gone")
	b.Add("gone", "v", "log", "late")
	if _, err := os.Stat(filepath.Join(dir, "gone.log")); !os.IsNotExist(err) {
		t.Fatalf("the forgotten worker's file: %v", err)
	}
	if got := b.List("gone", 0, 10); len(got) != 0 {
		t.Fatalf("%+v", got)
	}
	n, err := b.Sweep(func(w string) bool { return w == "kept" })
	if err != nil || n != 1 {
		t.Fatalf("sweep removed %d: %v", n, err)
	}
	des, _ := os.ReadDir(dir)
	if len(des) != 1 || des[0].Name() != "kept.log" {
		t.Fatalf("left %v", des)
	}
}

// Wait is closed by the next Add past the cursor, at once when the log
// already holds one.
func TestLogBookWait(t *testing.T) {
	clock := time.UnixMicro(0)
	b := openBook(t, t.TempDir(), 10, &clock)
	b.Add("w", "v", "log", "one")
	select {
	case <-b.Wait("w", 0):
	default:
		t.Fatal("an entry after 0 exists: Wait must be closed")
	}
	ch := b.Wait("w", 1)
	select {
	case <-ch:
		t.Fatal("closed before a new entry")
	default:
	}
	b.Add("w", "v", "log", "two")
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by Add")
	}
}

// BenchmarkLogBookAdd: the cost of one log line in memory and in the
// durable book (one write to the worker's file, rewrites amortised).
func BenchmarkLogBookAdd(b *testing.B) {
	msg := strings.Repeat("x", 100)
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "file"
		}
		b.Run(name, func(b *testing.B) {
			book := NewLogBook(0)
			if durable {
				var err error
				if book, err = OpenLogBook(b.TempDir(), 0); err != nil {
					b.Fatal(err)
				}
				defer book.Close()
			}
			workers := []string{"w1", "w2", "w3", "w4"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				book.Add(workers[i%len(workers)], "v", "log", msg)
			}
		})
	}
}
