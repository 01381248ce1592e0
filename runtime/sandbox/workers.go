package sandbox

import (
	"sync"
	"time"
)

// workers runs a sandbox's requests on goroutines kept between requests.
//
// Why: goja's interpreter recurses, so a goroutine that has run JavaScript
// has a grown stack. With a new goroutine per request every invocation grew
// its stack again from the minimum, copying it at each doubling: about a
// twelfth of a sandbox's CPU at a fetch that sends (in process, the same
// JavaScript runs on the host's long-lived connection goroutines). A worker
// that finishes waits up to its idle time for the next request, then ends,
// so a quiet sandbox keeps no goroutines beyond its reader. The most
// recently idle worker is reused first (its stack and caches are warm).
//
// The zero value is ready; idle is defaultWorkerIdle when zero.
type workers struct {
	idle time.Duration

	mu      sync.Mutex
	waiting []chan func() // each idle worker's own hand-over channel
}

// defaultWorkerIdle is how long an idle worker waits for the next request
// before it ends.
const defaultWorkerIdle = 10 * time.Second

// run starts f on an idle worker, or on a new goroutine when none is idle.
// It never waits for f.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.waiting); n > 0 {
		ch := w.waiting[n-1]
		w.waiting = w.waiting[:n-1]
		w.mu.Unlock()
		ch <- f // buffered: the worker takes it when it wakes
		return
	}
	w.mu.Unlock()
	go w.loop(f)
}

// idleCount is the number of workers waiting for a request.
func (w *workers) idleCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}

func (w *workers) loop(f func()) {
	idle := w.idle
	if idle <= 0 {
		idle = defaultWorkerIdle
	}
	ch := make(chan func(), 1)
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		f()
		t.Reset(idle)
		w.mu.Lock()
		w.waiting = append(w.waiting, ch)
		w.mu.Unlock()
		select {
		case f = <-ch:
			continue
		case <-t.C:
		}
		// Timed out: leave unless run took this worker off the list
		// meanwhile, in which case its request is on the way.
		w.mu.Lock()
		for i, c := range w.waiting {
			if c == ch {
				w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
				w.mu.Unlock()
				return
			}
		}
		w.mu.Unlock()
		f = <-ch
	}
}
