package delivery

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// Message states of the inspection extension (spec/peers.md
// §Inspection).
const (
	MsgAvailable    = "available"     // visible, waiting for a batch
	MsgDelayed      = "delayed"       // not yet visible: a send's delay
	MsgRetryWaiting = "retry_waiting" // not yet visible: a retry's delay
	MsgInFlight     = "in_flight"     // held by a batch
	MsgRemoving     = "removing"      // its removal (expiry, dead-letter, discard) is being written
)

// QueueInspection is the state of one queue by message state.
type QueueInspection struct {
	Messages int   // every message the queue holds
	Bytes    int64 // their bodies' size
	// ByState counts the messages of the expiry index by state; messages
	// found expired whose removal is pending are counted as removing.
	ByState   map[string]int
	OldestAge time.Duration // of the oldest held message not yet found expired; 0 when none
	Batches   int           // batches dispatched and not finished
	Paused    bool
	// SinceStart is the queue's cumulative counts since the engine
	// started (nil where the engine does not hold the queue).
	SinceStart *QueueCounters
	// InFlight lists the batches in flight, oldest first (at most
	// MaxInspectedBatches; Batches counts them all).
	InFlight []BatchInfo
}

// MaxInspectedBatches bounds QueueInspection.InFlight (a consumer's
// maxConcurrency is at most 250).
const MaxInspectedBatches = 250

// BatchInfo is one batch in flight.
type BatchInfo struct {
	ID          string
	ConsumerUID string
	Messages    int
	Formed      int64  // UTC epoch ms
	State       string // "dispatching", "running" or "closing"
}

// MessageInfo is one message of a listing page.
type MessageInfo struct {
	ID         string
	AcceptedAt int64 // UTC epoch ms
	VisibleAt  int64 // UTC epoch ms
	Attempts   int
	Size       int
	State      string
	// DeadLetter is the message's dead-letter metadata, nil when it did
	// not arrive by dead-lettering. The caller must not change it.
	DeadLetter *store.DeadLetter
}

// Cursor is where a listing page ended: the last message's accept time
// and the engine's accept order. Zero starts at the oldest message.
type Cursor struct {
	AcceptedAt int64
	Seq        uint64
}

func stateOf(m *msg, now int64) string {
	switch {
	case m.state == stLeased:
		return MsgInFlight
	case m.state != stReady:
		return MsgRemoving
	case m.visibleAt <= now:
		return MsgAvailable
	case m.attempts > 0:
		return MsgRetryWaiting
	}
	return MsgDelayed
}

// Inspect counts a queue's messages by state, under the queue's lock and
// without store I/O. It does not walk the queue: the counts are kept as
// messages change (O(1) in the queue's size, plus the batches in flight
// and, amortized, the messages that became visible since the last look;
// see settleFuture).
func (e *Engine) Inspect(_ context.Context, uid string) (QueueInspection, error) {
	q := e.queue(uid)
	if q == nil {
		return QueueInspection{}, abi.ErrUnknownQueue
	}
	now := e.nowMs()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removed {
		return QueueInspection{}, abi.ErrUnknownQueue
	}
	out := QueueInspection{Messages: q.held, Bytes: q.heldBytes, Batches: len(q.batches), Paused: q.cfg.Paused,
		ByState: q.countByState(now)}
	out.InFlight = make([]BatchInfo, 0, len(q.batches))
	for _, b := range q.batches {
		st := "closing"
		switch b.state {
		case bDispatching:
			st = "dispatching"
		case bRunning:
			st = "running"
		}
		info := BatchInfo{ID: b.id, Messages: len(b.items), Formed: b.formed, State: st}
		if b.c != nil {
			info.ConsumerUID = b.c.cfg.UID
		}
		out.InFlight = append(out.InFlight, info)
	}
	slices.SortFunc(out.InFlight, func(a, b BatchInfo) int {
		return cmp.Or(cmp.Compare(a.Formed, b.Formed), strings.Compare(a.ID, b.ID))
	})
	if len(out.InFlight) > MaxInspectedBatches {
		out.InFlight = out.InFlight[:MaxInspectedBatches]
	}
	c := &q.count
	out.SinceStart = &QueueCounters{UID: q.uid, Name: q.cfg.Name,
		Accepted: c.accepted.Load(), Delivered: c.delivered.Load(), Acknowledged: c.acknowledged.Load(),
		Retried: c.retried.Load(), DeadLettered: c.deadLettered.Load(), Discarded: c.discarded.Load(), Expired: c.expired.Load()}
	if m := q.expiry.peek(); m != nil && now > m.acceptedAt {
		out.OldestAge = time.Duration(now-m.acceptedAt) * time.Millisecond
	}
	return out, nil
}

