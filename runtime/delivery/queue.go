package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sync"
	"sync/atomic"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/clock"
	"github.com/takoform/queuehost/runtime/store"
)

// queue is the engine's state of one AtLeastOnceQueue. Everything but life
// is guarded by mu. mu is never held across store I/O or a handler call.
type queue struct {
	e   *Engine
	uid string

	// life serialises message-creating store writes (Send, dead-letter
	// moves into this queue) against RemoveQueue's DropQueue, so that no
	// message is accepted into a dropped queue. Readers: Send and commit;
	// writer: RemoveQueue. Never acquired while mu is held.
	life sync.RWMutex
	// sendDelay is cfg.DeliveryDelaySeconds, for Send to read without mu.
	sendDelay atomic.Int32

	mu  sync.Mutex
	cfg QueueConfig
	// removed is written under mu with life held exclusively, so a holder
	// of either may read it.
	removed bool
	// unloaded: removed by Unload (its delivery moved to another engine
	// of a cluster), not deleted; written with removed.
	unloaded bool
	// quiesced: its delivery is being handed over to another engine of a
	// cluster (Quiesce): no new batch is formed, the running ones finish.
	quiesced bool
	// held counts the messages the queue holds (not gone). ids maps them
	// by ID only with an injected NewID, whose IDs must be checked for
	// duplicates; random ones need no map.
	held      int
	heldBytes int64 // the bodies' size of the held messages
	ids       map[string]*msg
	delayed   msgOrder // stReady, not yet promoted (visibleAt may be future)
	avail     msgOrder // stReady, visibleAt <= now, ready for a batch
	expiry    msgOrder // every message whose expiry has not been found yet (byExpiry)

	consumer *consumer
	batches  map[string]*batch // dispatching, running or closing

	// serial: cfg.Serialized, fixed at AddQueue (see serial.go). avail is
	// then in accept order (bySeq) and holds every ready message, visible
	// or not; delayed stays empty.
	serial bool
	// pending lists the first accept sequence number of each write that
	// is adding messages to a serialized queue (a Send, a dead-letter
	// move into it) and has not ended: no message accepted after it may be
	// delivered before it is in memory (see serial.go).
	pending []uint64
	// serialFillAt: when the message right behind a serialized queue's
	// visible head run becomes visible, if that may fill the batch (set by
	// dispatchSerial, armed by rearmSerial); 0 when none.
	serialFillAt int64

	// Background store work: messages found expired, and messages that
	// exhausted their deliveries, waiting for (or in) their store write.
	toExpire   []*msg
	toExhaust  []*msg
	expiring   bool // a removal of toExpire is in flight
	exhausting bool // a dead-letter/discard write is in flight
	opFailures int
	opRetryAt  int64 // after a failed background write: not before

	timer   clock.Timer
	timerAt int64 // due time the timer is armed for; 0 when not armed

	count counters // for Engine.Counters (metrics)

	// futDelayed and futRetry count the ready messages that were not yet
	// visible when they became ready (first delivery and retry), kept as
	// they change so that Inspect does not walk the queue; futDue holds
	// them by visible time, so that Inspect can take out those that have
	// become visible since (see inspect.go).
	futDelayed, futRetry int
	futDue               futHeap

	// listed: the queue is in the engine's ChangedQueues list.
	listed bool

	// Pull consumers (pull.go): pullCh is closed to wake the long polls
	// waiting (pullWaiters) when messages become visible; recovered holds,
	// by lease ID, the messages of pull leases a restart found unexpired
	// (waiting in the delayed order until the lease's expiry).
	pullCh      chan struct{}
	pullWaiters int
	recovered   map[string][]*msg
}

// consumer is one attached QueueConsumer; guarded by its queue's mu.
type consumer struct {
	cfg       ConsumerConfig
	q         *queue
	inflight  int  // batches counted against maxConcurrency
	detaching bool // no new batches; Detach is waiting
	// Resolver or delivery write failures back off the consumer.
	failures     int
	backoffUntil int64
}

