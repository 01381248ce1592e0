package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

// Operation kinds.
const (
	KindCreate = "create"
	KindUpdate = "update"
	KindDelete = "delete"
)

// allowedEffects is the whole state/effect relation of spec/host-api.md
// §Operations.
var allowedEffects = map[string][]string{
	store.OpPending:     {store.EffectNone},
	store.OpRunning:     {store.EffectNone, store.EffectPartial, store.EffectUnknown},
	store.OpReconciling: {store.EffectUnknown},
	store.OpSucceeded:   {store.EffectApplied, store.EffectNone},
	store.OpFailed:      {store.EffectNone, store.EffectPartial},
}

// CheckOperationState is the one function that decides whether an
// Operation may be in state with effect. Every Operation the controller
// journals passes through it (putOp).
func CheckOperationState(state, effect string) error {
	effects, ok := allowedEffects[state]
	if !ok {
		return fmt.Errorf("controller: unknown Operation state %q", state)
	}
	if !slices.Contains(effects, effect) {
		return fmt.Errorf("controller: Operation state %q cannot have effect %q", state, effect)
	}
	return nil
}

// putOp is the only way the controller writes an Operation.
func putOp(op store.Operation) (store.Mutation, error) {
	if err := CheckOperationState(op.State, op.Effect); err != nil {
		return nil, err
	}
	return store.PutOperation{Operation: op}, nil
}

// intent is what an Operation journals before its effect: the Form and,
// for a create or an update, the record it makes. It never holds private
// inputs: those are written with the record at create time and never change.
type intent struct {
	FormURL  string          `json:"formUrl"`
	Resource *store.Resource `json:"resource,omitempty"`
}

func encodeIntent(in intent) json.RawMessage {
	if in.Resource != nil {
		r := *in.Resource
		r.PrivateInputs = nil
		in.Resource = &r
	}
	b, _ := json.Marshal(in)
	return b
}

func decodeIntent(op store.Operation) (intent, bool) {
	var in intent
	if len(op.Intent) == 0 || json.Unmarshal(op.Intent, &in) != nil || in.FormURL == "" {
		return intent{}, false
	}
	return in, true
}

// FormOfOperation is the Form of the resource op changes: the
// Operation's FormURL, or for one journaled before Operations had it, its
// intent's (a store drops the intent once the Operation is Done); "" when
// neither says.
func FormOfOperation(op store.Operation) string {
	if op.FormURL != "" {
		return op.FormURL
	}
	in, _ := decodeIntent(op)
	return in.FormURL
}

type inflightOp struct{ id, kind string }

func (c *Controller) inflightOf(uid string) (inflightOp, bool) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	f, ok := c.inflight[uid]
	return f, ok
}

// unresolved is the Operation on uid that this host drives and has not
// resolved. The in-flight entry is cleared just after the Operation's
// outcome is stored, and a client that read that outcome (by polling, or
// on another host of a cluster) can come back before: so an entry whose
// stored Operation is done no longer holds the resource. Only references
// and requests that do not take the resource's own lock can meet that
// moment; complete holds the lock across it.
func (c *Controller) unresolved(ctx context.Context, uid string) (inflightOp, bool) {
	f, ok := c.inflightOf(uid)
	if !ok {
		return f, false
	}
	if op, err := c.st.Operation(ctx, f.id); err == nil && op.Done() {
		return inflightOp{}, false
	}
	return f, true
}

func (c *Controller) setInflight(uid string, f inflightOp) {
	c.opMu.Lock()
	c.inflight[uid] = f
	c.opMu.Unlock()
}

// clearInflight forgets uid's unresolved Operation if it is id.
func (c *Controller) clearInflight(uid, id string) {
	c.opMu.Lock()
	if f, ok := c.inflight[uid]; ok && f.id == id {
		delete(c.inflight, uid)
	}
	c.opMu.Unlock()
}

// plan is an admitted request, ready to be journaled.
type plan struct {
	kind      string
	space     string
	uid       string
	formURL   string
	principal string
	// record is the resource in its transitional state, written with the
	// intent; desired is the record the Operation makes (create, update).
	record  store.Resource
	desired *store.Resource
	// noop: a verified no-op update, journaled as succeeded/none at once.
	noop bool
	idem Idempotency
}

