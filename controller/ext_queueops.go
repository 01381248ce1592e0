package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// The purge and redrive extensions (spec/peers.md §Purge, §Redrive):
// Operations on an AtLeastOnceQueue that change its messages, not its
// record. Both are admitted like the Forms' writes (editor of the Form,
// Idempotency-Key, operation_in_progress while another Operation on the
// queue runs), journaled before they act, and resumed after a restart.

// Operation kinds of the queue extensions.
const (
	KindPurge   = "purge"
	KindRedrive = "redrive"
)

// Redrive rate limits (messages per second).
const (
	DefaultRedriveRate = 100
	MaxRedriveRate     = 1000
)

// QueueOpRequest is a purge or a redrive of a queue.
type QueueOpRequest struct {
	Principal   *auth.Principal
	Space, UID  string
	Idempotency Idempotency
	// Target (redrive) is the queue every message goes to; "" sends each
	// to the queue it was dead-lettered from.
	Target string
	// Rate (redrive) is the most messages moved per second; 0: default.
	Rate int
	// Group (redrive) moves only the dead letters of that group (a
	// fingerprint, ext_forensics.go); DryRun moves nothing and records
	// what would move.
	Group  string
	DryRun bool
}

// queueOpIntent is what a purge or a redrive journals before it acts. It
// carries formUrl, so that decodeIntent reads it as every intent.
type queueOpIntent struct {
	FormURL string `json:"formUrl"`
	Queue   string `json:"queue"`
	// Redrive: the explicit target ("" none), the rate, and the bound of
	// the messages it moves (those accepted by then, UTC epoch ms).
	Target     string `json:"target,omitempty"`
	Rate       int    `json:"rate,omitempty"`
	AcceptedBy int64  `json:"acceptedBy,omitempty"`
	Group      string `json:"group,omitempty"`
}

// QueueOpProgress is Operation.Progress of a purge (Removed) or a redrive
// (Total, Moved, Skipped), as the Host API shows it.
type QueueOpProgress struct {
	Removed *int `json:"removed,omitempty"`
	Total   *int `json:"total,omitempty"`
	Moved   *int `json:"moved,omitempty"`
	Skipped *int `json:"skipped,omitempty"`
	// Group, DryRun and WouldMove: a redrive of one dead-letter group,
	// and a dry run (ext_forensics.go).
	Group     string `json:"group,omitempty"`
	DryRun    bool   `json:"dryRun,omitempty"`
	WouldMove *int   `json:"wouldMove,omitempty"`
}

type redriveProgress struct {
	total, moved, skipped int
	group                 string
}

func (p redriveProgress) encode() json.RawMessage {
	b, _ := json.Marshal(QueueOpProgress{Total: &p.total, Moved: &p.moved, Skipped: &p.skipped, Group: p.group})
	return b
}

func decodeRedriveProgress(raw json.RawMessage) redriveProgress {
	var q QueueOpProgress
	json.Unmarshal(raw, &q)
	var p redriveProgress
	if q.Total != nil {
		p.total = *q.Total
	}
	if q.Moved != nil {
		p.moved = *q.Moved
	}
	if q.Skipped != nil {
		p.skipped = *q.Skipped
	}
	p.group = q.Group
	return p
}

// queueOpTask is the in-process state of a redrive: its lock is held
// around every move and around a cancel, so that once a cancel is recorded
// no further message moves.
type queueOpTask struct {
	mu        sync.Mutex
	cancelled bool
}

func (c *Controller) task(id string) *queueOpTask {
	t, _ := c.queueOps.LoadOrStore(id, &queueOpTask{})
	return t.(*queueOpTask)
}

