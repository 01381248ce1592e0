package delivery

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/clock"
	"github.com/takoform/queuehost/runtime/store"
)

// ErrHandlerTimeout is the cause (context.Cause) of a handler context that
// ended because the invocation exceeded Options.HandlerTimeout. It wraps
// context.DeadlineExceeded.
var ErrHandlerTimeout = fmt.Errorf("delivery: the handler exceeded its time limit: %w", context.DeadlineExceeded)

// errBatchClosed is the cause of a handler context whose batch was closed
// by Detach, Stop or RemoveQueue before the handler returned.
var errBatchClosed = errors.New("delivery: the batch was closed by the host")

type batchState uint8

const (
	bDispatching batchState = iota // resolving, reading bodies, recording the delivery
	bRunning                       // handler invoked; settlements accepted
	bClosing                       // invocation ended; waiting for settlements in flight, then finalizing
	bClosed
)

type outcome uint8

const (
	outSuccess outcome = iota + 1 // handler returned nil: acknowledge the unsettled
	outFailure                    // threw, rejected, panicked: retry the unsettled
	outTimeout                    // exceeded HandlerTimeout: retry the unsettled
	outClose                      // closed by the host: unsettled go back as they are
	outExpired                    // a pull lease's visibility timeout ended: retry the unsettled at once
	outSettled                    // every message of a pull lease was settled
	outRelease                    // a pull lease closed by a detach: the unsettled are visible again at once, durably
)

type settleState uint8

const (
	unsettled settleState = iota
	settling
	settled
)

type bmsg struct {
	m    *msg
	st   settleState
	wait chan struct{} // closed when a settlement in flight ends
}

// batch is one delivery; guarded by its queue's mu.
type batch struct {
	id    string
	q     *queue
	c     *consumer
	items []*bmsg
	byID  map[string]*bmsg // built on the first settlement of one message
	state batchState
	// abort: set while dispatching by Detach, Stop or RemoveQueue;
	// the handler is not invoked and the messages go back.
	abort bool
	// noAck: the consumer is detaching; a normal return of the handler
	// does not acknowledge what is unsettled (QC-CRUD-23).
	noAck      bool
	outcome    outcome
	pending    int  // settlements in flight
	finalizing bool // someone is running finalize
	// slotFreed: the invocation ended and the batch no longer counts
	// against maxConcurrency (QC: the batches running at once), though
	// its settlement may still be in flight; its messages stay leased
	// until that write ends.
	slotFreed bool
	cancel    context.CancelCauseFunc
	timer     clock.Timer
	done      chan struct{} // closed when bClosed
	formed    int64         // UTC epoch ms when it was formed (inspection)
	// spans: the batch's open spans while it runs on a traced engine
	// (trace.go); nil otherwise.
	spans BatchSpans
	// pull: a pull consumer's lease (pull.go); expiresAt is its expiry
	// (UTC epoch ms), extending is set while an extension is written.
	pull      bool
	expiresAt int64
	extending bool

	// For the attempt history (attempts.go): when the handler started
	// and its invocation ended (UTC epoch ms), the WorkerVersion that ran
	// it, and how it failed.
	startedMs, endedMs            int64
	version                       string
	errName, errMessage, errStack string
	failOutcome                   string
}

func (e *Engine) newBatch(q *queue, c *consumer, ms []*msg) *batch {
	b := &batch{id: e.newBatchID(), q: q, c: c, items: make([]*bmsg, len(ms)), done: make(chan struct{}), formed: e.nowMs()}
	bms := make([]bmsg, len(ms))
	for i, m := range ms {
		bms[i].m = m
		b.items[i] = &bms[i]
	}
	return b
}