// accept journals the Operation, its intent, the transitional record and
// the idempotency key in one Apply. Called with the space's lock held,
// which it releases (unlockSpace) once what it writes is reserved (see
// pending.go), before the Apply waits for the journal. After it returns
// without error the request is accepted; before, nothing was changed.
func (c *Controller) accept(ctx context.Context, pl plan, unlockSpace func()) (store.Operation, error) {
	now := c.now().UTC()
	op := store.Operation{
		ID: newID("op-"), Space: pl.space, Kind: pl.kind, ResourceUID: pl.uid,
		IdempotencyKey: pl.idem.Key, Principal: pl.principal, FormURL: pl.formURL, CreateTime: now, UpdateTime: now,
		Intent: encodeIntent(intent{FormURL: pl.formURL, Resource: pl.desired}),
	}
	var muts []store.Mutation
	if pl.noop {
		op.State, op.Effect = store.OpSucceeded, store.EffectNone
	} else {
		op.State, op.Effect = store.OpRunning, store.EffectNone
		muts = append(muts, store.PutResource{Resource: pl.record})
	}
	m, err := putOp(op)
	if err != nil {
		return store.Operation{}, err
	}
	muts = append(muts, m)
	if rec := pl.idem.record(); rec != nil {
		rec.OperationID, rec.CreateTime = op.ID, now
		muts = append(muts, store.PutIdempotency{Record: *rec})
	}
	res := c.pending.reserve(pl)
	if !pl.noop {
		c.setInflight(pl.uid, inflightOp{id: op.ID, kind: op.Kind})
		c.indexApplied(muts[:1])
	}
	unlockRes := c.resources.lock(pl.uid)
	if c.opts.SharedLock == nil {
		unlockSpace()
	} else {
		// Hosts sharing the store see each other's admissions only once
		// written: the space stays locked until the Apply is done.
		defer unlockSpace()
	}
	defer func() {
		c.pending.release(pl.space, res)
		unlockRes()
	}()
	if err := c.st.Apply(context.WithoutCancel(ctx), muts...); err != nil {
		// A backend may fail to acknowledge a write it made (a lost commit
		// acknowledgement): reconcile by the Operation's ID. The unit is
		// atomic, so the Operation being there means all of it is, and the
		// request was accepted after all; answering 503 would leave it
		// running, never driven, until a restart replays its now stale
		// intent.
		if _, rerr := c.st.Operation(context.WithoutCancel(ctx), op.ID); rerr != nil {
			if !pl.noop {
				c.clearInflight(pl.uid, op.ID)
				c.reindex(context.WithoutCancel(ctx), pl.uid)
			}
			return store.Operation{}, problem.Unavailable(err)
		}
		c.log.Warn("the first write of an operation reported an error but was applied; accepting it", "operation", op.ID, "err", err)
	}
	if !pl.noop {
		c.obs.mark(pl.uid) // its record changed state (observers of it may read that)
	}
	return op, nil
}

// Run drives an accepted Operation in the background and waits up to
// SyncWait for it to settle (or to be reconciling), returning its state
// then.
func (c *Controller) Run(ctx context.Context, op store.Operation) store.Operation {
	if op.Done() {
		return op
	}
	c.goBackground(func(bg context.Context) {
		if c.opts.AfterIntent != nil {
			c.opts.AfterIntent(bg, op)
			if bg.Err() != nil {
				return
			}
		}
		c.drive(bg, op)
	})
	got, err := c.waitOp(ctx, op.ID, c.opts.SyncWait, true)
	if err != nil {
		return op
	}
	return got
}

func (c *Controller) claim(id string) bool {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.driving[id] {
		return false
	}
	c.driving[id] = true
	return true
}

func (c *Controller) unclaim(id string) {
	c.opMu.Lock()
	delete(c.driving, id)
	c.opMu.Unlock()
}

func (c *Controller) scheduleRetry(id string) {
	c.opMu.Lock()
	c.retry[id] = true
	c.opMu.Unlock()
}

func (c *Controller) unscheduleRetry(id string) {
	c.opMu.Lock()
	delete(c.retry, id)
	c.opMu.Unlock()
}

