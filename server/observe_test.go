package server

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

// countingStore counts the record reads and the writes the observer makes.
type countingStore struct {
	store.Store
	reads, applies atomic.Int64
}

func (c *countingStore) Resource(ctx context.Context, uid string) (store.Resource, error) {
	c.reads.Add(1)
	return c.Store.Resource(ctx, uid)
}

func (c *countingStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	c.applies.Add(1)
	return c.Store.Apply(ctx, muts...)
}

func (c *countingStore) ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	return c.Store.(interface {
		ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error)
	}).ResourcesView(ctx, space, formURL)
}

func (h *harness) statsCalls() int {
	h.eng.mu.Lock()
	defer h.eng.mu.Unlock()
	return h.eng.stats
}

// TestIdleObservationReadsNothingMore: a pass that finds nothing changed
// neither writes nor reads records one by one; a change is still written.
func TestIdleObservationReadsNothingMore(t *testing.T) {
	cs := &countingStore{Store: store.NewMemory()}
	h := newHarness(t, cs)
	w, _ := h.worker("s1", "w")
	var qs []string
	for i := range 5 {
		q := h.mustCreate("s1", "q"+string(rune('a'+i)), fQueue, queueSpec())
		h.mustCreate("s1", "c"+string(rune('a'+i)), fConsumer, consumerSpec(q, w))
		qs = append(qs, q)
	}
	h.ctl.ObserveAll(t.Context())
	reads, applies := cs.reads.Load(), cs.applies.Load()
	h.ctl.ObserveAll(t.Context())
	if r, a := cs.reads.Load()-reads, cs.applies.Load()-applies; r != 0 || a != 0 {
		t.Fatalf("an idle pass read %d records and wrote %d times", r, a)
	}
	h.eng.mu.Lock()
	h.eng.counts[qs[2]] = 3
	h.eng.mu.Unlock()
	h.ctl.ObserveAll(t.Context())
	if a := cs.applies.Load() - applies; a != 1 {
		t.Fatalf("a changed count was written %d times", a)
	}
	if n := h.getRes("s1", qs[2]).get("observed", "messageCount"); n != 3.0 {
		t.Fatalf("messageCount %v", n)
	}
	if g := h.getRes("s1", qs[1]); string(mustJSON(g.get("observed"))) != `{"messageCount":0,"queueExists":true}` {
		t.Fatalf("unchanged queue: %s", g.body)
	}
}

// TestObservationSameValueOtherFormIsNotWritten: observed is written only
// when it changes, also when the stored bytes differ from the host's own
// encoding only in form.
func TestObservationSameValueOtherFormIsNotWritten(t *testing.T) {
	cs := &countingStore{Store: store.NewMemory()}
	h := newHarness(t, cs)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	r, err := cs.Store.Resource(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	r.Observed = json.RawMessage(`{ "queueExists": true, "messageCount": 0 }`)
	if err := cs.Store.Apply(t.Context(), store.PutResource{Resource: r}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		reads, applies := cs.reads.Load(), cs.applies.Load()
		h.ctl.ObserveAll(t.Context())
		if r, a := cs.reads.Load()-reads, cs.applies.Load()-applies; a != 0 || r != 0 {
			t.Fatalf("an equal observation was read %d times and written %d times", r, a)
		}
	}
	h.eng.mu.Lock()
	h.eng.counts[q] = 2
	h.eng.mu.Unlock()
	h.ctl.ObserveAll(t.Context())
	if g := h.getRes("s1", q); string(mustJSON(g.get("observed"))) != `{"messageCount":2,"queueExists":true}` {
		t.Fatalf("a changed count: %s", g.body)
	}
}

// TestObserveAfterOnlyWhatTheOperationChanged: the observation after an
// Operation covers its resource and the consumers that observe it, not the
// rest of the space.
func TestObserveAfterOnlyWhatTheOperationChanged(t *testing.T) {
	h := newHarness(t, nil)
	w, _ := h.worker("s1", "w")
	for i := range 20 {
		h.mustCreate("s1", "q"+string(rune('a'+i)), fQueue, queueSpec())
	}
	before := h.statsCalls()
	q := h.mustCreate("s1", "last", fQueue, queueSpec())
	// One QueueStats in the effect, one in the observation.
	if n := h.statsCalls() - before; n > 2 {
		t.Fatalf("creating one queue asked the engine about %d queues", n)
	}
	if g := h.getRes("s1", q); string(mustJSON(g.get("observed"))) != `{"messageCount":0,"queueExists":true}` {
		t.Fatalf("new queue: %s", g.body)
	}
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	if g := h.getRes("s1", c); string(mustJSON(g.get("observed"))) != `{"consumerAttached":true,"queueExists":true,"workerExists":true}` {
		t.Fatalf("new consumer: %s", g.body)
	}
	// The consumer observes its queue: an Operation on the queue
	// re-observes it.
	h.eng.mu.Lock()
	delete(h.eng.consumers, c)
	h.eng.mu.Unlock()
	h.mustPut("s1", q, map[string]any{"messageRetentionSeconds": 7200})
	if g := h.getRes("s1", c); g.get("observed", "consumerAttached") != false {
		t.Fatalf("dependent consumer after its queue's update: %s", g.body)
	}
}
