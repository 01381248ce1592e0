package delivery

import (
	"context"
	"errors"
	"fmt"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// The purge and redrive extensions (spec/peers.md §Purge, §Redrive): the
// engine's part is one store.Apply per purge and per moved message, so
// that each is atomic; the controller makes Operations of them.

// Purge durably removes every message the queue holds: one store.Apply
// of store.DropQueue and the mutations extra returns for the number of
// messages removed (the controller's Operation outcome, so that the purge
// and its record are one atomic unit). Sends into the queue wait for it
// (they are accepted after it, or before it and removed by it).
//
// Messages held by a running batch are not acknowledged by it: the batch
// keeps them, and their later settlement answers as for a message removed
// by retention while in flight (it resolves, and nothing is delivered
// again). A message whose dead-letter move or expiry is being written is
// gone when that write finds it missing.
func (e *Engine) Purge(ctx context.Context, uid string, extra func(removed int) []store.Mutation) (removed int, err error) {
	if err := e.checkRunning(); err != nil {
		return 0, err
	}
	q := e.queue(uid)
	if q == nil {
		return 0, abi.ErrUnknownQueue
	}
	q.life.Lock()
	defer q.life.Unlock()
	if q.removed {
		return 0, abi.ErrUnknownQueue
	}
	q.mu.Lock()
	removed = q.held
	q.mu.Unlock()
	muts := []store.Mutation{store.DropQueue{Queue: uid}}
	if extra != nil {
		muts = append(muts, extra(removed)...)
	}
	if err := e.store.Apply(ctx, muts...); err != nil {
		return 0, backendErr(err)
	}
	q.mu.Lock()
	q.purgeLocked()
	q.pump()
	q.mu.Unlock()
	e.notify()
	e.log.Info("delivery: queue purged", "queue", uid, "messages", removed)
	return removed, nil
}

// purgeLocked forgets, in memory, every message a DropQueue just removed:
// waiting ones at once; leased and busy ones are marked expired, so that
// they are removed (a no-op write) when their batch or write ends. mu held.
func (q *queue) purgeLocked() {
	var waiting []*msg
	mark := func(m *msg) {
		if m.state == stReady {
			waiting = append(waiting, m)
		} else {
			m.expired = true
		}
	}
	for i := range q.expiry.run.Len() {
		if en := *q.expiry.run.At(i); q.expiry.isLive(en) {
			mark(en.m)
		}
	}
	for _, en := range q.expiry.heap {
		if q.expiry.isLive(en) {
			mark(en.m)
		}
	}
	// Leased messages whose expiry was already found are in no order.
	for _, b := range q.batches {
		for _, bm := range b.items {
			if bm.m.state == stLeased {
				bm.m.expired = true
			}
		}
	}
	for _, m := range waiting {
		q.drop(m)
	}
}

// Move errors.
var (
	// ErrUnknownTarget: the queue a message is to move to is not known to
	// the engine (deleted, or not created yet).
	ErrUnknownTarget = errors.New("the target queue is not known to the engine")
	// ErrMoveToSelf: a message cannot move to the queue it is in.
	ErrMoveToSelf = errors.New("a message cannot move to the queue it is in")
	// ErrElsewhere: the queue is delivered by another engine of a cluster
	// (its owner), which carries out a purge or a move of its messages.
	ErrElsewhere = errors.New("the queue is delivered by another host")
)

// MoveOutcome is what MoveNext did with one message.
type MoveOutcome int

const (
	// MoveDone: no message accepted at or before the limit is left after
	// the cursor.
	MoveDone MoveOutcome = iota
	// Moved: the message is in the target queue as a new message, and
	// gone from its queue, by one store.Apply.
	Moved
	// MoveSkipped: the message was left where it is: held by a batch or
	// being removed, or Target named no queue for it.
	MoveSkipped
	// MoveUnselected: MoveRequest.Select left the message out; it stays.
	MoveUnselected
)

// MoveResult reports one step of MoveNext.
type MoveResult struct {
	Outcome MoveOutcome
	// Next is the cursor after the message considered (the next call's
	// after).
	Next Cursor
	// ID is the message considered; NewID its ID in Target (Moved).
	ID, NewID, Target string
	// Why a message was skipped.
	Why string
}

// MoveRequest is one step of a redrive (SQS StartMessageMoveTask).
type MoveRequest struct {
	From string // the queue messages leave (a dead-letter queue)
	// After is the cursor of the previous step (zero: the oldest).
	After Cursor
	// AcceptedBy bounds the messages considered: those accepted at or
	// before it (UTC epoch ms), the queue's content when the redrive
	// started, so that a message that comes back is not moved twice.
	AcceptedBy int64
	// Target names the queue a message goes to given its dead-letter
	// metadata (nil when it has none); "" skips the message.
	Target func(dl *store.DeadLetter) string
	// Extra returns the mutations written in the same Apply as the move
	// (the Operation's progress), given the new message's ID and target.
	Extra func(newID, target string) []store.Mutation
	// Select, when set, says which messages (by ID) the redrive moves
	// (one dead-letter group); the others are MoveUnselected.
	Select func(id string) bool
}

// MoveNext moves the oldest message of From after the cursor (accepted by
// AcceptedBy) to its target as a new message: new ID, accepted now,
// visible after the target's deliveryDelaySeconds, no attempts, no
// dead-letter metadata. The accept into the target, the removal from From
// and Extra are one store.Apply: the message is never in both queues nor
// in neither, whatever fails or crashes. A message held by a batch or
// being removed is skipped.
func (e *Engine) MoveNext(ctx context.Context, req MoveRequest) (MoveResult, error) {
	if err := e.checkRunning(); err != nil {
		return MoveResult{}, err
	}
	q := e.queue(req.From)
	if q == nil {
		return MoveResult{}, abi.ErrUnknownQueue
	}
	q.mu.Lock()
	if q.removed {
		q.mu.Unlock()
		return MoveResult{}, abi.ErrUnknownQueue
	}
	ms, _ := q.after(req.After, 1)
	if len(ms) == 0 || ms[0].acceptedAt > req.AcceptedBy {
		q.mu.Unlock()
		return MoveResult{Outcome: MoveDone, Next: req.After}, nil
	}
	m := ms[0]
	res := MoveResult{Next: Cursor{AcceptedAt: m.acceptedAt, Seq: m.seq}, ID: m.id}
	if req.Select != nil && !req.Select(m.id) {
		q.mu.Unlock()
		res.Outcome = MoveUnselected
		return res, nil
	}
	if m.state != stReady {
		q.mu.Unlock()
		res.Outcome, res.Why = MoveSkipped, "held by a batch or being removed"
		return res, nil
	}
	target := req.Target(m.dl)
	if target == "" {
		q.mu.Unlock()
		res.Outcome, res.Why = MoveSkipped, "no target queue: it did not arrive by dead-lettering, and no target was given"
		return res, nil
	}
	res.Target = target
	if target == q.uid {
		q.mu.Unlock()
		return res, ErrMoveToSelf
	}
	// Busy: no batch takes it while it moves.
	q.unlinkVis(m)
	m.state = stBusy
	q.mu.Unlock()

	newID, moved, err := e.move(ctx, q, m, target, req.Extra)
	q.mu.Lock()
	if err != nil || !moved {
		q.release(m, m.visibleAt, e.nowMs())
		q.pump()
		q.mu.Unlock()
		if err != nil {
			return res, err
		}
		res.Outcome, res.Why = MoveSkipped, "removed meanwhile"
		return res, nil
	}
	q.drop(m)
	q.pump()
	q.mu.Unlock()
	res.Outcome, res.NewID = Moved, newID
	return res, nil
}

// move writes one message's move in one Apply, under both queues' life
// locks, so that neither is dropped (deleted, purged) between the body's
// read and the write. moved is false when the message is gone from q.
func (e *Engine) move(ctx context.Context, q *queue, m *msg, target string, extra func(newID, target string) []store.Mutation) (newID string, moved bool, err error) {
	t := e.queue(target)
	if t == nil {
		delay, err := e.remoteQueue(target)
		if err == nil {
			return e.moveRemote(ctx, q, m, target, delay, extra)
		}
		if !errors.Is(err, abi.ErrUnknownQueue) {
			return "", false, backendErr(err)
		}
		return "", false, fmt.Errorf("%w: %s", ErrUnknownTarget, target)
	}
	q.life.RLock()
	defer q.life.RUnlock()
	t.life.RLock()
	defer t.life.RUnlock()
	t.mu.Lock()
	removed, delay := t.removed, int64(t.cfg.DeliveryDelaySeconds)*1000
	t.mu.Unlock()
	if removed {
		return "", false, fmt.Errorf("%w: %s", ErrUnknownTarget, target)
	}
	if q.removed {
		return "", false, abi.ErrUnknownQueue
	}
	body, err := e.bodyOf(ctx, q, m)
	if body == nil || err != nil {
		return "", false, err
	}
	var seq uint64
	if t.serial {
		// As a send: the accept order is taken under the target's lock,
		// and nothing accepted after it is delivered before it.
		t.mu.Lock()
		seq = t.reserveSeqs(1)
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			t.endPending(seq)
			t.pump()
			t.mu.Unlock()
		}()
		newID = e.serialIDs(t, seq, 1)[0]
	} else {
		newID, seq = e.newMessageIDs(t, 1)[0], e.seq.Add(1)
	}
	now := e.nowMs()
	// Inserted below, after the write (see queue.holds).
	t.mu.Lock()
	t.reserve([]string{newID})
	t.mu.Unlock()
	if err := e.store.Apply(ctx, moveMutations(q, m, t.uid, newID, now, now+delay, body, extra)...); err != nil {
		t.mu.Lock()
		t.unreserve([]string{newID})
		t.mu.Unlock()
		return "", false, backendErr(err)
	}
	nm := newMsg(newID, now, now+delay, 0, len(body), seq)
	nm.tr = m.tr
	t.mu.Lock()
	if !t.removed {
		t.insert(nm, e.nowMs())
		t.pump()
	}
	t.mu.Unlock()
	e.notify()
	return newID, true, nil
}

