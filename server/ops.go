package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
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
// Operation may be in state with effect. Every Operation the server
// journals passes through it (putOp).
func CheckOperationState(state, effect string) error {
	effects, ok := allowedEffects[state]
	if !ok {
		return fmt.Errorf("server: unknown Operation state %q", state)
	}
	if !slices.Contains(effects, effect) {
		return fmt.Errorf("server: Operation state %q cannot have effect %q", state, effect)
	}
	return nil
}

// putOp is the only way the server writes an Operation.
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

// opFormURL is the Form of the resource op changes: the Operation's
// FormURL, or for one journaled before Operations had it, its intent's (a
// store drops the intent once the Operation is Done).
func opFormURL(op store.Operation) string {
	if op.FormURL != "" {
		return op.FormURL
	}
	in, _ := decodeIntent(op)
	return in.FormURL
}

type inflightOp struct{ id, kind string }

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
	key  string
	idem *store.IdempotencyRecord
}

// accept journals the Operation, its intent, the transitional record and
// the idempotency key in one Apply. Called with s.mu held. After it returns
// without error the request is accepted; before, nothing was changed.
func (s *Server) accept(ctx context.Context, pl plan) (store.Operation, error) {
	now := s.now().UTC()
	op := store.Operation{
		ID: newID("op-"), Space: pl.space, Kind: pl.kind, ResourceUID: pl.uid,
		IdempotencyKey: pl.key, Principal: pl.principal, FormURL: pl.formURL, CreateTime: now, UpdateTime: now,
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
	if pl.idem != nil {
		rec := *pl.idem
		rec.OperationID, rec.CreateTime = op.ID, now
		muts = append(muts, store.PutIdempotency{Record: rec})
	}
	if err := s.st.Apply(context.WithoutCancel(ctx), muts...); err != nil {
		// A backend may fail to acknowledge a write it made (a lost commit
		// acknowledgement): reconcile by the Operation's ID. The unit is
		// atomic, so the Operation being there means all of it is, and the
		// request was accepted after all; answering 503 would leave it
		// running, never driven, until a restart replays its now stale
		// intent.
		if _, rerr := s.st.Operation(context.WithoutCancel(ctx), op.ID); rerr != nil {
			return store.Operation{}, unavailable(err)
		}
		s.log.Warn("the first write of an operation reported an error but was applied; accepting it", "operation", op.ID, "err", err)
	}
	if !pl.noop {
		s.inflight[pl.uid] = inflightOp{id: op.ID, kind: op.Kind}
	}
	return op, nil
}

// start drives an accepted Operation in the background and waits up to
// SyncWait for it to settle, returning its state then.
func (s *Server) start(ctx context.Context, op store.Operation) store.Operation {
	if op.Done() {
		return op
	}
	s.go_(func(bg context.Context) {
		if s.opts.AfterIntent != nil {
			s.opts.AfterIntent(bg, op)
			if bg.Err() != nil {
				return
			}
		}
		s.drive(bg, op)
	})
	got, err := s.waitOp(ctx, op.ID, s.opts.SyncWait, true)
	if err != nil {
		return op
	}
	return got
}

func (s *Server) claim(id string) bool {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.driving[id] {
		return false
	}
	s.driving[id] = true
	return true
}

func (s *Server) unclaim(id string) {
	s.opMu.Lock()
	delete(s.driving, id)
	s.opMu.Unlock()
}

func (s *Server) scheduleRetry(id string) {
	s.opMu.Lock()
	s.retry[id] = true
	s.opMu.Unlock()
}

func (s *Server) unscheduleRetry(id string) {
	s.opMu.Lock()
	delete(s.retry, id)
	s.opMu.Unlock()
}

// watch returns a channel closed at the Operation's next change.
func (s *Server) watch(id string) <-chan struct{} {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	ch, ok := s.watches[id]
	if !ok {
		ch = make(chan struct{})
		s.watches[id] = ch
	}
	return ch
}

func (s *Server) notify(id string) {
	s.opMu.Lock()
	if ch, ok := s.watches[id]; ok {
		close(ch)
		delete(s.watches, id)
	}
	s.opMu.Unlock()
}

// waitOp reads the Operation, waiting up to d for it to be done (or, with
// orReconciling, to be reconciling): one wake-up per change, no polling.
func (s *Server) waitOp(ctx context.Context, id string, d time.Duration, orReconciling bool) (store.Operation, error) {
	settled := func(op store.Operation) bool {
		return op.Done() || (orReconciling && op.State == store.OpReconciling)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ch := s.watch(id) // before the read, so that no change is missed
		op, err := s.st.Operation(ctx, id)
		if err != nil || settled(op) || d <= 0 {
			return op, err
		}
		select {
		case <-ch:
		case <-timer.C:
			return s.st.Operation(ctx, id)
		case <-ctx.Done():
			return op, nil
		}
	}
}

// drive causes an Operation's effect and records its outcome. It is safe to
// call again for the same Operation (after a restart, from the
// reconciler): every effect is idempotent given the records.
func (s *Server) drive(ctx context.Context, op store.Operation) {
	if !s.claim(op.ID) {
		return
	}
	defer s.unclaim(op.ID)
	in, ok := decodeIntent(op)
	if !ok {
		s.log.Error("operation without a readable intent", "operation", op.ID)
		return
	}
	if err := s.effect(ctx, op, in); err != nil {
		if ctx.Err() != nil {
			return // shutting down: the journal resumes it on the next start
		}
		s.log.Warn("operation effect failed", "operation", op.ID, "kind", op.Kind, "resource", op.ResourceUID, "err", err)
		s.settleFailure(ctx, op, in, err)
		return
	}
	s.complete(ctx, op, in)
}

// effect is the part of an Operation outside the store.
func (s *Server) effect(ctx context.Context, op store.Operation, in intent) error {
	uid := op.ResourceUID
	switch in.FormURL {
	case schemas.FormAtLeastOnceQueue:
		switch op.Kind {
		case KindCreate, KindUpdate:
			cfg, err := queueConfigOf(*in.Resource)
			if err != nil {
				return err
			}
			if _, err := s.eng.QueueStats(ctx, uid); errors.Is(err, abi.ErrUnknownQueue) {
				return s.eng.AddQueue(ctx, cfg)
			}
			if op.Kind == KindCreate {
				return nil // rebuild already added it
			}
			return s.eng.UpdateQueue(ctx, cfg)
		case KindDelete:
			if err := s.eng.RemoveQueue(ctx, uid); err != nil && !errors.Is(err, abi.ErrUnknownQueue) {
				return err
			}
		}
	case schemas.FormQueueConsumer:
		switch op.Kind {
		case KindCreate, KindUpdate:
			cfg, err := consumerConfigOf(*in.Resource)
			if err != nil {
				return err
			}
			if s.isAttached(uid) {
				if op.Kind == KindCreate {
					return nil
				}
				return s.eng.UpdateConsumer(ctx, cfg)
			}
			if err := s.eng.Attach(ctx, cfg); err != nil {
				return err
			}
			s.setAttached(uid, true)
		case KindDelete:
			if err := s.eng.Detach(ctx, uid); err != nil {
				return err
			}
			s.setAttached(uid, false)
		}
	}
	return nil
}

func (s *Server) isAttached(uid string) bool {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	return s.attached[uid]
}

func (s *Server) setAttached(uid string, v bool) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if v {
		s.attached[uid] = true
	} else {
		delete(s.attached, uid)
	}
}

