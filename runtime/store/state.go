package store

import (
	"cmp"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/takoform/queuehost/runtime/internal/chunked"
)

// state is the in-memory state machine both backends share: Memory applies
// mutations to it directly, Journaled after they are durable and again on
// replay. It is not safe for concurrent use; its owner locks.
//
// Every entity remembers the segment of its latest full-state record (its
// anchor) and that record's size, so that the store knows how many live
// bytes each segment holds and which entities a compaction of a segment
// must rewrite. Memory uses segment 0 throughout.
type state struct {
	resources map[string]*resEntry
	byName    map[nameKey]string
	// perSpace counts the resources of each space (CountResources).
	perSpace map[string]int
	ops      map[string]*opEntry
	idem     map[idemKey]*idemEntry
	queues   map[string]*queue
	// segment → bytes of the records anchored in it: metaLive for
	// resources, Operations and idempotency records, live for messages
	// (two maps, because two locks guard the two halves; see core).
	metaLive map[uint64]int64
	live     map[uint64]int64
	leases   leaseTable
	// deadLetters holds the dead-letter metadata of the messages that
	// have it (Message.DeadLetter), few next to the rest: a side map keeps
	// msgEntry small and pointer-free.
	deadLetters map[msgKey]*DeadLetter
	// traces holds the TraceParent of the messages that have one (only
	// a host that traces sets it): a side map too, empty when tracing
	// is off, so an untraced backlog costs nothing more.
	traces map[msgKey]string
	// history holds the attempt history of the messages that have one
	// (Message.History): those retried or dead-lettered, a side map for
	// the same reason.
	history map[msgKey][]Attempt

	// bodies holds message bodies when there is no journal to read them
	// from (Memory); nil for Journaled.
	bodies   map[uint64][]byte
	nextBody uint64
}

type nameKey struct{ space, name string }
type msgKey struct{ queue, id string }
type idemKey struct{ scope, key string }

type anchor struct {
	seg  uint64
	size int64
}

type resEntry struct {
	r Resource
	anchor
}

type opEntry struct {
	o Operation
	anchor
}

type idemEntry struct {
	r IdempotencyRecord
	anchor
}

// queue keeps its messages in a chunked.Deque (whose entries never move
// as it grows), with a map from ID to slot: a backlog of a million
// messages then costs one small struct and one map slot each, neither
// holding a pointer (so the garbage collector does not scan them), and
// listing them is a scan of contiguous memory. About 100 bytes per
// message in all (BenchmarkIndexMemory).
//
// The engine issues IDs of 32 lowercase hex digits; those are kept decoded,
// as 16 bytes, in the entry and in byHex. Any other ID is a string in
// byName, with names mapping its slot back to it.
//
// The maps hold positions, not slot indexes: slot i of msgs is position
// base+i. Messages mostly leave in the order they came, so removed slots
// gather at the front, and tidy drops them by moving base, without
// touching the maps; only holes behind a message that stays make it
// rewrite them (see tidy).
type queue struct {
	// hint is the slot of the message apply found last (see lookupKey).
	hint   int32
	base   int32 // the position of slot 0
	byHex  map[[16]byte]int32
	byName map[string]int32 // nil until an ID that is not hex arrives
	names  map[int32]string // by position
	msgs   chunked.Deque[msgEntry]
	dead   int
}

// msgEntry is the index of one message: its delivery state and where its
// body lies. 56 bytes, no pointers.
type msgEntry struct {
	id         [16]byte // the decoded ID, when it is hex (see queue)
	acceptedAt int64
	visibleAt  int64
	// pos is where the body lies: segment<<32 | offset in the journal
	// (Journaled caps segments at 2 GiB, so offsets fit), or for Memory
	// the key in state.bodies. It is never 0 for a message (segments and
	// Memory's keys count from 1), so 0 marks a removed slot.
	pos      uint64
	size     int32
	crc      uint32
	attempts int32
	lease    uint32 // in state.leases; 0: none
}

func journalPos(seg uint64, off int64) uint64 { return seg<<32 | uint64(off) }

func (e *msgEntry) seg() uint64   { return e.pos >> 32 }
func (e *msgEntry) off() int64    { return int64(e.pos & (1<<32 - 1)) }
func (e *msgEntry) removed() bool { return e.pos == 0 }

