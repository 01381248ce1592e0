package delivery

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// Pull consumers (spec/peers.md §Pull consumers): a queue consumed over
// HTTP by an application instead of by a worker's queue handler. A pull
// consumer is an engine consumer (ConsumerConfig.Pull) that forms no
// batch by itself: Lease forms one when asked, of the messages visible
// then, and the batch runs until it is fully settled or its visibility
// timeout ends. Everything else is the batch machinery of batch.go:
//
//   - a lease is a batch whose ID starts with PullLeasePrefix; its
//     delivery is ONE store.Apply(DeliverMessages) that counts the attempts
//     and records the lease's expiry as the messages' visible time, so a
//     restart keeps the lease (load) and after its expiry the messages are
//     visible again, attempts counted;
//   - its "handler time limit" is the visibility timeout: at its end the
//     unsettled messages are retried visible at once (the timeout was the
//     delay), or dead-lettered/discarded after 1 + maxRetries deliveries;
//   - settlements are the batch's: each message at most once, durable
//     before the answer, several in one write.
//
// A lease's ID stays meaningful after it ends: the engine remembers the
// last endedLeases leases it ended and why, so that a late settlement is
// told the lease expired (its messages are visible again) rather than that
// it never existed.

// PullLeasePrefix starts the ID of every pull lease, so that a restart
// tells a pull lease (kept until its expiry) from a push batch's (whose
// messages are redelivered at once). The consumer's tag follows
// (leaseTag), then 128 random bits.
const PullLeasePrefix = "pl_"

// leaseTag is the start of the IDs of a pull consumer's leases: the prefix
// and 32 bits of FNV-1a of the consumer's UID. A lease ID names its
// consumer, so that one settled through another consumer is told so
// (ErrLeaseOfOtherConsumer) by any engine, after a restart and on any host
// of a cluster, without a record of the lease.
func leaseTag(consumerUID string) string {
	h := fnv.New32a()
	h.Write([]byte(consumerUID))
	return fmt.Sprintf("%s%08x_", PullLeasePrefix, h.Sum32())
}

// Errors of the pull consumer calls (the Forms' abi errors are used for
// the per-message ones: abi.ErrUnknownMessage, abi.ErrAlreadySettled).
var (
	// ErrNotPullConsumer: a lease call names a consumer that is a
	// QueueConsumer (its messages go to its worker).
	ErrNotPullConsumer = errors.New("the consumer is not a pull consumer")
	// ErrUnknownLease: no lease of this ID was issued (or it ended so long
	// ago that it is forgotten).
	ErrUnknownLease = errors.New("no lease of this ID was issued")
	// ErrLeaseExpired: the lease's visibility timeout ended (or its
	// consumer was detached): its unsettled messages are visible again.
	ErrLeaseExpired = errors.New("the lease expired: its unsettled messages are visible again")
	// ErrLeaseSettled: every message of the lease was settled.
	ErrLeaseSettled = errors.New("every message of the lease is settled already")
	// ErrLeaseOfOtherConsumer: the lease was issued to another consumer.
	ErrLeaseOfOtherConsumer = errors.New("the lease was issued to another pull consumer")
	// ErrDuplicateMessage: one settlement names a message twice.
	ErrDuplicateMessage = errors.New("a settlement names a message twice")
)

// Pull limits: the Binding's batch bound and delay range, the consumer's
// visibility timeout range, and the long poll's longest wait (SQS's).
const (
	MaxPullMessages          = 100
	MaxVisibilitySeconds     = abi.MaxDelaySeconds
	DefaultVisibilitySeconds = 30
	MaxPullWaitSeconds       = 20
)

// PullLease is one leased batch.
type PullLease struct {
	ID        string
	ExpiresAt int64 // UTC epoch ms
	Messages  []abi.Message
}

// PullRetry is one retry of a settlement; Delay nil: the consumer's
// retryDelaySeconds.
type PullRetry struct {
	ID    string
	Delay *int
}

// endedLeases is how many ended leases the engine remembers.
const endedLeases = 1 << 14

