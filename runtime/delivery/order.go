package delivery

import (
	"github.com/takoform/queuehost/runtime/internal/chunked"
	"github.com/takoform/queuehost/runtime/store"
)

// msgState says where a message is in the engine's lifecycle.
type msgState uint8

const (
	// stReady: waiting in the delayed order (visibleAt in the future) or
	// in the available order.
	stReady msgState = iota
	// stLeased: held by a batch (dispatching, running or closing).
	stLeased
	// stBusy: a store operation that removes or moves it is pending or in
	// flight (expiry, dead-letter, discard). It is not deliverable.
	stBusy
	// stGone: removed from the queue.
	stGone
)

// visWhere says which visibility order holds a message.
type visWhere uint8

const (
	inNone visWhere = iota
	inDelayed
	inAvail
)

// msg is the engine's in-memory view of one stored message. Bodies stay in
// the store. Guarded by its queue's mu.
type msg struct {
	id         string
	acceptedAt int64 // UTC epoch ms
	visibleAt  int64 // UTC epoch ms
	attempts   int
	size       int
	seq        uint64 // engine-wide accept order, the last tie-breaker
	state      msgState
	// expired: the retention deadline passed while the message was leased
	// or busy; it is removed as expired as soon as it comes back, even if
	// retention is raised meanwhile (nothing expired is restored).
	expired bool
	where   visWhere // which visibility order holds it
	inExp   bool     // the expiry order holds it
	// fut: counted in its queue's futDelayed (futRetry false) or
	// futRetry (true): ready and not yet visible when last looked at (see
	// queue.noteFuture).
	fut, futRetry bool
	// visGen and expGen are bumped whenever the message leaves its
	// visibility or expiry order: an entry of an order is live only while
	// it carries the message's current generation (see msgOrder).
	visGen, expGen uint32
	// dl is the dead-letter metadata of a message that arrived by
	// dead-lettering (store.Message.DeadLetter); nil otherwise. Operators
	// read it (inspection, redrive); it never reaches a handler.
	dl *store.DeadLetter
	// tr is the message's trace state (trace.go); nil when it has none.
	tr *msgTrace
}

func newMsg(id string, acceptedAt, visibleAt int64, attempts, size int, seq uint64) *msg {
	return &msg{id: id, acceptedAt: acceptedAt, visibleAt: visibleAt, attempts: attempts, size: size, seq: seq}
}

// visLess is the delivery order: visible time, then accept time, then
// accept order (input order within one Send), a total order.
func visLess(a, b *msg) bool {
	if a.visibleAt != b.visibleAt {
		return a.visibleAt < b.visibleAt
	}
	if a.acceptedAt != b.acceptedAt {
		return a.acceptedAt < b.acceptedAt
	}
	return a.seq < b.seq
}

// seqLess is the delivery order of a serialized queue (spec/peers.md
// §Serialized queues): accept order only, whatever the visible times, so
// that neither a send's delay nor a retry's moves a message past another.
func seqLess(a, b *msg) bool {
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.id < b.id // two engines of a cluster, one number
}

// expLess is the retention order. Retention is one duration per queue, so
// the deadline order is the accept order whatever the current setting.
func expLess(a, b *msg) bool {
	if a.acceptedAt != b.acceptedAt {
		return a.acceptedAt < b.acceptedAt
	}
	return a.seq < b.seq
}

// msgOrder is a priority queue of messages that costs O(1) per message
// for the way queues are used: messages mostly arrive in order (a send's
// accept time and visible time are "now", a retry's is "now + the same
// delay") and leave from the front (delivery, expiry) or from anywhere
// (acknowledgement, expiry of a waiting message).
//
// It keeps a sorted run (a chunked.Deque, whose entries never move as it
// grows) that takes every message arriving at or after its back, and a
// binary heap for those that arrive out of order (a send whose write
// finished after a later one's, a retry due before messages already
// waiting, a clock step back). A group of messages that belongs just
// before the run's back is merged into the run instead, when that moves
// at most mergeLimit entries. The minimum is the smaller of the run's
// front and the heap's top.
//
// Removal is lazy: the owner bumps the message's generation and calls
// removed; the stale entry is skipped when it reaches the front, and the
// whole order is compacted once stale entries outnumber live ones, so
// memory stays within about twice the live count.
type msgOrder struct {
	byExpiry bool // expLess and expGen; otherwise visLess (seqLess with bySeq) and visGen
	bySeq    bool // a serialized queue's available order: seqLess and visGen
	run      chunked.Deque[entry]
	heap     []entry
	live     int // live entries in run and heap
	stale    int
}

// entry is one message in an order, with the generation it was added at.
type entry struct {
	m   *msg
	gen uint32
}

// mergeLimit bounds the entries one out-of-order insertion may shift in
// the run; beyond it the messages go to the heap.
const mergeLimit = 4096

func (o *msgOrder) less(a, b *msg) bool {
	switch {
	case o.byExpiry:
		return expLess(a, b)
	case o.bySeq:
		return seqLess(a, b)
	}
	return visLess(a, b)
}

func (o *msgOrder) gen(m *msg) uint32 {
	if o.byExpiry {
		return m.expGen
	}
	return m.visGen
}

