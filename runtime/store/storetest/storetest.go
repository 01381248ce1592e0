// Package storetest is the conformance suite every store.Store backend
// must pass. A backend's test calls Run with a function that opens the
// backend on a directory; the suite reopens the same directory after Close
// and expects every durable change back.
package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store"
)

// Option adjusts the suite to a backend.
type Option func(*config)

type config struct {
	reopen bool
	fault  func(t *testing.T, on bool)
}

// NoReopen skips every check that needs the state back after Close: for
// backends that are not durable, like store.NewMemory.
func NoReopen() Option { return func(c *config) { c.reopen = false } }

// WithFault gives the suite a way to make the backend unable to persist:
// fault(t, true) arms it (the next Apply must then fail with
// store.ErrUnavailable), fault(t, false) removes it.
func WithFault(fault func(t *testing.T, on bool)) Option {
	return func(c *config) { c.fault = fault }
}

// Opener opens a backend on dir. Opening the same dir again after Close
// must give back all durable state.
type Opener func(t *testing.T, dir string) store.Store

// Run runs the suite.
func Run(t *testing.T, open func(t *testing.T, dir string) store.Store, opts ...Option) {
	c := config{reopen: true}
	for _, o := range opts {
		o(&c)
	}
	h := &harness{open: open, cfg: c}
	t.Run("Resources", h.wrap(testResources))
	t.Run("CountResources", h.wrap(testCountResources))
	t.Run("Operations", h.wrap(testOperations))
	t.Run("OperationList", h.wrap(testOperationList))
	t.Run("ResourcePage", h.wrap(testResourcePage))
	t.Run("Idempotency", h.wrap(testIdempotency))
	t.Run("ExpireRecords", h.wrap(testExpireRecords))
	t.Run("Messages", h.wrap(testMessages))
	t.Run("PullLeases", h.wrap(testPullLeases))
	t.Run("AcceptReplaces", h.wrap(testAcceptReplaces))
	t.Run("DropQueue", h.wrap(testDropQueue))
	t.Run("DeadLetterMetadata", h.wrap(testDeadLetterMetadata))
	t.Run("TraceParent", h.wrap(testTraceParent))
	t.Run("AttemptHistory", h.wrap(testAttemptHistory))
	t.Run("UnknownReferencesAreNoOps", h.wrap(testNoOps))
	t.Run("Copies", h.wrap(testCopies))
	t.Run("AtomicVisibility", h.wrap(testAtomicVisibility))
	t.Run("ManyMessages", h.wrap(testManyMessages))
	t.Run("Closed", h.wrap(testClosed))
	if c.fault != nil {
		t.Run("FaultIsAllOrNothing", h.wrap(testFault))
	}
}

type harness struct {
	open Opener
	cfg  config
}

// env is one subtest's store, reopenable on its directory.
type env struct {
	*testing.T
	h   *harness
	dir string
	s   store.Store
	ctx context.Context
}

func (h *harness) wrap(f func(e *env)) func(t *testing.T) {
	return func(t *testing.T) {
		e := &env{T: t, h: h, dir: t.TempDir(), ctx: context.Background()}
		e.s = h.open(t, e.dir)
		t.Cleanup(func() { e.s.Close() })
		f(e)
	}
}

// reopen closes the store and opens it again, then runs check on each of
// the two stores (before and after) when the backend is durable; otherwise
// just once on the open store.
func (e *env) reopen(check func()) {
	e.Helper()
	check()
	if !e.h.cfg.reopen {
		return
	}
	if err := e.s.Close(); err != nil {
		e.Fatalf("Close: %v", err)
	}
	e.s = e.h.open(e.T, e.dir)
	check()
}

func (e *env) apply(muts ...store.Mutation) {
	e.Helper()
	if err := e.s.Apply(e.ctx, muts...); err != nil {
		e.Fatalf("Apply: %v", err)
	}
}

func (e *env) notFound(err error, what string) {
	e.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		e.Fatalf("%s: got %v, want ErrNotFound", what, err)
	}
}

func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func resource(uid, space, name, form string, at int) store.Resource {
	return store.Resource{
		UID: uid, Space: space, Name: name, FormURL: form, Offering: "default",
		Spec:          json.RawMessage(`{"name":"` + name + `"}`),
		PrivateInputs: json.RawMessage(`{"secret":1}`),
		Observed:      json.RawMessage(`{}`),
		State:         store.StateActive, Generation: 3, ETag: "e-" + uid,
		CreateTime: t0.Add(time.Duration(at) * time.Second),
		UpdateTime: t0.Add(time.Duration(at)*time.Second + time.Millisecond),
		Exports:    []string{"fetch", "queue"},
		Creator:    "principal-1",
	}
}