// dispatchBatch resolves the handler, reads the bodies, records the
// delivery durably (attempts+1, lease) and runs the handler. Runs in its own
// goroutine, counted by track until the handler is invoked.
func (e *Engine) dispatchBatch(b *batch) {
	q := b.q
	tracked := true
	defer func() {
		if tracked {
			e.track.done()
		}
	}()
	q.mu.Lock()
	workerUID, queueName, abort, consumerUID := b.c.cfg.WorkerUID, q.cfg.Name, b.abort, b.c.cfg.UID
	q.mu.Unlock()
	if abort {
		e.unlease(b, nil, false)
		return
	}
	h, err := e.res.Resolve(e.ctx, workerUID)
	if err == nil && h == nil {
		err = errors.New("resolver returned no handler")
	}
	if err != nil {
		e.log.Warn("delivery: cannot resolve the queue handler; delivering nothing, will retry", "queue", q.uid, "consumer", b.c.cfg.UID, "worker", workerUID, "err", err)
		e.unlease(b, nil, true)
		return
	}
	var version string
	if vh, ok := h.(abi.VersionedHandler); ok {
		version = vh.VersionUID()
	}
	ids := make([]string, len(b.items))
	for i, bm := range b.items {
		ids[i] = bm.m.id
	}
	bodies, err := e.store.Bodies(e.ctx, q.uid, ids)
	if err != nil {
		e.log.Warn("delivery: reading message bodies failed; will retry", "queue", q.uid, "err", err)
		e.unlease(b, nil, true)
		return
	}
	if gone := b.gone(bodies); len(gone) > 0 {
		e.unlease(b, gone, false)
		return
	}
	q.mu.Lock()
	abort = b.abort
	q.mu.Unlock()
	if abort {
		e.unlease(b, nil, false)
		return
	}
	if e.remote != nil && !e.remote.Deliverable(q.uid) {
		// The queue's lease is running out by this host's clock (a
		// renewal is late, or the lease is lost): record nothing, so
		// that no attempt is counted that no handler runs; try again
		// shortly (the renewal succeeds, or the queue is unloaded).
		e.log.Debug("delivery: the queue's lease is running out; delivering nothing until it is renewed", "queue", q.uid)
		e.unleaseFor(b, leaseWait)
		return
	}
	if err := e.store.Apply(e.ctx, store.DeliverMessages{Queue: q.uid, Batch: b.id, IDs: ids}); err != nil {
		e.log.Warn("delivery: recording a delivery failed; will retry", "queue", q.uid, "err", err)
		e.unlease(b, nil, true)
		return
	}

	leaseUntil, current := e.currentLease(q.uid)
	q.mu.Lock()
	b.c.failures, b.c.backoffUntil = 0, 0
	if !b.abort && !current {
		// The queue's lease may have moved on while this host was
		// stalled (its delivery write was fenced in time, but the
		// handler must not run late either): as if closed.
		b.abort = true
	}
	if b.abort {
		// Closed while the delivery was being recorded: the handler does
		// not run, and the recorded attempt is given back.
		q.mu.Unlock()
		e.giveBack(b, bodies)
		return
	}
	msgs := make([]abi.Message, len(b.items))
	for i, bm := range b.items {
		bm.m.attempts++
		msgs[i] = abi.Message{ID: bm.m.id, TimestampMillis: bm.m.acceptedAt, Body: bodies[i], Attempts: bm.m.attempts}
	}
	b.state = bRunning
	b.startedMs, b.version = e.nowMs(), version
	base := context.Background()
	if !leaseUntil.IsZero() {
		// The handler's last chance to refuse a stale batch is where it
		// starts it (a sandbox process, which goes on while this one is
		// stopped).
		base = abi.WithStartBy(base, leaseUntil)
	}
	hctx, cancel := context.WithCancelCause(base)
	timeout := e.handlerTimeout
	if clock.IsReal(e.clock) {
		// Let the handler see its deadline; the clock timer below is what
		// closes the batch.
		var c2 context.CancelFunc
		hctx, c2 = context.WithDeadlineCause(hctx, e.clock.Now().Add(timeout), ErrHandlerTimeout)
		cancel1 := cancel
		cancel = func(cause error) { cancel1(cause); c2() }
	}
	if e.tracer != nil {
		e.startSpans(b)
		hctx = b.spans.Context(hctx)
	}
	b.cancel = cancel
	b.timer = e.clock.AfterFunc(timeout, func() { e.handlerTimedOut(b) })
	e.registerBatch(b)
	e.delivered.Add(1)
	q.mu.Unlock()

	q.count.delivered.Add(uint64(len(msgs)))
	batch := abi.NewBatch(b.id, queueName, msgs, e)
	tracked = false
	e.track.done()
	started := e.clock.Now()
	herr := runHandler(hctx, h, batch)
	if e.observeBatch != nil {
		e.observeBatch(BatchObservation{ConsumerUID: consumerUID, QueueUID: q.uid, Messages: len(msgs), Duration: e.clock.Now().Sub(started), Failed: herr != nil})
	}
	e.track.add()
	tracked = true
	if errors.Is(herr, abi.ErrNotStarted) {
		e.notStarted(b, bodies)
		return
	}

	out := outSuccess
	if herr != nil {
		out = outFailure
		e.log.Info("delivery: the queue handler failed; unsettled messages will be retried", "queue", q.uid, "batch", b.id, "err", herr)
	}
	q.mu.Lock()
	if herr != nil && b.state == bRunning {
		b.failed(herr)
	}
	fin := e.closeLocked(b, out)
	// The freed slot may start the next batch now, so that its delivery
	// and this batch's settlement share a group commit.
	q.pump()
	q.mu.Unlock()
	if fin {
		e.finalize(b)
	}
}

