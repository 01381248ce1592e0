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

// Inspect counts a queue's messages by state. It walks the queue's
// in-memory index under the queue's lock (no store I/O): O(messages), for
// an operator's view, not for every request.
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
		ByState: map[string]int{MsgAvailable: 0, MsgDelayed: 0, MsgRetryWaiting: 0, MsgInFlight: 0, MsgRemoving: 0}}
	counted := 0
	visit := func(en entry) {
		if q.expiry.isLive(en) {
			out.ByState[stateOf(en.m, now)]++
			counted++
		}
	}
	for i := range q.expiry.run.Len() {
		visit(*q.expiry.run.At(i))
	}
	for _, en := range q.expiry.heap {
		visit(en)
	}
	out.ByState[MsgRemoving] += q.held - counted
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