func backoff(failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	if failures > 7 {
		return maxBackoff
	}
	d := minBackoff << (failures - 1)
	if d > maxBackoff {
		d = maxBackoff
	}
	return d
}

// Backoff bounds for retrying resolution and failed background writes.
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

func (q *queue) retentionMs() int64 { return int64(q.cfg.MessageRetentionSeconds) * 1000 }

// expireAt is the instant from which m counts as expired: accept time plus
// the queue's current retention.
func (q *queue) expireAt(m *msg) int64 { return m.acceptedAt + q.retentionMs() } // mutate:retention-from-delivery

// insert adds a new message (load, adoption, dead-letter move, redrive)
// and reports whether it did: false when the queue already holds a
// message of that ID (see holds). mu held.
func (q *queue) insert(m *msg, now int64) bool {
	if !q.add(m) {
		return false
	}
	q.pushVis(m, now)
	q.expiry.push(m)
	m.inExp = true
	return true
}

// insertSent adds the messages of one Send, given in input order: they
// share an accept time, so they are in expiry order, and those visible at
// once are in delivery order. mu held.
func (q *queue) insertSent(ms []*msg, now int64) {
	var avail []*msg
	skipped := false
	for _, m := range ms {
		if !q.add(m) {
			skipped = true
			continue
		}
		m.inExp = true
		if q.serial || m.visibleAt <= now {
			m.where = inAvail
			avail = append(avail, m)
		} else {
			m.where = inDelayed
			q.delayed.push(m)
		}
		q.noteFuture(m, now)
	}
	if skipped {
		var added []*msg
		for _, m := range ms {
			if q.ids[m.id] == m {
				added = append(added, m)
			}
		}
		ms = added
	}
	q.expiry.pushSorted(ms)
	q.avail.pushSorted(avail)
}

// Whether a message is held in memory is decided in one place: q.ids,
// kept when messages can reach the queue by two ways (a cluster, whose
// owner adopts what other engines accepted and what a re-read of the
// store finds; an injected NewID). A write that adds messages to a held
// queue (a send, a dead-letter move, a redrive) reserves their IDs before
// its store write and inserts them after it: a re-read of the store in
// between finds them reserved and leaves them to the write, so that one
// message never has two copies in memory (delivered twice, both times as
// attempt 1). Without q.ids a message has one way in.

// holds reports whether the queue holds the message of that ID, or a
// write in progress is adding it. mu held.
func (q *queue) holds(id string) bool {
	_, ok := q.ids[id]
	return ok
}

// reserve marks ids as being added by a write in progress (see holds).
// mu held.
func (q *queue) reserve(ids []string) {
	if q.ids == nil {
		return
	}
	for _, id := range ids {
		if _, ok := q.ids[id]; !ok {
			q.ids[id] = nil
		}
	}
}

// unreserve forgets the reservations of a write that failed. mu held.
func (q *queue) unreserve(ids []string) {
	if q.ids == nil {
		return
	}
	for _, id := range ids {
		if m, ok := q.ids[id]; ok && m == nil {
			delete(q.ids, id)
		}
	}
}

// add counts a new message as held and ready, unless the queue holds a
// message of that ID already (false). A reservation of its ID is taken
// over. mu held.
func (q *queue) add(m *msg) bool {
	if q.ids != nil {
		if cur := q.ids[m.id]; cur != nil {
			return false
		}
		q.ids[m.id] = m
	}
	q.noteChanged()
	q.held++
	q.heldBytes += int64(m.size)
	m.state = stReady
	return true
}

// pushVis adds a ready message to the available order when it is visible
// at now, else to the delayed one. mu held.
func (q *queue) pushVis(m *msg, now int64) {
	if q.serial || m.visibleAt <= now {
		m.where = inAvail
		q.avail.push(m)
	} else {
		m.where = inDelayed
		q.delayed.push(m)
	}
	q.noteFuture(m, now)
}

