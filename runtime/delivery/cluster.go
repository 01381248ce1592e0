package delivery

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// Several engines sharing one store (spec/cluster.md): each holds the
// queues whose delivery its host owns; the others' queues are remote. A
// send or a dead-letter move into a remote queue is written to the store
// and announced through Remote, whose owner then adopts the messages.

// Remote is what an engine of a cluster knows of the queues other engines
// hold.
type Remote interface {
	// Queue returns the deliveryDelaySeconds of uid, a queue held
	// elsewhere: an error wrapping abi.ErrUnknownQueue when no such queue
	// exists, another error when that cannot be told now (its record
	// could not be read).
	Queue(uid string) (deliveryDelaySeconds int, err error)
	// Accepted is told, after they are durable, of messages accepted into
	// a queue held elsewhere, so that its owner can adopt them. It must
	// not block.
	Accepted(queueUID string, ids []string)
	// Current reports whether this engine's host still holds the lease of
	// a queue it delivers, by its own monotonic clock, and until when:
	// checked right before a handler is invoked, so that a host that was
	// stalled past its lease does not run a batch its successor may be
	// delivering again. until is passed on to the handler
	// (abi.WithStartBy), which checks it again where it starts the batch.
	Current(queueUID string) (until time.Time, ok bool)
	// Deliverable is Current with room to spare: the lease is held for
	// long enough to record a delivery and start its handler. Checked
	// before a delivery is recorded, so that a host whose lease estimate
	// is running out records (counts) no attempt it would not hand to a
	// handler.
	Deliverable(queueUID string) bool
}

func (e *Engine) remoteQueue(uid string) (int, error) {
	if e.remote == nil {
		return 0, abi.ErrUnknownQueue
	}
	return e.remote.Queue(uid)
}

// currentLease is Remote.Current; a single engine holds its queues for
// good (ok, zero until).
func (e *Engine) currentLease(uid string) (time.Time, bool) {
	if e.remote == nil {
		return time.Time{}, true
	}
	return e.remote.Current(uid)
}

// sendRemote is Send into a queue this engine does not hold.
func (e *Engine) sendRemote(ctx context.Context, queueUID string, msgs []abi.OutgoingMessage, extra func(ids []string) []store.Mutation, traceParent string) ([]string, error) {
	delay, err := e.remoteQueue(queueUID)
	if errors.Is(err, abi.ErrUnknownQueue) {
		return nil, err
	}
	if err != nil {
		return nil, backendErr(err)
	}
	// IDs carry an accept sequence number, in case the queue is
	// serialized (its owner then orders it by them: serial.go).
	ids := e.serialIDs(nil, e.serialSeqs(len(msgs)), len(msgs))
	now := e.nowMs()
	muts := make([]store.Mutation, len(msgs))
	for i, m := range msgs {
		d := delay
		if m.Delay != nil {
			d = *m.Delay
		}
		muts[i] = store.AcceptMessage{
			Message: store.Message{Queue: queueUID, ID: ids[i], AcceptedAt: now, VisibleAt: now + int64(d)*1000, Size: len(m.Body), TraceParent: traceParent},
			Body:    m.Body,
		}
	}
	if extra != nil {
		muts = append(muts, extra(ids)...)
	}
	if err := e.store.Apply(ctx, muts...); err != nil {
		return nil, backendErr(err)
	}
	e.remote.Accepted(queueUID, ids)
	return ids, nil
}

// Unload forgets a queue without deleting its messages: its delivery moved
// to another engine. Its batches are closed without acknowledging anything
// (their settlements answer ErrUnknownBatch); what they held stays leased
// in the store, and the next owner delivers it again. Unloading an unknown
// queue is a no-op.
func (e *Engine) Unload(ctx context.Context, uid string) error {
	return e.removeQueue(ctx, uid, false)
}