type endedLease struct {
	consumer string
	err      error // ErrLeaseExpired or ErrLeaseSettled
}

// noteEnded remembers why lease b ended. q.mu held (bmu is a leaf).
func (e *Engine) noteEnded(b *batch, why error) {
	e.bmu.Lock()
	defer e.bmu.Unlock()
	if e.ended == nil {
		e.ended = make(map[string]endedLease, 64)
	}
	if _, ok := e.ended[b.id]; !ok {
		if len(e.endedOrder) >= endedLeases {
			delete(e.ended, e.endedOrder[0])
			e.endedOrder = e.endedOrder[1:]
		}
		e.endedOrder = append(e.endedOrder, b.id)
	}
	e.ended[b.id] = endedLease{consumer: b.c.cfg.UID, err: why}
}

func (e *Engine) endedOf(id string) (endedLease, bool) {
	e.bmu.Lock()
	defer e.bmu.Unlock()
	l, ok := e.ended[id]
	return l, ok
}

// pullConsumer returns the attached pull consumer of that UID.
func (e *Engine) pullConsumer(uid string) (*consumer, error) {
	if err := e.checkRunning(); err != nil {
		return nil, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	c := e.consumer(uid)
	if c == nil {
		return nil, ErrUnknownConsumer
	}
	if !c.cfg.Pull {
		return nil, ErrNotPullConsumer
	}
	return c, nil
}

// Lease leases up to max visible messages of the pull consumer's queue for
// visibility, waiting up to wait for one to become visible (the long
// poll; by the engine's clock). It answers a lease with no ID and no
// messages when none came. Each message's delivery is counted (attempts)
// durably before it answers.
func (e *Engine) Lease(ctx context.Context, consumerUID string, max int, visibility, wait time.Duration) (PullLease, error) {
	if max < 1 || max > MaxPullMessages || visibility < time.Second || visibility > MaxVisibilitySeconds*time.Second || wait < 0 {
		return PullLease{}, fmt.Errorf("%w: maxMessages %d, visibility %s, wait %s", ErrInvalidConfig, max, visibility, wait)
	}
	deadline := e.clock.Now().Add(wait)
	for {
		c, err := e.pullConsumer(consumerUID)
		if err != nil {
			return PullLease{}, err
		}
		q := c.q
		q.mu.Lock()
		if q.removed || c.detaching || q.consumer != c {
			q.mu.Unlock()
			return PullLease{}, ErrUnknownConsumer
		}
		now := e.nowMs()
		var ms []*msg
		if !q.cfg.Paused {
			ms = q.takePull(c, max, now)
		}
		if len(ms) > 0 {
			b := e.newBatch(q, c, ms)
			b.id = leaseTag(consumerUID) + b.id
			b.pull, b.slotFreed = true, true // leases are not bounded by maxConcurrency
			q.batches[b.id] = b
			e.track.add()
			q.pump()
			q.mu.Unlock()
			l, err := e.recordLease(b, visibility)
			if err != nil || len(l.Messages) > 0 {
				return l, err
			}
			continue // every message was gone meanwhile
		}
		q.pump() // what takePull found exhausted
		left := deadline.Sub(e.clock.Now())
		if left <= 0 {
			q.mu.Unlock()
			return PullLease{}, nil
		}
		if q.pullCh == nil {
			q.pullCh = make(chan struct{})
		}
		wake := q.pullCh
		q.pullWaiters++
		q.rearm(now)
		q.mu.Unlock()
		timeout := make(chan struct{})
		t := e.clock.AfterFunc(left, func() { close(timeout) })
		select {
		case <-wake:
		case <-timeout:
		case <-ctx.Done():
		case <-e.ctx.Done():
		}
		t.Stop()
		q.mu.Lock()
		q.pullWaiters--
		q.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return PullLease{}, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
		}
	}
}

