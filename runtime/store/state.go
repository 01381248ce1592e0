package store

import (
	"cmp"
	"slices"
	"strings"
	"time"
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
	ops       map[string]*opEntry
	idem      map[idemKey]*idemEntry
	queues    map[string]*queue
	live      map[uint64]int64 // segment → bytes of the records anchored in it

	// bodies holds message bodies when there is no journal to read them
	// from (Memory); nil for Journaled.
	bodies   map[int64][]byte
	nextBody int64
}

type nameKey struct{ space, name string }
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

// queue keeps its messages in a slice, with a map from ID to index: a
// backlog of a million messages then costs one small struct and one map
// slot each, and listing them is a scan of contiguous memory.
type queue struct {
	idx  map[string]int32
	msgs []msgEntry
	dead int
}

// msgEntry is the index of one message: its delivery state and where its
// body lies (segment and offset in the journal; for Memory, off is the key
// in state.bodies). About 72 bytes plus the ID.
type msgEntry struct {
	id         string // "" once removed
	lease      string
	acceptedAt int64
	visibleAt  int64
	off        int64
	attempts   int32
	size       int32
	crc        uint32
	seg        uint32
}

// recordSize estimates the bytes a message's AcceptMessage record takes,
// for live-byte accounting; it must not depend on fields that change after
// the record was written.
func (e *msgEntry) recordSize(queue string) int64 {
	return int64(e.size) + int64(len(e.id)+len(queue)) + 32
}

func newState(memoryBodies bool) *state {
	s := &state{
		resources: map[string]*resEntry{},
		byName:    map[nameKey]string{},
		ops:       map[string]*opEntry{},
		idem:      map[idemKey]*idemEntry{},
		queues:    map[string]*queue{},
		live:      map[uint64]int64{},
	}
	if memoryBodies {
		s.bodies = map[int64][]byte{}
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
	return o
}

func (s *state) anchorAt(seg uint64, size int64) anchor {
	s.live[seg] += size
	return anchor{seg, size}
}

func (s *state) unanchor(a anchor) {
	if s.live[a.seg] -= a.size; s.live[a.seg] <= 0 {
		delete(s.live, a.seg)
	}
}

// apply applies one Apply's mutations. seg and payloadOff locate the
// frame's payload in the journal; meta comes from the codec (nil for
// Memory, which copies bodies instead).
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
			} else {
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
				delete(s.resources, m.UID)
			}
		case PutOperation:
			o := cloneOperation(m.Operation)
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
			s.accept(m, seg, bodyOff, crc)
		case DeliverMessages:
			q := s.queues[m.Queue]
			if q == nil {
				continue
			}
			for _, id := range m.IDs {
				if i, ok := q.idx[id]; ok {
					e := &q.msgs[i]
					e.attempts++
					e.lease = m.Batch
				}
			}
		case RetryMessage:
			if q := s.queues[m.Queue]; q != nil {
				if i, ok := q.idx[m.ID]; ok {
					q.msgs[i].lease = ""
					q.msgs[i].visibleAt = m.VisibleAt
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
			if q := s.queues[m.Queue]; q != nil {
				for i := range q.msgs {
					if e := &q.msgs[i]; e.id != "" {
						s.forgetBody(m.Queue, e)
					}
				}
				delete(s.queues, m.Queue)
			}
		}
	}
}

func (s *state) accept(m AcceptMessage, seg uint64, bodyOff int64, crc uint32) {
	q := s.queues[m.Message.Queue]
	if q == nil {
		q = &queue{idx: map[string]int32{}}
		s.queues[m.Message.Queue] = q
	}
	e := msgEntry{
		id:         m.Message.ID,
		lease:      m.Message.Lease,
		acceptedAt: m.Message.AcceptedAt,
		visibleAt:  m.Message.VisibleAt,
		attempts:   int32(m.Message.Attempts),
		size:       int32(len(m.Body)),
		crc:        crc,
		seg:        uint32(seg),
		off:        bodyOff,
	}
	if s.bodies != nil {
		s.nextBody++
		e.off = s.nextBody
		s.bodies[e.off] = cloneBytes(m.Body)
	}
	s.live[seg] += e.recordSize(m.Message.Queue)
	if i, ok := q.idx[e.id]; ok {
		s.forgetBody(m.Message.Queue, &q.msgs[i])
		q.msgs[i] = e
		return
	}
	q.idx[e.id] = int32(len(q.msgs))
	q.msgs = append(q.msgs, e)
}

// forgetBody drops what the state holds for a message's body.
func (s *state) forgetBody(queue string, e *msgEntry) {
	s.unanchor(anchor{uint64(e.seg), e.recordSize(queue)})
	if s.bodies != nil {
		delete(s.bodies, e.off)
	}
}

func (s *state) removeMessage(name string, q *queue, id string) {
	i, ok := q.idx[id]
	if !ok {
		return
	}
	s.forgetBody(name, &q.msgs[i])
	q.msgs[i] = msgEntry{}
	delete(q.idx, id)
	q.dead++
}

// tidy reclaims removed slots once they are the majority, which keeps the
// slice within twice the live count at amortised constant cost.
func (s *state) tidy(name string, q *queue) {
	if len(q.idx) == 0 {
		delete(s.queues, name)
		return
	}
	if q.dead < 64 || q.dead < len(q.msgs)/2 {
		return
	}
	live := q.msgs[:0]
	for _, e := range q.msgs {
		if e.id != "" {
			q.idx[e.id] = int32(len(live))
			live = append(live, e)
		}
	}
	clear(q.msgs[len(live):])
	q.msgs = slices.Clip(live)
	if cap(q.msgs) > 2*len(q.msgs)+64 {
		q.msgs = slices.Clone(q.msgs)
	}
	q.dead = 0
}

func (s *state) message(queue, id string) (*msgEntry, bool) {
	q := s.queues[queue]
	if q == nil {
		return nil, false
	}
	i, ok := q.idx[id]
	if !ok {
		return nil, false
	}
	return &q.msgs[i], true
}

func (e *msgEntry) message(queue string) Message {
	return Message{
		Queue:      queue,
		ID:         e.id,
		AcceptedAt: e.acceptedAt,
		VisibleAt:  e.visibleAt,
		Attempts:   int(e.attempts),
		Lease:      e.lease,
		Size:       int(e.size),
	}
}

func (s *state) messages(queue string) []Message {
	q := s.queues[queue]
	if q == nil {
		return []Message{}
	}
	out := make([]Message, 0, len(q.idx))
	for i := range q.msgs {
		if e := &q.msgs[i]; e.id != "" {
			out = append(out, e.message(queue))
		}
	}
	// Accept order is nearly AcceptedAt order already, which pdqsort
	// handles in linear time.
	slices.SortFunc(out, func(a, b Message) int {
		return cmp.Or(cmp.Compare(a.AcceptedAt, b.AcceptedAt), strings.Compare(a.ID, b.ID))
	})
	return out
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
	return n
}

func (s *state) messageCount() int64 {
	var n int64
	for _, q := range s.queues {
		n += int64(len(q.idx))
	}
	return n
}