// unlinkVis removes m from whichever visibility order holds it. mu held.
func (q *queue) unlinkVis(m *msg) {
	q.forgetFuture(m)
	var o *msgOrder
	switch m.where {
	case inAvail:
		o = &q.avail
	case inDelayed:
		o = &q.delayed
	default:
		return
	}
	m.visGen++
	m.where = inNone
	o.removed()
}

// unlinkExp removes m from the expiry order. mu held.
func (q *queue) unlinkExp(m *msg) {
	if !m.inExp {
		return
	}
	m.expGen++
	m.inExp = false
	q.expiry.removed()
}

// drop forgets m: the store no longer holds it. mu held.
func (q *queue) drop(m *msg) {
	q.unlinkVis(m)
	q.unlinkExp(m)
	if m.state == stGone {
		return
	}
	m.state = stGone
	q.noteChanged()
	q.held--
	q.heldBytes -= int64(m.size)
	if q.ids != nil && q.ids[m.id] == m {
		delete(q.ids, m.id)
	}
}

// release puts a leased or busy message back to be delivered from
// visibleAt, unless it has expired, in which case it goes to expiry
// removal instead. mu held.
func (q *queue) release(m *msg, visibleAt, now int64) {
	if m.state != stLeased && m.state != stBusy {
		return
	}
	if m.expired || now >= q.expireAt(m) {
		q.markExpired(m)
		return
	}
	m.state = stReady
	m.visibleAt = visibleAt
	q.unlinkVis(m)
	q.pushVis(m, now)
	if !m.inExp {
		q.expiry.push(m)
		m.inExp = true
	}
}

// markExpired moves m (not leased) to the expiry removal list. mu held.
func (q *queue) markExpired(m *msg) {
	q.unlinkVis(m)
	q.unlinkExp(m)
	m.expired = true
	m.state = stBusy
	q.toExpire = append(q.toExpire, m)
}

// expireDue pops every message whose retention has passed. Messages that
// are waiting are queued for removal; leased (in a running batch) or busy
// ones are only flagged and are removed when they come back. mu held.
func (q *queue) expireDue(now int64) {
	for {
		m := q.expiry.peek()
		if m == nil || now < q.expireAt(m) {
			return
		}
		q.expiry.pop()
		m.inExp = false
		switch m.state {
		case stReady:
			q.markExpired(m)
		default:
			m.expired = true
		}
	}
}

// pump does everything that is due on the queue now: expiry, batch
// formation, background writes; then arms the queue's timer for the next
// due event. Called with mu held after every change that can make something
// due. It never blocks: store I/O and handlers run in goroutines.
func (q *queue) pump() {
	e := q.e
	if q.removed || e.stopping.Load() {
		q.stopTimer()
		return
	}
	if !e.started.Load() {
		return
	}
	now := e.nowMs()
	q.expireDue(now)
	if len(q.toExpire) > 0 && !q.expiring && now >= q.opRetryAt {
		list := q.toExpire
		q.toExpire = nil
		q.expiring = true
		e.track.add()
		go e.removeExpired(q, list)
	}
	if c := q.consumer; c != nil && !c.detaching && !q.quiesced {
		switch {
		case q.cfg.Paused:
		case c.cfg.Pull:
			q.pullReady(now)
		case q.serial:
			q.dispatchSerial(c, now)
		default:
			q.dispatch(c, now)
		}
		if len(q.toExhaust) > 0 && !q.exhausting && now >= q.opRetryAt {
			q.startExhaust(c, now)
		}
	}
	q.rearm(now)
}

func (q *queue) exhausted(c *consumer, m *msg) bool { return m.attempts >= 1+c.cfg.MaxRetries } // mutate:max-retries-first-1