// queueToChange is the first checks of a purge or a redrive: the key's
// replay (prior), the queue, and the principal's editor role on it.
func (c *Controller) queueToChange(ctx context.Context, req QueueOpRequest) (store.Resource, *store.Operation, error) {
	if prior, err := c.replay(ctx, req.Idempotency); err != nil || prior != nil {
		return store.Resource{}, prior, err
	}
	r, err := c.load(ctx, req.Space, req.UID)
	if err != nil {
		return store.Resource{}, nil, err
	}
	p := req.Principal
	if !c.forms.IsQueue(r.FormURL) {
		if !p.Can(req.Space, r.FormURL, auth.Read) {
			return store.Resource{}, nil, problem.Forbidden("the principal may not read %s resources in this space", c.forms.Name(r.FormURL))
		}
		return store.Resource{}, nil, problem.New(http.StatusNotFound, problem.CodeNotAQueue, "a %s has no messages: only an AtLeastOnceQueue is purged or redriven", c.forms.Name(r.FormURL))
	}
	if !p.Can(req.Space, r.FormURL, auth.Write) {
		return store.Resource{}, nil, problem.Forbidden("the principal may not change AtLeastOnceQueue resources in this space")
	}
	return r, nil, nil
}

// admitQueueOp takes the space's lock and checks, under it, that nothing
// else is under way on the queue; it returns the lock's release.
func (c *Controller) admitQueueOp(ctx context.Context, req QueueOpRequest) (unlock func(), prior *store.Operation, err error) {
	unlock, prior, err = c.lockSpace(ctx, req.Space, req.Idempotency)
	if err != nil || prior != nil {
		return nil, prior, err
	}
	fail := func(err error) (func(), *store.Operation, error) {
		unlock()
		return nil, nil, err
	}
	r, err := c.load(ctx, req.Space, req.UID)
	if err != nil {
		return fail(err)
	}
	if fl, busy := c.unresolved(ctx, req.UID); busy {
		return fail(problem.Conflict(problem.CodeOperationInProgress, "Operation %s on this queue has not finished", fl.id))
	}
	if r.State != store.StateActive {
		return fail(problem.Conflict(problem.CodeOperationInProgress, "the queue is %s; it can be purged or redriven once it is active", r.State))
	}
	if id, busy, err := c.queueOpElsewhere(ctx, req.UID); err != nil {
		return fail(problem.Unavailable(err))
	} else if busy {
		return fail(problem.Conflict(problem.CodeOperationInProgress, "Operation %s on this queue has not finished", id))
	}
	return unlock, nil, nil
}

// acceptQueueOp journals op (running, no effect yet) with its key in one
// Apply; from then on the queue is busy with it. Called with the space's
// lock held, which it releases.
func (c *Controller) acceptQueueOp(ctx context.Context, op store.Operation, idem Idempotency, unlockSpace func()) (store.Operation, error) {
	m, err := putOp(op)
	if err != nil {
		unlockSpace()
		return store.Operation{}, err
	}
	muts := []store.Mutation{m}
	if rec := idem.record(); rec != nil {
		rec.OperationID, rec.CreateTime = op.ID, op.CreateTime
		muts = append(muts, store.PutIdempotency{Record: *rec})
	}
	c.setInflight(op.ResourceUID, inflightOp{id: op.ID, kind: op.Kind})
	unlockSpace()
	if err := c.st.Apply(context.WithoutCancel(ctx), muts...); err != nil {
		// A lost acknowledgement: the unit is atomic, so the Operation
		// being there means all of it is.
		if _, rerr := c.st.Operation(context.WithoutCancel(ctx), op.ID); rerr != nil {
			c.clearInflight(op.ResourceUID, op.ID)
			return store.Operation{}, problem.Unavailable(err)
		}
	}
	return op, nil
}

// newQueueOp is a purge or redrive of q, the queue req names.
func (c *Controller) newQueueOp(req QueueOpRequest, q store.Resource, kind string, in queueOpIntent) store.Operation {
	now := c.now().UTC()
	in.FormURL, in.Queue = q.FormURL, req.UID
	b, _ := json.Marshal(in)
	return store.Operation{
		ID: newID("op-"), Space: req.Space, Kind: kind, ResourceUID: req.UID, State: store.OpRunning, Effect: store.EffectNone,
		IdempotencyKey: req.Idempotency.Key, Principal: req.Principal.ID, FormURL: q.FormURL,
		Intent: b, CreateTime: now, UpdateTime: now,
	}
}