// runHandler calls h, turning a panic into an error.
func runHandler(ctx context.Context, h abi.Handler, b *abi.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("queue handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h.HandleBatch(ctx, b)
}

// unlease abandons a batch that never reached its handler: nothing was
// recorded, so the messages simply become deliverable again (gone ones are
// forgotten). With fail, the consumer backs off.
func (e *Engine) unlease(b *batch, gone []*bmsg, fail bool) {
	q := b.q
	q.mu.Lock()
	now := e.nowMs()
	for _, bm := range gone {
		q.drop(bm.m)
	}
	for _, bm := range b.items {
		if bm.m.state == stLeased {
			q.release(bm.m, bm.m.visibleAt, now)
		}
	}
	if fail {
		b.c.failures++
		b.c.backoffUntil = now + backoff(b.c.failures).Milliseconds()
	}
	e.endBatchLocked(b)
	q.pump()
	q.mu.Unlock()
	e.notify()
}

// leaseWait is how long a consumer waits before its next batch when its
// queue's lease was running out at a delivery (see Remote.Deliverable).
const leaseWait = 250 * time.Millisecond

// unleaseFor is unlease of a batch that was not recorded, with the next
// batch of its consumer not before wait.
func (e *Engine) unleaseFor(b *batch, wait time.Duration) {
	q := b.q
	q.mu.Lock()
	now := e.nowMs()
	for _, bm := range b.items {
		if bm.m.state == stLeased {
			q.release(bm.m, bm.m.visibleAt, now)
		}
	}
	b.c.backoffUntil = max(b.c.backoffUntil, now+wait.Milliseconds())
	e.endBatchLocked(b)
	q.pump()
	q.mu.Unlock()
	e.notify()
}

// giveBack ends a batch whose delivery was recorded but whose handler
// will not run (closed meanwhile, or the queue's lease ran out by this
// host's clock): a delivery counts as an attempt only once it is recorded
// and handed to a handler, so each message's record is restored as it
// was before the delivery (same attempts, no lease), in one write fenced
// by the queue's lease in a cluster (the RetryMessage). When that write
// fails (the lease moved on: the successor may already deliver them) the
// attempt stays counted. A message purged or expired meanwhile is not
// restored, nor are the messages of a removed queue.
func (e *Engine) giveBack(b *batch, bodies [][]byte) {
	q := b.q
	q.life.RLock()
	q.mu.Lock()
	var muts []store.Mutation
	var restored []*msg
	if !q.removed {
		for i, bm := range b.items {
			m := bm.m
			if m.expired || m.state != stLeased {
				continue
			}
			muts = append(muts,
				store.AcceptMessage{
					Message: store.Message{Queue: q.uid, ID: m.id, AcceptedAt: m.acceptedAt, VisibleAt: m.visibleAt,
						Attempts: m.attempts, Size: m.size, DeadLetter: m.dl, TraceParent: m.traceParent()},
					Body: bodies[i],
				},
				store.RetryMessage{Queue: q.uid, ID: m.id, VisibleAt: m.visibleAt})
			restored = append(restored, m)
		}
	}
	q.mu.Unlock()
	var err error
	if len(muts) > 0 {
		err = e.store.Apply(context.WithoutCancel(e.ctx), muts...)
	}
	q.life.RUnlock()
	q.mu.Lock()
	now := e.nowMs()
	if err != nil {
		e.log.Warn("delivery: giving back the attempt of a batch whose handler did not run failed; the attempt stays counted", "queue", q.uid, "batch", b.id, "err", err)
	} else if q.unloaded && len(restored) < len(b.items) {
		e.log.Info("delivery: the queue of a batch whose handler did not run was unloaded meanwhile (its lease moved on); the attempt stays counted", "queue", q.uid, "batch", b.id)
	}
	for _, bm := range b.items {
		if err != nil || !slices.Contains(restored, bm.m) {
			bm.m.attempts++ // as recorded
		}
		if bm.m.state == stLeased {
			q.release(bm.m, now, now)
		}
	}
	e.endBatchLocked(b)
	q.pump()
	q.mu.Unlock()
	e.notify()
}

// notStarted ends a running batch whose handler refused to start it
// (abi.ErrNotStarted: the lease's end, passed with abi.WithStartBy, had
// passed where it was to start): as giveBack, unless the batch was closed
// meanwhile (its closer settles it as usual).
func (e *Engine) notStarted(b *batch, bodies [][]byte) {
	q := b.q
	q.mu.Lock()
	if b.state != bRunning || b.pending > 0 {
		fin := e.closeLocked(b, outClose)
		q.mu.Unlock()
		if fin {
			e.finalize(b)
		}
		return
	}
	b.state = bDispatching
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.cancel != nil {
		b.cancel(errBatchClosed)
	}
	e.unregisterBatch(b.id)
	for _, bm := range b.items {
		bm.m.attempts-- // giveBack counts them again if it cannot restore them
	}
	q.mu.Unlock()
	e.log.Info("delivery: the handler did not start a batch: the queue's lease had ended where it was to start; giving the attempt back", "queue", q.uid, "batch", b.id)
	e.giveBack(b, bodies)
}

// endBatchLocked retires b. q.mu held.
func (e *Engine) endBatchLocked(b *batch) {
	b.endSpans()
	b.state = bClosed
	delete(b.q.batches, b.id)
	b.freeSlot()
	e.unregisterBatch(b.id)
	close(b.done)
}

// freeSlot stops counting b against its consumer's maxConcurrency, once.
func (b *batch) freeSlot() {
	if !b.slotFreed {
		b.slotFreed = true
		b.c.inflight--
	}
}

func (e *Engine) handlerTimedOut(b *batch) {
	q := b.q
	q.mu.Lock()
	fin := e.closeLocked(b, outTimeout)
	q.pump()
	q.mu.Unlock()
	if fin {
		e.log.Info("delivery: the queue handler exceeded its time limit; unsettled messages will be retried", "queue", q.uid, "batch", b.id)
		e.finalizeLater(b)
	}
}

// closeLocked ends the invocation of a running batch: from now on every
// settlement is ErrUnknownBatch. It reports whether the caller must run
// finalize (no settlement is in flight); otherwise the last settlement in
// flight runs it. The first close wins. q.mu held.
func (e *Engine) closeLocked(b *batch, out outcome) bool {
	if b.state != bRunning {
		return false
	}
	b.state = bClosing
	b.outcome = out
	b.endedMs = e.nowMs()
	b.freeSlot()
	if b.timer != nil {
		b.timer.Stop()
	}
	if b.cancel != nil {
		switch out {
		case outTimeout:
			b.cancel(ErrHandlerTimeout)
		case outClose:
			b.cancel(errBatchClosed)
		default:
			b.cancel(context.Canceled)
		}
	}
	e.unregisterBatch(b.id)
	if b.pull {
		why := ErrLeaseExpired
		if out == outSettled {
			why = ErrLeaseSettled
		}
		e.noteEnded(b, why)
	}
	if b.pending == 0 && !b.finalizing {
		b.finalizing = true
		return true
	}
	return false
}

// finalize settles what the handler left unsettled according to the
// outcome, then retires the batch. For outClose it does no I/O.
func (e *Engine) finalize(b *batch) {
	q := b.q
	q.mu.Lock()
	out := b.outcome
	if out == outSuccess && b.noAck { // mutate:detach-acks-unsettled
		out = outClose
	}
	cfg := b.c.cfg
	now := e.nowMs()
	p := plan{q: q}
	switch out {
	case outSuccess:
		p.attempt = e.attemptOf(b, store.OutcomeAcknowledged, 0)
	case outFailure:
		p.attempt = e.attemptOf(b, b.failOutcome, cfg.RetryDelaySeconds)
	case outTimeout:
		p.attempt = e.attemptOf(b, store.OutcomeTimeLimit, cfg.RetryDelaySeconds)
	}
	for _, bm := range b.items {
		if bm.st != unsettled {
			continue
		}
		bm.st = settled
		switch out {
		case outSuccess: // mutate:ack-after-throw
			p.ack = append(p.ack, bm.m)
		case outFailure, outTimeout:
			p.retryOrExhaust(bm.m, now+int64(cfg.RetryDelaySeconds)*1000, now, cfg) // mutate:throw-delay-ignored
		case outExpired:
			// The visibility timeout was the delay (spec/peers.md §Pull
			// consumers).
			p.retryOrExhaust(bm.m, now, now, cfg)
		case outRelease:
			p.retry = append(p.retry, bm.m)
			p.retryAt = append(p.retryAt, now)
		default:
			// Closed by the host: nothing is acknowledged; the delivery
			// stays counted and the message is deliverable again at once
			// (its durable lease is overwritten by the next delivery, or
			// released at the next start).
			q.release(bm.m, now, now)
		}
	}
	q.mu.Unlock()

	var moved []*msg
	var dlq *queue
	var err error
	if !p.empty() {
		moved, dlq, err = e.commit(context.Background(), &p)
	}

	q.mu.Lock()
	now = e.nowMs()
	if err != nil {
		// Nothing of the plan is durable: the messages stay leased in the
		// store and unsettled. Deliver them again after the retry delay
		// (an exhausted one is dead-lettered at that point instead).
		e.log.Warn("delivery: settling a finished batch failed; its messages will be redelivered", "queue", q.uid, "batch", b.id, "err", err)
		for _, m := range p.all() {
			q.release(m, now+int64(cfg.RetryDelaySeconds)*1000, now)
		}
	} else {
		q.applyPlan(&p, now)
		b.traceSettled(&p)
	}
	e.endBatchLocked(b)
	e.finished.Add(1)
	q.pump()
	q.mu.Unlock()
	e.addMoved(dlq, moved, p.dlqPending)
	e.notify()
}

// Settle applies one settlement of a running batch. It returns only after
// the settlement is durable. See the package documentation for the errors.
func (e *Engine) Settle(ctx context.Context, batchID string, s abi.Settlement) error {
	switch s.Kind {
	case abi.Acknowledge, abi.Retry, abi.AcknowledgeAll, abi.RetryAll:
	default:
		return fmt.Errorf("delivery: unknown settlement kind %d", s.Kind)
	}
	if (s.Kind == abi.Retry || s.Kind == abi.RetryAll) && s.Delay != nil && (*s.Delay < 0 || *s.Delay > abi.MaxDelaySeconds) {
		return abi.ErrInvalidDelay
	}
	b := e.lookupBatch(batchID)
	if b == nil {
		return abi.ErrUnknownBatch
	}
	q := b.q
	q.mu.Lock()
	var targets []*bmsg
	for {
		if b.state != bRunning {
			q.mu.Unlock()
			return abi.ErrUnknownBatch
		}
		if s.Kind == abi.AcknowledgeAll || s.Kind == abi.RetryAll {
			for _, bm := range b.items {
				if bm.st == unsettled { // mutate:ackall-reverses-retry
					targets = append(targets, bm)
				}
			}
			if len(targets) == 0 {
				q.mu.Unlock()
				return nil
			}
			break
		}
		if b.byID == nil {
			b.byID = make(map[string]*bmsg, len(b.items))
			for _, bm := range b.items {
				b.byID[bm.m.id] = bm
			}
		}
		bm := b.byID[s.MessageID]
		if bm == nil {
			q.mu.Unlock()
			return abi.ErrUnknownMessage
		}
		if bm.st == settled { // mutate:settlement-reversed
			q.mu.Unlock()
			return abi.ErrAlreadySettled
		}
		if bm.st == settling {
			// Another settlement of this message is in flight: its
			// outcome decides ours.
			ch := bm.wait
			q.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, ctx.Err())
			}
			q.mu.Lock()
			continue
		}
		targets = []*bmsg{bm}
		break
	}
	cfg := b.c.cfg
	now := e.nowMs()
	p := plan{q: q}
	for _, bm := range targets {
		bm.st = settling
		bm.wait = make(chan struct{})
		switch s.Kind {
		case abi.Acknowledge, abi.AcknowledgeAll:
			p.ack = append(p.ack, bm.m)
		default:
			delay := cfg.RetryDelaySeconds // mutate:retry-delay-ignored
			if s.Delay != nil {
				delay = *s.Delay
			}
			p.retryOrExhaust(bm.m, now+int64(delay)*1000, now, cfg)
		}
	}
	if s.Kind == abi.Acknowledge || s.Kind == abi.AcknowledgeAll {
		p.attempt = e.attemptOf(b, store.OutcomeAcknowledged, 0)
	} else {
		p.attempt = e.attemptOf(b, store.OutcomeRetried, settledDelay(s, cfg))
	}
	b.pending++
	q.mu.Unlock()

	// The settlement is accepted: closing the batch now waits for it, and
	// its outcome is the store's alone. ctx is typically the handler's,
	// which the engine itself cancels when the invocation ends (time
	// limit, return, throw); aborting the write then would leave the
	// message unsettled and finalize would apply the batch's default
	// (retryDelaySeconds, or an acknowledgement) instead of this
	// settlement.
	moved, dlq, err := e.commit(context.WithoutCancel(ctx), &p)
	return e.settleDone(b, targets, &p, moved, dlq, err)
}