// takePull takes up to max visible messages for a lease; those that had
// 1 + maxRetries deliveries already go to dead-lettering instead. mu held.
func (q *queue) takePull(c *consumer, max int, now int64) []*msg {
	q.promote(now)
	var ms []*msg
	for len(ms) < max && q.avail.Len() > 0 {
		m := q.avail.pop()
		m.where = inNone
		if q.exhausted(c, m) {
			m.state = stBusy
			q.toExhaust = append(q.toExhaust, m)
			continue
		}
		m.state = stLeased
		ms = append(ms, m)
	}
	return ms
}

// promote moves the delayed messages visible at now to the available
// order. mu held.
func (q *queue) promote(now int64) {
	for m := q.delayed.peek(); m != nil && m.visibleAt <= now; m = q.delayed.peek() {
		q.delayed.pop()
		m.where = inAvail
		q.avail.push(m)
	}
}

// pullReady is the pump of a pull consumer's queue: it wakes the long
// polls when messages are visible. mu held.
func (q *queue) pullReady(now int64) {
	if q.pullWaiters == 0 || q.pullCh == nil {
		return
	}
	q.promote(now)
	if q.avail.Len() > 0 {
		close(q.pullCh)
		q.pullCh = nil
	}
}

// recordLease reads the lease's bodies and records its delivery (attempts
// + 1, the lease and its expiry) in one write, then arms its expiry.
// Counted by track until it returns.
func (e *Engine) recordLease(b *batch, visibility time.Duration) (PullLease, error) {
	defer e.track.done()
	q := b.q
	ids := make([]string, len(b.items))
	for i, bm := range b.items {
		ids[i] = bm.m.id
	}
	bodies, err := e.store.Bodies(e.ctx, q.uid, ids)
	if err != nil {
		e.unlease(b, nil, false)
		return PullLease{}, backendErr(err)
	}
	if gone := b.gone(bodies); len(gone) > 0 {
		// Removed meanwhile (purged, expired): lease nothing; the caller
		// tries again with what remains.
		e.unlease(b, gone, false)
		return PullLease{}, nil
	}
	if e.remote != nil && !e.remote.Deliverable(q.uid) {
		e.unlease(b, nil, false)
		return PullLease{}, fmt.Errorf("%w: this host's lease on the queue is running out; pull again", abi.ErrBackendUnavailable)
	}
	exp := e.nowMs() + visibility.Milliseconds()
	if err := e.store.Apply(e.ctx, store.DeliverMessages{Queue: q.uid, Batch: b.id, IDs: ids, VisibleAt: exp}); err != nil {
		e.unlease(b, nil, false)
		return PullLease{}, backendErr(err)
	}
	_, current := e.currentLease(q.uid)
	q.mu.Lock()
	if b.abort || !current {
		q.mu.Unlock()
		e.giveBack(b, bodies)
		return PullLease{}, fmt.Errorf("%w: the queue's consumer or owner changed during the lease; pull again", abi.ErrBackendUnavailable)
	}
	msgs := make([]abi.Message, len(b.items))
	for i, bm := range b.items {
		bm.m.attempts++
		msgs[i] = abi.Message{ID: bm.m.id, TimestampMillis: bm.m.acceptedAt, Body: bodies[i], Attempts: bm.m.attempts}
	}
	b.state = bRunning
	b.expiresAt = exp
	b.timer = e.clock.AfterFunc(visibility, func() { e.leaseExpired(b) })
	e.registerBatch(b)
	e.delivered.Add(1)
	q.mu.Unlock()
	q.count.delivered.Add(uint64(len(msgs)))
	return PullLease{ID: b.id, ExpiresAt: exp, Messages: msgs}, nil
}

// leaseExpired ends a lease at the end of its visibility timeout.
func (e *Engine) leaseExpired(b *batch) {
	q := b.q
	q.mu.Lock()
	fin := e.closeLocked(b, outExpired)
	q.pump()
	q.mu.Unlock()
	if fin {
		e.finalizeLater(b)
	}
}

