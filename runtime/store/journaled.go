package store

// The journaled store
//
// Journaled keeps the whole state machine in memory except message bodies,
// and makes every Apply durable as one frame of runtime/journal before
// applying it. The sequence for one Apply is: encode the group (codec.go)
// → journal.Append → on the journal's writer goroutine, once the frame is
// durable and in journal order, apply it to the state under the write lock
// → return. So readers never see a change that could still be lost, memory
// changes in exactly the order that replay will reproduce, and a failed
// Append leaves memory untouched (ErrUnavailable). Open replays the journal
// through the same apply.
//
// A message's index entry records where its body lies in the journal
// (segment, offset, length, CRC32C); Body reads it back with one ReadAt
// and checks it, so a backlog costs about 100 bytes of memory per message
// whatever the bodies weigh.
//
// Compaction keeps disk use proportional to live data. Every entity is
// anchored in the segment of its latest full-state record (PutResource,
// PutOperation, PutIdempotency, AcceptMessage); the state counts the live
// bytes anchored in each segment. When the sealed segments hold mostly
// dead bytes, the compactor takes the oldest segment, rewrites the current
// full state of every entity still anchored there to the head, and deletes
// the segment. Invariant: only the oldest segment is ever deleted, and
// only once nothing is anchored in it. Then no record that survives can
// have been cancelled by a deleted one (a cancelling record — delete,
// remove, a later put — always follows what it cancels, so it sits in the
// same or a later segment), and delta records (DeliverMessages,
// RetryMessage) left in later segments precede the rewritten full state
// and replay as no-ops on an unknown message, or are overridden by it.
// The rewrite re-checks liveness under a gate that briefly holds back new
// Applies and waits for those in flight, so a message removed or changed
// meanwhile is never resurrected or reverted; the segment's bodies are read
// before taking the gate, so writers wait for about one group commit per
// batch, not for the I/O of a whole segment.
//
// A full disk. The journal keeps Options.DiskReserve free: an Apply that
// grows the state (a new message, a new resource, the start of an update)
// fails with ErrNoSpace at the reserve, while everything that settles or
// deletes, and compaction's rewrites, may use it — so a disk filled by a
// backlog can always be drained. Near the reserve, the compactor seals a
// mostly dead head segment (journal.Rotate; only sealed segments are
// compacted) and reclaims every dead byte it can in that round; it also
// runs at Open, so a restart on a full but drained disk gets its space
// back.
//
// What never shrinks otherwise. A Done Operation drops its intent (which
// can hold a whole resource); ExpireRecords removes finished Operations
// and their idempotency records past a cutoff (the host: 24 hours).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
)

// Options configure Open. The zero value is usable.
type Options struct {
	FS          journal.FS   // default journal.OSFS
	SegmentSize int64        // default journal.DefaultSegmentSize (64 MiB)
	Logger      *slog.Logger // default slog.Default()

	// Background compaction runs when the sealed segments hold at least
	// CompactMinGarbage dead bytes (default: one segment) and those are
	// more than CompactGarbageRatio of their bytes (default 0.5). So disk
	// use stays within about live/(1-ratio) plus the head segment.
	CompactGarbageRatio float64
	CompactMinGarbage   int64
	// DisableCompaction turns background compaction off; Compact still
	// works.
	DisableCompaction bool
	// DiskReserve is disk space kept free for what frees space: an Apply
	// that would grow the state (new messages, new resources) fails with
	// ErrNoSpace once the free space is at or below it, while settlements,
	// deletes and compaction go on using it. 0 means the default:
	// DefaultDiskReserve on the real disk (FS nil), none on any other FS;
	// negative turns it off. The journal keeps at most an eighth of the
	// file system and at least journal.MinReserve as reserve, and refuses
	// a file system too small for that (journal.ErrDiskTooSmall).
	DiskReserve int64
	// ObserveSync is journal.Options.ObserveSync: each group commit's
	// fsync duration.
	ObserveSync func(time.Duration)
	// ZeroAhead is journal.Options.ZeroAhead. 0 means the default:
	// journal.DefaultZeroAhead on the real disk (FS nil), off on any
	// other FS (the tests' fault-injecting ones count every write);
	// negative turns it off.
	ZeroAhead int64
}

