package controller

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// gatedNote is noteForm whose References, once armed, stops the first
// call that decodes the spec text armed for, until released: the moment a
// re-index is decoding a record's references.
type gatedNote struct {
	*noteForm
	mu      sync.Mutex
	text    string        // the spec text that stops; "" when disarmed
	entered chan struct{} // closed when a call stops
	release chan struct{} // closed to let it go on
}

func (g *gatedNote) arm(text string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.text, g.entered, g.release = text, make(chan struct{}), make(chan struct{})
}

func (g *gatedNote) References(spec []byte) ([]Reference, error) {
	sp, err := decodeSpec[noteSpec](spec)
	g.mu.Lock()
	stop := err == nil && g.text != "" && sp.Text == g.text
	entered, release := g.entered, g.release
	if stop {
		g.text = "" // once
	}
	g.mu.Unlock()
	if stop {
		close(entered)
		<-release
	}
	return g.noteForm.References(spec)
}

// A re-index of a record another host wrote (Reindex, on a cluster's
// notification) runs without the space's lock, while an admission of the
// space reads the index. While it decodes the new record's references, the
// record's earlier references must still be indexed: an admission that
// found the resource naming nothing would delete what it references (or
// admit a second consumer of its queue, or a dead-letter cycle).
// TestClusterAdmissionRaces admitted both requests of a round this way.
func TestReindexNeverHidesAReferrerFromAdmission(t *testing.T) {
	note := &gatedNote{noteForm: &noteForm{applied: map[string]string{}}}
	c, st := newTestController(t, note)
	ctx := t.Context()
	q := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds":60}`)})
	}).ResourceUID
	spec := func(text string) []byte {
		return []byte(`{"text":"` + text + `","queue":{"resourceUid":"` + q + `"}}`)
	}
	n := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "n", FormURL: noteURL, Spec: spec("hi")})
	}).ResourceUID
	// Nothing but the test's Reindex decodes references from here on (no
	// observation pass).
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// Another host updates the note: its next generation, still naming q.
	r, err := st.Resource(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	r.Generation++
	r.Spec = spec("edited elsewhere")
	r.ETag = etagOf(r.Generation, r.Spec)
	if err := st.Apply(ctx, store.PutResource{Resource: r}); err != nil {
		t.Fatal(err)
	}

	// Its notification re-indexes the note, and stops while decoding it;
	// meanwhile q's delete is admitted.
	note.arm("edited elsewhere")
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Reindex(context.WithoutCancel(ctx), n)
	}()
	select {
	case <-note.entered:
	case <-done:
		t.Fatal("Reindex did not decode the note's new generation")
	}
	_, _, err = c.Delete(ctx, DeleteRequest{Principal: admin, Space: "s", UID: q})
	close(note.release)
	<-done
	wantCode(t, err, problem.CodeDependencyConflict)

	// And once it is done.
	_, _, err = c.Delete(ctx, DeleteRequest{Principal: admin, Space: "s", UID: q})
	wantCode(t, err, problem.CodeDependencyConflict)
	if !c.refs.has(n, r.Generation) {
		t.Fatalf("the note is not indexed at generation %d after its re-index", r.Generation)
	}
}

// failingReads is a store whose resource reads fail while fail is set.
type failingReads struct {
	store.Store
	mu   sync.Mutex
	fail bool
}

func (s *failingReads) set(fail bool) {
	s.mu.Lock()
	s.fail = fail
	s.mu.Unlock()
}

func (s *failingReads) Resource(ctx context.Context, uid string) (store.Resource, error) {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail {
		return store.Resource{}, store.ErrUnavailable
	}
	return s.Store.Resource(ctx, uid)
}

// A re-index whose read fails leaves the entry as it was; one that finds
// the record gone drops it.
func TestReindexKeepsTheEntryWhenItCannotRead(t *testing.T) {
	st := &failingReads{Store: store.NewMemory()}
	c, err := New(Options{Store: st, Engine: newMemEngine(), Workers: noWorkers{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r := store.Resource{UID: "r-n", Space: "s", Name: "n", FormURL: noteURL, Generation: 1, State: store.StateActive}
	c.refs.put(r.UID, 1, []Reference{{UID: "r-q"}})

	st.set(true)
	c.Reindex(ctx, r.UID)
	if got := c.refs.referrers("r-q"); !slices.Equal(got, []string{r.UID}) {
		t.Fatalf("after a failed read, q's referrers are %v, want [%s]", got, r.UID)
	}
	st.set(false)
	c.Reindex(ctx, r.UID) // not stored: gone
	if got := c.refs.referrers("r-q"); len(got) != 0 {
		t.Fatalf("after the record was found gone, q's referrers are %v, want none", got)
	}
}

// A record read before a later generation was indexed, and indexed after
// it, does not put the older references back.
func TestRefIndexKeepsTheLaterGeneration(t *testing.T) {
	var x refIndex
	x.put("r-c", 2, []Reference{{UID: "r-q"}, {UID: "r-dlq"}})
	x.put("r-c", 1, []Reference{{UID: "r-q"}})
	if got := x.referrers("r-dlq"); !slices.Equal(got, []string{"r-c"}) {
		t.Fatalf("the dead-letter queue's referrers are %v after a stale put, want [r-c]", got)
	}
	if !x.has("r-c", 1) || !x.has("r-c", 2) || x.has("r-c", 3) {
		t.Fatal("has: want true up to generation 2 only")
	}
	x.put("r-c", 3, []Reference{{UID: "r-q"}})
	if got := x.referrers("r-dlq"); len(got) != 0 {
		t.Fatalf("the dead-letter queue's referrers are %v after generation 3 dropped it, want none", got)
	}
}