func testResources(e *env) {
	forms := []string{"https://forms/queue", "https://forms/worker"}
	a := resource("u1", "s1", "alpha", forms[0], 2)
	b := resource("u2", "s1", "beta", forms[1], 1)
	c := resource("u3", "s2", "alpha", forms[0], 1)
	c.PrivateInputs, c.Exports = nil, nil // nil stays nil
	c.CreateTime = b.CreateTime           // ties break on UID
	e.apply(store.PutResource{Resource: a}, store.PutResource{Resource: b}, store.PutResource{Resource: c})
	// Rename a: its old name is free, the new one finds it.
	a2 := a
	a2.Name, a2.Generation, a2.State = "gamma", 4, store.StateUpdating
	a2.Paused = true // the queue extension's inactive delivery round-trips
	e.apply(store.PutResource{Resource: a2})
	e.apply(store.DeleteResource{UID: "u2"})
	e.reopen(func() {
		got, err := e.s.Resource(e.ctx, "u1")
		if err != nil {
			e.Fatal(err)
		}
		same(e.T, "Resource(u1)", got, a2)
		if r, err := e.s.ResourceByName(e.ctx, "s1", "gamma"); err != nil || r.UID != "u1" {
			e.Fatalf("ResourceByName(s1, gamma) = %v, %v", r.UID, err)
		}
		_, err = e.s.ResourceByName(e.ctx, "s1", "alpha")
		e.notFound(err, "old name after rename")
		_, err = e.s.Resource(e.ctx, "u2")
		e.notFound(err, "deleted resource")
		_, err = e.s.ResourceByName(e.ctx, "s1", "beta")
		e.notFound(err, "name of deleted resource")
		if r, err := e.s.ResourceByName(e.ctx, "s2", "alpha"); err != nil {
			e.Fatal(err)
		} else {
			same(e.T, "resource with nil fields", r, c)
		}
		all, _ := e.s.Resources(e.ctx, "", "")
		same(e.T, "Resources(all) order by CreateTime then UID", uids(all), []string{"u3", "u1"})
		s1, _ := e.s.Resources(e.ctx, "s1", "")
		same(e.T, "Resources(s1)", uids(s1), []string{"u1"})
		f, _ := e.s.Resources(e.ctx, "", forms[0])
		same(e.T, "Resources(form)", uids(f), []string{"u3", "u1"})
		none, err := e.s.Resources(e.ctx, "nope", "")
		if err != nil || len(none) != 0 {
			e.Fatalf("Resources(unknown space) = %v, %v", none, err)
		}
	})
	// The name is free again for a new resource.
	d := resource("u4", "s1", "beta", forms[1], 5)
	e.apply(store.PutResource{Resource: d})
	if r, err := e.s.ResourceByName(e.ctx, "s1", "beta"); err != nil || r.UID != "u4" {
		e.Fatalf("reused name: %v %v", r.UID, err)
	}
}

// testCountResources: a store that counts a space's resources
// (store.ResourceCounter) agrees with Resources, across puts, a put that
// replaces, deletes and a reopen.
func testCountResources(e *env) {
	rc, ok := e.s.(store.ResourceCounter)
	if !ok {
		e.Skip("the store does not implement store.ResourceCounter")
	}
	count := func(space string, want int) {
		e.Helper()
		n, err := rc.CountResources(e.ctx, space)
		if err != nil || n != want {
			e.Fatalf("CountResources(%s) = %d, %v; want %d", space, n, err, want)
		}
		if list, _ := e.s.Resources(e.ctx, space, ""); len(list) != want {
			e.Fatalf("Resources(%s) has %d, CountResources %d", space, len(list), want)
		}
	}
	a := resource("u1", "s1", "a", "f", 1)
	e.apply(store.PutResource{Resource: a}, store.PutResource{Resource: resource("u2", "s1", "b", "f", 2)},
		store.PutResource{Resource: resource("u3", "s2", "a", "f", 3)})
	a.Generation++
	e.apply(store.PutResource{Resource: a}) // replaces, does not add
	e.apply(store.DeleteResource{UID: "u2"}, store.DeleteResource{UID: "u-none"})
	e.reopen(func() {
		rc = e.s.(store.ResourceCounter)
		count("s1", 1)
		count("s2", 1)
		count("s3", 0)
	})
	e.apply(store.DeleteResource{UID: "u1"})
	count("s1", 0)
}

// testResourcePage: a store that pages a space's resources
// (store.ResourceLister) gives, page after page, exactly what Resources
// lists in the list's order (CreateTime, then UID; equal times included),
// filtered by Form, never another space's, before and after a reopen; and
// store.PageOf, the fallback of a wrapper, pages the same.
func testResourcePage(e *env) {
	rl, ok := e.s.(store.ResourceLister)
	var muts []store.Mutation
	for i := range 9 {
		form := "f"
		if i%3 == 0 {
			form = "g"
		}
		// every second pair shares a CreateTime, so the UID breaks ties
		muts = append(muts, store.PutResource{Resource: resource(fmt.Sprintf("u%d", 9-i), "s1", fmt.Sprintf("n%d", i), form, 1+i/2)})
	}
	muts = append(muts, store.PutResource{Resource: resource("x1", "s2", "a", "f", 1)})
	e.apply(muts...)
	check := func() {
		e.Helper()
		for _, form := range []string{"", "f", "g"} {
			full, err := e.s.Resources(e.ctx, "s1", form)
			if err != nil {
				e.Fatal(err)
			}
			slices.SortFunc(full, func(a, b store.Resource) int {
				return cmp.Or(a.CreateTime.Compare(b.CreateTime), strings.Compare(a.UID, b.UID))
			})
			for _, limit := range []int{1, 2, 4, 100} {
				pages := map[string]func(store.ResourceQuery) ([]store.Resource, error){
					"PageOf": func(q store.ResourceQuery) ([]store.Resource, error) { return store.PageOf(full, q), nil },
				}
				if ok {
					pages["ResourcePage"] = func(q store.ResourceQuery) ([]store.Resource, error) { return rl.ResourcePage(e.ctx, q) }
				}
				for name, page := range pages {
					var got []store.Resource
					q := store.ResourceQuery{Space: "s1", FormURL: form, Limit: limit}
					for range 20 {
						p, err := page(q)
						if err != nil {
							e.Fatalf("%s: %v", name, err)
						}
						if len(p) > limit {
							e.Fatalf("%s(limit %d) gave %d", name, limit, len(p))
						}
						got = append(got, p...)
						if len(p) < limit {
							break
						}
						q.After = p[len(p)-1]
					}
					if !slices.Equal(uids(got), uids(full)) {
						e.Fatalf("%s form %q limit %d: pages give %v, the listing %v", name, form, limit, uids(got), uids(full))
					}
				}
			}
		}
	}
	check()
	e.reopen(func() {
		rl, ok = e.s.(store.ResourceLister)
		check()
	})
}

