package startstop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestStopEndsAndWaitsForTheGoroutines(t *testing.T) {
	var b Base
	var ended atomic.Bool
	b.Go(func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		ended.Store(true)
	})
	if err := b.Stop(context.Background()); err != nil || !ended.Load() {
		t.Fatalf("stop: %v, goroutine ended %v", err, ended.Load())
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatalf("a second stop: %v", err)
	}
}

func TestStopWithinItsContext(t *testing.T) {
	var b Base
	release := make(chan struct{})
	b.Go(func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop of a goroutine that does not end: %v", err)
	}
	close(release)
}

func TestEveryAndARestart(t *testing.T) {
	var b Base
	var n atomic.Int32
	b.Every(time.Millisecond, true, func(context.Context) { n.Add(1) })
	time.Sleep(30 * time.Millisecond)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := n.Load()
	if got < 2 {
		t.Fatalf("%d runs in 30 ms", got)
	}
	time.Sleep(10 * time.Millisecond)
	if n.Load() != got {
		t.Fatal("work ran after Stop")
	}
	// Work handed to the stopped part sees its context done.
	var sawDone atomic.Bool
	b.Go(func(ctx context.Context) { sawDone.Store(ctx.Err() != nil) })
	_ = b.Stop(context.Background())
	if !sawDone.Load() {
		t.Fatal("Go after Stop ran on a live context")
	}
	// Started again (Every), it runs on a fresh context.
	b.Every(time.Hour, true, func(ctx context.Context) {
		if ctx.Err() == nil {
			n.Add(1)
		}
	})
	time.Sleep(10 * time.Millisecond)
	if n.Load() != got+1 {
		t.Fatal("the restarted work did not run at once")
	}
	_ = b.Stop(context.Background())
}

func TestCloser(t *testing.T) {
	closed := 0
	var s Service = Closer(func() error { closed++; return nil })
	if s.Start(context.Background()) != nil || s.Stop(context.Background()) != nil || closed != 1 {
		t.Fatalf("closed %d times", closed)
	}
}
