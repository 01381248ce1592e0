package store

import (
	"context"
	"fmt"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
)

// compactBatchBytes bounds one rewrite frame, and so how long one batch
// holds back writers.
const compactBatchBytes = 1 << 20

func (s *Journaled) maybeCompact() {
	if s.opt.DisableCompaction {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Journaled) compactor(ctx context.Context) {
	defer close(s.compactDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		// Near the reserve, the whole round reclaims every dead byte it
		// can: stopping as soon as the space is back above the mark
		// would leave the next sends to find the disk full again.
		pressed := s.underPressure()
		s.maybeRotateHead(ctx, pressed)
		// Every sealed segment at most once per round: if the oldest ones
		// are all live, rewriting them cannot make the ratio better, and
		// the round must end.
		for range len(s.j.Segments()) {
			if ctx.Err() != nil || !s.needCompaction(pressed) {
				break
			}
			if err := s.compactOldest(ctx); err != nil {
				if ctx.Err() == nil {
					s.log.Warn("store: compaction failed", "err", err)
				}
				break
			}
		}
		// Evaluating after every Apply would cost more than it saves.
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Journaled) needCompaction(pressed bool) bool {
	st := s.Stats()
	garbage := st.SealedBytes - st.SealedLiveBytes
	if garbage <= 0 || float64(garbage) <= s.opt.CompactGarbageRatio*float64(st.SealedBytes) {
		return false
	}
	// Near the reserve, any garbage is worth its rewrite.
	return garbage >= s.opt.CompactMinGarbage || pressed
}

// underPressure: the free disk space is known and below twice the
// reserve.
func (s *Journaled) underPressure() bool {
	free, ok := s.j.FreeSpace()
	return ok && s.j.Reserve() > 0 && free < 2*s.j.Reserve()
}

// maybeRotateHead seals a head segment that is mostly dead when its space
// is wanted: only sealed segments are compacted, so without this a queue
// that filled the disk and drained would keep the head's dead bytes until
// new data filled the head, which a full disk never lets happen.
func (s *Journaled) maybeRotateHead(ctx context.Context, pressed bool) {
	segs := s.j.Segments()
	if len(segs) == 0 {
		return
	}
	head := segs[len(segs)-1]
	s.meta.RLock()
	s.mu.RLock()
	live := s.st.segmentLive(head.ID)
	s.mu.RUnlock()
	s.meta.RUnlock()
	dead := head.Size - journal.SegmentHeaderSize - live
	if dead <= 0 || float64(dead) <= s.opt.CompactGarbageRatio*float64(head.Size) {
		return
	}
	st := s.Stats()
	if dead+st.SealedBytes-st.SealedLiveBytes < s.opt.CompactMinGarbage && !pressed {
		return
	}
	if err := s.j.Rotate(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("store: sealing a mostly dead head segment failed", "segment", head.ID, "err", err)
	}
}

func (s *Journaled) compactOldest(ctx context.Context) error {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	segs := s.j.Segments()
	if len(segs) == 0 || !segs[0].Sealed {
		return nil
	}
	return s.compactSegment(ctx, segs[0].ID)
}

// Compact compacts every segment that is sealed when it is called, oldest
// first, whatever the thresholds say: afterwards the journal holds only the
// head segment plus the rewritten live records. For tests and operators;
// the background compactor is what normally runs.
func (s *Journaled) Compact(ctx context.Context) error {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	for _, g := range s.j.Segments() {
		if !g.Sealed {
			break
		}
		if err := s.compactSegment(ctx, g.ID); err != nil {
			return err
		}
	}
	return nil
}

type compactItem struct {
	kind byte // one of the rec* full-state types
	a, b string
	loc  msgEntry // for messages: where the body was when collected
}

// anchoredIn lists the entities whose latest full-state record is in seg.
func (s *Journaled) anchoredIn(seg uint64) []compactItem {
	s.meta.RLock()
	defer s.meta.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var items []compactItem
	for uid, e := range s.st.resources {
		if e.seg == seg {
			items = append(items, compactItem{kind: recPutResource, a: uid})
		}
	}
	for id, e := range s.st.ops {
		if e.seg == seg {
			items = append(items, compactItem{kind: recPutOperation, a: id})
		}
	}
	for k, e := range s.st.idem {
		if e.seg == seg {
			items = append(items, compactItem{kind: recPutIdempotency, a: k.scope, b: k.key})
		}
	}
	for name, q := range s.st.queues {
		for i := range q.msgs.Len() {
			if e := q.msgs.At(i); !e.removed() && e.seg() == seg {
				items = append(items, compactItem{kind: recAcceptMessage, a: name, b: q.id(int32(i)), loc: *e})
			}
		}
	}
	return items
}

func (s *Journaled) compactSegment(ctx context.Context, seg uint64) error {
	start := time.Now()
	items := s.anchoredIn(seg)
	rewritten := 0
	for len(items) > 0 {
		n, bytes := 0, 0
		for n < len(items) && (n == 0 || bytes < compactBatchBytes) {
			bytes += int(items[n].loc.size) + 256
			n++
		}
		k, err := s.rewrite(ctx, seg, items[:n])
		if err != nil {
			return fmt.Errorf("store: compact segment %d: %w", seg, err)
		}
		rewritten += k
		items = items[n:]
	}
	if left := s.anchoredIn(seg); len(left) > 0 {
		return fmt.Errorf("store: compact segment %d: %d records still anchored there", seg, len(left))
	}
	if err := s.j.RemoveSegment(seg); err != nil {
		return fmt.Errorf("store: compact: %w", err)
	}
	s.lock(true, true)
	delete(s.st.metaLive, seg)
	delete(s.st.live, seg)
	delete(s.ends, seg)
	s.unlock(true, true)
	s.ra.drop(seg)
	s.compacted.Add(1)
	s.log.Info("store: compacted segment", "segment", seg, "rewritten", rewritten, "took", time.Since(start))
	return nil
}

// rewrite appends the current full state of the items still anchored in
// seg. Bodies are read first, without any lock; liveness is decided under
// the gate, after every Apply already queued has been applied.
func (s *Journaled) rewrite(ctx context.Context, seg uint64, items []compactItem) (int, error) {
	bodies := make([][]byte, len(items))
	for i := range items {
		if items[i].kind == recAcceptMessage {
			b, err := s.readBody(items[i].b, &items[i].loc)
			if err != nil {
				return 0, err
			}
			bodies[i] = b
		}
	}
	s.gate.Lock()
	defer s.gate.Unlock()
	var muts []Mutation
	s.meta.RLock()
	s.mu.RLock()
	for i, it := range items {
		switch it.kind {
		case recPutResource:
			if e := s.st.resources[it.a]; e != nil && e.seg == seg {
				muts = append(muts, PutResource{e.r})
			}
		case recPutOperation:
			if e := s.st.ops[it.a]; e != nil && e.seg == seg {
				muts = append(muts, PutOperation{e.o})
			}
		case recPutIdempotency:
			if e := s.st.idem[idemKey{it.a, it.b}]; e != nil && e.seg == seg {
				muts = append(muts, PutIdempotency{e.r})
			}
		case recAcceptMessage:
			// Same segment and offset: the very record whose body we read.
			if e, ok := s.st.message(it.a, it.b, nil); ok && e.pos == it.loc.pos {
				muts = append(muts, AcceptMessage{Message: s.st.messageOf(it.a, it.b, e), Body: bodies[i]})
			}
		}
	}
	s.mu.RUnlock()
	s.meta.RUnlock()
	if len(muts) == 0 {
		return 0, nil
	}
	payload, meta, err := encodeGroup(nil, muts)
	if err != nil {
		return 0, err
	}
	hasMeta, _ := mutationKinds(muts)
	// All of the reserve: compaction is what gives a full disk its space
	// back, and settlements leave it half the reserve for that.
	err = s.appendAs(ctx, payload, true, true, func(p journal.Pos) {
		s.lock(hasMeta, true)
		s.st.apply(muts, p.Segment, p.PayloadOffset(), meta)
		s.ends[p.Segment] = p.PayloadOffset() + int64(len(payload))
		s.unlock(hasMeta, true)
	})
	return len(muts), err
}