// leaseBatch finds the running lease id of the pull consumer: a lease a
// restart recovered becomes a batch again at its first use.
func (e *Engine) leaseBatch(consumerUID, id string) (*batch, error) {
	c, err := e.pullConsumer(consumerUID)
	if err != nil {
		return nil, err
	}
	if tag := leaseTag(consumerUID); !strings.HasPrefix(id, tag) {
		if strings.HasPrefix(id, PullLeasePrefix) && len(id) > len(tag) && id[len(tag)-1] == '_' {
			return nil, ErrLeaseOfOtherConsumer
		}
		return nil, ErrUnknownLease
	}
	if b := e.lookupBatch(id); b != nil {
		if b.c != c {
			return nil, ErrLeaseOfOtherConsumer
		}
		return b, nil
	}
	if l, ok := e.endedOf(id); ok {
		if l.consumer != consumerUID {
			return nil, ErrLeaseOfOtherConsumer
		}
		return nil, l.err
	}
	q := c.q
	q.mu.Lock()
	defer q.mu.Unlock()
	ms, ok := q.recovered[id]
	if !ok {
		return nil, ErrUnknownLease
	}
	delete(q.recovered, id)
	now := e.nowMs()
	var keep []*msg
	var exp int64
	for _, m := range ms {
		// Still as the restart found it: waiting for the lease's expiry.
		if m.state == stReady && m.where == inDelayed && m.visibleAt > now {
			q.unlinkVis(m)
			m.state = stLeased
			keep = append(keep, m)
			exp = max(exp, m.visibleAt)
		}
	}
	if len(keep) == 0 {
		return nil, ErrLeaseExpired
	}
	b := e.newBatch(q, c, keep)
	b.id, b.pull, b.slotFreed, b.state, b.expiresAt = id, true, true, bRunning, exp
	b.timer = e.clock.AfterFunc(time.Duration(exp-now)*time.Millisecond, func() { e.leaseExpired(b) })
	q.batches[b.id] = b
	e.registerBatch(b)
	return b, nil
}

// leaseErr is the error of a lease that is not running.
func (e *Engine) leaseErr(b *batch) error {
	if l, ok := e.endedOf(b.id); ok {
		return l.err
	}
	return ErrLeaseExpired
}

// SettleLease acknowledges and retries messages of a running lease, in
// one durable write. The whole settlement is refused, changing nothing,
// when one of its messages is not in the lease (abi.ErrUnknownMessage),
// was settled (abi.ErrAlreadySettled) or is named twice
// (ErrDuplicateMessage), or a delay is out of range (abi.ErrInvalidDelay).
// A lease whose messages are all settled ends.
func (e *Engine) SettleLease(ctx context.Context, consumerUID, leaseID string, acks []string, retries []PullRetry) error {
	for _, r := range retries {
		if r.Delay != nil && (*r.Delay < 0 || *r.Delay > abi.MaxDelaySeconds) {
			return abi.ErrInvalidDelay
		}
	}
	seen := make(map[string]bool, len(acks)+len(retries))
	for _, id := range acks {
		if seen[id] {
			return fmt.Errorf("%w: %s", ErrDuplicateMessage, id)
		}
		seen[id] = true
	}
	for _, r := range retries {
		if seen[r.ID] {
			return fmt.Errorf("%w: %s", ErrDuplicateMessage, r.ID)
		}
		seen[r.ID] = true
	}
	b, err := e.leaseBatch(consumerUID, leaseID)
	if err != nil {
		return err
	}
	q := b.q
	q.mu.Lock()
	if b.byID == nil {
		b.byID = make(map[string]*bmsg, len(b.items))
		for _, bm := range b.items {
			b.byID[bm.m.id] = bm
		}
	}
	for {
		if b.state != bRunning {
			q.mu.Unlock()
			return e.leaseErr(b)
		}
		var wait chan struct{}
		for id := range seen {
			bm := b.byID[id]
			switch {
			case bm == nil:
				q.mu.Unlock()
				return fmt.Errorf("%w: %s", abi.ErrUnknownMessage, id)
			case bm.st == settled:
				q.mu.Unlock()
				return fmt.Errorf("%w: %s", abi.ErrAlreadySettled, id)
			case bm.st == settling:
				wait = bm.wait
			}
		}
		if wait == nil {
			break
		}
		// A concurrent settlement of one of these is in flight: its
		// outcome decides ours.
		q.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, ctx.Err())
		}
		q.mu.Lock()
	}
	cfg := b.c.cfg
	now := e.nowMs()
	p := plan{q: q}
	var targets []*bmsg
	take := func(id string) *msg {
		bm := b.byID[id]
		bm.st, bm.wait = settling, make(chan struct{})
		targets = append(targets, bm)
		return bm.m
	}
	for _, id := range acks {
		p.ack = append(p.ack, take(id))
	}
	for _, r := range retries {
		delay := cfg.RetryDelaySeconds
		if r.Delay != nil {
			delay = *r.Delay
		}
		p.retryOrExhaust(take(r.ID), now+int64(delay)*1000, now, cfg)
	}
	b.pending++
	q.mu.Unlock()

	moved, dlq, err := e.commit(context.WithoutCancel(ctx), &p)
	return e.settleDone(b, targets, &p, moved, dlq, err)
}