// recordSize estimates the bytes a message's AcceptMessage record takes,
// for live-byte accounting; it must not depend on fields that change after
// the record was written.
func (e *msgEntry) recordSize(queue string, idLen int) int64 {
	return int64(e.size) + int64(idLen+len(queue)) + 32
}

// hexID decodes an ID of exactly 32 lowercase hex digits. (encoding/hex
// would accept upper case too, which would not read back the same.)
func hexID(id string) (k [16]byte, ok bool) {
	if len(id) != 32 {
		return k, false
	}
	// One table load per digit and one test at the end: invalid digits
	// map to 0x10, which survives the OR.
	var bad byte
	for i := range k {
		hi, lo := unhexTab[id[2*i]], unhexTab[id[2*i+1]]
		bad |= hi | lo
		k[i] = hi<<4 | lo&0xf
	}
	if bad > 0xf {
		return [16]byte{}, false
	}
	return k, true
}

// unhexTab maps a lowercase hex digit to its value and every other byte to
// 0x10.
var unhexTab = func() (t [256]byte) {
	for c := range t {
		t[c] = 0x10
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
	}
	return t
}()

func newQueue() *queue { return &queue{byHex: map[[16]byte]int32{}, hint: noHint} }

// noHint starts a run of lookups (see lookupKey).
const noHint = int32(-2)

func (q *queue) lookup(id string, hint *int32) (int32, bool) {
	k, isHex := hexID(id)
	return q.lookupKey(id, k, isHex, hint)
}

// lookupKey is lookup with id already decoded by hexID, so that a caller
// that goes on to index or unindex decodes it once.
//
// hint, when not nil, is the slot the caller found last, and is updated.
// The messages of a batch mostly lie in consecutive slots (one Send's
// messages are accepted by one Apply, and delivered, acknowledged and read
// in that order), so the slot after the hint is tried before the map: a
// run of lookups then costs one probe of the map instead of one each. A
// live slot holding the same hex ID is the message's only slot (an accept
// of an existing ID replaces it in place).
func (q *queue) lookupKey(id string, k [16]byte, isHex bool, hint *int32) (int32, bool) {
	if isHex {
		if hint != nil && k != ([16]byte{}) {
			// k == 0 is excluded: a slot whose ID is not hex has e.id 0.
			if h := *hint + 1; h >= 0 && int(h) < q.msgs.Len() {
				if e := q.msgs.At(int(h)); e.id == k && !e.removed() {
					*hint = h
					return h, true
				}
			}
		}
		p, ok := q.byHex[k]
		i := p - q.base
		if ok && hint != nil {
			*hint = i
		}
		return i, ok
	}
	if q.byName == nil {
		return 0, false
	}
	p, ok := q.byName[id]
	return p - q.base, ok
}

// indexKey records that slot i holds id, filling e.id when it is hex.
func (q *queue) indexKey(id string, k [16]byte, isHex bool, i int32, e *msgEntry) {
	p := q.base + i
	if isHex {
		e.id = k
		q.byHex[k] = p
		return
	}
	if q.byName == nil {
		q.byName, q.names = map[string]int32{}, map[int32]string{}
	}
	q.byName[id] = p
	q.names[p] = id
}

func (q *queue) unindexKey(id string, k [16]byte, isHex bool, i int32) {
	if isHex {
		delete(q.byHex, k)
		return
	}
	delete(q.byName, id)
	delete(q.names, q.base+i)
}

// id is the ID of the message in slot i.
func (q *queue) id(i int32) string {
	if name, ok := q.names[q.base+i]; ok {
		return name
	}
	return hex.EncodeToString(q.msgs.At(int(i)).id[:])
}

func (q *queue) idLen(i int32) int {
	if name, ok := q.names[q.base+i]; ok {
		return len(name)
	}
	return 32
}

func (q *queue) count() int { return len(q.byHex) + len(q.byName) }

// leaseTable interns lease (batch) IDs: the messages of one batch share
// one entry, so a message holds a 4-byte index instead of a string.
type leaseTable struct {
	ids  []string // by index; ids[0] is unused (no lease)
	refs []int32
	free []uint32
	idx  map[string]uint32
}

func (t *leaseTable) ref(id string) uint32 {
	if id == "" {
		return 0
	}
	l, ok := t.idx[id]
	if !ok {
		if t.idx == nil {
			t.idx, t.ids, t.refs = map[string]uint32{}, []string{""}, []int32{0}
		}
		if n := len(t.free); n > 0 {
			l, t.free = t.free[n-1], t.free[:n-1]
			t.ids[l] = id
		} else {
			l = uint32(len(t.ids))
			t.ids, t.refs = append(t.ids, id), append(t.refs, 0)
		}
		t.idx[id] = l
	}
	t.refs[l]++
	return l
}