// Purge admits the removal of every message of a queue as an Operation of
// kind purge (spec/peers.md §Purge). replayed: the Idempotency-Key named
// an earlier one. Run drives it.
func (c *Controller) Purge(ctx context.Context, req QueueOpRequest) (store.Operation, bool, error) {
	q, prior, err := c.queueToChange(ctx, req)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	unlock, prior, err := c.admitQueueOp(ctx, req)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	c.refresh(ctx, req.UID)
	if _, err := c.env.Engine.Inspect(ctx, req.UID); err != nil {
		unlock()
		return store.Operation{}, false, engineQueueErr(err)
	}
	op, err := c.acceptQueueOp(ctx, c.newQueueOp(req, q, KindPurge, queueOpIntent{}), req.Idempotency, unlock)
	return op, false, err
}

// Redrive admits the move of a dead-letter queue's messages back to their
// source queues (or to req.Target) as an Operation of kind redrive
// (spec/peers.md §Redrive). Run drives it; CancelOperation stops it.
func (c *Controller) Redrive(ctx context.Context, req QueueOpRequest) (store.Operation, bool, error) {
	q, prior, err := c.queueToChange(ctx, req)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	if req.Rate == 0 {
		req.Rate = DefaultRedriveRate
	}
	if req.Rate < 1 || req.Rate > MaxRedriveRate {
		return store.Operation{}, false, problem.InvalidRequest("maxMessagesPerSecond must be an integer from 1 to %d", MaxRedriveRate)
	}
	if err := c.checkRedriveTarget(ctx, req); err != nil {
		return store.Operation{}, false, err
	}
	if req.Group != "" && !validGroup(req.Group) {
		return store.Operation{}, false, problem.InvalidRequest("group must be a dead-letter group's fingerprint: 16 lowercase hex digits, as GET …/deadletters/groups lists them")
	}
	unlock, prior, err := c.admitQueueOp(ctx, req)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	if err := c.checkRedriveTarget(ctx, req); err != nil {
		unlock()
		return store.Operation{}, false, err
	}
	c.refresh(ctx, req.UID)
	st, err := c.env.Engine.Inspect(ctx, req.UID)
	if err != nil {
		unlock()
		return store.Operation{}, false, engineQueueErr(err)
	}
	op := c.newQueueOp(req, q, KindRedrive, queueOpIntent{Target: req.Target, Rate: req.Rate, AcceptedBy: c.now().UTC().UnixMilli(), Group: req.Group})
	op.Progress = redriveProgress{total: st.Messages, group: req.Group}.encode()
	if req.Group != "" || req.DryRun {
		members, err := c.redriveSelection(ctx, req)
		if err != nil {
			unlock()
			return store.Operation{}, false, err
		}
		if req.Group != "" {
			op.Progress = redriveProgress{total: len(members), group: req.Group}.encode()
		}
		if req.DryRun {
			op, err = c.dryRunRedrive(ctx, op, req, members, unlock)
			return op, false, err
		}
	}
	id := op.ID
	c.task(id)
	op, err = c.acceptQueueOp(ctx, op, req.Idempotency, unlock)
	if err != nil {
		c.queueOps.Delete(id)
	}
	return op, false, err
}

// refresher is an Engine that may hold fewer of a queue's messages than
// the store (a host of a cluster: sends through other hosts are adopted
// on notification) and can catch up on request.
type refresher interface {
	Refresh(ctx context.Context, uid string)
}

// refresh makes the engine hold every stored message of uid before a
// purge or a redrive counts them.
func (c *Controller) refresh(ctx context.Context, uid string) {
	if r, ok := c.env.Engine.(refresher); ok {
		r.Refresh(ctx, uid)
	}
}

