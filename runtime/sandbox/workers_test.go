package sandbox

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
)

// goroutineID is the running goroutine's number, from its stack header
// ("goroutine 7 [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b, _, _ = bytes.Cut(bytes.TrimPrefix(b, []byte("goroutine ")), []byte(" "))
	return string(b)
}

// waitIdle waits until w has n idle workers.
func waitIdle(t *testing.T, w *workers, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.idleCount() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers, want %d", w.idleCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWorkersReuseAGoroutine: a request after an earlier one finished runs
// on the same goroutine, not a new one.
func TestWorkersReuseAGoroutine(t *testing.T) {
	var w workers
	ids := make(chan string, 1)
	var first string
	for i := range 5 {
		w.run(func() { ids <- goroutineID() })
		id := <-ids
		if i == 0 {
			first = id
		} else if id != first {
			t.Fatalf("request %d ran on goroutine %s, the first on %s", i, id, first)
		}
		waitIdle(t, &w, 1)
	}
}

// TestWorkersRunConcurrently: a request never waits for a busy worker; n
// requests blocked at once are n goroutines, all idle afterwards.
func TestWorkersRunConcurrently(t *testing.T) {
	var w workers
	const n = 8
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for range n {
		w.run(func() {
			started.Done()
			<-release
			done.Done()
		})
	}
	started.Wait() // all n are running at once
	close(release)
	done.Wait()
	waitIdle(t, &w, n)
}

// TestWorkersEndWhenIdle: an idle worker ends after its idle time, and a
// later request starts a new one.
func TestWorkersEndWhenIdle(t *testing.T) {
	w := workers{idle: 200 * time.Millisecond}
	ids := make(chan string, 1)
	w.run(func() { ids <- goroutineID() })
	first := <-ids
	waitIdle(t, &w, 1)
	waitIdle(t, &w, 0) // it timed out and left the list
	w.run(func() { ids <- goroutineID() })
	if id := <-ids; id == first {
		t.Fatalf("the request after the idle time ran on the worker that ended (goroutine %s)", id)
	}
}