// complete records a successful effect: the final record (or its removal)
// and the succeeded Operation, in one Apply.
func (s *Server) complete(ctx context.Context, op store.Operation, in intent) {
	s.mu.Lock()
	now := s.now().UTC()
	var muts []store.Mutation
	switch op.Kind {
	case KindCreate, KindUpdate:
		cur, err := s.st.Resource(ctx, op.ResourceUID)
		if err != nil {
			s.mu.Unlock()
			s.log.Error("operation's resource vanished", "operation", op.ID, "err", err)
			s.scheduleRetry(op.ID)
			return
		}
		rec := *in.Resource
		rec.State = store.StateActive
		rec.Observed = cur.Observed
		rec.PrivateInputs = cur.PrivateInputs
		rec.UpdateTime = now
		if op.Kind == KindCreate {
			rec.UpdateTime = rec.CreateTime
		}
		muts = append(muts, store.PutResource{Resource: rec})
	case KindDelete:
		if in.FormURL == schemas.FormAtLeastOnceQueue {
			muts = append(muts, store.DropQueue{Queue: op.ResourceUID})
		}
		muts = append(muts, store.DeleteResource{UID: op.ResourceUID})
	}
	op.State, op.Effect, op.Error, op.UpdateTime = store.OpSucceeded, store.EffectApplied, nil, now
	m, err := putOp(op)
	if err == nil {
		muts = append(muts, m)
		err = s.st.Apply(ctx, muts...)
		if err != nil {
			// The outcome may have been recorded all the same (a lost
			// acknowledgement): reconcile by the Operation's ID.
			if got, rerr := s.st.Operation(ctx, op.ID); rerr == nil && got.Done() {
				s.log.Warn("recording an operation's outcome reported an error but was applied", "operation", op.ID, "err", err)
				err = nil
			}
		}
	}
	if err != nil {
		s.mu.Unlock()
		s.log.Warn("recording an operation's outcome failed; will retry", "operation", op.ID, "err", err)
		s.scheduleRetry(op.ID)
		return
	}
	delete(s.inflight, op.ResourceUID)
	s.mu.Unlock()
	s.unscheduleRetry(op.ID)
	if op.Kind == KindDelete && in.FormURL == schemas.FormWorkerVersion {
		s.workers.Evict(op.ResourceUID)
	}
	// Observe before waking waiters, so that a client who sees the
	// Operation succeeded reads an observation made after it.
	s.observeAfter(ctx, op, in)
	s.notify(op.ID)
}

