package delivery

import "container/heap"

// msgState says where a message is in the engine's lifecycle.
type msgState uint8

const (
	// stReady: waiting in the delayed heap (visibleAt in the future, or no
	// consumer has looked yet) or in the available heap.
	stReady msgState = iota
	// stLeased: held by a batch (dispatching, running or closing).
	stLeased
	// stBusy: a store operation that removes or moves it is pending or in
	// flight (expiry, dead-letter, discard). It is not deliverable.
	stBusy
	// stGone: removed from the queue.
	stGone
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
	inAvail bool // which visibility heap visIdx refers to
	visIdx  int  // index in delayed or avail; -1 when in neither
	expIdx  int  // index in expiry; -1 when not in it
}

func newMsg(id string, acceptedAt, visibleAt int64, attempts, size int, seq uint64) *msg {
	return &msg{id: id, acceptedAt: acceptedAt, visibleAt: visibleAt, attempts: attempts, size: size, seq: seq, visIdx: -1, expIdx: -1}
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

// expLess is the retention order. Retention is one duration per queue, so
// the deadline order is the accept order whatever the current setting.
func expLess(a, b *msg) bool {
	if a.acceptedAt != b.acceptedAt {
		return a.acceptedAt < b.acceptedAt
	}
	return a.seq < b.seq
}

// visHeap orders messages by visLess; index kept in msg.visIdx.
type visHeap []*msg

func (h visHeap) Len() int           { return len(h) }
func (h visHeap) Less(i, j int) bool { return visLess(h[i], h[j]) }
func (h visHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].visIdx = i
	h[j].visIdx = j
}
func (h *visHeap) Push(x any) {
	m := x.(*msg)
	m.visIdx = len(*h)
	*h = append(*h, m)
}
func (h *visHeap) Pop() any {
	old := *h
	n := len(old)
	m := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	m.visIdx = -1
	return m
}

// expHeap orders messages by expLess; index kept in msg.expIdx.
type expHeap []*msg

func (h expHeap) Len() int           { return len(h) }
func (h expHeap) Less(i, j int) bool { return expLess(h[i], h[j]) }
func (h expHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].expIdx = i
	h[j].expIdx = j
}
func (h *expHeap) Push(x any) {
	m := x.(*msg)
	m.expIdx = len(*h)
	*h = append(*h, m)
}
func (h *expHeap) Pop() any {
	old := *h
	n := len(old)
	m := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	m.expIdx = -1
	return m
}

var (
	_ heap.Interface = (*visHeap)(nil)
	_ heap.Interface = (*expHeap)(nil)
)