// dispatch forms the batches that are due. mu held.
func (q *queue) dispatch(c *consumer, now int64) {
	q.promote(now)
	timeoutMs := int64(c.cfg.MaxBatchTimeoutSeconds) * 1000                               // mutate:batch-no-wait
	for c.inflight < c.cfg.MaxConcurrency && now >= c.backoffUntil && q.avail.Len() > 0 { // mutate:max-concurrency
		// A batch is due when it is full, or when its first message has
		// been available for maxBatchTimeoutSeconds.
		if q.avail.Len() < c.cfg.MaxBatchSize && now < q.avail.peek().visibleAt+timeoutMs {
			return
		}
		ms := make([]*msg, 0, min(c.cfg.MaxBatchSize, q.avail.Len()))
		for len(ms) < c.cfg.MaxBatchSize && q.avail.Len() > 0 { // mutate:max-batch-size
			m := q.avail.pop()
			m.where = inNone
			if q.exhausted(c, m) {
				// Already had 1+maxRetries deliveries (restart, store
				// failure at settlement, lowered maxRetries): never
				// deliver again; dead-letter or discard.
				m.state = stBusy
				q.toExhaust = append(q.toExhaust, m)
				continue
			}
			m.state = stLeased
			ms = append(ms, m)
		}
		if len(ms) == 0 {
			continue
		}
		b := q.e.newBatch(q, c, ms)
		c.inflight++
		q.batches[b.id] = b
		q.e.track.add()
		go q.e.dispatchBatch(b)
	}
}

// rearm arms the queue's one timer for the earliest future event, or stops
// it when nothing is due: an idle queue costs no goroutine and no timer.
// mu held.
func (q *queue) rearm(now int64) {
	var next int64
	consider := func(t int64) {
		if t > now && (next == 0 || t < next) {
			next = t
		}
	}
	if m := q.expiry.peek(); m != nil { // mutate:retention-lazy
		consider(q.expireAt(m))
	}
	if (len(q.toExpire) > 0 && !q.expiring) || (len(q.toExhaust) > 0 && !q.exhausting && q.consumer != nil) {
		consider(q.opRetryAt)
	}
	if c := q.consumer; c != nil && q.serial {
		q.rearmSerial(c, now, consider)
	} else if c != nil && !c.detaching && !q.cfg.Paused && c.inflight < c.cfg.MaxConcurrency {
		if c.backoffUntil > now {
			if q.avail.Len() > 0 || q.delayed.Len() > 0 {
				consider(c.backoffUntil)
			}
		} else {
			if m := q.delayed.peek(); m != nil {
				consider(m.visibleAt)
			}
			if m := q.avail.peek(); m != nil {
				consider(m.visibleAt + int64(c.cfg.MaxBatchTimeoutSeconds)*1000)
			}
		}
	}
	if next == q.timerAt {
		return
	}
	if next == 0 {
		q.stopTimer()
		return
	}
	d := time.Duration(next-now) * time.Millisecond
	if q.timer == nil {
		q.timer = q.e.clock.AfterFunc(d, q.onTimer)
	} else {
		q.timer.Reset(d)
	}
	q.timerAt = next
}

func (q *queue) stopTimer() {
	if q.timer != nil && q.timerAt != 0 {
		q.timer.Stop()
	}
	q.timerAt = 0
}

func (q *queue) onTimer() {
	q.mu.Lock()
	q.timerAt = 0
	q.pump()
	q.mu.Unlock()
}

// opFailed backs off background writes after a store failure. mu held.
func (q *queue) opFailed(now int64) {
	q.opFailures++
	q.opRetryAt = now + backoff(q.opFailures).Milliseconds()
}

func (q *queue) opSucceeded() {
	q.opFailures = 0
	q.opRetryAt = 0
}

// removeExpired durably removes messages found expired.
func (e *Engine) removeExpired(q *queue, list []*msg) {
	defer e.track.done()
	ids := make([]string, len(list))
	for i, m := range list {
		ids[i] = m.id
	}
	err := e.store.Apply(e.ctx, store.RemoveMessages{Queue: q.uid, IDs: ids, Reason: store.RemovedExpired})
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expiring = false
	if err != nil {
		e.log.Warn("delivery: removing expired messages failed; will retry", "queue", q.uid, "count", len(ids), "err", err)
		q.toExpire = append(q.toExpire, list...)
		q.opFailed(e.nowMs())
	} else {
		q.opSucceeded()
		for _, m := range list {
			q.drop(m)
		}
		q.count.expired.Add(uint64(len(list)))
		q.emit(EventExpired, list, "")
		e.log.Debug("delivery: expired messages removed", "queue", q.uid, "count", len(ids))
	}
	q.pump()
}