// Quiesce prepares the hand-over of a held queue to another engine of a
// cluster: it stops forming new batches of it and waits until the
// batches it runs have ended — their handlers returned and their
// settlements were written, under the lease the host still holds — or
// until ctx ends (it then returns ctx's error; the batches go on). The
// queue stays held: Unload then finds nothing running (a batch closed by
// Unload keeps its attempt counted although its handler may not have
// reached its first statement, which is why a planned hand-over goes
// through Quiesce), and Resume undoes it when the queue stays. Sends and
// adoptions into a quiesced queue are held as usual.
func (e *Engine) Quiesce(ctx context.Context, uid string) error {
	q := e.queue(uid)
	if q == nil {
		return abi.ErrUnknownQueue
	}
	q.mu.Lock()
	if q.removed {
		q.mu.Unlock()
		return abi.ErrUnknownQueue
	}
	q.quiesced = true
	waits := make([]chan struct{}, 0, len(q.batches))
	for _, b := range q.batches {
		waits = append(waits, b.done)
	}
	q.mu.Unlock()
	return waitAll(ctx, waits)
}

// Resume forms batches of a quiesced queue again (its hand-over was
// called off).
func (e *Engine) Resume(uid string) {
	q := e.queue(uid)
	if q == nil {
		return
	}
	q.mu.Lock()
	q.quiesced = false
	q.pump()
	q.mu.Unlock()
	e.notify()
}

// CloseBatches closes every batch of a held queue without acknowledging
// anything, as Unload does, but keeps the queue: a host whose lease of
// the queue has run out by its own clock (its renewal late) stops the
// handlers it runs at once (their contexts are cancelled, their
// settlements answer ErrUnknownBatch), instead of at the next renewal.
// A batch still being dispatched does not start its handler. The
// messages are deliverable again under a current lease. It returns how
// many batches it closed.
func (e *Engine) CloseBatches(uid string) int {
	q := e.queue(uid)
	if q == nil {
		return 0
	}
	q.mu.Lock()
	var fin []*batch
	n := 0
	for _, b := range q.batches {
		switch b.state {
		case bDispatching:
			b.abort = true
			n++
		case bRunning:
			if e.closeLocked(b, outClose) {
				fin = append(fin, b)
			}
			n++
		}
	}
	q.mu.Unlock()
	for _, b := range fin {
		e.finalize(b)
	}
	if n > 0 {
		e.notify()
	}
	return n
}

// Holds reports whether the engine holds the queue.
func (e *Engine) Holds(uid string) bool {
	q := e.queue(uid)
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.removed
}

// Adopt adds to a held queue the stored messages it does not hold yet
// (accepted by another engine, or found by a re-read of the store), and
// returns how many it added. A message leased by a batch of another
// engine is unsettled, as at Start. Adopting a message the engine has just
// removed is safe: the delivery finds its record gone and forgets it.
// Only with Options.Remote or QueueConfig.External (the engine indexes
// the queue's messages by ID).
func (e *Engine) Adopt(uid string, sms []store.Message) int {
	q := e.queue(uid)
	if q == nil {
		return 0
	}
	sort.Slice(sms, func(i, j int) bool {
		if sms[i].AcceptedAt != sms[j].AcceptedAt {
			return sms[i].AcceptedAt < sms[j].AcceptedAt
		}
		return sms[i].ID < sms[j].ID
	})
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removed || q.ids == nil {
		return 0
	}
	now := e.nowMs()
	n := 0
	for _, sm := range sms {
		if sm.Queue != uid && sm.Queue != "" {
			continue
		}
		if q.holds(sm.ID) {
			continue
		}
		seq := uint64(0)
		if q.serial {
			// Its place in accept order, whichever engine accepted it.
			if s, ok := serialSeq(sm.ID); ok {
				seq = s
				e.raiseSerial(s)
			}
		}
		if seq == 0 {
			seq = e.seq.Add(1)
		}
		m := newMsg(sm.ID, sm.AcceptedAt, sm.VisibleAt, sm.Attempts, sm.Size, seq)
		m.dl = sm.DeadLetter
		m.tracedFrom(sm.TraceParent)
		if sm.Lease != "" && m.visibleAt > now {
			m.visibleAt = now
		}
		if q.insert(m, now) {
			n++
		}
	}
	if n > 0 {
		q.pump()
	}
	return n
}

