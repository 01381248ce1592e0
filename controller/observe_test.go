package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// countStore counts record reads and writes, and fails writes on demand.
type countStore struct {
	store.Store
	reads, applies atomic.Int64
	failApply      atomic.Bool
}

func (s *countStore) Resource(ctx context.Context, uid string) (store.Resource, error) {
	s.reads.Add(1)
	return s.Store.Resource(ctx, uid)
}

func (s *countStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	s.applies.Add(1)
	if s.failApply.Load() {
		return errors.New("the store refused the write")
	}
	return s.Store.Apply(ctx, muts...)
}

type observeHarness struct {
	t   *testing.T
	c   *Controller
	st  *countStore
	eng *memEngine
}

func newObserveHarness(t *testing.T, forms ...Form) *observeHarness {
	return newObserveHarnessPaused(t, nil, forms...)
}

func newObserveHarnessPaused(t *testing.T, paused func(space, uid string) bool, forms ...Form) *observeHarness {
	t.Helper()
	h := &observeHarness{t: t, st: &countStore{Store: store.NewMemory()}, eng: newMemEngine()}
	reg := Builtin()
	for _, f := range forms {
		reg.Register(f)
	}
	c, err := New(Options{Store: h.st, Engine: h.eng, Workers: noWorkers{}, Forms: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ObserveInterval: time.Hour, ObservationPaused: paused})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	h.c = c
	return h
}

func (h *observeHarness) create(name, form, spec string) string {
	h.t.Helper()
	return mustRun(h.t, h.c, func() (store.Operation, bool, error) {
		return h.c.Create(h.t.Context(), CreateRequest{Principal: admin, Space: "s", Name: name, FormURL: form, Spec: []byte(spec)})
	}).ResourceUID
}

func (h *observeHarness) observed(uid string) string {
	h.t.Helper()
	r, err := h.st.Store.Resource(h.t.Context(), uid)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(r.Observed)
}

// cost runs f and returns the record reads, the writes and the engine's
// QueueStats calls it made.
func (h *observeHarness) cost(f func()) (reads, applies int64, stats int) {
	r0, a0 := h.st.reads.Load(), h.st.applies.Load()
	h.eng.mu.Lock()
	s0 := h.eng.stats
	h.eng.mu.Unlock()
	f()
	h.eng.mu.Lock()
	s1 := h.eng.stats
	h.eng.mu.Unlock()
	return h.st.reads.Load() - r0, h.st.applies.Load() - a0, s1 - s0
}

// TestObserveChangedDoesNothingWhenNothingChanged: after the first full
// pass, a periodic pass on an idle host reads no record, asks the engine
// about no queue and writes nothing; a count the engine reports changed is
// observed alone, and written.
func TestObserveChangedDoesNothingWhenNothingChanged(t *testing.T) {
	h := newObserveHarness(t)
	ctx := t.Context()
	var qs []string
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		qs = append(qs, h.create(n, schemas.FormAtLeastOnceQueue, `{"messageRetentionSeconds":60}`))
	}
	h.c.ObserveAll(ctx)
	h.c.ObserveChanged(ctx) // what the Operations marked
	for range 3 {
		if r, a, s := h.cost(func() { h.c.ObserveChanged(ctx) }); r != 0 || a != 0 || s != 0 {
			t.Fatalf("an idle pass read %d records, wrote %d times and asked the engine about %d queues", r, a, s)
		}
	}
	h.eng.setCount(qs[2], 7)
	// Its record is read to observe it and again under its lock to
	// write it.
	if r, a, s := h.cost(func() { h.c.ObserveChanged(ctx) }); r != 2 || a != 1 || s != 1 {
		t.Fatalf("one changed count: %d reads, %d writes, %d engine calls; want 2, 1, 1", r, a, s)
	}
	if got := h.observed(qs[2]); got != `{"messageCount":7,"queueExists":true}` {
		t.Fatalf("changed queue observed %s", got)
	}
	for _, q := range []string{qs[0], qs[1], qs[3], qs[4]} {
		if got := h.observed(q); got != `{"messageCount":0,"queueExists":true}` {
			t.Fatalf("unchanged queue observed %s", got)
		}
	}
	// The count goes back: observed follows (no stale value kept).
	h.eng.setCount(qs[2], 0)
	h.c.ObserveChanged(ctx)
	if got := h.observed(qs[2]); got != `{"messageCount":0,"queueExists":true}` {
		t.Fatalf("drained queue observed %s", got)
	}
}