func uids(rs []store.Resource) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.UID)
	}
	return out
}

func operation(id string, state string, at int) store.Operation {
	return store.Operation{
		ID: id, Space: "s1", Kind: "create", ResourceUID: "u1", State: state, Effect: store.EffectNone,
		IdempotencyKey: "k-" + id, Principal: "p1", FormURL: "https://forms.example/Thing/1.0.0/",
		Intent:     json.RawMessage(`{"want":"` + id + `"}`),
		CreateTime: t0.Add(time.Duration(at) * time.Second), UpdateTime: t0.Add(time.Hour),
	}
}

// testOperationList: a store that lists Operations (store.OperationLister)
// pages a space's newest first, filters by state and resource, and never
// shows another space's, before and after a reopen.
func testOperationList(e *env) {
	ol, ok := e.s.(store.OperationLister)
	if !ok {
		e.Skip("the store does not implement store.OperationLister")
	}
	var muts []store.Mutation
	for i := range 7 {
		o := operation(fmt.Sprintf("op%d", i), store.OpSucceeded, i/2) // pairs share a CreateTime: the ID breaks the tie
		o.Intent = nil
		if i%3 == 0 {
			o.State, o.ResourceUID = store.OpFailed, "u2"
		}
		muts = append(muts, store.PutOperation{Operation: o})
	}
	other := operation("other", store.OpSucceeded, 9)
	other.Space, other.Intent = "s2", nil
	muts = append(muts, store.PutOperation{Operation: other})
	e.apply(muts...)
	ids := func(q store.OperationQuery) []string {
		list, err := ol.Operations(e.ctx, q)
		if err != nil {
			e.Fatal(err)
		}
		out := []string{}
		for _, o := range list {
			out = append(out, o.ID)
		}
		return out
	}
	e.reopen(func() {
		ol = e.s.(store.OperationLister)
		var pages [][]string
		q := store.OperationQuery{Space: "s1", Limit: 3}
		for {
			page, err := ol.Operations(e.ctx, q)
			if err != nil {
				e.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			var p []string
			for _, o := range page {
				p = append(p, o.ID)
			}
			pages = append(pages, p)
			q.Before = page[len(page)-1]
		}
		same(e.T, "pages of 3", pages, [][]string{{"op6", "op5", "op4"}, {"op3", "op2", "op1"}, {"op0"}})
		same(e.T, "state failed", ids(store.OperationQuery{Space: "s1", State: store.OpFailed, Limit: 10}), []string{"op6", "op3", "op0"})
		same(e.T, "resource u1", ids(store.OperationQuery{Space: "s1", ResourceUID: "u1", Limit: 10}), []string{"op5", "op4", "op2", "op1"})
		same(e.T, "space s2", ids(store.OperationQuery{Space: "s2", Limit: 10}), []string{"other"})
		same(e.T, "space s3", ids(store.OperationQuery{Space: "s3", Limit: 10}), []string{})
	})
}

func testOperations(e *env) {
	o1 := operation("o1", store.OpPending, 3)
	o2 := operation("o2", store.OpRunning, 1)
	o3 := operation("o3", store.OpReconciling, 2)
	o3.Intent = nil
	o4 := operation("o4", store.OpSucceeded, 0)
	o4.Effect = store.EffectApplied
	o1.Progress = json.RawMessage(`{"moved":0,"total":9}`)
	e.apply(store.PutOperation{Operation: o1}, store.PutOperation{Operation: o2}, store.PutOperation{Operation: o3}, store.PutOperation{Operation: o4})
	o2.State, o2.Effect = store.OpFailed, store.EffectPartial
	o2.Error = json.RawMessage(`{"type":"about:blank","status":500}`)
	o2.Progress = json.RawMessage(`{"moved":3,"total":9}`)
	e.apply(store.PutOperation{Operation: o2})
	// A Done Operation reads back without its intent (which can hold a
	// whole resource); its FormURL stays, for authorisation, and so does
	// its progress (a redrive's or a purge's report).
	o2.Intent, o4.Intent = nil, nil
	e.reopen(func() {
		for _, want := range []store.Operation{o1, o2, o3, o4} {
			got, err := e.s.Operation(e.ctx, want.ID)
			if err != nil {
				e.Fatal(err)
			}
			same(e.T, "Operation "+want.ID, got, want)
		}
		_, err := e.s.Operation(e.ctx, "nope")
		e.notFound(err, "unknown operation")
		un, err := e.s.UnfinishedOperations(e.ctx)
		if err != nil {
			e.Fatal(err)
		}
		same(e.T, "UnfinishedOperations (reconciling is not done)", un, []store.Operation{o3, o1})
	})
}

func testExpireRecords(e *env) {
	cutoff := t0.Add(24 * time.Hour)
	old := func(id, state string) store.Operation {
		o := operation(id, state, 0)
		o.UpdateTime = cutoff.Add(-time.Second)
		return o
	}
	oldDone := old("old-done", store.OpSucceeded)
	oldFailed := old("old-failed", store.OpFailed)
	oldRunning := old("old-running", store.OpRunning) // never expires: unresolved
	oldReconciling := old("old-reconciling", store.OpReconciling)
	newDone := operation("new-done", store.OpSucceeded, 0)
	newDone.UpdateTime = cutoff // not before the cutoff
	key := func(op string, at time.Time) store.IdempotencyRecord {
		return store.IdempotencyRecord{Scope: "p|s|POST|/x", Key: "k-" + op, Fingerprint: "f", OperationID: op, CreateTime: at}
	}
	early := t0
	muts := []store.Mutation{}
	for _, o := range []store.Operation{oldDone, oldFailed, oldRunning, oldReconciling, newDone} {
		muts = append(muts, store.PutOperation{Operation: o}, store.PutIdempotency{Record: key(o.ID, early)})
	}
	orphan := key("gone", early)      // its Operation no longer exists
	recent := key("gone-too", cutoff) // not created before the cutoff
	muts = append(muts, store.PutIdempotency{Record: orphan}, store.PutIdempotency{Record: recent})
	e.apply(muts...)

	n, err := e.s.ExpireRecords(e.ctx, cutoff)
	if err != nil {
		e.Fatal(err)
	}
	// old-done, old-failed, and the keys of those two and of "gone".
	same(e.T, "records expired", n, 5)
	e.reopen(func() {
		for _, id := range []string{oldDone.ID, oldFailed.ID} {
			_, err := e.s.Operation(e.ctx, id)
			e.notFound(err, "expired Operation "+id)
			_, err = e.s.Idempotency(e.ctx, "p|s|POST|/x", "k-"+id)
			e.notFound(err, "key of expired Operation "+id)
		}
		_, err := e.s.Idempotency(e.ctx, orphan.Scope, orphan.Key)
		e.notFound(err, "old key of a missing Operation")
		for _, id := range []string{oldRunning.ID, oldReconciling.ID, newDone.ID} {
			if _, err := e.s.Operation(e.ctx, id); err != nil {
				e.Fatalf("Operation %s must stay: %v", id, err)
			}
			if _, err := e.s.Idempotency(e.ctx, "p|s|POST|/x", "k-"+id); err != nil {
				e.Fatalf("the key of Operation %s must stay: %v", id, err)
			}
		}
		if _, err := e.s.Idempotency(e.ctx, recent.Scope, recent.Key); err != nil {
			e.Fatalf("a key created at the cutoff must stay: %v", err)
		}
	})
	n, err = e.s.ExpireRecords(e.ctx, cutoff)
	if err != nil {
		e.Fatal(err)
	}
	same(e.T, "records expired by a second call", n, 0)
	// DeleteOperation of an unknown ID is a no-op.
	e.apply(store.DeleteOperation{ID: "nope"})
}

func testIdempotency(e *env) {
	r1 := store.IdempotencyRecord{Scope: "p|s|POST|/x", Key: "k1", Fingerprint: "f1", OperationID: "o1", CreateTime: t0}
	r2 := store.IdempotencyRecord{Scope: "p|s|POST|/x", Key: "k2", Fingerprint: "f2", OperationID: "o2", CreateTime: t0}
	r3 := r1
	// The server joins a scope's parts with NUL bytes: any bytes round-trip.
	r3.Scope = "principal\x00space\x00POST\x00/x"
	e.apply(store.PutIdempotency{Record: r1}, store.PutIdempotency{Record: r2}, store.PutIdempotency{Record: r3})
	r2.Fingerprint = "f2b"
	e.apply(store.PutIdempotency{Record: r2}, store.DeleteIdempotency{Scope: r1.Scope, Key: r1.Key})
	e.reopen(func() {
		_, err := e.s.Idempotency(e.ctx, r1.Scope, r1.Key)
		e.notFound(err, "deleted idempotency record")
		for _, want := range []store.IdempotencyRecord{r2, r3} {
			got, err := e.s.Idempotency(e.ctx, want.Scope, want.Key)
			if err != nil {
				e.Fatal(err)
			}
			same(e.T, "Idempotency", got, want)
		}
	})
}

func msg(q, id string, at int64, body string) store.AcceptMessage {
	return store.AcceptMessage{
		Message: store.Message{Queue: q, ID: id, AcceptedAt: at, VisibleAt: at + 10, Size: len(body)},
		Body:    []byte(body),
	}
}

func (e *env) body(q, id, want string) {
	e.Helper()
	b, err := store.Body(e.ctx, e.s, q, id)
	if err != nil || string(b) != want {
		e.Fatalf("Body(%s, %s) = %q, %v; want %q", q, id, b, err, want)
	}
}

func testMessages(e *env) {
	e.apply(msg("q1", "m3", 300, "third"), msg("q1", "m1", 100, "first"), msg("q1", "m2", 100, "second"),
		msg("q2", "m1", 50, "other queue"))
	e.apply(store.DeliverMessages{Queue: "q1", Batch: "b1", IDs: []string{"m1", "m2", "nope"}})
	e.apply(store.DeliverMessages{Queue: "q1", Batch: "b2", IDs: []string{"m1"}})
	e.apply(store.RetryMessage{Queue: "q1", ID: "m2", VisibleAt: 999})
	e.apply(store.RemoveMessages{Queue: "q1", IDs: []string{"m3"}, Reason: store.RemovedAcknowledged})
	e.reopen(func() {
		got, err := e.s.Messages(e.ctx, "q1")
		if err != nil {
			e.Fatal(err)
		}
		want := []store.Message{
			{Queue: "q1", ID: "m1", AcceptedAt: 100, VisibleAt: 110, Attempts: 2, Lease: "b2", Size: 5},
			{Queue: "q1", ID: "m2", AcceptedAt: 100, VisibleAt: 999, Attempts: 1, Size: 6},
		}
		same(e.T, "Messages(q1), by AcceptedAt then ID", got, want)
		m, err := e.s.Message(e.ctx, "q1", "m1")
		if err != nil {
			e.Fatal(err)
		}
		same(e.T, "Message(q1, m1)", m, want[0])
		_, err = e.s.Message(e.ctx, "q1", "m3")
		e.notFound(err, "removed message")
		_, err = store.Body(e.ctx, e.s, "q1", "m3")
		e.notFound(err, "body of removed message")
		_, err = e.s.Message(e.ctx, "q9", "m1")
		e.notFound(err, "message of unknown queue")
		if n, err := e.s.MessageCount(e.ctx, "q1"); n != 2 || err != nil {
			e.Fatalf("MessageCount(q1) = %d, %v", n, err)
		}
		if n, err := e.s.MessageCount(e.ctx, "q9"); n != 0 || err != nil {
			e.Fatalf("MessageCount(q9) = %d, %v", n, err)
		}
		if l, err := e.s.Messages(e.ctx, "q9"); len(l) != 0 || err != nil {
			e.Fatalf("Messages(q9) = %v, %v", l, err)
		}
		e.body("q1", "m1", "first")
		e.body("q1", "m2", "second")
		e.body("q2", "m1", "other queue")
		// A batch's bodies in one call, in the order asked, with nil for
		// a message the queue does not hold.
		bs, err := e.s.Bodies(e.ctx, "q1", []string{"m2", "m3", "m1", "nope"})
		if err != nil || len(bs) != 4 || string(bs[0]) != "second" || bs[1] != nil || string(bs[2]) != "first" || bs[3] != nil {
			e.Fatalf("Bodies(q1, m2 m3 m1 nope) = %q, %v", bs, err)
		}
		if bs, err := e.s.Bodies(e.ctx, "q9", []string{"m1"}); err != nil || len(bs) != 1 || bs[0] != nil {
			e.Fatalf("Bodies of an unknown queue = %q, %v", bs, err)
		}
	})
	for _, r := range []string{store.RemovedExpired, store.RemovedDiscarded, store.RemovedDeadLettered} {
		e.apply(msg("q3", r, 1, r))
		e.apply(store.RemoveMessages{Queue: "q3", IDs: []string{r}, Reason: r})
	}
	if n, _ := e.s.MessageCount(e.ctx, "q3"); n != 0 {
		e.Fatalf("q3 holds %d after removals", n)
	}
}

// testPullLeases: a pull consumer's lease (spec/peers.md §Pull consumers)
// is a delivery that also sets the visible time to the lease's expiry, and
// an extension moves the visible time of the messages the lease still
// holds, and only theirs; both survive a reopen, so that a restart keeps an
// unexpired lease.
func testPullLeases(e *env) {
	e.apply(msg("q", "a", 100, "a"), msg("q", "b", 100, "b"), msg("q", "c", 100, "c"))
	e.apply(store.DeliverMessages{Queue: "q", Batch: "L1", IDs: []string{"a", "b", "nope"}, VisibleAt: 5000})
	e.apply(store.DeliverMessages{Queue: "q", Batch: "L2", IDs: []string{"c"}, VisibleAt: 6000})
	// a is retried (its lease ends); the extension of L1 then moves only b,
	// and one of L1 naming c (held by L2) changes nothing.
	e.apply(store.RetryMessage{Queue: "q", ID: "a", VisibleAt: 700})
	e.apply(store.ExtendLease{Queue: "q", Lease: "L1", IDs: []string{"a", "b", "c", "nope"}, VisibleAt: 9000},
		store.ExtendLease{Queue: "nope", Lease: "L1", IDs: []string{"b"}, VisibleAt: 1})
	e.reopen(func() {
		got, err := e.s.Messages(e.ctx, "q")
		if err != nil {
			e.Fatal(err)
		}
		want := []store.Message{
			{Queue: "q", ID: "a", AcceptedAt: 100, VisibleAt: 700, Attempts: 1, Size: 1},
			{Queue: "q", ID: "b", AcceptedAt: 100, VisibleAt: 9000, Attempts: 1, Lease: "L1", Size: 1},
			{Queue: "q", ID: "c", AcceptedAt: 100, VisibleAt: 6000, Attempts: 1, Lease: "L2", Size: 1},
		}
		same(e.T, "messages after pull leases and an extension", got, want)
	})
	// A push delivery (VisibleAt 0) leaves the visible time as it is.
	e.apply(store.DeliverMessages{Queue: "q", Batch: "b3", IDs: []string{"a"}})
	e.reopen(func() {
		m, err := e.s.Message(e.ctx, "q", "a")
		if err != nil || m.VisibleAt != 700 || m.Attempts != 2 || m.Lease != "b3" {
			e.Fatalf("after a push delivery: %+v, %v", m, err)
		}
	})
}

func testAcceptReplaces(e *env) {
	e.apply(msg("q", "m", 1, "old body"))
	e.apply(store.DeliverMessages{Queue: "q", Batch: "b", IDs: []string{"m"}})
	repl := msg("q", "m", 1, "the new body")
	repl.Message.Attempts, repl.Message.Lease, repl.Message.VisibleAt = 7, "b9", 77
	e.apply(repl)
	e.reopen(func() {
		m, err := e.s.Message(e.ctx, "q", "m")
		if err != nil {
			e.Fatal(err)
		}
		same(e.T, "replaced message", m, repl.Message)
		e.body("q", "m", "the new body")
		if n, _ := e.s.MessageCount(e.ctx, "q"); n != 1 {
			e.Fatalf("MessageCount = %d after replacing", n)
		}
	})
}

func testDropQueue(e *env) {
	e.apply(msg("q", "a", 1, "a"), msg("q", "b", 2, "b"), msg("keep", "a", 1, "kept"))
	e.apply(store.DropQueue{Queue: "q"})
	e.reopen(func() {
		if n, _ := e.s.MessageCount(e.ctx, "q"); n != 0 {
			e.Fatalf("dropped queue holds %d", n)
		}
		_, err := store.Body(e.ctx, e.s, "q", "a")
		e.notFound(err, "body in dropped queue")
		e.body("keep", "a", "kept")
	})
	// A dropped queue can be used again.
	e.apply(msg("q", "a", 3, "again"))
	e.body("q", "a", "again")
}

// testDeadLetterMetadata: a message's dead-letter metadata is durable with
// it, survives delivery, retry and replacement by a message that carries it
// again (compaction's rewrite), and goes with the message (removal,
// DropQueue, replacement without it); a message without it reads back nil.
func testDeadLetterMetadata(e *env) {
	dl := &store.DeadLetter{SourceQueue: "src-uid", SourceQueueName: "tasks", Consumer: "c-uid", ConsumerName: "tasks-consumer",
		Reason: store.ReasonRetriesExhausted, Attempts: 4, OriginalID: "orig-1", DeadLetteredAt: 1700000000123}
	a := msg("dlq", "d1", 10, "dead one")
	a.Message.DeadLetter = dl
	b := msg("dlq", "d2", 11, "dead two")
	b.Message.DeadLetter = &store.DeadLetter{SourceQueue: "src2", Reason: store.ReasonRetriesExhausted, Attempts: 1}
	e.apply(a, b, msg("dlq", "plain", 12, "sent directly"),
		store.RemoveMessages{Queue: "src-uid", IDs: []string{"orig-1"}, Reason: store.RemovedDeadLettered})
	// Apply keeps no reference: changing the caller's value changes nothing.
	dl.Reason = "changed by the caller"
	e.apply(store.DeliverMessages{Queue: "dlq", Batch: "b1", IDs: []string{"d1"}})
	e.apply(store.RetryMessage{Queue: "dlq", ID: "d1", VisibleAt: 500})
	e.reopen(func() {
		got, err := e.s.Message(e.ctx, "dlq", "d1")
		if err != nil {
			e.Fatal(err)
		}
		want := store.Message{Queue: "dlq", ID: "d1", AcceptedAt: 10, VisibleAt: 500, Attempts: 1, Size: 8,
			DeadLetter: &store.DeadLetter{SourceQueue: "src-uid", SourceQueueName: "tasks", Consumer: "c-uid", ConsumerName: "tasks-consumer",
				Reason: store.ReasonRetriesExhausted, Attempts: 4, OriginalID: "orig-1", DeadLetteredAt: 1700000000123}}
		same(e.T, "Message(dlq, d1)", got, want)
		all, err := e.s.Messages(e.ctx, "dlq")
		if err != nil || len(all) != 3 {
			e.Fatalf("Messages(dlq) = %v, %v", all, err)
		}
		same(e.T, "Messages(dlq)[0]", all[0], want)
		if all[1].DeadLetter == nil || all[1].DeadLetter.SourceQueue != "src2" || all[1].DeadLetter.Attempts != 1 {
			e.Fatalf("Messages(dlq)[1].DeadLetter = %#v", all[1].DeadLetter)
		}
		if all[2].DeadLetter != nil {
			e.Fatalf("a message sent directly has dead-letter metadata %#v", all[2].DeadLetter)
		}
		// A read returns a copy.
		got.DeadLetter.Reason = "changed by a reader"
		if again, _ := e.s.Message(e.ctx, "dlq", "d1"); again.DeadLetter.Reason != store.ReasonRetriesExhausted {
			e.Fatalf("a reader changed the stored metadata: %#v", again.DeadLetter)
		}
	})
	// Replacing a message without metadata drops it; removing and
	// accepting the same ID again does not bring it back.
	e.apply(msg("dlq", "d2", 11, "dead two"))
	e.apply(store.RemoveMessages{Queue: "dlq", IDs: []string{"d1"}, Reason: store.RemovedRedriven})
	e.apply(msg("dlq", "d1", 13, "new d1"))
	e.reopen(func() {
		for _, id := range []string{"d1", "d2"} {
			m, err := e.s.Message(e.ctx, "dlq", id)
			if err != nil || m.DeadLetter != nil {
				e.Fatalf("Message(dlq, %s) = %#v, %v; want no dead-letter metadata", id, m, err)
			}
		}
	})
	// DropQueue drops the metadata with the messages.
	e.apply(a)
	e.apply(store.DropQueue{Queue: "dlq"})
	e.apply(msg("dlq", "d1", 14, "after the drop"))
	e.reopen(func() {
		if m, err := e.s.Message(e.ctx, "dlq", "d1"); err != nil || m.DeadLetter != nil {
			e.Fatalf("after DropQueue: %#v, %v", m, err)
		}
	})
}

// testTraceParent: a message's trace context is durable with it, alone
// or beside dead-letter metadata, survives delivery and retry, and goes
// with the message (removal, DropQueue, replacement without it).
func testTraceParent(e *env) {
	const tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const tp2 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	a := msg("q", "t1", 10, "traced")
	a.Message.TraceParent = tp1
	b := msg("q", "t2", 11, "traced dead letter")
	b.Message.TraceParent = tp2
	b.Message.DeadLetter = &store.DeadLetter{SourceQueue: "src", Reason: store.ReasonRetriesExhausted, Attempts: 2, OriginalID: "o"}
	e.apply(a, b, msg("q", "plain", 12, "untraced"))
	e.apply(store.DeliverMessages{Queue: "q", Batch: "b1", IDs: []string{"t1", "t2"}})
	e.apply(store.RetryMessage{Queue: "q", ID: "t1", VisibleAt: 500})
	e.reopen(func() {
		got, err := e.s.Message(e.ctx, "q", "t1")
		if err != nil {
			e.Fatal(err)
		}
		same(e.T, "Message(q, t1)", got, store.Message{Queue: "q", ID: "t1", AcceptedAt: 10, VisibleAt: 500, Attempts: 1, Size: 6, TraceParent: tp1})
		all, err := e.s.Messages(e.ctx, "q")
		if err != nil || len(all) != 3 {
			e.Fatalf("Messages(q) = %v, %v", all, err)
		}
		if all[1].TraceParent != tp2 || all[1].DeadLetter == nil || all[1].DeadLetter.OriginalID != "o" || all[1].DeadLetter.Attempts != 2 {
			e.Fatalf("Messages(q)[1] = %#v; want its trace context and its dead-letter metadata", all[1])
		}
		if all[2].TraceParent != "" {
			e.Fatalf("an untraced message has trace context %q", all[2].TraceParent)
		}
	})
	e.apply(msg("q", "t1", 10, "replaced"))
	e.apply(store.RemoveMessages{Queue: "q", IDs: []string{"t2"}, Reason: store.RemovedAcknowledged})
	e.apply(msg("q", "t2", 13, "new t2"))
	e.reopen(func() {
		for _, id := range []string{"t1", "t2"} {
			if m, err := e.s.Message(e.ctx, "q", id); err != nil || m.TraceParent != "" {
				e.Fatalf("Message(q, %s) = %#v, %v; want no trace context", id, m, err)
			}
		}
	})
	e.apply(a)
	e.apply(store.DropQueue{Queue: "q"})
	e.apply(msg("q", "t1", 14, "after the drop"))
	e.reopen(func() {
		if m, err := e.s.Message(e.ctx, "q", "t1"); err != nil || m.TraceParent != "" {
			e.Fatalf("after DropQueue: %#v, %v", m, err)
		}
	})
}

func testNoOps(e *env) {
	e.apply(msg("q", "m", 1, "x"))
	e.apply(
		store.DeleteResource{UID: "nope"},
		store.DeleteIdempotency{Scope: "nope", Key: "nope"},
		store.DeliverMessages{Queue: "nope", Batch: "b", IDs: []string{"m"}},
		store.DeliverMessages{Queue: "q", Batch: "b", IDs: []string{"nope"}},
		store.RetryMessage{Queue: "q", ID: "nope", VisibleAt: 5},
		store.RetryMessage{Queue: "nope", ID: "m", VisibleAt: 5},
		store.RemoveMessages{Queue: "q", IDs: []string{"nope"}, Reason: store.RemovedAcknowledged},
		store.RemoveMessages{Queue: "nope", IDs: []string{"m"}, Reason: store.RemovedAcknowledged},
		store.DropQueue{Queue: "nope"},
	)
	e.apply() // an empty Apply is fine too
	e.reopen(func() {
		m, err := e.s.Message(e.ctx, "q", "m")
		if err != nil {
			e.Fatal(err)
		}
		same(e.T, "untouched message", m, msg("q", "m", 1, "x").Message)
	})
}

func testCopies(e *env) {
	r := resource("u1", "s", "n", "f", 0)
	o := operation("o1", store.OpReconciling, 0) // not Done: its intent stays
	o.Error = json.RawMessage(`{"status":500}`)
	m := msg("q", "m", 1, "body")
	e.apply(store.PutResource{Resource: r}, store.PutOperation{Operation: o}, m)
	// The caller's values after Apply are the caller's.
	r.Spec[2], r.Exports[0], o.Error[2], o.Intent[2], m.Body[0] = 'X', "X", 'X', 'X', 'X'
	want := resource("u1", "s", "n", "f", 0)

	got, _ := e.s.Resource(e.ctx, "u1")
	same(e.T, "resource after the caller changed its input", got, want)
	got.Spec[2], got.Observed[0], got.PrivateInputs[0], got.Exports[0] = 'Y', 'Y', 'Y', "Y"
	got, _ = e.s.ResourceByName(e.ctx, "s", "n")
	same(e.T, "resource after the caller changed a read", got, want)
	got.Spec[2] = 'Z'
	list, _ := e.s.Resources(e.ctx, "", "")
	same(e.T, "listed resource", list[0], want)
	list[0].Spec[2] = 'W'
	got, _ = e.s.Resource(e.ctx, "u1")
	same(e.T, "resource after the caller changed a listed one", got, want)

	op, _ := e.s.Operation(e.ctx, "o1")
	if string(op.Error) != `{"status":500}` || string(op.Intent) != `{"want":"o1"}` {
		e.Fatalf("operation after the caller changed its input: %s %s", op.Error, op.Intent)
	}
	op.Error[0] = 'X'
	op, _ = e.s.Operation(e.ctx, "o1")
	if string(op.Error) != `{"status":500}` {
		e.Fatalf("operation after the caller changed a read: %s", op.Error)
	}
	b, _ := store.Body(e.ctx, e.s, "q", "m")
	if string(b) != "body" {
		e.Fatalf("body after the caller changed its input: %q", b)
	}
	b[0] = 'X'
	e.body("q", "m", "body")
	ms, _ := e.s.Messages(e.ctx, "q")
	ms[0].Attempts = 99
	if mm, _ := e.s.Message(e.ctx, "q", "m"); mm.Attempts != 0 {
		e.Fatal("Messages returned an alias")
	}
}

// testAtomicVisibility checks that readers never see part of an Apply: each
// Apply moves one message from queue a to queue b, so a+b is constant.
func testAtomicVisibility(e *env) {
	const n = 200
	for i := range n {
		e.apply(msg("a", fmt.Sprint(i), int64(i), "x"))
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			// Moves only go from a to b, so probing b then a can only find
			// both if a move was half applied, and probing a then b can only
			// find neither if so.
			i := fmt.Sprint(time.Now().UnixNano() % n)
			_, errB := e.s.Message(e.ctx, "b", i)
			_, errA := e.s.Message(e.ctx, "a", i)
			if errA == nil && errB == nil {
				e.Error("message in both queues")
				return
			}
			_, errA = e.s.Message(e.ctx, "a", i)
			_, errB = e.s.Message(e.ctx, "b", i)
			if errA != nil && errB != nil {
				e.Error("message in neither queue")
				return
			}
		}
	})
	for i := range n {
		id := fmt.Sprint(i)
		e.apply(store.RemoveMessages{Queue: "a", IDs: []string{id}, Reason: store.RemovedDeadLettered}, msg("b", id, int64(i), "x"))
	}
	close(done)
	wg.Wait()
	e.reopen(func() {
		na, _ := e.s.MessageCount(e.ctx, "a")
		nb, _ := e.s.MessageCount(e.ctx, "b")
		if na != 0 || nb != n {
			e.Fatalf("counts a=%d b=%d", na, nb)
		}
	})
}