// DefaultDiskReserve is Options.DiskReserve on the real disk.
const DefaultDiskReserve = 64 << 20

// RecoveryReport says what Open replayed and what torn tail, if any, it cut
// off the journal.
type RecoveryReport = journal.RecoveryReport

// Stats describe the journal and how much of it is live.
type Stats struct {
	Segments  int
	Bytes     int64 // of data, all segments (the head's file may hold up to ZeroAhead more, zeroed ahead)
	LiveBytes int64 // estimate of the bytes of records still needed
	// SealedBytes and SealedLiveBytes are the same for the sealed
	// segments only, which are what compaction can reclaim.
	SealedBytes     int64
	SealedLiveBytes int64
	Messages        int64
	Appends         uint64 // Apply frames made durable since Open
	Syncs           uint64 // group commits since Open
	// The journal writer's time since Open: writing, syncing, and
	// applying durable Applies to memory (see journal.Stats).
	WriteTime, SyncTime, ApplyTime time.Duration
	Compacted                      uint64 // segments compacted and deleted since Open
}

// Journaled is the durable Store of the embedded host.
type Journaled struct {
	core
	j   *journal.Journal
	log *slog.Logger
	opt Options

	// gate is held shared by every Apply from before its frame is queued
	// until it is applied, and exclusively by a compaction batch while it
	// checks liveness and queues its rewrite: that orders the rewrite after
	// every change it might otherwise undo.
	gate sync.RWMutex

	compactMu   sync.Mutex // one compaction at a time
	kick        chan struct{}
	stop        context.CancelFunc
	compactDone chan struct{}
	compacted   atomic.Uint64
	closeOnce   sync.Once

	// ends is, per segment, the end of the last frame applied from it:
	// every byte before it is durable and never changes. Guarded by
	// core.mu.
	ends map[uint64]int64
	ra   readAhead // see readahead.go
}

var _ Store = (*Journaled)(nil)

// maxSegmentSize bounds Options.SegmentSize: a segment then ends before
// 2 GiB plus one group, well within the 32-bit offsets of the index.
const maxSegmentSize = 2 << 30

var payloadPool = sync.Pool{New: func() any { return new([]byte) }}

// Open opens (creating if needed) the journaled store in dir and replays
// it. A torn tail is cut off and reported; other damage is an error, and
// the host must not start on it.
func Open(ctx context.Context, dir string, opts Options) (*Journaled, RecoveryReport, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = journal.DefaultSegmentSize
	}
	if opts.SegmentSize > maxSegmentSize {
		// The index packs a body's offset in its segment into 32 bits.
		return nil, RecoveryReport{}, fmt.Errorf("store: segment size %d above the maximum %d", opts.SegmentSize, int64(maxSegmentSize))
	}
	if opts.CompactGarbageRatio <= 0 || opts.CompactGarbageRatio >= 1 {
		opts.CompactGarbageRatio = 0.5
	}
	if opts.CompactMinGarbage <= 0 {
		opts.CompactMinGarbage = opts.SegmentSize
	}
	s := &Journaled{core: core{st: newState(false)}, log: opts.Logger, opt: opts, kick: make(chan struct{}, 1), ends: map[uint64]int64{}}
	zeroAhead := opts.ZeroAhead
	if zeroAhead == 0 && opts.FS == nil {
		zeroAhead = journal.DefaultZeroAhead
	}
	reserve := opts.DiskReserve
	if reserve == 0 && opts.FS == nil {
		reserve = DefaultDiskReserve
	}
	j, rep, err := journal.Open(ctx, dir, journal.Options{FS: opts.FS, SegmentSize: opts.SegmentSize, Logger: opts.Logger, ZeroAhead: max(zeroAhead, 0), Reserve: max(reserve, 0), ObserveSync: opts.ObserveSync},
		func(p journal.Pos, payload []byte) error {
			muts, meta, err := decodeGroup(payload)
			if err != nil {
				return err
			}
			s.st.apply(muts, p.Segment, p.PayloadOffset(), meta)
			s.ends[p.Segment] = p.PayloadOffset() + int64(len(payload))
			return nil
		})
	if err != nil {
		return nil, rep, fmt.Errorf("store: open %s: %w", dir, err)
	}
	s.j = j
	cctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.compactDone = make(chan struct{})
	go s.compactor(cctx)
	// A journal left full by a backlog that has since drained is
	// compacted at start, not only after the next Apply.
	s.maybeCompact()
	return s, rep, nil
}

