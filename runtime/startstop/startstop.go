// Package startstop is the host's one lifecycle: every long-lived part is a
// Service (Start(ctx) error, Stop(ctx) error), and a part that runs
// goroutines between the two embeds Base instead of writing its own
// cancel-and-wait, as riverqueue/river's startstop does for its services.
//
// Base gives the part a context that ends at Stop, runs its goroutines on
// it (Go, Every) and makes Stop end them and wait for them, within Stop's
// context. After Stop, Go runs on the ended context (work handed to a
// stopped part sees it done at once); Every, which a part calls from its
// Start, begins a new run.
package startstop

import (
	"context"
	"sync"
	"time"
)

// Service is a long-lived part: Start prepares it to serve, Stop releases
// it within ctx (ctx's error when it ends first).
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Base is embedded by a Service that runs goroutines from Start to Stop.
// Its zero value is ready.
type Base struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      *sync.WaitGroup
	stopped bool
}

// run is the current run's context and wait group, made at the first use;
// fresh is set by a Start (Every), which begins a new run after a Stop.
func (b *Base) run(fresh bool) (context.Context, *sync.WaitGroup) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil || (fresh && b.stopped) {
		b.ctx, b.cancel = context.WithCancel(context.Background())
		b.wg, b.stopped = new(sync.WaitGroup), false
	}
	return b.ctx, b.wg
}

// Context is the part's context: it ends when Stop is called.
func (b *Base) Context() context.Context {
	ctx, _ := b.run(false)
	return ctx
}

// Go runs f on a goroutine of the part, with the part's context; Stop
// waits for it.
func (b *Base) Go(f func(ctx context.Context)) { b.goRun(false, f) }

func (b *Base) goRun(fresh bool, f func(ctx context.Context)) {
	ctx, wg := b.run(fresh)
	wg.Add(1)
	go func() {
		defer wg.Done()
		f(ctx)
	}()
}

// Every runs work every interval (and once at once when now is set) on a
// goroutine of the part, until Stop. Called from Start, it begins a new
// run when the part was stopped.
func (b *Base) Every(every time.Duration, now bool, work func(ctx context.Context)) {
	b.goRun(true, func(ctx context.Context) {
		if now {
			work(ctx)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				work(ctx)
			}
		}
	})
}

// Stop ends the part's context and waits for its goroutines, or for ctx
// (then ctx's error; the goroutines end on their own). Nothing to do when
// nothing ran.
func (b *Base) Stop(ctx context.Context) error {
	b.mu.Lock()
	cancel, wg := b.cancel, b.wg
	b.stopped = true
	b.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Closer is the Service of a part that is opened when it is made and only
// closed (a store, a journal): Start does nothing, Stop closes it.
type Closer func() error

// Start does nothing: the part was opened when it was made.
func (Closer) Start(context.Context) error { return nil }

// Stop closes the part.
func (c Closer) Stop(context.Context) error { return c() }