// watch returns a channel closed at the Operation's next change.
func (c *Controller) watch(id string) <-chan struct{} {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	ch, ok := c.watches[id]
	if !ok {
		ch = make(chan struct{})
		c.watches[id] = ch
	}
	return ch
}

func (c *Controller) notify(id string) {
	c.opMu.Lock()
	if ch, ok := c.watches[id]; ok {
		close(ch)
		delete(c.watches, id)
	}
	c.opMu.Unlock()
}

// Wait reads the Operation, waiting up to d for it to be done.
func (c *Controller) Wait(ctx context.Context, id string, d time.Duration) (store.Operation, error) {
	return c.waitOp(ctx, id, d, false)
}

// waitOp reads the Operation, waiting up to d for it to be done (or, with
// orReconciling, to be reconciling): one wake-up per change, no polling.
func (c *Controller) waitOp(ctx context.Context, id string, d time.Duration, orReconciling bool) (store.Operation, error) {
	settled := func(op store.Operation) bool {
		return op.Done() || (orReconciling && op.State == store.OpReconciling)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ch := c.watch(id) // before the read, so that no change is missed
		op, err := c.st.Operation(ctx, id)
		if err != nil || settled(op) || d <= 0 {
			return op, err
		}
		// On a store shared with other hosts, another host may carry the
		// Operation out (a queue's purge or redrive runs on its owner):
		// its changes are read, not notified.
		var poll <-chan time.Time
		if c.opts.SharedLock != nil {
			poll = time.After(50 * time.Millisecond)
		}
		select {
		case <-ch:
		case <-poll:
		case <-timer.C:
			return c.st.Operation(ctx, id)
		case <-ctx.Done():
			return op, nil
		}
	}
}

// drive causes an Operation's effect and records its outcome. It is safe to
// call again for the same Operation (after a restart, from the
// reconciler): every effect is idempotent given the records.
func (c *Controller) drive(ctx context.Context, op store.Operation) {
	if !c.claim(op.ID) {
		return
	}
	defer c.unclaim(op.ID)
	// Runs after the claim below is released, so that the host asked to
	// take a handed-off purge or redrive over can claim it.
	defer c.afterHandOff(op)
	if c.opts.ClaimOperation != nil {
		// Several hosts on one store: one drives an Operation at a time,
		// and it may have ended on another meanwhile.
		release, ok := c.opts.ClaimOperation(ctx, op.ID)
		if !ok {
			// Another host drives it: this host's admission reads it
			// from the store from now on (busy), and this host looks
			// again later, to wake its waiters once it ends.
			c.clearInflight(op.ResourceUID, op.ID)
			c.scheduleRetry(op.ID)
			return
		}
		defer release()
		cur, err := c.st.Operation(ctx, op.ID)
		if err != nil {
			return
		}
		if cur.Done() {
			c.unscheduleRetry(op.ID)
			c.resolved(cur)
			return
		}
	}
	if op.Kind == KindPurge || op.Kind == KindRedrive {
		c.driveQueueOp(ctx, op)
		return
	}
	in, ok := decodeIntent(op)
	if !ok {
		c.log.Error("operation without a readable intent", "operation", op.ID)
		return
	}
	f, ok := c.forms.Form(in.FormURL)
	if !ok {
		c.log.Error("operation of a Form this host does not serve", "operation", op.ID, "form", in.FormURL)
		return
	}
	ch := Change{Kind: op.Kind, Space: op.Space, UID: op.ResourceUID, Record: in.Resource}
	extra, err := f.Apply(ctx, c.env, ch)
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down: the journal resumes it on the next start
		}
		c.log.Warn("operation effect failed", "operation", op.ID, "kind", op.Kind, "resource", op.ResourceUID, "err", err)
		c.settleFailure(ctx, op, f.Undo(ctx, c.env, ch), err)
		return
	}
	c.complete(ctx, op, in, extra)
}