func (t *leaseTable) unref(l uint32) {
	if l == 0 {
		return
	}
	if t.refs[l]--; t.refs[l] == 0 {
		delete(t.idx, t.ids[l])
		t.ids[l] = ""
		t.free = append(t.free, l)
	}
}

func (t *leaseTable) name(l uint32) string {
	if l == 0 {
		return ""
	}
	return t.ids[l]
}

func newState(memoryBodies bool) *state {
	s := &state{
		resources: map[string]*resEntry{},
		byName:    map[nameKey]string{},
		perSpace:  map[string]int{},
		ops:       map[string]*opEntry{},
		idem:      map[idemKey]*idemEntry{},
		queues:    map[string]*queue{},
		metaLive:  map[uint64]int64{},
		live:      map[uint64]int64{},
	}
	if memoryBodies {
		s.bodies = map[uint64][]byte{}
	}
	return s
}

// normTime drops the monotonic reading and the location, so that a time
// reads back the same from memory as after a replay.
func normTime(t time.Time) time.Time { return time.Unix(t.Unix(), int64(t.Nanosecond())).UTC() }

func cloneBytes[T ~[]byte](b T) T {
	if b == nil {
		return nil
	}
	return append(T{}, b...)
}

func cloneResource(r Resource) Resource {
	r.Spec = cloneBytes(r.Spec)
	r.PrivateInputs = cloneBytes(r.PrivateInputs)
	r.Observed = cloneBytes(r.Observed)
	r.Exports = slices.Clone(r.Exports)
	return r
}

func cloneOperation(o Operation) Operation {
	o.Error = cloneBytes(o.Error)
	o.Intent = cloneBytes(o.Intent)
	o.Progress = cloneBytes(o.Progress)
	return o
}

func (s *state) anchorAt(seg uint64, size int64) anchor {
	s.metaLive[seg] += size
	return anchor{seg, size}
}

func (s *state) unanchor(a anchor) { unanchorIn(s.metaLive, a) }

func unanchorIn(live map[uint64]int64, a anchor) {
	if live[a.seg] -= a.size; live[a.seg] <= 0 {
		delete(live, a.seg)
	}
}

// segmentLive is the live bytes anchored in seg; the caller holds both
// locks (core).
func (s *state) segmentLive(seg uint64) int64 { return s.metaLive[seg] + s.live[seg] }

// mutationKinds says which halves of the state muts change: the metadata
// (resources, Operations, idempotency records) and the messages.
func mutationKinds(muts []Mutation) (meta, msgs bool) {
	for _, m := range muts {
		switch m.(type) {
		case PutResource, DeleteResource, PutOperation, DeleteOperation, PutIdempotency, DeleteIdempotency:
			meta = true
		default:
			msgs = true
		}
	}
	return meta, msgs
}

