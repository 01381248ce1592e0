package controller

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// noteForm is a tiny Form registered only here: one field (text) and one
// reference (a queue). Its effect is a map of the notes applied; its
// observation says whether the queue it names exists. It is the proof that
// a Form lands in one file: admission, Operations and observation all go
// through the registry.
type noteForm struct {
	mu      sync.Mutex
	applied map[string]string // uid -> text, as the effect left it
}

const noteURL = "https://example.test/forms/Note/0.1.0/"

type noteSpec struct {
	Text  string `json:"text"`
	Queue struct {
		ResourceUID string `json:"resourceUid"`
	} `json:"queue"`
}

func (*noteForm) URL() string         { return noteURL }
func (*noteForm) Name() string        { return "Note 0.1.0" }
func (*noteForm) Offerings() []string { return []string{OfferingEmbedded} }

func (*noteForm) Validate(spec, _ []byte) ([]schemas.Violation, error) {
	sp, err := decodeSpec[noteSpec](spec)
	if err != nil {
		return nil, schemas.ErrNotJSON
	}
	if sp.Text == "" {
		return []schemas.Violation{{Pointer: "/spec/text", Detail: "required"}}, nil
	}
	return nil, nil
}

func (*noteForm) References(spec []byte) ([]Reference, error) {
	sp, err := decodeSpec[noteSpec](spec)
	if err != nil {
		return nil, err
	}
	return []Reference{{"/spec/queue/resourceUid", sp.Queue.ResourceUID, schemas.FormAtLeastOnceQueue}}, nil
}

func (*noteForm) Prepare(context.Context, *Env, *store.Resource, []byte) error { return nil }

func (*noteForm) CheckUpdate(cur store.Resource, spec, _ []byte) error {
	a, _ := decodeSpec[noteSpec](cur.Spec)
	b, _ := decodeSpec[noteSpec](spec)
	if a.Queue != b.Queue {
		return problem.Unprocessable(problem.CodeInvalidSpec, "queue is immutable").WithPointer("/spec/queue", "cannot change")
	}
	return nil
}

// Admit: at most one note per queue.
func (*noteForm) Admit(ctx context.Context, sp *Space, rec store.Resource, _ bool) error {
	s, _ := decodeSpec[noteSpec](rec.Spec)
	users, err := sp.ReferencedBy(ctx, s.Queue.ResourceUID)
	if err != nil {
		return err
	}
	for _, u := range users {
		if u.Resource.FormURL == noteURL {
			return problem.Conflict(problem.CodeConsumerConflict, "the queue has a note")
		}
	}
	return nil
}

func (f *noteForm) Apply(_ context.Context, _ *Env, ch Change) ([]store.Mutation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch.Kind == KindDelete {
		delete(f.applied, ch.UID)
		return nil, nil
	}
	s, err := decodeSpec[noteSpec](ch.Record.Spec)
	if err != nil {
		return nil, err
	}
	f.applied[ch.UID] = s.Text
	return nil, nil
}

func (*noteForm) Undo(context.Context, *Env, Change) Failure { return FailUnknown }

func (*noteForm) Observe(_ context.Context, _ *Env, r store.Resource, get Lookup) (json.RawMessage, bool) {
	s, err := decodeSpec[noteSpec](r.Spec)
	if err != nil {
		return nil, false
	}
	q, ok := get(s.Queue.ResourceUID)
	b, _ := json.Marshal(map[string]bool{"queueExists": ok && q.State != store.StateDeleting})
	return b, true
}

func (f *noteForm) Rebuild(_ context.Context, env *Env, r store.Resource, _ string) error {
	_, err := f.Apply(context.Background(), env, Change{Kind: KindUpdate, UID: r.UID, Record: &r})
	return err
}

func (f *noteForm) text(uid string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.applied[uid]
	return t, ok
}

// memEngine is the smallest Engine: queues and consumers in maps.
type memEngine struct {
	mu        sync.Mutex
	queues    map[string]delivery.QueueConfig
	consumers map[string]delivery.ConsumerConfig
	counts    map[string]int
	changed   []string // since the last ChangedQueues
	stats     int      // QueueStats calls
	failStats error    // when set, QueueStats fails with it
}

func newMemEngine() *memEngine {
	return &memEngine{queues: map[string]delivery.QueueConfig{}, consumers: map[string]delivery.ConsumerConfig{}, counts: map[string]int{}}
}

// setCount changes a queue's message count as a send or an
// acknowledgement would, and reports it as the engine does.
func (e *memEngine) setCount(uid string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counts[uid] = n
	e.changed = append(e.changed, uid)
}

func (e *memEngine) ChangedQueues() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.changed
	e.changed = nil
	return c
}

func (e *memEngine) AddQueue(_ context.Context, q delivery.QueueConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queues[q.UID] = q
	e.changed = append(e.changed, q.UID)
	return nil
}