// Apply implements Store. Errors other than ErrClosed and ctx's wrap
// ErrUnavailable and the cause.
func (s *Journaled) Apply(ctx context.Context, muts ...Mutation) error {
	if len(muts) == 0 {
		return ctx.Err()
	}
	bp := payloadPool.Get().(*[]byte)
	payload, meta, err := encodeGroup((*bp)[:0], muts)
	if err != nil {
		payloadPool.Put(bp)
		return err
	}
	// ends is under mu, so every Apply takes it; meta only when it
	// changes metadata.
	hasMeta, _ := mutationKinds(muts)
	err = s.append(ctx, payload, !s.grows(muts), func(p journal.Pos) {
		s.lock(hasMeta, true)
		s.st.apply(muts, p.Segment, p.PayloadOffset(), meta)
		s.ends[p.Segment] = p.PayloadOffset() + int64(len(payload))
		s.unlock(hasMeta, true)
	})
	if cap(payload) <= 1<<20 {
		*bp = payload
		payloadPool.Put(bp)
	}
	if err != nil {
		return err
	}
	s.maybeCompact()
	return nil
}

func (s *Journaled) append(ctx context.Context, payload []byte, reserved bool, onDurable func(journal.Pos)) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.appendLocked(ctx, payload, reserved, onDurable)
}

// grows reports whether muts add to what the store holds rather than
// settle, delete or finish what was accepted: a new message (other than a
// dead-letter move, which removes one too), a new resource, or the start
// of an update (the record in state updating). Only those are refused on
// a disk at its reserve.
func (s *Journaled) grows(muts []Mutation) bool {
	accepts, removes := false, false
	var uids []string
	for _, m := range muts {
		switch m := m.(type) {
		case AcceptMessage:
			accepts = true
		case RemoveMessages:
			removes = true
		case PutResource:
			if m.Resource.State == StateUpdating {
				return true
			}
			uids = append(uids, m.Resource.UID)
		}
	}
	if accepts && !removes {
		return true
	}
	if len(uids) == 0 {
		return false
	}
	s.meta.RLock()
	defer s.meta.RUnlock()
	for _, uid := range uids {
		if s.st.resources[uid] == nil {
			return true
		}
	}
	return false
}

func (s *Journaled) appendLocked(ctx context.Context, payload []byte, reserved bool, onDurable func(journal.Pos)) error {
	return s.appendAs(ctx, payload, reserved, false, onDurable)
}

// appendAs appends with the journal's reserve: none (new state), half
// (reserved: settlements and deletes) or all of it (reclaim: compaction's
// rewrites, which hand segments back).
func (s *Journaled) appendAs(ctx context.Context, payload []byte, reserved, reclaim bool, onDurable func(journal.Pos)) error {
	var err error
	if reclaim {
		_, err = s.j.AppendReclaim(ctx, payload, onDurable)
	} else if reserved {
		_, err = s.j.AppendReserved(ctx, payload, onDurable)
	} else {
		_, err = s.j.Append(ctx, payload, onDurable)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, journal.ErrNoSpace):
		return fmt.Errorf("%w: %w (%w)", ErrUnavailable, ErrNoSpace, err)
	case errors.Is(err, journal.ErrClosed):
		return ErrClosed
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// Bodies implements Store: the index entries are looked up under one read
// lock, then each body is one ReadAt of the journal or a copy out of the
// read-ahead of a run of adjacent bodies (readahead.go), checked against
// its CRC32C.
func (s *Journaled) Bodies(ctx context.Context, queue string, ids []string) ([][]byte, error) {
	out := make([][]byte, len(ids))
	locs := make([]msgEntry, len(ids))
	todo := make([]int, len(ids)) // indexes of ids still to read
	for i := range todo {
		todo[i] = i
	}
	// A compaction may move a body and delete its segment between the
	// lookup and the read; the lookup then finds the new place.
	for range 3 {
		if err := s.rlock(ctx); err != nil {
			return nil, err
		}
		found := todo[:0]
		hint := noHint
		for _, i := range todo {
			if e, ok := s.st.message(queue, ids[i], &hint); ok {
				locs[i] = *e
				found = append(found, i)
			}
		}
		s.mu.RUnlock()
		todo = found
		var again []int
		for _, i := range todo {
			b, err := s.readBody(ids[i], &locs[i])
			switch {
			case errors.Is(err, journal.ErrNoSegment):
				again = append(again, i)
			case err != nil:
				return nil, err
			default:
				out[i] = b
			}
		}
		if len(again) == 0 {
			return out, nil
		}
		todo = again
	}
	return nil, fmt.Errorf("%w: bodies of %d messages keep moving", ErrUnavailable, len(todo))
}

func (s *Journaled) readBody(id string, e *msgEntry) ([]byte, error) {
	if b, ok, err := s.ra.read(s, e); err != nil {
		return nil, err
	} else if ok && journal.Checksum(b) == e.crc {
		return b, nil
	}
	b := make([]byte, e.size)
	if n, err := s.j.ReadAt(b, e.seg(), e.off()); n < len(b) {
		if errors.Is(err, journal.ErrNoSegment) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: read body at %d:%d: %w", ErrUnavailable, e.seg(), e.off(), err)
	}
	if journal.Checksum(b) != e.crc {
		return nil, fmt.Errorf("%w: body of message %q at segment %d offset %d fails its checksum", ErrUnavailable, id, e.seg(), e.off())
	}
	return b, nil
}

// durableEnd is ends[seg], under the read lock.
func (s *Journaled) durableEnd(seg uint64) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ends[seg]
}