// complete records a successful effect: the final record (or its removal)
// and the succeeded Operation, in one Apply.
func (c *Controller) complete(ctx context.Context, op store.Operation, in intent, extra []store.Mutation) {
	unlock := c.resources.lock(op.ResourceUID)
	now := c.now().UTC()
	var muts []store.Mutation
	switch op.Kind {
	case KindCreate, KindUpdate:
		cur, err := c.st.Resource(ctx, op.ResourceUID)
		if err != nil {
			unlock()
			c.log.Error("operation's resource vanished", "operation", op.ID, "err", err)
			c.scheduleRetry(op.ID)
			return
		}
		rec := *in.Resource
		rec.State = store.StateActive
		rec.Observed = cur.Observed
		rec.PrivateInputs = cur.PrivateInputs
		rec.Paused = cur.Paused
		rec.UpdateTime = now
		if op.Kind == KindCreate {
			rec.UpdateTime = rec.CreateTime
		}
		muts = append(muts, store.PutResource{Resource: rec})
	case KindDelete:
		muts = append(muts, store.DeleteResource{UID: op.ResourceUID})
	}
	muts = append(muts, extra...)
	op.State, op.Effect, op.Error, op.UpdateTime = store.OpSucceeded, store.EffectApplied, nil, now
	m, err := putOp(op)
	if err == nil {
		muts = append(muts, m)
		err = c.st.Apply(ctx, muts...)
		if err != nil {
			// The outcome may have been recorded all the same (a lost
			// acknowledgement): reconcile by the Operation's ID.
			if got, rerr := c.st.Operation(ctx, op.ID); rerr == nil && got.Done() {
				c.log.Warn("recording an operation's outcome reported an error but was applied", "operation", op.ID, "err", err)
				err = nil
			}
		}
	}
	if err != nil {
		unlock()
		c.log.Warn("recording an operation's outcome failed; will retry", "operation", op.ID, "err", err)
		c.scheduleRetry(op.ID)
		return
	}
	c.indexApplied(muts)
	c.clearInflight(op.ResourceUID, op.ID)
	unlock()
	c.unscheduleRetry(op.ID)
	// Observe before waking waiters, so that a client who sees the
	// Operation succeeded reads an observation made after it.
	c.observeAfter(ctx, op)
	c.notify(op.ID)
}

// settleFailure records what a failed effect means (see Failure): a
// create the engine confirms absent failed with no effect; an effect under
// way stays running; everything else is reconciling with an unknown
// effect, and the reconciler re-drives it.
func (c *Controller) settleFailure(ctx context.Context, op store.Operation, failure Failure, cause error) {
	uid := op.ResourceUID
	absent := failure == FailNothing && op.Kind == KindCreate
	unlock := c.resources.lock(uid)
	defer func() {
		unlock()
		// The effect may have changed what the engine holds, whatever
		// was recorded: observe it again on the next pass.
		c.obs.mark(uid)
		c.notify(op.ID)
	}()
	now := c.now().UTC()
	op.UpdateTime = now
	var muts []store.Mutation
	switch {
	case absent:
		// Viewers read this Operation: the engine's or store's own text
		// (which can name the host's files) stays in the host's log, where
		// drive wrote it.
		p := problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable,
			"the delivery engine did not take the change; nothing was changed, the host's log says why")
		if errors.Is(cause, store.ErrNoSpace) {
			p = problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable,
				"the host's disk is nearly full: the delivery engine did not take the change; nothing was changed")
		}
		doc, _ := json.Marshal(p.Document("/v2/spaces/"+op.Space+"/resources/"+uid, ""))
		op.State, op.Effect, op.Error = store.OpFailed, store.EffectNone, doc
		muts = append(muts, store.DeleteResource{UID: uid})
	case failure == FailRunning:
		op.State, op.Effect = store.OpRunning, store.EffectUnknown
	default:
		op.State, op.Effect = store.OpReconciling, store.EffectUnknown
		if cur, err := c.st.Resource(ctx, uid); err == nil && op.Kind != KindDelete {
			cur.State = store.StateReconciling
			muts = append(muts, store.PutResource{Resource: cur})
		}
	}
	m, err := putOp(op)
	if err == nil {
		muts = append(muts, m)
		err = c.st.Apply(ctx, muts...)
	}
	if err != nil {
		c.log.Warn("recording an operation's failure failed; will retry", "operation", op.ID, "err", err)
		c.scheduleRetry(op.ID)
		return
	}
	c.indexApplied(muts)
	if absent {
		c.clearInflight(uid, op.ID)
		c.unscheduleRetry(op.ID)
		return
	}
	c.scheduleRetry(op.ID)
}

