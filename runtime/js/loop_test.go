package js

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

func TestTimersAndWaitUntil(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-timers", "byBody")
	if err := runBodies(t, rt, s, v, "b1", "timerThenAck"); err != nil {
		t.Fatal(err)
	}
	if got := s.settlements("b1"); !reflect.DeepEqual(got, []abi.Settlement{{Kind: abi.AcknowledgeAll}}) {
		t.Fatalf("settlements %+v", got)
	}
	// waitUntil keeps the invocation (and so the batch) alive until its
	// promise settles, after the handler itself returned
	if err := runBodies(t, rt, s, v, "b2", "waitUntil"); err != nil {
		t.Fatal(err)
	}
	if got := s.settlements("b2"); !reflect.DeepEqual(got, []abi.Settlement{{Kind: abi.AcknowledgeAll}}) {
		t.Fatalf("settlements %+v", got)
	}
	if len(seen(t, rt, v.WorkerUID, "waitUntil")) != 1 {
		t.Fatal("waitUntil's continuation did not run")
	}
}

func TestStackOverflow(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-deep", "byBody")
	err := runBodies(t, rt, s, v, "b1", "deepRecursion")
	var se *ScriptError
	if !errors.As(err, &se) || se.Name != "RangeError" {
		t.Fatalf("HandleBatch = %v", err)
	}
	if err := runBodies(t, rt, s, v, "b2", "counter"); err != nil {
		t.Fatalf("next batch: %v", err)
	}
}

func TestCallerDeadlineWins(t *testing.T) {
	rt := New(Options{InvocationTimeout: time.Minute})
	defer rt.Close()
	h, err := rt.QueueHandler(queueVersion(t, "v-ctx", "hang"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = h.HandleBatch(ctx, newFakeSettler().batch("b1", 1))
	if !errors.Is(err, ErrTimeout) || time.Since(start) > time.Second {
		t.Fatalf("HandleBatch = %v after %s", err, time.Since(start))
	}
}

func TestCallerCancel(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	h, _ := rt.QueueHandler(queueVersion(t, "v-cancel", "infinite"))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	err := h.HandleBatch(ctx, newFakeSettler().batch("b1", 1))
	if err == nil || errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("HandleBatch = %v", err)
	}
}

// A runaway worker does not stall another version's invocations, and one
// version runs batches concurrently on separate runtimes.
func TestIsolationAndConcurrency(t *testing.T) {
	rt := New(Options{InvocationTimeout: 2 * time.Second})
	defer rt.Close()
	s := newFakeSettler()
	runaway, _ := rt.QueueHandler(queueVersion(t, "v-runaway", "infinite"))
	done := make(chan error, 1)
	go func() { done <- runaway.HandleBatch(t.Context(), s.batch("spin", 1)) }()

	v := queueVersion(t, "v-busy", "timerThenAck")
	h, _ := rt.QueueHandler(v)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.HandleBatch(t.Context(), s.batch("c"+string(rune('0'+i)), 2))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("8 concurrent 20 ms batches took %s beside a runaway worker", d)
	}
	e, _ := rt.version(v)
	if idle, _ := e.pool.stats(); idle < 2 || idle > 8 {
		t.Fatalf("%d idle runtimes after 8 concurrent batches", idle)
	}
	if err := <-done; !errors.Is(err, ErrTimeout) {
		t.Fatalf("runaway = %v", err)
	}
}