// Stats reports the journal's size and how much of it is live.
func (s *Journaled) Stats() Stats {
	segs := s.j.Segments()
	js := s.j.Stats()
	st := Stats{Segments: len(segs), Appends: js.Appends, Syncs: js.Groups, Compacted: s.compacted.Load(),
		WriteTime: js.WriteTime, SyncTime: js.SyncTime, ApplyTime: js.CallbackTime}
	s.meta.RLock()
	defer s.meta.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, g := range segs {
		live := s.st.segmentLive(g.ID)
		st.Bytes += g.Size
		st.LiveBytes += live
		if g.Sealed {
			st.SealedBytes += g.Size
			st.SealedLiveBytes += live
		}
	}
	st.Messages = s.st.messageCount()
	return st
}

// Close stops compaction, waits for Applies in flight and closes the
// journal. Closing twice is not an error.
func (s *Journaled) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.stop()
		<-s.compactDone
		s.gate.Lock()
		s.lock(true, true)
		s.closed = true
		s.unlock(true, true)
		s.gate.Unlock()
		err = s.j.Close()
	})
	return err
}

// RecoveryStats is what MeasureRecovery found.
type RecoveryStats struct {
	Duration time.Duration
	Report   RecoveryReport
	Stats    Stats
}

// MeasureRecovery opens the store in dir, as a restarting host would, and
// closes it again: how long a restart takes to replay the journal. It is
// for the benchmark tool.
func MeasureRecovery(ctx context.Context, dir string, opts Options) (RecoveryStats, error) {
	opts.DisableCompaction = true
	start := time.Now()
	s, rep, err := Open(ctx, dir, opts)
	if err != nil {
		return RecoveryStats{}, err
	}
	rs := RecoveryStats{Duration: time.Since(start), Report: rep, Stats: s.Stats()}
	return rs, s.Close()
}

// FillForBenchmark accepts n messages of size bytes into queue of the store
// in dir, 100 per Apply, so that MeasureRecovery has a journal to replay.
// It is for the benchmark tool.
func FillForBenchmark(ctx context.Context, dir string, opts Options, queue string, n, size int) error {
	opts.DisableCompaction = true
	s, _, err := Open(ctx, dir, opts)
	if err != nil {
		return err
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	var muts []Mutation
	for i := range n {
		muts = append(muts, AcceptMessage{
			Message: Message{Queue: queue, ID: fmt.Sprintf("m%09d", i), AcceptedAt: int64(i), VisibleAt: int64(i), Size: size},
			Body:    body,
		})
		if len(muts) == 100 || i == n-1 {
			if err := s.Apply(ctx, muts...); err != nil {
				s.Close()
				return err
			}
			muts = muts[:0]
		}
	}
	return s.Close()
}