// apply applies one Apply's mutations. seg and payloadOff locate the
// frame's payload in the journal; meta comes from the codec (nil for
// Memory, which copies bodies instead). The caller holds the write locks
// of the halves mutationKinds names.
func (s *state) apply(muts []Mutation, seg uint64, payloadOff int64, meta []recMeta) {
	for i, m := range muts {
		var size int64
		var bodyOff int64 = -1
		var crc uint32
		if meta != nil {
			crc = meta[i].crc
			size = int64(meta[i].size)
			if meta[i].bodyOff >= 0 {
				bodyOff = payloadOff + int64(meta[i].bodyOff)
			}
		}
		switch m := m.(type) {
		case PutResource:
			r := cloneResource(m.Resource)
			r.CreateTime, r.UpdateTime = normTime(r.CreateTime), normTime(r.UpdateTime)
			e := s.resources[r.UID]
			if e == nil {
				e = &resEntry{}
				s.resources[r.UID] = e
				s.perSpace[r.Space]++
			} else {
				if e.r.Space != r.Space {
					s.uncount(e.r.Space)
					s.perSpace[r.Space]++
				}
				if old := (nameKey{e.r.Space, e.r.Name}); s.byName[old] == r.UID {
					delete(s.byName, old)
				}
				s.unanchor(e.anchor)
			}
			e.anchor = s.anchorAt(seg, size)
			e.r = r
			s.byName[nameKey{r.Space, r.Name}] = r.UID
		case DeleteResource:
			if e := s.resources[m.UID]; e != nil {
				if k := (nameKey{e.r.Space, e.r.Name}); s.byName[k] == m.UID {
					delete(s.byName, k)
				}
				s.unanchor(e.anchor)
				s.uncount(e.r.Space)
				delete(s.resources, m.UID)
			}
		case PutOperation:
			o := cloneOperation(m.Operation)
			if o.Done() {
				o.Intent = nil
			}
			o.CreateTime, o.UpdateTime = normTime(o.CreateTime), normTime(o.UpdateTime)
			e := s.ops[o.ID]
			if e == nil {
				e = &opEntry{}
				s.ops[o.ID] = e
			} else {
				s.unanchor(e.anchor)
			}
			e.anchor = s.anchorAt(seg, size)
			e.o = o
		case DeleteOperation:
			if e := s.ops[m.ID]; e != nil {
				s.unanchor(e.anchor)
				delete(s.ops, m.ID)
			}
		case PutIdempotency:
			r := m.Record
			r.CreateTime = normTime(r.CreateTime)
			k := idemKey{r.Scope, r.Key}
			e := s.idem[k]
			if e == nil {
				e = &idemEntry{}
				s.idem[k] = e
			} else {
				s.unanchor(e.anchor)
			}
			e.anchor = s.anchorAt(seg, size)
			e.r = r
		case DeleteIdempotency:
			k := idemKey{m.Scope, m.Key}
			if e := s.idem[k]; e != nil {
				s.unanchor(e.anchor)
				delete(s.idem, k)
			}
		case AcceptMessage:
			s.accept(&m, seg, bodyOff, crc)
		case DeliverMessages:
			q := s.queues[m.Queue]
			if q == nil {
				continue
			}
			// The batch's lease is interned once for all its messages:
			// each message found takes one reference, and the first one
			// taken keeps the entry alive while the old leases go.
			var l uint32
			for _, id := range m.IDs {
				if i, ok := q.lookup(id, &q.hint); ok {
					e := q.msgs.At(int(i))
					e.attempts++
					old := e.lease
					if l == 0 {
						l = s.leases.ref(m.Batch)
					} else {
						s.leases.refs[l]++
					}
					e.lease = l
					s.leases.unref(old)
					if m.VisibleAt != 0 {
						e.visibleAt = m.VisibleAt
					}
				}
			}
		case ExtendLease:
			q := s.queues[m.Queue]
			if q == nil {
				continue
			}
			for _, id := range m.IDs {
				if i, ok := q.lookup(id, &q.hint); ok {
					if e := q.msgs.At(int(i)); e.lease != 0 && s.leases.name(e.lease) == m.Lease {
						e.visibleAt = m.VisibleAt
					}
				}
			}
		case RetryMessage:
			if q := s.queues[m.Queue]; q != nil {
				if i, ok := q.lookup(m.ID, &q.hint); ok {
					e := q.msgs.At(int(i))
					s.leases.unref(e.lease)
					e.lease = 0
					e.visibleAt = m.VisibleAt
					if m.Attempt != nil {
						s.appendAttempt(msgKey{m.Queue, m.ID}, *m.Attempt)
					}
				}
			}
		case RemoveMessages:
			if q := s.queues[m.Queue]; q != nil {
				for _, id := range m.IDs {
					s.removeMessage(m.Queue, q, id)
				}
				s.tidy(m.Queue, q)
			}
		case DropQueue:
			for k := range s.deadLetters {
				if k.queue == m.Queue {
					delete(s.deadLetters, k)
				}
			}
			for k := range s.traces {
				if k.queue == m.Queue {
					delete(s.traces, k)
				}
			}
			for k := range s.history {
				if k.queue == m.Queue {
					delete(s.history, k)
				}
			}
			if q := s.queues[m.Queue]; q != nil {
				for i := range q.msgs.Len() {
					if e := q.msgs.At(i); !e.removed() {
						s.forget(m.Queue, e, q.idLen(int32(i)))
					}
				}
				delete(s.queues, m.Queue)
			}
		}
	}
}