func (o *msgOrder) isLive(e entry) bool { return e.gen == o.gen(e.m) }

// Len is the number of live messages.
func (o *msgOrder) Len() int { return o.live }

// push adds m with its current generation.
func (o *msgOrder) push(m *msg) {
	e := entry{m, o.gen(m)}
	o.live++
	n := o.run.Len()
	if n == 0 || !o.less(m, o.run.At(n-1).m) {
		o.run.Push(e)
		return
	}
	if p := o.searchRun(m); n-p <= mergeLimit {
		o.run.Push(entry{})
		for i := n; i > p; i-- {
			*o.run.At(i) = *o.run.At(i - 1)
		}
		*o.run.At(p) = e
		return
	}
	o.heapPush(e)
}

// pushSorted adds messages given in this order's order (one send's
// messages): one merge instead of one insertion each.
func (o *msgOrder) pushSorted(ms []*msg) {
	if len(ms) == 0 {
		return
	}
	for i := 1; i < len(ms); i++ {
		if o.less(ms[i], ms[i-1]) {
			// Not in order after all (different delays became due
			// during a slow write): one at a time.
			for _, m := range ms {
				o.push(m)
			}
			return
		}
	}
	n := o.run.Len()
	if n == 0 || !o.less(ms[0], o.run.At(n-1).m) {
		for _, m := range ms {
			o.push(m)
		}
		return
	}
	p := o.searchRun(ms[0])
	if n-p > mergeLimit {
		for _, m := range ms {
			o.push(m)
		}
		return
	}
	// Merge ms with the run's tail from p, back to front, in place.
	tail := make([]entry, n-p)
	for i := range tail {
		tail[i] = *o.run.At(p + i)
	}
	for range ms {
		o.run.Push(entry{})
	}
	i, j, k := len(tail)-1, len(ms)-1, o.run.Len()-1
	for j >= 0 {
		if i >= 0 && o.less(ms[j], tail[i].m) {
			*o.run.At(k) = tail[i]
			i--
		} else {
			*o.run.At(k) = entry{ms[j], o.gen(ms[j])}
			j--
		}
		k--
	}
	o.live += len(ms)
}

// searchRun is the first position of the run whose message m sorts
// before.
func (o *msgOrder) searchRun(m *msg) int {
	lo, hi := 0, o.run.Len()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if o.less(m, o.run.At(mid).m) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// removed records that one live entry went stale (its message's
// generation was bumped by the owner).
func (o *msgOrder) removed() {
	o.live--
	o.stale++
	if o.stale > o.live+1024 {
		o.compact()
	}
}

// peek returns the first live message without removing it, or nil.
func (o *msgOrder) peek() *msg {
	for o.run.Len() > 0 && !o.isLive(*o.run.At(0)) {
		o.run.DropFront(1)
		o.stale--
	}
	for len(o.heap) > 0 && !o.isLive(o.heap[0]) {
		o.heapPop()
		o.stale--
	}
	switch {
	case o.run.Len() > 0 && len(o.heap) > 0:
		if o.less(o.heap[0].m, o.run.At(0).m) {
			return o.heap[0].m
		}
		return o.run.At(0).m
	case o.run.Len() > 0:
		return o.run.At(0).m
	case len(o.heap) > 0:
		return o.heap[0].m
	}
	return nil
}

// pop removes and returns the first live message, or nil. The message's
// generation is left as it is: the caller bumps it when the message is
// added to this order again later, via push, so nothing stale remains.
func (o *msgOrder) pop() *msg {
	m := o.peek()
	if m == nil {
		return nil
	}
	if len(o.heap) > 0 && o.heap[0].m == m {
		o.heapPop()
	} else {
		o.run.DropFront(1)
	}
	o.live--
	return m
}

// compact drops every stale entry.
func (o *msgOrder) compact() {
	w := 0
	for i := range o.run.Len() {
		if e := *o.run.At(i); o.isLive(e) {
			*o.run.At(w) = e
			w++
		}
	}
	o.run.Truncate(w)
	h := o.heap[:0]
	for _, e := range o.heap {
		if o.isLive(e) {
			h = append(h, e)
		}
	}
	clear(o.heap[len(h):])
	o.heap = h
	for i := len(h)/2 - 1; i >= 0; i-- {
		o.down(i)
	}
	o.stale = 0
}

func (o *msgOrder) heapPush(e entry) {
	o.heap = append(o.heap, e)
	i := len(o.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !o.less(o.heap[i].m, o.heap[p].m) {
			break
		}
		o.heap[i], o.heap[p] = o.heap[p], o.heap[i]
		i = p
	}
}

func (o *msgOrder) heapPop() {
	n := len(o.heap) - 1
	o.heap[0] = o.heap[n]
	o.heap[n] = entry{}
	o.heap = o.heap[:n]
	if n > 0 {
		o.down(0)
	}
}

func (o *msgOrder) down(i int) {
	n := len(o.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && o.less(o.heap[r].m, o.heap[l].m) {
			c = r
		}
		if !o.less(o.heap[c].m, o.heap[i].m) {
			return
		}
		o.heap[i], o.heap[c] = o.heap[c], o.heap[i]
		i = c
	}
}