// storedState is the inspection state of a stored message, as a host that
// does not deliver its queue sees it: a lease means a batch holds it.
func storedState(m store.Message, now int64) string {
	switch {
	case m.Lease != "":
		return MsgInFlight
	case m.VisibleAt <= now:
		return MsgAvailable
	case m.Attempts > 0:
		return MsgRetryWaiting
	}
	return MsgDelayed
}

// InspectStored is Inspect computed from a queue's stored messages, for a
// queue another engine holds.
func InspectStored(ms []store.Message, cfg QueueConfig, now int64) QueueInspection {
	out := QueueInspection{Messages: len(ms), Paused: cfg.Paused,
		ByState: map[string]int{MsgAvailable: 0, MsgDelayed: 0, MsgRetryWaiting: 0, MsgInFlight: 0, MsgRemoving: 0}}
	batches := map[string]bool{}
	oldest := int64(0)
	for _, m := range ms {
		out.Bytes += int64(m.Size)
		out.ByState[storedState(m, now)]++
		if m.Lease != "" {
			batches[m.Lease] = true
		}
		if oldest == 0 || m.AcceptedAt < oldest {
			oldest = m.AcceptedAt
		}
	}
	out.Batches = len(batches)
	if oldest != 0 && now > oldest {
		out.OldestAge = time.Duration(now-oldest) * time.Millisecond
	}
	return out
}

// PageStored is MessagePage over a queue's stored messages, in accept
// order (ID order within a millisecond; the cursor's Seq counts the
// messages of its millisecond).
func PageStored(ms []store.Message, after Cursor, limit int, now int64) ([]MessageInfo, Cursor, bool) {
	if limit <= 0 {
		limit = 1
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].AcceptedAt != ms[j].AcceptedAt {
			return ms[i].AcceptedAt < ms[j].AcceptedAt
		}
		return ms[i].ID < ms[j].ID
	})
	var page []MessageInfo
	var next Cursor
	seq, prev := uint64(0), int64(-1)
	for _, m := range ms {
		if m.AcceptedAt != prev {
			seq, prev = 0, m.AcceptedAt
		}
		seq++
		if m.AcceptedAt < after.AcceptedAt || (m.AcceptedAt == after.AcceptedAt && seq <= after.Seq) {
			continue
		}
		if len(page) == limit {
			return page, next, true
		}
		page = append(page, MessageInfo{ID: m.ID, AcceptedAt: m.AcceptedAt, VisibleAt: m.VisibleAt, Attempts: m.Attempts, Size: m.Size, State: storedState(m, now), DeadLetter: m.DeadLetter})
		next = Cursor{AcceptedAt: m.AcceptedAt, Seq: seq}
	}
	return page, next, false
}

// remoteDead prepares the dead-letter move of p.dead into a queue another
// engine holds: the accepts into it (new IDs), and which messages move
// and which were found gone.
func (e *Engine) remoteDead(ctx context.Context, q *queue, p *plan, delaySeconds int) (muts []store.Mutation, newIDs []string, dead, gone []*msg, err error) {
	ids := make([]string, len(p.dead))
	for i, m := range p.dead {
		ids[i] = m.id
	}
	bodies, err := e.store.Bodies(ctx, q.uid, ids)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	kept, err := e.histories(ctx, q.uid, p.dead)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	now := e.nowMs()
	seqIDs := e.serialIDs(nil, e.serialSeqs(len(p.dead)), len(p.dead))
	var deadHistory [][]store.Attempt
	for i, m := range p.dead {
		if bodies[i] == nil {
			gone = append(gone, m)
			continue
		}
		id := seqIDs[i]
		h := p.movedHistory(m, kept[i])
		deadHistory = append(deadHistory, h)
		muts = append(muts, store.AcceptMessage{
			Message: store.Message{Queue: p.dlqUID, ID: id, AcceptedAt: now, VisibleAt: now + int64(delaySeconds)*1000, Size: len(bodies[i]),
				DeadLetter: p.deadLetter(q, m, now), TraceParent: m.traceParent(), History: h},
			Body: bodies[i],
		})
		newIDs = append(newIDs, id)
		dead = append(dead, m)
	}
	p.deadHistory = deadHistory
	return muts, newIDs, dead, gone, nil
}
