package controller

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// notHeldEngine holds every queue for admission (Inspect) but purges none:
// the engine of a host of an active-active cluster that does not own the
// queue.
type notHeldEngine struct{ *memEngine }

func (notHeldEngine) Purge(context.Context, string, func(int) []store.Mutation) (int, error) {
	return 0, abi.ErrUnknownQueue
}

// A purge whose queue this host's engine does not hold ends failed with no
// effect, instead of waiting for ever.
func TestPurgeOfAQueueTheEngineDoesNotHold(t *testing.T) {
	st := store.NewMemory()
	c, err := New(Options{Store: st, Engine: notHeldEngine{newMemEngine()}, Workers: noWorkers{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ObserveInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	q := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(t.Context(), CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds":60}`)})
	}).ResourceUID
	op, _, err := c.Purge(t.Context(), QueueOpRequest{Principal: admin, Space: "s", UID: q})
	if err != nil {
		t.Fatal(err)
	}
	op = c.Run(t.Context(), op)
	if op, err = c.Wait(t.Context(), op.ID, 5*time.Second); err != nil || op.State != store.OpFailed || op.Effect != store.EffectNone || len(op.Error) == 0 {
		t.Fatalf("purge: %+v %v", op, err)
	}
	// The queue is free again.
	if _, busy := c.inflightOf(q); busy {
		t.Fatal("the failed purge still holds the queue")
	}
}

// Cancelling needs editor of the queue's Form; only an unfinished redrive
// is cancelled.
func TestCancelRefusals(t *testing.T) {
	c, _ := newTestController(t)
	ctx := t.Context()
	q := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds":60}`)})
	})
	viewer := &auth.Principal{ID: "pr_viewer", Name: "viewer", Grants: []auth.Grant{{Space: "*", Role: auth.RoleViewer}}}
	_, err := c.CancelOperation(ctx, viewer, "s", q.ID)
	wantCode(t, err, problem.CodeForbidden)
	_, err = c.CancelOperation(ctx, admin, "s", q.ID)
	wantCode(t, err, problem.CodeNotCancellable)
	_, err = c.CancelOperation(ctx, admin, "other", q.ID)
	wantCode(t, err, problem.CodeNotFound)
	_, _, err = c.Purge(ctx, QueueOpRequest{Principal: viewer, Space: "s", UID: q.ResourceUID})
	wantCode(t, err, problem.CodeForbidden)
	_, _, err = c.Redrive(ctx, QueueOpRequest{Principal: viewer, Space: "s", UID: q.ResourceUID})
	wantCode(t, err, problem.CodeForbidden)
	_, _, err = c.Redrive(ctx, QueueOpRequest{Principal: admin, Space: "s", UID: q.ResourceUID, Rate: MaxRedriveRate + 1})
	wantCode(t, err, problem.CodeInvalidRequest)
	_, _, err = c.Redrive(ctx, QueueOpRequest{Principal: admin, Space: "s", UID: q.ResourceUID, Target: "r-nope"})
	wantCode(t, err, problem.CodeInvalidReference)
	// A redrive of an empty queue ends at once, and is then not cancelled.
	op, _, err := c.Redrive(ctx, QueueOpRequest{Principal: admin, Space: "s", UID: q.ResourceUID})
	if err != nil {
		t.Fatal(err)
	}
	op = c.Run(ctx, op)
	if op, err = c.Wait(ctx, op.ID, 5*time.Second); err != nil || op.State != store.OpSucceeded || op.Effect != store.EffectNone {
		t.Fatalf("redrive of an empty queue: %+v %v", op, err)
	}
	_, err = c.CancelOperation(ctx, admin, "s", op.ID)
	wantCode(t, err, problem.CodeNotCancellable)
}

// This host forgets an Operation as in flight just after it stores the
// outcome, and a client that read the outcome can come back before: a
// reference to the resource, or a change of its delivery state, is then
// admitted all the same, because the stored Operation decides. An entry
// whose Operation is not resolved still holds the resource.
func TestSucceededOperationFreesItsResourceAtOnce(t *testing.T) {
	notes := &noteForm{applied: map[string]string{}}
	c, _ := newTestController(t, notes)
	ctx := t.Context()
	created := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds":60}`)})
	})
	q := created.ResourceUID
	note := func(name string) error {
		_, _, err := c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: name, FormURL: noteURL,
			Spec: []byte(`{"text":"hi","queue":{"resourceUid":"` + q + `"}}`)})
		return err
	}
	// The moment between storing the create's outcome and clearing it.
	c.setInflight(q, inflightOp{id: created.ID, kind: KindCreate})
	if err := note("n1"); err != nil {
		t.Fatalf("a reference to the queue whose create succeeded: %v", err)
	}
	if _, err := c.SetDelivery(ctx, admin, "s", q, false); err != nil {
		t.Fatalf("pausing the queue whose create succeeded: %v", err)
	}
	// A create that is really under way.
	c.setInflight(q, inflightOp{id: "op-not-stored", kind: KindCreate})
	wantCode(t, note("n2"), problem.CodeInvalidReference)
	_, err := c.SetDelivery(ctx, admin, "s", q, true)
	wantCode(t, err, problem.CodeOperationInProgress)
}