// startExhaust launches the dead-letter/discard write of toExhaust with the
// consumer's current settings. mu held.
func (q *queue) startExhaust(c *consumer, now int64) {
	var p plan
	p.q = q
	p.dlqUID = c.cfg.DeadLetterQueueUID
	p.consumerUID, p.consumerName = c.cfg.UID, c.cfg.Name
	list := q.toExhaust
	q.toExhaust = nil
	for _, m := range list {
		switch {
		case m.expired || now >= q.expireAt(m):
			m.expired = true
			p.expire = append(p.expire, m)
		case !q.exhausted(c, m):
			// maxRetries was raised meanwhile: deliverable again.
			q.release(m, m.visibleAt, now)
		case p.dlqUID != "":
			p.dead = append(p.dead, m)
		default:
			p.discard = append(p.discard, m)
		}
	}
	if p.empty() {
		return
	}
	q.exhausting = true
	q.e.track.add()
	go q.e.runExhaust(q, &p)
}

func (e *Engine) runExhaust(q *queue, p *plan) {
	defer e.track.done()
	moved, dlq, err := e.commit(e.ctx, p)
	q.mu.Lock()
	q.exhausting = false
	if err != nil {
		e.log.Warn("delivery: dead-letter/discard failed; will retry", "queue", q.uid, "err", err)
		q.toExhaust = append(q.toExhaust, p.all()...)
		q.opFailed(e.nowMs())
	} else {
		q.opSucceeded()
		q.applyPlan(p, e.nowMs())
	}
	q.pump()
	q.mu.Unlock()
	e.addMoved(dlq, moved, p.dlqPending)
}

// plan is a set of final dispositions of messages of one queue, written in
// one store.Apply by commit and then applied to memory by applyPlan.
type plan struct {
	q       *queue
	ack     []*msg
	retry   []*msg
	retryAt []int64
	expire  []*msg
	discard []*msg
	dead    []*msg
	dlqUID  string
	gone    []*msg // found missing from the store while committing
	// consumerUID and consumerName name the consumer whose settings
	// dead-letter p.dead (the dead-letter metadata).
	consumerUID, consumerName string
	// dlqPending: the first accept sequence number commit reserved in a
	// serialized DLQ for the moved messages; addMoved ends the mark.
	dlqPending uint64
	// attempt is the delivery these dispositions end (attempts.go), nil
	// when they end none; deadHistory is the history each of dead
	// carried into the DLQ, set by commit.
	attempt     *store.Attempt
	deadHistory [][]store.Attempt
}

func (p *plan) empty() bool {
	return len(p.ack)+len(p.retry)+len(p.expire)+len(p.discard)+len(p.dead) == 0
}

func (p *plan) all() []*msg {
	var out []*msg
	for _, l := range [][]*msg{p.ack, p.retry, p.expire, p.discard, p.dead, p.gone} {
		out = append(out, l...)
	}
	return out
}

// retryOrExhaust classifies a message that is to be retried (visible again
// at visibleAt): expired messages are removed as expired; one that has had
// 1+maxRetries deliveries is dead-lettered (cfg has a DLQ) or discarded.
// q.mu held.
func (p *plan) retryOrExhaust(m *msg, visibleAt, now int64, cfg ConsumerConfig) {
	q := p.q
	switch {
	case m.expired || now >= q.expireAt(m):
		m.expired = true
		p.expire = append(p.expire, m)
	case m.attempts >= 1+cfg.MaxRetries: // mutate:max-retries-first-2
		if cfg.DeadLetterQueueUID != "" {
			p.dlqUID = cfg.DeadLetterQueueUID
			p.consumerUID, p.consumerName = cfg.UID, cfg.Name
			p.dead = append(p.dead, m)
		} else {
			p.discard = append(p.discard, m)
		}
	default:
		p.retry = append(p.retry, m)
		p.retryAt = append(p.retryAt, visibleAt)
	}
}