// settleFailure decides what a failed effect means. A create whose absence
// the engine confirms failed with no effect; a consumer delete whose stop
// boundary is not proven stays running; everything else is reconciling
// with an unknown effect, and the reconciler re-drives it.
func (s *Server) settleFailure(ctx context.Context, op store.Operation, in intent, cause error) {
	uid := op.ResourceUID
	absent := false
	if op.Kind == KindCreate {
		switch in.FormURL {
		case schemas.FormAtLeastOnceQueue:
			_, err := s.eng.QueueStats(ctx, uid)
			absent = errors.Is(err, abi.ErrUnknownQueue)
		case schemas.FormQueueConsumer:
			absent = s.eng.Detach(ctx, uid) == nil
		}
	}
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		s.notify(op.ID)
	}()
	now := s.now().UTC()
	op.UpdateTime = now
	var muts []store.Mutation
	switch {
	case absent:
		p := newProblem(http.StatusServiceUnavailable, CodeBackendUnavailable,
			"the delivery engine did not take the change (%v); nothing was changed", cause)
		doc, _ := json.Marshal(p.document("/v2/spaces/"+op.Space+"/resources/"+uid, ""))
		op.State, op.Effect, op.Error = store.OpFailed, store.EffectNone, doc
		muts = append(muts, store.DeleteResource{UID: uid})
	case op.Kind == KindDelete && in.FormURL == schemas.FormQueueConsumer:
		op.State, op.Effect = store.OpRunning, store.EffectUnknown
	default:
		op.State, op.Effect = store.OpReconciling, store.EffectUnknown
		if cur, err := s.st.Resource(ctx, uid); err == nil && op.Kind != KindDelete {
			cur.State = store.StateReconciling
			muts = append(muts, store.PutResource{Resource: cur})
		}
	}
	m, err := putOp(op)
	if err == nil {
		muts = append(muts, m)
		err = s.st.Apply(ctx, muts...)
	}
	if err != nil {
		s.log.Warn("recording an operation's failure failed; will retry", "operation", op.ID, "err", err)
		s.scheduleRetry(op.ID)
		return
	}
	if absent {
		delete(s.inflight, uid)
		s.unscheduleRetry(op.ID)
		return
	}
	s.scheduleRetry(op.ID)
}