func (s *state) accept(m *AcceptMessage, seg uint64, bodyOff int64, crc uint32) {
	q := s.queues[m.Message.Queue]
	if q == nil {
		q = newQueue()
		s.queues[m.Message.Queue] = q
	}
	e := msgEntry{
		acceptedAt: m.Message.AcceptedAt,
		visibleAt:  m.Message.VisibleAt,
		attempts:   int32(m.Message.Attempts),
		size:       int32(len(m.Body)),
		crc:        crc,
		pos:        journalPos(seg, bodyOff),
		lease:      s.leases.ref(m.Message.Lease),
	}
	if s.bodies != nil {
		s.nextBody++
		e.pos = s.nextBody
		s.bodies[e.pos] = cloneBytes(m.Body)
	}
	id := m.Message.ID
	s.live[seg] += e.recordSize(m.Message.Queue, len(id))
	k, isHex := hexID(id)
	i, ok := q.lookupKey(id, k, isHex, nil)
	if ok {
		s.forget(m.Message.Queue, q.msgs.At(int(i)), len(id))
	} else {
		i = int32(q.msgs.Len())
	}
	q.indexKey(id, k, isHex, i, &e)
	if ok {
		*q.msgs.At(int(i)) = e
	} else {
		q.msgs.Push(e)
	}
	if dl := m.Message.DeadLetter; dl != nil {
		if s.deadLetters == nil {
			s.deadLetters = map[msgKey]*DeadLetter{}
		}
		c := *dl
		s.deadLetters[msgKey{m.Message.Queue, id}] = &c
	} else if ok && s.deadLetters != nil {
		delete(s.deadLetters, msgKey{m.Message.Queue, id})
	}
	if tp := m.Message.TraceParent; tp != "" {
		if s.traces == nil {
			s.traces = map[msgKey]string{}
		}
		s.traces[msgKey{m.Message.Queue, id}] = tp
	} else if ok && s.traces != nil {
		delete(s.traces, msgKey{m.Message.Queue, id})
	}
	s.setHistory(msgKey{m.Message.Queue, id}, m.Message.History)
}

// forget drops what the state holds for a message that goes: its live
// bytes, its lease reference and (Memory) its body.
func (s *state) forget(queue string, e *msgEntry, idLen int) {
	unanchorIn(s.live, anchor{e.seg(), e.recordSize(queue, idLen)})
	s.leases.unref(e.lease)
	if s.bodies != nil {
		delete(s.bodies, e.pos)
	}
}

func (s *state) removeMessage(name string, q *queue, id string) {
	k, isHex := hexID(id)
	i, ok := q.lookupKey(id, k, isHex, &q.hint)
	if !ok {
		return
	}
	s.forget(name, q.msgs.At(int(i)), len(id))
	if s.deadLetters != nil {
		delete(s.deadLetters, msgKey{name, id})
	}
	if s.traces != nil {
		delete(s.traces, msgKey{name, id})
	}
	if s.history != nil {
		delete(s.history, msgKey{name, id})
	}
	*q.msgs.At(int(i)) = msgEntry{}
	q.unindexKey(id, k, isHex, i)
	q.dead++
}

// maxPosition bounds base+msgs.Len(): past it, tidy renumbers the positions
// from 0, so that they never overflow an int32.
const maxPosition = 1 << 30

// tidy reclaims removed slots: at once those at the front (moving base,
// which costs nothing per live message), and every hole once holes are the
// majority (renumbering the live messages), which keeps the slots in use
// within twice the live count at amortised constant cost.
func (s *state) tidy(name string, q *queue) {
	if q.count() == 0 {
		delete(s.queues, name)
		return
	}
	front := 0
	for front < q.msgs.Len() && q.msgs.At(front).removed() {
		front++
	}
	if front > 0 {
		q.msgs.DropFront(front)
		q.base += int32(front)
		q.dead -= front
		q.hint -= int32(front)
	}
	if (q.dead < 64 || q.dead < q.msgs.Len()/2) && int(q.base)+q.msgs.Len()+chunked.ChunkLen < maxPosition {
		return
	}
	s.renumber(q)
}

// renumber drops every removed slot and gives the live messages the
// positions 0, 1, ...: one map write each.
func (s *state) renumber(q *queue) {
	var names map[int32]string
	if q.names != nil {
		names = make(map[int32]string, len(q.names))
	}
	// Compacted towards slot 0: the copy only ever moves an entry to a
	// lower slot than it is read from.
	live := 0
	for i := range q.msgs.Len() {
		e := q.msgs.At(i)
		if e.removed() {
			continue
		}
		n := int32(live)
		if id, ok := q.names[q.base+int32(i)]; ok {
			q.byName[id] = n
			names[n] = id
		} else {
			q.byHex[e.id] = n
		}
		if live != i {
			*q.msgs.At(live) = *e
		}
		live++
	}
	q.names = names
	// The chunks in use stay: a queue in steady traffic fills them again
	// at once. Only a queue that shrank a lot gives memory back.
	q.msgs.Truncate(live)
	q.base, q.dead, q.hint = 0, 0, noHint
}