// checkRedriveTarget: an explicit target is another AtLeastOnceQueue of
// the space, which the principal may change (messages are accepted into
// it).
func (c *Controller) checkRedriveTarget(ctx context.Context, req QueueOpRequest) error {
	if req.Target == "" {
		return nil
	}
	bad := func(detail string) error {
		return problem.Unprocessable(problem.CodeInvalidReference, "targetQueue does not name a usable queue").WithPointer("/targetQueue/resourceUid", detail)
	}
	if req.Target == req.UID {
		return bad("the target is the queue the messages leave")
	}
	t, err := c.st.Resource(ctx, req.Target)
	if isNotFound(err) || (err == nil && t.Space != req.Space) {
		return bad("no AtLeastOnceQueue with this UID exists in this space")
	}
	if err != nil {
		return problem.Unavailable(err)
	}
	if !c.forms.IsQueue(t.FormURL) {
		return bad(fmt.Sprintf("the resource is a %s, not an AtLeastOnceQueue", c.forms.Name(t.FormURL)))
	}
	if t.State == store.StateDeleting {
		return bad("the queue is being deleted")
	}
	return nil
}

// driveQueueOp causes a purge's or a redrive's effect; drive calls it
// (first run, restart, reconciler).
func (c *Controller) driveQueueOp(ctx context.Context, op store.Operation) {
	var in queueOpIntent
	if err := json.Unmarshal(op.Intent, &in); err != nil || in.Queue == "" {
		c.log.Error("queue operation without a readable intent", "operation", op.ID)
		return
	}
	switch op.Kind {
	case KindPurge:
		c.drivePurge(ctx, op)
	case KindRedrive:
		c.driveRedrive(ctx, op, in)
	}
}

func (c *Controller) drivePurge(ctx context.Context, op store.Operation) {
	uid := op.ResourceUID
	n, err := c.env.Engine.Purge(ctx, uid, func(removed int) []store.Mutation {
		done := op
		done.State, done.Effect, done.UpdateTime = store.OpSucceeded, store.EffectApplied, c.now().UTC()
		done.Progress, _ = json.Marshal(QueueOpProgress{Removed: &removed})
		m, _ := putOp(done)
		return []store.Mutation{m}
	})
	if errors.Is(err, delivery.ErrElsewhere) {
		c.handOff(op)
		return
	}
	if errors.Is(err, abi.ErrUnknownQueue) && ctx.Err() == nil {
		// The engine of this host does not hold the queue (another host
		// of an active-active cluster owns it): waiting would not change
		// that, so the Operation ends, having removed nothing.
		c.failQueueOp(ctx, op, problem.Conflict(problem.CodeOperationInProgress,
			"the delivery engine of this host does not hold the queue (in an active-active cluster, another host owns it); nothing was removed"))
		return
	}
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down: resumed on the next start
		}
		c.log.Warn("purge failed; will retry", "operation", op.ID, "queue", uid, "err", err)
		c.scheduleRetry(op.ID)
		return
	}
	c.log.Info("queue purged", "operation", op.ID, "queue", uid, "messages", n)
	c.finishQueueOp(op)
}

// failQueueOp records a purge that ended without an effect.
func (c *Controller) failQueueOp(ctx context.Context, op store.Operation, fail *problem.Problem) {
	op.State, op.Effect, op.UpdateTime = store.OpFailed, store.EffectNone, c.now().UTC()
	op.Error, _ = json.Marshal(fail.Document(operationPath(op), ""))
	m, err := putOp(op)
	if err == nil {
		err = c.st.Apply(context.WithoutCancel(ctx), m)
	}
	if err != nil {
		c.log.Warn("recording a purge's failure failed; will retry", "operation", op.ID, "err", err)
		c.scheduleRetry(op.ID)
		return
	}
	c.finishQueueOp(op)
}

// handOff stops driving a purge or a redrive here: the queue is delivered
// by another host of the cluster, which the engine has asked to carry the
// Operation out (see ResumeQueueOps). The Operation stays running in the
// store.
func (c *Controller) handOff(op store.Operation) {
	c.log.Info("queue operation handed to the queue's owner", "operation", op.ID, "kind", op.Kind, "queue", op.ResourceUID)
	c.clearInflight(op.ResourceUID, op.ID)
	c.unscheduleRetry(op.ID)
	c.queueOps.Delete(op.ID)
	c.handedOff.Store(op.ID, true)
}