func (e *memEngine) UpdateQueue(ctx context.Context, q delivery.QueueConfig) error {
	return e.AddQueue(ctx, q)
}

func (e *memEngine) RemoveQueue(_ context.Context, uid string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.queues, uid)
	e.changed = append(e.changed, uid)
	return nil
}

func (e *memEngine) QueueStats(_ context.Context, uid string) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats++
	if e.failStats != nil {
		return 0, e.failStats
	}
	if _, ok := e.queues[uid]; !ok {
		return 0, abi.ErrUnknownQueue
	}
	return e.counts[uid], nil
}

func (e *memEngine) Attach(_ context.Context, c delivery.ConsumerConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.consumers[c.UID] = c
	return nil
}

func (e *memEngine) UpdateConsumer(ctx context.Context, c delivery.ConsumerConfig) error {
	return e.Attach(ctx, c)
}

func (e *memEngine) Detach(_ context.Context, uid string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.consumers, uid)
	return nil
}

func (e *memEngine) ConsumerAttached(_ context.Context, uid string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.consumers[uid]
	return ok, nil
}

func (e *memEngine) Inspect(_ context.Context, uid string) (delivery.QueueInspection, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.queues[uid]; !ok {
		return delivery.QueueInspection{}, abi.ErrUnknownQueue
	}
	return delivery.QueueInspection{}, nil
}

func (e *memEngine) MessagePage(ctx context.Context, uid string, after delivery.Cursor, _ int) ([]delivery.MessageInfo, delivery.Cursor, bool, error) {
	_, err := e.Inspect(ctx, uid)
	return nil, after, false, err
}

type noWorkers struct{}

func (noWorkers) Compile(context.Context, *abi.Version) ([]string, error) {
	return nil, errors.New("no runtime in this test")
}
func (noWorkers) Evict(string)        {}
func (noWorkers) ForgetWorker(string) {}

var admin = &auth.Principal{ID: "pr_admin", Name: "admin", Grants: []auth.Grant{{Space: "*", Role: auth.RoleEditor}}}

func newTestController(t *testing.T, forms ...Form) (*Controller, store.Store) {
	t.Helper()
	st := store.NewMemory()
	reg := Builtin()
	for _, f := range forms {
		reg.Register(f)
	}
	c, err := New(Options{Store: st, Engine: newMemEngine(), Workers: noWorkers{}, Forms: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ObserveInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c, st
}

// mustRun admits with admit and drives the Operation to success.
func mustRun(t *testing.T, c *Controller, admit func() (store.Operation, bool, error)) store.Operation {
	t.Helper()
	op, _, err := admit()
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	op = c.Run(t.Context(), op)
	if op, err = c.Wait(t.Context(), op.ID, 5*time.Second); err != nil || op.State != store.OpSucceeded {
		t.Fatalf("operation %+v: %v", op, err)
	}
	return op
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var p *problem.Problem
	if !errors.As(err, &p) || p.Code != code {
		t.Fatalf("got %v, want %s", err, code)
	}
}

func TestATestFormGoesThroughTheRegistry(t *testing.T) {
	note := &noteForm{applied: map[string]string{}}
	c, st := newTestController(t, note)
	ctx := t.Context()
	create := func(name, form, spec string) func() (store.Operation, bool, error) {
		return func() (store.Operation, bool, error) {
			return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: name, FormURL: form, Spec: []byte(spec)})
		}
	}
	q := mustRun(t, c, create("q", schemas.FormAtLeastOnceQueue, `{"messageRetentionSeconds":60}`)).ResourceUID
	spec := func(text, queue string) string {
		return `{"text":"` + text + `","queue":{"resourceUid":"` + queue + `"}}`
	}

	// Admission: the Form's schema (step 4), its reference (step 7), its
	// own rule (step 9).
	_, _, err := c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "n", FormURL: noteURL, Spec: []byte(spec("", q))})
	wantCode(t, err, problem.CodeInvalidSpec)
	_, _, err = c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "n", FormURL: noteURL, Spec: []byte(spec("hi", "r-missing"))})
	wantCode(t, err, problem.CodeInvalidReference)
	n := mustRun(t, c, create("n", noteURL, spec("hi", q))).ResourceUID
	_, _, err = c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "n2", FormURL: noteURL, Spec: []byte(spec("again", q))})
	wantCode(t, err, problem.CodeConsumerConflict)

	// Operations: the effect ran, the record is active.
	if txt, ok := note.text(n); !ok || txt != "hi" {
		t.Fatalf("effect after create: %q %v", txt, ok)
	}
	mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Update(ctx, UpdateRequest{Principal: admin, Space: "s", UID: n, Spec: []byte(spec("bye", q))})
	})
	if txt, _ := note.text(n); txt != "bye" {
		t.Fatalf("effect after update: %q", txt)
	}
	_, _, err = c.Update(ctx, UpdateRequest{Principal: admin, Space: "s", UID: n, Spec: []byte(spec("bye", "r-other"))})
	wantCode(t, err, problem.CodeInvalidSpec)

	// Observation, after the Operation and in a full pass.
	r, err := st.Resource(ctx, n)
	if err != nil || string(r.Observed) != `{"queueExists":true}` {
		t.Fatalf("observed after update: %s %v", r.Observed, err)
	}
	c.ObserveAll(ctx)
	if r, _ = st.Resource(ctx, n); string(r.Observed) != `{"queueExists":true}` {
		t.Fatalf("observed after a pass: %s", r.Observed)
	}

	// The reference keeps the queue (dependency_conflict), until the note
	// is deleted.
	_, _, err = c.Delete(ctx, DeleteRequest{Principal: admin, Space: "s", UID: q})
	wantCode(t, err, problem.CodeDependencyConflict)
	mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Delete(ctx, DeleteRequest{Principal: admin, Space: "s", UID: n})
	})
	if _, ok := note.text(n); ok {
		t.Fatal("effect of the delete did not run")
	}
	mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Delete(ctx, DeleteRequest{Principal: admin, Space: "s", UID: q})
	})
}