// Start rebuilds what the records need outside the store (each Form's
// Rebuild, in registration order: queues, then consumers), resumes every
// unfinished Operation and starts the observer and the reconciler. Call it
// once, before admitting anything.
func (c *Controller) Start(ctx context.Context) error {
	c.opMu.Lock()
	if c.started {
		c.opMu.Unlock()
		return errors.New("controller: already started")
	}
	c.started = true
	c.opMu.Unlock()
	ops, err := c.st.UnfinishedOperations(ctx)
	if err != nil {
		return fmt.Errorf("controller: reading unfinished operations: %w", err)
	}
	if err := c.indexAll(ctx); err != nil {
		return fmt.Errorf("controller: indexing references: %w", err)
	}
	pending := map[string]string{}
	for _, op := range ops {
		c.setInflight(op.ResourceUID, inflightOp{id: op.ID, kind: op.Kind})
		pending[op.ResourceUID] = op.Kind
	}
	for _, f := range c.forms.list {
		list, err := c.st.Resources(ctx, "", f.URL())
		if err != nil {
			return fmt.Errorf("controller: reading resources: %w", err)
		}
		for _, r := range list {
			if err := f.Rebuild(ctx, c.env, r, pending[r.UID]); err != nil {
				c.log.Error("rebuild failed", "form", f.Name(), "resource", r.UID, "err", err)
			}
		}
	}
	for _, op := range ops {
		if _, ok := decodeIntent(op); !ok {
			c.resumeWithoutIntent(ctx, op)
			continue
		}
		c.log.Info("resuming operation", "operation", op.ID, "kind", op.Kind, "resource", op.ResourceUID, "state", op.State)
		c.goBackground(func(bg context.Context) { c.drive(bg, op) })
	}
	c.goBackground(c.observeLoop)
	return nil
}

// resumeWithoutIntent handles an Operation journaled without an intent:
// nothing outside the journal can have happened, so a delete is simply run
// again and anything else is failed with no effect.
func (c *Controller) resumeWithoutIntent(ctx context.Context, op store.Operation) {
	if op.Kind == KindDelete {
		if r, err := c.st.Resource(ctx, op.ResourceUID); err == nil {
			op.Intent = encodeIntent(intent{FormURL: r.FormURL})
			c.goBackground(func(bg context.Context) { c.drive(bg, op) })
			return
		}
	}
	unlock := c.resources.lock(op.ResourceUID)
	defer unlock()
	p := problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable, "the host stopped before the Operation started; nothing was changed")
	doc, _ := json.Marshal(p.Document("", ""))
	op.State, op.Effect, op.Error, op.UpdateTime = store.OpFailed, store.EffectNone, doc, c.now().UTC()
	m, err := putOp(op)
	if err == nil {
		err = c.st.Apply(ctx, m)
	}
	if err != nil {
		c.log.Error("failing an operation without intent", "operation", op.ID, "err", err)
		return
	}
	c.clearInflight(op.ResourceUID, op.ID)
}

// observeLoop re-drives unsettled Operations and refreshes observed every
// ObserveInterval: a full pass at start and every fullObserveEvery
// periods, and in between only what changed (ObserveChanged).
func (c *Controller) observeLoop(ctx context.Context) {
	c.ObserveAll(ctx)
	t := time.NewTicker(c.opts.ObserveInterval)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.reconcile(ctx)
		if n%fullObserveEvery == 0 {
			c.ObserveAll(ctx)
		} else {
			c.ObserveChanged(ctx)
		}
	}
}

// resolved forgets a finished Operation that still blocks its resource
// (its outcome was recorded by a write that reported an error) and wakes
// its waiters.
func (c *Controller) resolved(op store.Operation) {
	c.clearInflight(op.ResourceUID, op.ID)
	c.notify(op.ID)
}

func (c *Controller) reconcile(ctx context.Context) {
	c.opMu.Lock()
	ids := make([]string, 0, len(c.retry))
	for id := range c.retry {
		ids = append(ids, id)
	}
	c.opMu.Unlock()
	for _, id := range ids {
		op, err := c.st.Operation(ctx, id)
		if err != nil || op.Done() {
			if err == nil {
				c.unscheduleRetry(id)
				c.resolved(op)
			}
			continue
		}
		c.goBackground(func(bg context.Context) { c.drive(bg, op) })
	}
}