// afterHandOff tells Options.HandOff of op if its run just handed it off.
func (c *Controller) afterHandOff(op store.Operation) {
	if _, ok := c.handedOff.LoadAndDelete(op.ID); ok && c.opts.HandOff != nil {
		c.opts.HandOff(op)
	}
}

// ResumeQueueOps drives the unfinished purges and redrives of the queues
// for which owned is true: a host of a cluster calls it when it takes a
// queue's delivery over (a redrive under way goes on from its recorded
// progress), when another host hands it an Operation, and periodically.
// An Operation already driven here is left to its run.
func (c *Controller) ResumeQueueOps(ctx context.Context, owned func(queueUID string) bool) {
	ops, err := c.st.UnfinishedOperations(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("reading unfinished queue operations failed", "err", err)
		}
		return
	}
	for _, op := range ops {
		if (op.Kind != KindPurge && op.Kind != KindRedrive) || !owned(op.ResourceUID) {
			continue
		}
		c.setInflight(op.ResourceUID, inflightOp{id: op.ID, kind: op.Kind})
		c.goBackground(func(bg context.Context) { c.drive(bg, op) })
	}
}

// queueOpElsewhere reports, on a store shared with other hosts, a purge or
// a redrive of uid another host is carrying out (its record is running).
func (c *Controller) queueOpElsewhere(ctx context.Context, uid string) (string, bool, error) {
	if c.opts.SharedLock == nil {
		return "", false, nil
	}
	ops, err := c.st.UnfinishedOperations(ctx)
	if err != nil {
		return "", false, err
	}
	for _, op := range ops {
		if op.ResourceUID == uid && (op.Kind == KindPurge || op.Kind == KindRedrive) {
			return op.ID, true, nil
		}
	}
	return "", false, nil
}

func (c *Controller) finishQueueOp(op store.Operation) {
	c.clearInflight(op.ResourceUID, op.ID)
	c.unscheduleRetry(op.ID)
	c.queueOps.Delete(op.ID)
	c.notify(op.ID)
}

