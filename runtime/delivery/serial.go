package delivery

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/takoform/queuehost/abi"
)

// Serialized queues: the host extension of the Offering "serialized" of
// AtLeastOnceQueue (spec/peers.md §Serialized queues), after intra-mart's
// 直列タスクキュー.
//
//   - Order. A serialized queue's available order holds every ready
//     message, visible or not, in accept order (msg.seq; seqLess). The head
//     is its first message. A message delayed by its send or by a retry
//     keeps its place: it blocks the messages behind it until it is
//     visible (head-of-line blocking), so no delay reorders anything.
//   - One batch at a time. A batch starts only when the queue has no batch
//     at all (dispatching, running, or closing: a retried head is known
//     only once the previous batch is settled) and no dead-letter or
//     discard write pending; it takes the head and the messages right
//     behind it, up to maxBatchSize, stopping at the first that is not yet
//     visible. maxConcurrency is therefore 1 in effect. A batch is due as
//     for any queue: full, or its head visible for maxBatchTimeoutSeconds.
//   - A head that has had 1+maxRetries deliveries is dead-lettered or
//     discarded (the Forms' rule) before anything behind it is delivered:
//     the next message becomes the head once that move is durable.
//   - Durable order. The store keeps no accept order within a millisecond
//     (and a clock stepped back would break accept times as an order), so
//     a serialized queue's message IDs begin with the message's accept
//     sequence number as 16 hex digits, followed by 16 random hex digits
//     (IDs stay opaque to workers, as the Form says). After a restart the
//     engine orders the queue by that number and continues numbering after
//     the largest. The number is the accept time in ms << seqShift, raised
//     past every number issued before: engines of a cluster that accept
//     messages into a queue another engine holds number them the same way
//     (sendRemote, remoteDead), and the owner adopts them into their place
//     (Adopt); across engines accept order is accept time (their clocks).
//   - Writes in flight. Sequence numbers are taken under the queue's lock
//     together with a "pending" mark, which ends when the write's messages
//     are in memory (or the write failed): nothing accepted after a
//     pending write is delivered before it, so two concurrent sends cannot
//     be delivered out of their accept order.

// serialIdle reports whether nothing of a serialized queue is in flight:
// no batch, and no dead-letter or discard of a head pending. mu held.
func (q *queue) serialIdle() bool {
	return len(q.batches) == 0 && !q.exhausting && len(q.toExhaust) == 0 // mutate:serial-two-batches
}

// pendingMin is the smallest sequence number a write in flight is adding,
// or the largest uint64 when none is. mu held.
func (q *queue) pendingMin() uint64 {
	m := ^uint64(0)
	for _, s := range q.pending {
		m = min(m, s)
	}
	return m
}

// reserveSeqs takes n consecutive accept sequence numbers for a write into
// a serialized queue and marks it pending; it returns the first. mu held.
func (q *queue) reserveSeqs(n int) uint64 {
	first := q.e.serialSeqs(n)
	q.pending = append(q.pending, first)
	return first
}

// seqShift: a serialized queue's sequence number is at least the accept
// time in ms shifted left by it (room for a million sends a millisecond),
// and greater than every number the engine issued or loaded before.
const seqShift = 20

// serialSeqs issues n consecutive accept sequence numbers of serialized
// queues and returns the first. They are based on the clock so that the
// engines of a cluster, which accept messages into one another's queues
// (cluster.go), number them alike: by accept time across engines, by
// accept order within one (even if its clock steps back).
func (e *Engine) serialSeqs(n int) uint64 {
	floor := uint64(max(e.nowMs(), 0)) << seqShift
	for {
		last := e.sseq.Load()
		first := max(last+1, floor)
		if e.sseq.CompareAndSwap(last, first+uint64(n)-1) {
			return first
		}
	}
}

// endPending ends the pending mark of the write that reserved first. mu
// held; the caller pumps.
func (q *queue) endPending(first uint64) {
	for i, s := range q.pending {
		if s == first {
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			return
		}
	}
}