// Start rebuilds the engine from the records (queues, then consumers that
// are not being created or deleted), resumes every unfinished Operation and
// starts the observer and the reconciler. Call it once, before serving.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("server: already started")
	}
	s.started = true
	ops, err := s.st.UnfinishedOperations(ctx)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("server: reading unfinished operations: %w", err)
	}
	for _, op := range ops {
		s.inflight[op.ResourceUID] = inflightOp{id: op.ID, kind: op.Kind}
	}
	all, err := s.st.Resources(ctx, "", "")
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("server: reading resources: %w", err)
	}
	inflight := maps.Clone(s.inflight)
	s.mu.Unlock()

	for _, r := range all {
		if r.FormURL != schemas.FormAtLeastOnceQueue {
			continue
		}
		cfg, err := queueConfigOf(r)
		if err == nil {
			err = s.eng.AddQueue(ctx, cfg)
		}
		if err != nil {
			s.log.Error("rebuild: adding queue failed", "queue", r.UID, "err", err)
		}
	}
	for _, r := range all {
		if r.FormURL != schemas.FormQueueConsumer || r.State == store.StateCreating || r.State == store.StateDeleting {
			continue
		}
		if f, ok := inflight[r.UID]; ok && f.kind != KindUpdate {
			continue // the resumed create or delete decides
		}
		cfg, err := consumerConfigOf(r)
		if err == nil {
			err = s.eng.Attach(ctx, cfg)
		}
		if err != nil {
			s.log.Error("rebuild: attaching consumer failed", "consumer", r.UID, "err", err)
			continue
		}
		s.setAttached(r.UID, true)
	}

	for _, op := range ops {
		op := op
		if _, ok := decodeIntent(op); !ok {
			s.resumeWithoutIntent(ctx, op)
			continue
		}
		s.log.Info("resuming operation", "operation", op.ID, "kind", op.Kind, "resource", op.ResourceUID, "state", op.State)
		s.go_(func(bg context.Context) { s.drive(bg, op) })
	}
	s.go_(s.observeLoop)
	return nil
}

// resumeWithoutIntent handles an Operation journaled without an intent:
// nothing outside the journal can have happened, so a delete is simply run
// again and anything else is failed with no effect.
func (s *Server) resumeWithoutIntent(ctx context.Context, op store.Operation) {
	if op.Kind == KindDelete {
		if r, err := s.st.Resource(ctx, op.ResourceUID); err == nil {
			op.Intent = encodeIntent(intent{FormURL: r.FormURL})
			s.go_(func(bg context.Context) { s.drive(bg, op) })
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := newProblem(http.StatusServiceUnavailable, CodeBackendUnavailable, "the host stopped before the Operation started; nothing was changed")
	doc, _ := json.Marshal(p.document("", ""))
	op.State, op.Effect, op.Error, op.UpdateTime = store.OpFailed, store.EffectNone, doc, s.now().UTC()
	m, err := putOp(op)
	if err == nil {
		err = s.st.Apply(ctx, m)
	}
	if err != nil {
		s.log.Error("failing an operation without intent", "operation", op.ID, "err", err)
		return
	}
	delete(s.inflight, op.ResourceUID)
}

// observeLoop refreshes observed and re-drives unsettled Operations every
// ObserveInterval.
func (s *Server) observeLoop(ctx context.Context) {
	s.observeAll(ctx)
	t := time.NewTicker(s.opts.ObserveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.reconcile(ctx)
		s.observeAll(ctx)
	}
}

// resolved forgets a finished Operation that still blocks its resource
// (its outcome was recorded by a write that reported an error) and wakes
// its waiters.
func (s *Server) resolved(op store.Operation) {
	s.mu.Lock()
	if f, ok := s.inflight[op.ResourceUID]; ok && f.id == op.ID {
		delete(s.inflight, op.ResourceUID)
	}
	s.mu.Unlock()
	s.notify(op.ID)
}

func (s *Server) reconcile(ctx context.Context) {
	s.opMu.Lock()
	ids := make([]string, 0, len(s.retry))
	for id := range s.retry {
		ids = append(ids, id)
	}
	s.opMu.Unlock()
	for _, id := range ids {
		op, err := s.st.Operation(ctx, id)
		if err != nil || op.Done() {
			if err == nil {
				s.unscheduleRetry(id)
				s.resolved(op)
			}
			continue
		}
		s.go_(func(bg context.Context) { s.drive(bg, op) })
	}
}