// message finds a message's index entry; hint is as for lookupKey (nil:
// none).
func (s *state) message(queue, id string, hint *int32) (*msgEntry, bool) {
	q := s.queues[queue]
	if q == nil {
		return nil, false
	}
	i, ok := q.lookup(id, hint)
	if !ok {
		return nil, false
	}
	return q.msgs.At(int(i)), true
}

func (s *state) messageOf(queue, id string, e *msgEntry) Message {
	return Message{
		Queue:       queue,
		ID:          id,
		AcceptedAt:  e.acceptedAt,
		VisibleAt:   e.visibleAt,
		Attempts:    int(e.attempts),
		Lease:       s.leases.name(e.lease),
		Size:        int(e.size),
		DeadLetter:  s.deadLetter(queue, id),
		TraceParent: s.traces[msgKey{queue, id}],
		History:     cloneAttempts(s.history[msgKey{queue, id}]),
	}
}

// setHistory replaces a message's attempt history (an accept: a new
// message, or a compaction's rewrite of one).
func (s *state) setHistory(k msgKey, h []Attempt) {
	if len(h) == 0 {
		if s.history != nil {
			delete(s.history, k)
		}
		return
	}
	if s.history == nil {
		s.history = map[msgKey][]Attempt{}
	}
	if len(h) > MaxAttempts {
		h = h[len(h)-MaxAttempts:]
	}
	out := make([]Attempt, len(h))
	for i, a := range h {
		out[i] = TrimAttempt(a)
	}
	s.history[k] = out
}

func (s *state) appendAttempt(k msgKey, a Attempt) {
	if s.history == nil {
		s.history = map[msgKey][]Attempt{}
	}
	s.history[k] = AppendAttempt(s.history[k], a)
}

// deadLetter is a copy of a message's dead-letter metadata, nil when it
// has none.
func (s *state) deadLetter(queue, id string) *DeadLetter {
	dl, ok := s.deadLetters[msgKey{queue, id}]
	if !ok {
		return nil
	}
	c := *dl
	return &c
}

func (s *state) messages(queue string) []Message {
	q := s.queues[queue]
	if q == nil {
		return []Message{}
	}
	out := make([]Message, 0, q.count())
	for i := range q.msgs.Len() {
		if e := q.msgs.At(i); !e.removed() {
			out = append(out, s.messageOf(queue, q.id(int32(i)), e))
		}
	}
	// Accept order is nearly AcceptedAt order already, which pdqsort
	// handles in linear time.
	slices.SortFunc(out, func(a, b Message) int {
		return cmp.Or(cmp.Compare(a.AcceptedAt, b.AcceptedAt), strings.Compare(a.ID, b.ID))
	})
	return out
}

func (s *state) uncount(space string) {
	if s.perSpace[space]--; s.perSpace[space] <= 0 {
		delete(s.perSpace, space)
	}
}

func (s *state) resourceList(space, formURL string) []Resource {
	out := []Resource{}
	for _, e := range s.resources {
		if (space == "" || e.r.Space == space) && (formURL == "" || e.r.FormURL == formURL) {
			out = append(out, cloneResource(e.r))
		}
	}
	slices.SortFunc(out, func(a, b Resource) int {
		return cmp.Or(a.CreateTime.Compare(b.CreateTime), strings.Compare(a.UID, b.UID))
	})
	return out
}

func (s *state) unfinished() []Operation {
	out := []Operation{}
	for _, e := range s.ops {
		if !e.o.Done() {
			out = append(out, cloneOperation(e.o))
		}
	}
	slices.SortFunc(out, func(a, b Operation) int {
		return cmp.Or(a.CreateTime.Compare(b.CreateTime), strings.Compare(a.ID, b.ID))
	})
	return out
}

func (s *state) liveBytes() int64 {
	var n int64
	for _, b := range s.live {
		n += b
	}
	for _, b := range s.metaLive {
		n += b
	}
	return n
}

func (s *state) messageCount() int64 {
	var n int64
	for _, q := range s.queues {
		n += int64(q.count())
	}
	return n
}