// driveRedrive moves the queue's messages one store write each, at most
// in.Rate a second, until none accepted by in.AcceptedBy is left to move,
// or a cancel is recorded. After a restart it starts again from the
// oldest message: those moved are gone from the queue, so nothing moves
// twice, and the moved count goes on from the journaled progress.
func (c *Controller) driveRedrive(ctx context.Context, op store.Operation, in queueOpIntent) {
	t := c.task(op.ID)
	// A cancel recorded before this run began (its task may be gone with
	// it) ends it here.
	t.mu.Lock()
	cur, err := c.st.Operation(ctx, op.ID)
	t.mu.Unlock()
	if err != nil || cur.Done() {
		if err == nil {
			c.finishQueueOp(cur)
		}
		return
	}
	op = cur
	prog := decodeRedriveProgress(op.Progress)
	prog.skipped = 0 // counted again from the oldest
	target := func(dl *store.DeadLetter) string {
		if in.Target != "" {
			return in.Target
		}
		if dl == nil {
			return ""
		}
		return dl.SourceQueue
	}
	var selected func(id string) bool
	if in.Group != "" {
		members, err := c.groupMembers(ctx, op.ResourceUID, in.Group)
		if err != nil {
			c.log.Warn("redrive: reading the group's messages failed; will retry", "operation", op.ID, "err", err)
			c.scheduleRetry(op.ID)
			return
		}
		selected = func(id string) bool { return members[id] }
	}
	interval := time.Second / time.Duration(max(in.Rate, 1))
	next := time.Now()
	var after delivery.Cursor
	failures := 0
	for {
		if d := time.Until(next); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				return // resumed on the next start
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		if t.cancelled {
			t.mu.Unlock()
			return
		}
		now := c.now().UTC()
		res, err := c.env.Engine.MoveNext(ctx, delivery.MoveRequest{
			From: op.ResourceUID, After: after, AcceptedBy: in.AcceptedBy, Target: target, Select: selected,
			Extra: func(string, string) []store.Mutation {
				o := op
				p := prog
				p.moved++
				o.Progress, o.Effect, o.UpdateTime = p.encode(), store.EffectPartial, now
				m, _ := putOp(o)
				return []store.Mutation{m}
			},
		})
		var fail *problem.Problem
		switch {
		case err == nil:
		case errors.Is(err, delivery.ErrElsewhere):
			// Another host delivers the queue (now): it goes on from the
			// recorded progress.
			t.mu.Unlock()
			c.handOff(op)
			return
		case (errors.Is(err, delivery.ErrUnknownTarget) || errors.Is(err, delivery.ErrMoveToSelf)) && in.Target == "":
			// The source queue is gone: leave the message.
			res.Outcome, res.Next = delivery.MoveSkipped, nextAfter(res, after)
			err = nil
		case errors.Is(err, delivery.ErrUnknownTarget):
			fail = problem.Unprocessable(problem.CodeInvalidReference, "the target queue %s no longer exists", in.Target)
		case errors.Is(err, abi.ErrUnknownQueue):
			if ctx.Err() != nil {
				t.mu.Unlock()
				return
			}
			fail = problem.Conflict(problem.CodeOperationInProgress, "the dead-letter queue is not held by the delivery engine")
		}
		if fail != nil {
			c.endRedrive(ctx, t, op, prog, store.OpFailed, fail)
			t.mu.Unlock()
			return
		}
		if err != nil {
			t.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			failures++
			c.log.Warn("redrive: moving a message failed; will retry", "operation", op.ID, "err", err)
			next = time.Now().Add(min(time.Duration(failures)*time.Second, time.Minute))
			continue
		}
		failures = 0
		switch res.Outcome {
		case delivery.MoveDone:
			c.endRedrive(ctx, t, op, prog, store.OpSucceeded, nil)
			t.mu.Unlock()
			return
		case delivery.Moved:
			prog.moved++
			op.Progress, op.Effect, op.UpdateTime = prog.encode(), store.EffectPartial, now
			next = next.Add(interval)
			if now := time.Now(); next.Before(now.Add(-time.Second)) {
				next = now // no burst after a long pause
			}
			c.notify(op.ID)
		case delivery.MoveSkipped:
			prog.skipped++
		}
		after = res.Next
		t.mu.Unlock()
	}
}

// nextAfter is the cursor past the message a failed step considered.
func nextAfter(res delivery.MoveResult, after delivery.Cursor) delivery.Cursor {
	if res.Next != (delivery.Cursor{}) {
		return res.Next
	}
	return after
}

// endRedrive records a redrive's outcome. t.mu held.
func (c *Controller) endRedrive(ctx context.Context, t *queueOpTask, op store.Operation, prog redriveProgress, state string, fail *problem.Problem) {
	op.State, op.UpdateTime, op.Progress = state, c.now().UTC(), prog.encode()
	switch {
	case state == store.OpSucceeded && prog.moved > 0:
		op.Effect = store.EffectApplied
	case state == store.OpSucceeded:
		op.Effect = store.EffectNone
	case prog.moved > 0:
		op.Effect = store.EffectPartial
	default:
		op.Effect = store.EffectNone
	}
	if fail != nil {
		op.Error, _ = json.Marshal(fail.Document(operationPath(op), ""))
	}
	m, err := putOp(op)
	if err == nil {
		err = c.st.Apply(context.WithoutCancel(ctx), m)
	}
	if err != nil {
		c.log.Warn("recording a redrive's outcome failed; will retry", "operation", op.ID, "err", err)
		c.scheduleRetry(op.ID)
		return
	}
	c.log.Info("redrive ended", "operation", op.ID, "queue", op.ResourceUID, "state", state, "moved", prog.moved, "skipped", prog.skipped, "total", prog.total)
	c.finishQueueOp(op)
}

func operationPath(op store.Operation) string {
	return "/v2/spaces/" + op.Space + "/operations/" + op.ID
}