// MessagePage lists up to limit messages of a queue in accept order after
// the cursor, and the cursor of the next page (ok false when this page is
// the last). A page costs a binary search of the queue's expiry index and
// a walk of the page (plus the index's out-of-order entries, which are few):
// it never scans the queue. Messages found expired and not yet removed are
// not listed.
func (e *Engine) MessagePage(_ context.Context, uid string, after Cursor, limit int) (page []MessageInfo, next Cursor, more bool, err error) {
	q := e.queue(uid)
	if q == nil {
		return nil, Cursor{}, false, abi.ErrUnknownQueue
	}
	if limit <= 0 {
		limit = 1
	}
	now := e.nowMs()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removed {
		return nil, Cursor{}, false, abi.ErrUnknownQueue
	}
	ms, more := q.after(after, limit)
	page = make([]MessageInfo, len(ms))
	for k, m := range ms {
		page[k] = MessageInfo{ID: m.id, AcceptedAt: m.acceptedAt, VisibleAt: m.visibleAt, Attempts: m.attempts, Size: m.size, State: stateOf(m, now), DeadLetter: m.dl}
	}
	if len(ms) > 0 {
		last := ms[len(ms)-1]
		next = Cursor{AcceptedAt: last.acceptedAt, Seq: last.seq}
	}
	return page, next, more, nil
}

// after returns up to limit messages of the expiry index after the
// cursor, in accept order, and whether more follow: a binary search of the
// index's sorted run and a walk of the page, plus the heap's out-of-order
// entries (few). mu held.
func (q *queue) after(after Cursor, limit int) (ms []*msg, more bool) {
	o := &q.expiry
	isAfter := func(m *msg) bool {
		return m.acceptedAt > after.AcceptedAt || (m.acceptedAt == after.AcceptedAt && m.seq > after.Seq)
	}
	// The run is sorted: start at the first entry after the cursor.
	lo, hi := 0, o.run.Len()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if isAfter(o.run.At(mid).m) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	// The heap's entries after the cursor, in order (it holds only the
	// messages that arrived out of order).
	var extra []*msg
	for _, en := range o.heap {
		if o.isLive(en) && isAfter(en.m) {
			extra = append(extra, en.m)
		}
	}
	sortMsgs(extra)
	ms = make([]*msg, 0, limit+1)
	i, j := lo, 0
	for len(ms) <= limit && (i < o.run.Len() || j < len(extra)) {
		var m *msg
		switch {
		case i < o.run.Len() && !o.isLive(*o.run.At(i)):
			i++
			continue
		case i < o.run.Len() && (j >= len(extra) || expLess(o.run.At(i).m, extra[j])):
			m = o.run.At(i).m
			i++
		default:
			m = extra[j]
			j++
		}
		ms = append(ms, m)
	}
	if len(ms) > limit {
		ms, more = ms[:limit], true
	}
	return ms, more
}

func sortMsgs(ms []*msg) {
	slices.SortFunc(ms, func(a, b *msg) int {
		if expLess(a, b) {
			return -1
		}
		if expLess(b, a) {
			return 1
		}
		return 0
	})
}