var errNoDeadLetterQueue = errors.New("the dead-letter queue is not known to the engine")

// commit writes p in one store.Apply. For dead-lettered messages it reads
// their bodies and accepts new messages into the DLQ in the same Apply,
// returning them (to be added to the DLQ's memory with addMoved). No queue's
// mu may be held.
func (e *Engine) commit(ctx context.Context, p *plan) (moved []*msg, dlq *queue, err error) {
	q := p.q
	q.life.RLock()
	defer q.life.RUnlock()
	var muts []store.Mutation
	remove := func(ms []*msg, reason string) {
		if len(ms) == 0 {
			return
		}
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.id
		}
		muts = append(muts, store.RemoveMessages{Queue: q.uid, IDs: ids, Reason: reason})
	}
	var remoteDLQ []string // IDs accepted into a dead-letter queue another engine holds
	if len(p.dead) > 0 {
		dlq = e.queue(p.dlqUID)
		if dlq == nil {
			delay, err := e.remoteQueue(p.dlqUID)
			if errors.Is(err, abi.ErrUnknownQueue) {
				return nil, nil, fmt.Errorf("%w: %s", errNoDeadLetterQueue, p.dlqUID)
			}
			if err != nil {
				return nil, nil, err
			}
			accepts, ids, dead, gone, rerr := e.remoteDead(ctx, q, p, delay)
			if rerr != nil {
				return nil, nil, rerr
			}
			muts = append(muts, accepts...)
			remove(dead, store.RemovedDeadLettered)
			remoteDLQ = ids
			defer func() {
				if err == nil {
					p.dead, p.gone = dead, append(p.gone, gone...)
				}
			}()
		} else {
			if dlq != q {
				dlq.life.RLock()
				defer dlq.life.RUnlock()
			}
			dlq.mu.Lock()
			removed, delay := dlq.removed, int64(dlq.cfg.DeliveryDelaySeconds)*1000
			var first uint64
			if !removed && dlq.serial {
				// The moved messages take their places in the serialized
				// DLQ's accept order now; nothing accepted after them is
				// delivered before they are in its memory (addMoved).
				first = dlq.reserveSeqs(len(p.dead))
				rq := dlq
				defer func() {
					if err != nil || moved == nil {
						rq.mu.Lock()
						rq.endPending(first)
						rq.pump()
						rq.mu.Unlock()
					} else {
						p.dlqPending = first
					}
				}()
			}
			dlq.mu.Unlock()
			if removed {
				return nil, nil, fmt.Errorf("%w: %s", errNoDeadLetterQueue, p.dlqUID)
			}
			now := e.nowMs()
			ids := make([]string, len(p.dead))
			for i, m := range p.dead {
				ids[i] = m.id
			}
			bodies, err := e.store.Bodies(ctx, q.uid, ids)
			if err != nil {
				return nil, nil, err
			}
			kept, err := e.histories(ctx, q.uid, p.dead)
			if err != nil {
				return nil, nil, err
			}
			var deadHistory [][]store.Attempt
			var newIDs []string
			if dlq.serial {
				newIDs = e.serialIDs(dlq, first, len(p.dead)) // mutate:serial-dlq-restart
			}
			var dead, gone []*msg
			for i, m := range p.dead {
				body := bodies[i]
				if body == nil {
					gone = append(gone, m)
					continue
				}
				var id string
				var seq uint64
				if dlq.serial {
					id, seq = newIDs[i], first+uint64(i)
				} else {
					id, seq = e.newMessageIDs(dlq, 1)[0], e.seq.Add(1)
				}
				dl := p.deadLetter(q, m, now)
				h := p.movedHistory(m, kept[i])
				deadHistory = append(deadHistory, h)
				muts = append(muts, store.AcceptMessage{
					Message: store.Message{Queue: dlq.uid, ID: id, AcceptedAt: now, VisibleAt: now + delay, Size: len(body), DeadLetter: dl, TraceParent: m.traceParent(), History: h},
					Body:    body,
				})
				nm := newMsg(id, now, now+delay, 0, len(body), seq) // mutate:dlq-keeps-attempts
				nm.dl, nm.tr = dl, m.tr
				moved = append(moved, nm)
				dead = append(dead, m)
			}
			remove(dead, store.RemovedDeadLettered)
			defer func() {
				if err == nil {
					p.dead, p.gone, p.deadHistory = dead, append(p.gone, gone...), deadHistory
				}
			}()
		}
	}
	remove(p.ack, store.RemovedAcknowledged)
	remove(p.expire, store.RemovedExpired)
	remove(p.discard, store.RemovedDiscarded)
	for i, m := range p.retry {
		muts = append(muts, store.RetryMessage{Queue: q.uid, ID: m.id, VisibleAt: p.retryAt[i], Attempt: p.attemptFor(m)})
	}
	if len(muts) == 0 {
		return nil, nil, nil
	}
	var movedIDs []string
	if len(moved) > 0 && dlq.ids != nil {
		// addMoved inserts them after the write (see queue.holds).
		for _, m := range moved {
			movedIDs = append(movedIDs, m.id)
		}
		dlq.mu.Lock()
		dlq.reserve(movedIDs)
		dlq.mu.Unlock()
	}
	if err := e.store.Apply(ctx, muts...); err != nil {
		if movedIDs != nil {
			dlq.mu.Lock()
			dlq.unreserve(movedIDs)
			dlq.mu.Unlock()
		}
		return nil, nil, err
	}
	if len(remoteDLQ) > 0 {
		e.remote.Accepted(p.dlqUID, remoteDLQ)
	}
	return moved, dlq, nil
}