// CancelOperation cancels a redrive that has not finished: once it
// answers, no further message moves, and the Operation is failed with
// operation_cancelled (effect partial when some moved). p must be able to
// change the queue.
func (c *Controller) CancelOperation(ctx context.Context, p *auth.Principal, space, id string) (store.Operation, error) {
	op, err := c.st.Operation(ctx, id)
	if isNotFound(err) || (err == nil && op.Space != space) {
		return store.Operation{}, problem.NotFound("no Operation with this ID exists in this space")
	}
	if err != nil {
		return store.Operation{}, problem.Unavailable(err)
	}
	if err := c.mayReadOperation(ctx, p, space, op); err != nil {
		return store.Operation{}, err
	}
	form := FormOfOperation(op)
	if !p.Can(space, form, auth.Write) {
		return store.Operation{}, problem.Forbidden("the principal may not change %s resources in this space", c.forms.Name(form))
	}
	if op.Kind != KindRedrive {
		return store.Operation{}, problem.Conflict(problem.CodeNotCancellable, "only a redrive can be cancelled; this Operation is a %s", op.Kind)
	}
	if c.opts.CancelElsewhere != nil && !op.Done() {
		handled, err := c.opts.CancelElsewhere(ctx, op, p.Name)
		if err != nil {
			return store.Operation{}, problem.Unavailable(err)
		}
		if handled {
			// The owner has recorded the cancel, or found the redrive
			// finished: the record says which.
			if op, err = c.st.Operation(ctx, id); err != nil {
				return store.Operation{}, problem.Unavailable(err)
			}
			if !cancelledOp(op) {
				return store.Operation{}, problem.Conflict(problem.CodeNotCancellable, "the redrive has finished (%s)", op.State)
			}
			c.finishQueueOp(op)
			return op, nil
		}
	}
	return c.cancelHere(ctx, id, p.Name)
}

// cancelledOp: op ended by a cancel.
func cancelledOp(op store.Operation) bool {
	if op.State != store.OpFailed {
		return false
	}
	var doc struct {
		Code string `json:"code"`
	}
	json.Unmarshal(op.Error, &doc)
	return doc.Code == problem.CodeOperationCancelled
}

// CancelQueueOp records the cancel of a redrive this host carries out, in
// the name of by (a principal's name), asked by another host of the
// cluster that has checked the principal's rights (CancelElsewhere).
func (c *Controller) CancelQueueOp(ctx context.Context, id, by string) error {
	_, err := c.cancelHere(ctx, id, by)
	return err
}

// cancelHere records the cancel under the task's lock: no move of this
// host is being written meanwhile, and none is written after it.
func (c *Controller) cancelHere(ctx context.Context, id, by string) (store.Operation, error) {
	t := c.task(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	// Under the task's lock no move is being written: this read is the
	// redrive's last word.
	op, err := c.st.Operation(ctx, id)
	if err != nil {
		return store.Operation{}, problem.Unavailable(err)
	}
	if op.Done() {
		return store.Operation{}, problem.Conflict(problem.CodeNotCancellable, "the redrive has finished (%s)", op.State)
	}
	prog := decodeRedriveProgress(op.Progress)
	fail := problem.Conflict(problem.CodeOperationCancelled, "cancelled by %s after moving %d of %d messages; the rest stay in the dead-letter queue", by, prog.moved, prog.total)
	op.State, op.UpdateTime = store.OpFailed, c.now().UTC()
	op.Effect = store.EffectNone
	if prog.moved > 0 {
		op.Effect = store.EffectPartial
	}
	op.Error, _ = json.Marshal(fail.Document(operationPath(op), ""))
	m, err := putOp(op)
	if err == nil {
		err = c.st.Apply(ctx, m)
	}
	if err != nil {
		return store.Operation{}, problem.Unavailable(err)
	}
	t.cancelled = true
	c.log.Info("redrive cancelled", "operation", id, "queue", op.ResourceUID, "moved", prog.moved, "principal", by)
	c.finishQueueOp(op)
	return op, nil
}