func TestPoolCap(t *testing.T) {
	rt := New(Options{MaxRuntimes: 1})
	defer rt.Close()
	s := newFakeSettler()
	h, _ := rt.QueueHandler(queueVersion(t, "v-cap", "timerThenAck"))
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.HandleBatch(t.Context(), s.batch("p"+string(rune('0'+i)), 1)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	e, _ := rt.version(queueVersion(t, "v-cap", "timerThenAck"))
	if idle, busy := e.pool.stats(); idle != 1 || busy != 0 {
		t.Fatalf("idle %d busy %d", idle, busy)
	}
	// a caller whose context ends while waiting for the only runtime
	rt2 := New(Options{MaxRuntimes: 1, InvocationTimeout: 300 * time.Millisecond})
	defer rt2.Close()
	hang, _ := rt2.QueueHandler(queueVersion(t, "v-cap2", "hang"))
	go hang.HandleBatch(t.Context(), s.batch("h1", 1))
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := hang.HandleBatch(ctx, s.batch("h2", 1)); !errors.Is(err, ErrRuntimeExhausted) {
		t.Fatalf("HandleBatch = %v", err)
	}
}

func TestEvictAndClose(t *testing.T) {
	rt := New(Options{})
	s := newFakeSettler()
	v := queueVersion(t, "v-evict", "counter")
	if err := runBatch(t, rt, s, v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	rt.Evict(v.UID)
	if err := runBatch(t, rt, s, v, "b2", 1); err != nil {
		t.Fatal(err)
	}
	all := seen(t, rt, v.WorkerUID, "counter")
	if len(all) != 2 || string(all[1]) != `{"invocations":1}` {
		t.Fatalf("after Evict: %s", all)
	}
	rt.Close()
	if _, err := rt.QueueHandler(v); !errors.Is(err, ErrClosed) {
		t.Fatalf("QueueHandler after Close = %v", err)
	}
}

func TestConsoleLevels(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := queueVersion(t, "v-console", "consoleLevels")
	if err := runBatch(t, rt, newFakeSettler(), v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	logs := rt.Logs(v.WorkerUID, 0, 100)
	var levels []string
	for _, e := range logs {
		levels = append(levels, e.Level)
	}
	if !reflect.DeepEqual(levels, []string{"log", "info", "warn", "error", "debug"}) {
		t.Fatalf("levels %v", levels)
	}
	if logs[0].Message != `plain 1 { a: [1, "two"] } null undefined` {
		t.Fatalf("log message %q", logs[0].Message)
	}
	if m := logs[3].Message; len(m) < 30 || m[:29] != "Error: an error object\n\tat co" {
		t.Fatalf("error message %q", m)
	}
}

func TestLogRing(t *testing.T) {
	s := newLogBook(3)
	s.now = func() time.Time { return time.UnixMicro(0) } // seq from 1
	for i := 0; i < 5; i++ {
		s.Add("w", "v", "log", string(rune('a'+i)))
	}
	got := s.List("w", 0, 10)
	if len(got) != 3 || got[0].Seq != 3 || got[0].Message != "c" || got[2].Seq != 5 {
		t.Fatalf("%+v", got)
	}
	if got := s.List("w", 3, 1); len(got) != 1 || got[0].Seq != 4 {
		t.Fatalf("%+v", got)
	}
	if got := s.List("other", 0, 10); len(got) != 0 {
		t.Fatalf("%+v", got)
	}
	long := make([]byte, maxLogMessageBytes+10)
	for i := range long {
		long[i] = 'x'
	}
	s.Add("w", "v", "log", string(long))
	if m := s.List("w", 5, 1)[0].Message; len(m) != maxLogMessageBytes+len("…") {
		t.Fatalf("long message kept %d bytes", len(m))
	}
}

// A new LogBook (the host restarted) starts every worker's seq above the
// last seq of the previous one, so a reader's after= cursor keeps working.
func TestLogSeqContinuesAcrossANewBook(t *testing.T) {
	clock := time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
	before := newLogBook(10)
	before.now = func() time.Time { return clock }
	for range 1000 {
		before.Add("w", "v", "log", "x")
	}
	last := before.List("w", 0, 1000)
	cursor := last[len(last)-1].Seq
	clock = clock.Add(2 * time.Millisecond) // a restart takes longer than 1000 lines' worth of microseconds
	after := newLogBook(10)
	after.now = func() time.Time { return clock }
	after.Add("w", "v", "log", "after the restart")
	if got := after.List("w", cursor, 10); len(got) != 1 || got[0].Message != "after the restart" || got[0].Seq <= cursor {
		t.Fatalf("after=%d on the new book: %+v", cursor, got)
	}
}

func TestUnhandledRejectionIsLogged(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := queueVersion(t, "v-unhandled", "unhandled")
	if err := runBatch(t, rt, newFakeSettler(), v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	logs := rt.Logs(v.WorkerUID, 0, 100)
	if len(logs) != 1 || logs[0].Level != "error" || !strings.Contains(logs[0].Message, "Uncaught (in promise) unknown_message") {
		t.Fatalf("logs %+v", logs)
	}
}

// wakeOnlyWaiter is a Waiter that returns only when woken: the runtime
// must call Wake whenever the loop has work or the invocation ends.
type wakeOnlyWaiter struct{ woken chan struct{} }

func (w *wakeOnlyWaiter) Wait(context.Context, <-chan struct{}) { <-w.woken }

func (w *wakeOnlyWaiter) Wake(context.Context) {
	select {
	case w.woken <- struct{}{}:
	default:
	}
}

// stuckSender starts sends that never complete.
type stuckSender struct{ fakeSender }

func (*stuckSender) StartSend(context.Context, string, string, string, []abi.OutgoingMessage, func([]string, error)) {
}

// TestWaiterIsWoken: a Waiter's Wait ends when a timer fires and when the
// invocation reaches its time limit, whatever it waits for.
func TestWaiterIsWoken(t *testing.T) {
	rt := New(Options{Waiter: &wakeOnlyWaiter{woken: make(chan struct{}, 1)}, Sender: &stuckSender{},
		InvocationTimeout: 300 * time.Millisecond})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-woken", "byBody")
	if err := runBodies(t, rt, s, v, "b1", "timerThenAck"); err != nil {
		t.Fatal(err)
	}
	if got := s.settlements("b1"); !reflect.DeepEqual(got, []abi.Settlement{{Kind: abi.AcknowledgeAll}}) {
		t.Fatalf("settlements %+v", got)
	}
	start := time.Now()
	err := runBatch(t, rt, s, queueVersion(t, "v-stuck", "sends"), "b2", 1)
	if !errors.Is(err, ErrTimeout) || time.Since(start) > 5*time.Second {
		t.Fatalf("HandleBatch with a send that never completes = %v after %s", err, time.Since(start))
	}
}