// dispatchSerial starts the next batch of a serialized queue when it is
// due. mu held.
func (q *queue) dispatchSerial(c *consumer, now int64) {
	q.serialFillAt = 0
	if !q.serialIdle() || now < c.backoffUntil {
		return
	}
	limit := q.pendingMin()
	head := q.avail.peek()
	if head == nil || head.seq >= limit || head.visibleAt > now {
		return
	}
	if q.exhausted(c, head) {
		// Already had 1+maxRetries deliveries (restart, store failure at
		// settlement, lowered maxRetries): dead-letter or discard it;
		// the next message waits until that is durable.
		q.avail.pop()
		head.where = inNone
		head.state = stBusy
		q.toExhaust = append(q.toExhaust, head)
		return
	}
	timeoutMs := int64(c.cfg.MaxBatchTimeoutSeconds) * 1000
	if q.avail.Len() < c.cfg.MaxBatchSize && now < head.visibleAt+timeoutMs {
		return // cannot be full, and the head has not waited long enough
	}
	ms := make([]*msg, 0, min(c.cfg.MaxBatchSize, q.avail.Len()))
	for len(ms) < c.cfg.MaxBatchSize {
		m := q.avail.peek()
		if m == nil || m.seq >= limit || m.visibleAt > now || q.exhausted(c, m) {
			break
		}
		q.avail.pop()
		m.where = inNone
		ms = append(ms, m)
	}
	if len(ms) < c.cfg.MaxBatchSize && now < head.visibleAt+timeoutMs {
		// Not full and not yet due: the messages keep their places. The
		// batch is due when the next one behind them becomes visible, if
		// that can fill it (rearmSerial).
		if m := q.avail.peek(); m != nil && m.seq < limit && m.visibleAt > now && !q.exhausted(c, m) {
			q.serialFillAt = m.visibleAt
		}
		for _, m := range ms {
			m.where = inAvail
		}
		q.avail.pushSorted(ms)
		return
	}
	for _, m := range ms {
		m.state = stLeased
	}
	b := q.e.newBatch(q, c, ms)
	c.inflight++
	q.batches[b.id] = b
	q.e.track.add()
	go q.e.dispatchBatch(b)
}

// rearmSerial considers the next instant a serialized queue's batch may
// become due. mu held.
func (q *queue) rearmSerial(c *consumer, now int64, consider func(int64)) {
	if c.detaching || q.cfg.Paused || !q.serialIdle() {
		return
	}
	head := q.avail.peek()
	if head == nil || head.seq >= q.pendingMin() {
		return
	}
	if c.backoffUntil > now {
		consider(c.backoffUntil)
		return
	}
	consider(head.visibleAt)
	consider(head.visibleAt + int64(c.cfg.MaxBatchTimeoutSeconds)*1000)
	consider(q.serialFillAt)
}

// serialIDs issues the IDs of n messages of a serialized queue whose
// sequence numbers start at first: the number as 16 hex digits, then 16
// random hex digits (or, with an injected NewID, its ID, checked against
// the queue's IDs). q is nil for a queue another engine holds.
func (e *Engine) serialIDs(q *queue, first uint64, n int) []string {
	ids := make([]string, n)
	if !e.customID {
		raw := make([]byte, 8*n)
		rand.Read(raw)
		for i := range ids {
			ids[i] = fmt.Sprintf("%016x", first+uint64(i)) + hex.EncodeToString(raw[8*i:8*i+8]) // mutate:serial-restart-order
		}
		return ids
	}
	for i := range ids {
		for {
			id := fmt.Sprintf("%016x", first+uint64(i)) + e.newID()
			dup := false
			if q != nil {
				q.mu.Lock()
				_, dup = q.ids[id]
				q.mu.Unlock()
			}
			if !dup && len(id) <= abi.MaxIDLength {
				ids[i] = id
				break
			}
		}
	}
	return ids
}

// serialSeq is the accept sequence number a serialized queue's message ID
// begins with.
func serialSeq(id string) (uint64, bool) {
	if len(id) < 17 {
		return 0, false
	}
	for _, c := range id[:16] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, false
		}
	}
	s, err := strconv.ParseUint(id[:16], 16, 64)
	return s, err == nil && s > 0
}

// raiseSerial makes the engine's next serialized sequence number greater
// than s.
func (e *Engine) raiseSerial(s uint64) {
	for {
		cur := e.sseq.Load()
		if cur >= s || e.sseq.CompareAndSwap(cur, s) {
			return
		}
	}
}