// moveRemote is move into a queue another engine of the cluster holds: the
// accept into it, the removal from q and extra are one store.Apply (as a
// send into a remote queue, the target's owner is told and adopts the new
// message).
func (e *Engine) moveRemote(ctx context.Context, q *queue, m *msg, target string, delaySeconds int, extra func(newID, target string) []store.Mutation) (newID string, moved bool, err error) {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.removed {
		return "", false, abi.ErrUnknownQueue
	}
	body, err := e.bodyOf(ctx, q, m)
	if body == nil || err != nil {
		return "", false, err
	}
	newID = e.serialIDs(nil, e.serialSeqs(1), 1)[0]
	now := e.nowMs()
	if err := e.store.Apply(ctx, moveMutations(q, m, target, newID, now, now+int64(delaySeconds)*1000, body, extra)...); err != nil {
		return "", false, backendErr(err)
	}
	e.remote.Accepted(target, []string{newID})
	return newID, true, nil
}

// bodyOf reads m's body from the store: nil (and no error) when the
// message is gone from q.
func (e *Engine) bodyOf(ctx context.Context, q *queue, m *msg) ([]byte, error) {
	bodies, err := e.store.Bodies(ctx, q.uid, []string{m.id})
	if err != nil {
		return nil, backendErr(err)
	}
	return bodies[0], nil
}

// moveMutations are the writes of one move, applied together: the accept
// of body into target as newID, m's removal from q as redriven, and what
// extra adds.
func moveMutations(q *queue, m *msg, target, newID string, now, visibleAt int64, body []byte, extra func(newID, target string) []store.Mutation) []store.Mutation {
	muts := []store.Mutation{
		store.AcceptMessage{
			Message: store.Message{Queue: target, ID: newID, AcceptedAt: now, VisibleAt: visibleAt, Size: len(body), TraceParent: m.traceParent()},
			Body:    body,
		},
		store.RemoveMessages{Queue: q.uid, IDs: []string{m.id}, Reason: store.RemovedRedriven},
	}
	if extra != nil {
		muts = append(muts, extra(newID, target)...)
	}
	return muts
}