// TestObserveChangedRetriesWhatItCouldNotConfirm: an observation the
// engine could not make keeps the last recorded value and is made on the
// next pass, with no new change reported; so is one whose write failed.
func TestObserveChangedRetriesWhatItCouldNotConfirm(t *testing.T) {
	h := newObserveHarness(t)
	ctx := t.Context()
	q := h.create("q", schemas.FormAtLeastOnceQueue, `{"messageRetentionSeconds":60}`)
	h.c.ObserveAll(ctx)

	h.eng.mu.Lock()
	h.eng.failStats = errors.New("engine busy")
	h.eng.mu.Unlock()
	h.eng.setCount(q, 3)
	h.c.ObserveChanged(ctx)
	if got := h.observed(q); got != `{"messageCount":0,"queueExists":true}` {
		t.Fatalf("an observation that failed changed observed to %s", got)
	}
	h.eng.mu.Lock()
	h.eng.failStats = nil
	h.eng.mu.Unlock()
	h.c.ObserveChanged(ctx)
	if got := h.observed(q); got != `{"messageCount":3,"queueExists":true}` {
		t.Fatalf("the failed observation was not made again: %s", got)
	}

	h.st.failApply.Store(true)
	h.eng.setCount(q, 5)
	h.c.ObserveChanged(ctx)
	h.st.failApply.Store(false)
	if got := h.observed(q); got != `{"messageCount":3,"queueExists":true}` {
		t.Fatalf("a refused write changed observed to %s", got)
	}
	h.c.ObserveChanged(ctx)
	if got := h.observed(q); got != `{"messageCount":5,"queueExists":true}` {
		t.Fatalf("the unrecorded observation was not recorded again: %s", got)
	}
}

// TestObserveChangedFollowsRecordWrites: a record written (as an
// Operation writes it) is observed again on the next pass together with
// what observes it, and a deleted one is forgotten.
func TestObserveChangedFollowsRecordWrites(t *testing.T) {
	note := &noteForm{applied: map[string]string{}}
	h := newObserveHarness(t, note)
	ctx := t.Context()
	q := h.create("q", schemas.FormAtLeastOnceQueue, `{"messageRetentionSeconds":60}`)
	n := h.create("n", noteURL, `{"text":"hi","queue":{"resourceUid":"`+q+`"}}`)
	h.c.ObserveAll(ctx)
	if got := h.observed(n); got != `{"queueExists":true}` {
		t.Fatalf("note observed %s", got)
	}
	// The queue's record goes to deleting (what an accepted delete
	// writes): the note, which observes it, is observed again.
	r, err := h.st.Store.Resource(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	r.State = store.StateDeleting
	m := store.PutResource{Resource: r}
	if err := h.st.Store.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	h.c.indexApplied([]store.Mutation{m})
	h.c.ObserveChanged(ctx)
	if got := h.observed(n); got != `{"queueExists":false}` {
		t.Fatalf("note after its queue went to deleting: %s", got)
	}
	// Deleted: the observer forgets it (and its cached spec).
	h.st.Store.Apply(ctx, store.DeleteResource{UID: n})
	h.c.indexApplied([]store.Mutation{store.DeleteResource{UID: n}})
	h.c.ObserveChanged(ctx)
	h.c.obs.mu.Lock()
	_, kept := h.c.obs.reads[n]
	h.c.obs.mu.Unlock()
	if kept {
		t.Fatal("the observer kept what a deleted resource read")
	}
}

// TestObservationPaused: while the pause hook holds a space, neither the
// observation after an Operation nor a pass observes its resources, so a
// queue created then reads {}; the first pass after the pause observes it.
func TestObservationPaused(t *testing.T) {
	var paused atomic.Bool
	paused.Store(true)
	h := newObserveHarnessPaused(t, func(space, _ string) bool { return paused.Load() && space == "s" })
	ctx := t.Context()
	q := h.create("q", schemas.FormAtLeastOnceQueue, `{"messageRetentionSeconds":60}`)
	h.c.ObserveAll(ctx)
	h.c.ObserveChanged(ctx)
	if got := h.observed(q); got != `{}` {
		t.Fatalf("observed while observation is paused: %s", got)
	}
	paused.Store(false)
	h.c.ObserveChanged(ctx)
	if got := h.observed(q); got != `{"messageCount":0,"queueExists":true}` {
		t.Fatalf("observed after the pause: %s", got)
	}
}
