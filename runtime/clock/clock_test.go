package clock

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func TestFakeFiresInTimeOrder(t *testing.T) {
	f := NewFake(t0)
	var got []string
	var at []time.Duration
	rec := func(name string) func() {
		return func() { got = append(got, name); at = append(at, f.Now().Sub(t0)) }
	}
	f.AfterFunc(3*time.Second, rec("c"))
	f.AfterFunc(1*time.Second, rec("a"))
	f.AfterFunc(2*time.Second, rec("b1"))
	f.AfterFunc(2*time.Second, rec("b2"))
	f.AfterFunc(10*time.Second, rec("late"))
	f.Advance(3 * time.Second)
	if want := []string{"a", "b1", "b2", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second}; !reflect.DeepEqual(at, want) {
		t.Fatalf("fired at %v, want %v", at, want)
	}
	if f.Pending() != 1 {
		t.Fatalf("pending %d, want 1", f.Pending())
	}
	if f.Now() != t0.Add(3*time.Second) {
		t.Fatalf("now %v", f.Now())
	}
}

func TestFakeCallbackArmsTimerFiringInSameAdvance(t *testing.T) {
	f := NewFake(t0)
	n := 0
	var fn func()
	fn = func() {
		n++
		f.AfterFunc(time.Second, fn)
	}
	f.AfterFunc(time.Second, fn)
	f.Advance(5 * time.Second)
	if n != 5 {
		t.Fatalf("fired %d times, want 5", n)
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(t0)
	fired := 0
	tm := f.AfterFunc(time.Second, func() { fired++ })
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	if tm.Stop() {
		t.Fatal("second Stop returned true")
	}
	f.Advance(2 * time.Second)
	if fired != 0 {
		t.Fatal("stopped timer fired")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer returned true")
	}
	if !tm.Reset(3 * time.Second) {
		t.Fatal("Reset of an armed timer returned false")
	}
	f.Advance(2 * time.Second)
	if fired != 0 {
		t.Fatal("timer fired before its reset time")
	}
	f.Advance(time.Second)
	if fired != 1 {
		t.Fatalf("fired %d, want 1", fired)
	}
	f.Advance(time.Hour)
	if fired != 1 {
		t.Fatal("timer fired twice")
	}
}

func TestFakeZeroDelayFiresOnAdvanceZero(t *testing.T) {
	f := NewFake(t0)
	fired := false
	f.AfterFunc(0, func() { fired = true })
	if fired {
		t.Fatal("fired inside AfterFunc")
	}
	f.Advance(0)
	if !fired {
		t.Fatal("Advance(0) did not fire a due timer")
	}
}

func TestFakeBlockUntil(t *testing.T) {
	f := NewFake(t0)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.AfterFunc(time.Minute, func() {})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	short, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := f.BlockUntil(short, 2); err == nil {
		t.Fatal("BlockUntil(2) returned nil with one timer armed")
	}
}

func TestRealSatisfiesClock(t *testing.T) {
	c := Real()
	if !IsReal(c) || IsReal(NewFake(t0)) {
		t.Fatal("IsReal")
	}
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("real timer did not fire")
	}
}