func testManyMessages(e *env) {
	const n = 3000
	var batch []store.Mutation
	for i := range n {
		batch = append(batch, msg("q", fmt.Sprintf("m%05d", i), int64(i), fmt.Sprintf("body-%d", i)))
		if len(batch) == 100 {
			e.apply(batch...)
			batch = nil
		}
	}
	var gone []string
	for i := 0; i < n; i += 3 {
		gone = append(gone, fmt.Sprintf("m%05d", i))
	}
	e.apply(store.RemoveMessages{Queue: "q", IDs: gone, Reason: store.RemovedAcknowledged})
	e.reopen(func() {
		ms, err := e.s.Messages(e.ctx, "q")
		if err != nil {
			e.Fatal(err)
		}
		if len(ms) != n-len(gone) {
			e.Fatalf("%d messages, want %d", len(ms), n-len(gone))
		}
		if !slices.IsSortedFunc(ms, func(a, b store.Message) int { return int(a.AcceptedAt - b.AcceptedAt) }) {
			e.Fatal("Messages not ordered by AcceptedAt")
		}
		for _, i := range []int{1, 2, n - 1} {
			e.body("q", fmt.Sprintf("m%05d", i), fmt.Sprintf("body-%d", i))
		}
		if c, _ := e.s.MessageCount(e.ctx, "q"); c != len(ms) {
			e.Fatalf("MessageCount %d, Messages %d", c, len(ms))
		}
	})
}