// countByState is Inspect's ByState, from counts kept as messages change.
// A ready message is in the available or the delayed order (and in the
// expiry order), so the orders' sizes count them; those not yet visible
// at now are futDelayed and futRetry once settleFuture has taken out the
// ones that became visible; the rest are available. In flight are the
// leased messages of the batches whose expiry has not been found (a walk
// of the batches: bounded by the consumer's maxConcurrency and
// maxBatchSize, not by the queue); every other held message is being
// removed. mu held.
func (q *queue) countByState(now int64) map[string]int {
	q.settleFuture(now)
	ready := q.avail.Len() + q.delayed.Len()
	// A message released by a batch that is still closing can be leased
	// again by a newer one: with more than one batch, count each once.
	inFlight := 0
	var seen map[*msg]struct{}
	if len(q.batches) > 1 {
		seen = map[*msg]struct{}{}
	}
	for _, b := range q.batches {
		for _, bm := range b.items {
			if bm.m.state != stLeased || !bm.m.inExp {
				continue
			}
			if seen != nil {
				if _, dup := seen[bm.m]; dup {
					continue
				}
				seen[bm.m] = struct{}{}
			}
			inFlight++
		}
	}
	return map[string]int{
		MsgAvailable:    ready - q.futDelayed - q.futRetry,
		MsgDelayed:      q.futDelayed,
		MsgRetryWaiting: q.futRetry,
		MsgInFlight:     inFlight,
		MsgRemoving:     q.held - ready - inFlight,
	}
}

// futEntry is a message counted as not yet visible, by the visible time
// it was counted with.
type futEntry struct {
	at int64
	m  *msg
}

// futHeap is a min-heap of futEntry by at.
type futHeap []futEntry

func (h *futHeap) push(e futEntry) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].at <= a[i].at {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *futHeap) pop() {
	a := *h
	n := len(a) - 1
	a[0] = a[n]
	a[n] = futEntry{}
	a = a[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && a[l].at < a[small].at {
			small = l
		}
		if r := l + 1; r < n && a[r].at < a[small].at {
			small = r
		}
		if small == i {
			break
		}
		a[i], a[small] = a[small], a[i]
		i = small
	}
	*h = a
}

// noteFuture counts m, just made ready, as delayed or retry-waiting when
// it is not yet visible at now. mu held.
func (q *queue) noteFuture(m *msg, now int64) {
	q.forgetFuture(m)
	if m.visibleAt <= now {
		return
	}
	m.fut, m.futRetry = true, m.attempts > 0
	if m.futRetry {
		q.futRetry++
	} else {
		q.futDelayed++
	}
	q.futDue.push(futEntry{m.visibleAt, m})
	// Entries of messages that left before they became visible stay until
	// they are due; keep them from outgrowing the live ones.
	if live := q.futDelayed + q.futRetry; len(q.futDue) > 2*live+1024 {
		kept := q.futDue[:0]
		for _, e := range q.futDue {
			if e.m.fut && e.m.visibleAt == e.at {
				kept = append(kept, e)
			}
		}
		clear(q.futDue[len(kept):])
		q.futDue = kept
		slices.SortFunc(q.futDue, func(a, b futEntry) int { return cmp.Compare(a.at, b.at) }) // a sorted slice is a heap
	}
}

// forgetFuture takes m out of the not-yet-visible counts (it leaves the
// ready state, or is made ready again). mu held.
func (q *queue) forgetFuture(m *msg) {
	if !m.fut {
		return
	}
	m.fut = false
	if m.futRetry {
		q.futRetry--
	} else {
		q.futDelayed--
	}
}

// settleFuture takes the messages that have become visible by now out of
// the not-yet-visible counts. Each entry is taken out once: amortized,
// a look costs nothing per message it does not find due. mu held.
func (q *queue) settleFuture(now int64) {
	for len(q.futDue) > 0 && q.futDue[0].at <= now {
		m := q.futDue[0].m
		q.futDue.pop()
		if m.fut && m.visibleAt <= now {
			q.forgetFuture(m)
		}
	}
}