func allSettled(b *batch) bool {
	for _, bm := range b.items {
		if bm.st != settled {
			return false
		}
	}
	return true
}

// ExtendLease moves the expiry of a running lease's unsettled messages to
// visibility from now, durably, and returns the new expiry (UTC epoch ms).
func (e *Engine) ExtendLease(ctx context.Context, consumerUID, leaseID string, visibility time.Duration) (int64, error) {
	if visibility < time.Second || visibility > MaxVisibilitySeconds*time.Second {
		return 0, fmt.Errorf("%w: visibility %s", ErrInvalidConfig, visibility)
	}
	b, err := e.leaseBatch(consumerUID, leaseID)
	if err != nil {
		return 0, err
	}
	q := b.q
	q.mu.Lock()
	if b.state != bRunning || b.extending {
		running := b.state == bRunning
		q.mu.Unlock()
		if running {
			return 0, fmt.Errorf("%w: another extension of this lease is in flight", abi.ErrBackendUnavailable)
		}
		return 0, e.leaseErr(b)
	}
	// The expiry is held off while the extension is written, so that the
	// lease cannot end between the write and the new timer.
	if !b.timer.Stop() {
		q.mu.Unlock()
		return 0, ErrLeaseExpired
	}
	b.extending = true
	var ids []string
	for _, bm := range b.items {
		if bm.st != settled {
			ids = append(ids, bm.m.id)
		}
	}
	exp := e.nowMs() + visibility.Milliseconds()
	q.mu.Unlock()
	err = e.store.Apply(context.WithoutCancel(ctx), store.ExtendLease{Queue: q.uid, Lease: b.id, IDs: ids, VisibleAt: exp})
	q.mu.Lock()
	b.extending = false
	if err == nil {
		b.expiresAt = exp
	}
	left := time.Duration(b.expiresAt-e.nowMs()) * time.Millisecond
	b.timer = e.clock.AfterFunc(max(left, 0), func() { e.leaseExpired(b) })
	q.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	return exp, nil
}

// recover keeps the unexpired pull leases a restart found (load): their
// messages wait in the delayed order until the lease's expiry, attempts
// counted, and the lease's ID settles them until then (leaseBatch). mu
// held.
func (q *queue) recover(rec map[string][]*msg, now int64) {
	if len(rec) == 0 {
		return
	}
	if q.recovered == nil {
		q.recovered = map[string][]*msg{}
	}
	for id, ms := range rec {
		q.recovered[id] = ms
	}
	if c := q.consumer; c != nil && !c.cfg.Pull {
		q.releaseRecovered(now)
	}
}

// releaseRecovered makes the messages of recovered pull leases visible at
// once: the queue now has a QueueConsumer, for which a restart redelivers
// what an earlier run left unsettled at once. mu held.
func (q *queue) releaseRecovered(now int64) {
	for id, ms := range q.recovered {
		for _, m := range ms {
			if m.state == stReady && m.where == inDelayed && m.visibleAt > now {
				q.unlinkVis(m)
				m.visibleAt = now
				q.pushVis(m, now)
			}
		}
		delete(q.recovered, id)
	}
}