func testClosed(e *env) {
	e.apply(msg("q", "m", 1, "x"))
	if err := e.s.Close(); err != nil {
		e.Fatal(err)
	}
	if err := e.s.Apply(e.ctx, msg("q", "n", 1, "x")); !errors.Is(err, store.ErrClosed) {
		e.Fatalf("Apply after Close = %v", err)
	}
	if _, err := e.s.Message(e.ctx, "q", "m"); !errors.Is(err, store.ErrClosed) {
		e.Fatalf("Message after Close = %v", err)
	}
	if _, err := store.Body(e.ctx, e.s, "q", "m"); !errors.Is(err, store.ErrClosed) {
		e.Fatalf("Body after Close = %v", err)
	}
	if _, err := e.s.Resources(e.ctx, "", ""); !errors.Is(err, store.ErrClosed) {
		e.Fatalf("Resources after Close = %v", err)
	}
	if e.h.cfg.reopen {
		e.s = e.h.open(e.T, e.dir)
		e.body("q", "m", "x")
	}
}

func testFault(e *env) {
	e.apply(msg("q", "before", 1, "x"), store.PutResource{Resource: resource("u0", "s", "zero", "f", 0)})
	e.h.cfg.fault(e.T, true)
	err := e.s.Apply(e.ctx,
		store.PutResource{Resource: resource("u1", "s", "one", "f", 1)},
		store.DeleteResource{UID: "u0"},
		store.RemoveMessages{Queue: "q", IDs: []string{"before"}, Reason: store.RemovedAcknowledged},
		msg("q", "during", 2, "y"),
	)
	e.h.cfg.fault(e.T, false)
	if !errors.Is(err, store.ErrUnavailable) {
		e.Fatalf("Apply under fault = %v, want ErrUnavailable", err)
	}
	check := func() {
		e.Helper()
		_, err := e.s.Resource(e.ctx, "u1")
		e.notFound(err, "resource of the failed Apply")
		if _, err := e.s.Resource(e.ctx, "u0"); err != nil {
			e.Fatalf("resource deleted by the failed Apply: %v", err)
		}
		_, err = e.s.Message(e.ctx, "q", "during")
		e.notFound(err, "message of the failed Apply")
		e.body("q", "before", "x")
	}
	check()
	e.apply(msg("q", "after", 3, "z"))
	e.reopen(func() {
		check()
		e.body("q", "after", "z")
	})
}