// settleDone ends a settlement of targets whose write (p) came back with
// err: the messages are settled (or unsettled again on err), the plan is
// applied, and a batch whose invocation ended meanwhile, or a pull lease
// now fully settled, is finalized. Called without the queue's lock.
func (e *Engine) settleDone(b *batch, targets []*bmsg, p *plan, moved []*msg, dlq *queue, err error) error {
	q := b.q
	q.mu.Lock()
	b.pending--
	for _, bm := range targets {
		close(bm.wait)
		if err != nil {
			bm.st = unsettled
		} else {
			bm.st = settled
		}
	}
	if err == nil {
		q.applyPlan(p, e.nowMs())
		b.traceSettled(p)
	}
	fin := false
	if b.pull && b.state == bRunning && allSettled(b) {
		fin = e.closeLocked(b, outSettled)
	} else if b.state == bClosing && b.pending == 0 && !b.finalizing {
		b.finalizing, fin = true, true
	}
	q.pump()
	q.mu.Unlock()
	if fin {
		e.finalizeLater(b)
	}
	e.addMoved(dlq, moved, p.dlqPending)
	e.notify()
	if err != nil { // mutate:ack-before-durable
		return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	return nil
}

var _ abi.Settler = (*Engine)(nil)

// gone is the batch's messages whose bodies (read in the batch's order)
// came back nil: removed meanwhile (purged, expired).
func (b *batch) gone(bodies [][]byte) []*bmsg {
	var out []*bmsg
	for i, bm := range b.items {
		if bodies[i] == nil {
			out = append(out, bm)
		}
	}
	return out
}

// finalizeLater finalizes b on a goroutine the engine's Stop waits for:
// for a batch closed from a timer or under a settlement's call, whose
// caller must not wait for the final write.
func (e *Engine) finalizeLater(b *batch) {
	e.track.add()
	go func() {
		defer e.track.done()
		e.finalize(b)
	}()
}