// The registry refuses a Form URL twice.
func TestRegistryRefusesADuplicate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Builtin().Register(QueueForm{})
}

func (e *memEngine) Purge(ctx context.Context, uid string, extra func(int) []store.Mutation) (int, error) {
	_, err := e.Inspect(ctx, uid)
	return 0, err
}

func (e *memEngine) MoveNext(ctx context.Context, req delivery.MoveRequest) (delivery.MoveResult, error) {
	_, err := e.Inspect(ctx, req.From)
	return delivery.MoveResult{Outcome: delivery.MoveDone, Next: req.After}, err
}

// tubeForm is a second queue Form, registered only here: it is the
// AtLeastOnceQueue's rules under another URL. That it is a queue of the
// engine is said by one method (EngineQueue, promoted from QueueForm), and
// every queue route takes it: its delivery state, its inspection, a purge.
// Nothing but the registry knows its URL.
type tubeForm struct{ QueueForm }

const tubeURL = "https://example.test/forms/Tube/0.1.0/"

func (tubeForm) URL() string         { return tubeURL }
func (tubeForm) Name() string        { return "Tube 0.1.0" }
func (tubeForm) Offerings() []string { return []string{OfferingEmbedded} }

func TestATestQueueFormIsAQueueEverywhere(t *testing.T) {
	note := &noteForm{applied: map[string]string{}}
	c, _ := newTestController(t, tubeForm{}, note)
	ctx := t.Context()
	if got := c.Forms().Queues(); len(got) != 2 || got[1] != tubeURL {
		t.Fatalf("queue Forms: %v", got)
	}
	tube := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "t", FormURL: tubeURL, Spec: []byte(`{"messageRetentionSeconds":60}`)})
	}).ResourceUID
	eng := c.env.Engine.(*memEngine)
	if _, ok := eng.queues[tube]; !ok {
		t.Fatal("the engine does not hold the tube")
	}

	// Delivery state: read, then paused through the engine.
	if d, err := c.Delivery(ctx, admin, "s", tube); err != nil || !d.Active || d.QueueUID != tube {
		t.Fatalf("delivery: %+v %v", d, err)
	}
	if _, err := c.SetDelivery(ctx, admin, "s", tube, false); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if !eng.queues[tube].Paused {
		t.Fatal("the engine's queue is not paused")
	}
	if _, err := c.InspectQueue(ctx, admin, "s", tube); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if _, err := c.SetDelivery(ctx, admin, "s", tube, true); err != nil {
		t.Fatalf("resume: %v", err)
	}
	// A purge is admitted (memEngine removes nothing, so it is not driven
	// here) and journaled under the tube's Form.
	if op, _, err := c.Purge(ctx, QueueOpRequest{Principal: admin, Space: "s", UID: tube}); err != nil || op.FormURL != tubeURL {
		t.Fatalf("purge: %+v %v", op, err)
	}

	// A Form that is not a queue has no delivery state and no messages.
	q := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds":60}`)})
	}).ResourceUID
	n := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "n", FormURL: noteURL, Spec: []byte(`{"text":"hi","queue":{"resourceUid":"` + q + `"}}`)})
	}).ResourceUID
	_, err := c.Delivery(ctx, admin, "s", n)
	wantCode(t, err, problem.CodeNotAQueue)
	_, err = c.InspectQueue(ctx, admin, "s", n)
	wantCode(t, err, problem.CodeNotAQueue)
}