// applyPlan applies a committed plan to memory. q.mu held.
func (q *queue) applyPlan(p *plan, now int64) {
	q.count.acknowledged.Add(uint64(len(p.ack)))
	q.count.retried.Add(uint64(len(p.retry)))
	q.count.expired.Add(uint64(len(p.expire)))
	q.count.discarded.Add(uint64(len(p.discard)))
	q.count.deadLettered.Add(uint64(len(p.dead)))
	q.countAttempts(p)
	q.emit(EventDeadLettered, p.dead, p.dlqUID)
	q.emit(EventDiscarded, p.discard, "")
	q.emit(EventExpired, p.expire, "")
	for _, l := range [][]*msg{p.ack, p.expire, p.discard, p.dead, p.gone} {
		for _, m := range l {
			q.drop(m)
		}
	}
	for i, m := range p.retry {
		q.release(m, p.retryAt[i], now)
	}
	if n := len(p.dead); n > 0 {
		q.e.log.Info("delivery: messages dead-lettered", "queue", q.uid, "deadLetterQueue", p.dlqUID, "count", n)
	}
	if n := len(p.discard); n > 0 {
		q.e.log.Info("delivery: messages discarded after their last retry", "queue", q.uid, "count", n)
	}
}

// addMoved adds dead-lettered messages, already durable, to the DLQ, and
// ends the serialized DLQ's pending mark of the move (pending: 0 when
// none).
func (e *Engine) addMoved(dlq *queue, moved []*msg, pending uint64) {
	if dlq == nil || len(moved) == 0 {
		return
	}
	dlq.mu.Lock()
	if pending != 0 {
		dlq.endPending(pending)
	}
	if !dlq.removed {
		now := e.nowMs()
		for _, m := range moved {
			dlq.insert(m, now)
		}
		dlq.pump()
	}
	dlq.mu.Unlock()
	e.notify()
}
