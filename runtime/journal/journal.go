package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSegmentSize is the size at which the head segment is sealed and a
// new one started.
const DefaultSegmentSize = 64 << 20

// defaultMaxGroup bounds the bytes of one group commit, so that a burst of
// large frames does not build one huge buffer; a frame larger than it is a
// group of its own.
const defaultMaxGroup = 8 << 20

// maxGather bounds how long the writer holds a group back for the writers
// of the previous one (see gather).
const maxGather = 5 * time.Millisecond

const segmentSuffix = ".wal"

// Errors of the journal.
var (
	ErrClosed = errors.New("journal: closed")
	// ErrBroken: a failed group could not be cut off the head segment,
	// so nothing more may be appended after it. Reopen the journal.
	ErrBroken = errors.New("journal: refusing writes until reopened")
	// ErrCorrupt: a segment holds a damaged frame that is not the torn
	// tail of the journal. Errors from Open wrap it in a *CorruptError.
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrNoSegment: the segment was removed (or never existed).
	ErrNoSegment = errors.New("journal: no such segment")
	// ErrNoSpace: the free disk space is at or below Options.Reserve, so
	// Append refuses (AppendReserved still writes).
	ErrNoSpace = errors.New("journal: free disk space is below the reserve")
	// ErrDiskTooSmall: Open refuses a file system too small to keep
	// MinReserve free as the reserve.
	ErrDiskTooSmall = errors.New("journal: the disk is too small")
)

// MinReserve is the least reserve the journal keeps on a file system whose
// size it knows, whatever Options.Reserve says: room for the settlements
// and deletes of a drain, compaction's rewrites and the manifest and
// segment writes that hand the space back. Zeros ahead (Options.ZeroAhead)
// never use the reserve. Open refuses a file system smaller than eight
// times it.
const MinReserve = 512 << 10

// CorruptError names the damaged frame.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: corrupt frame in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Options configure a journal. The zero value is usable.
type Options struct {
	FS          FS    // default OSFS
	SegmentSize int64 // default DefaultSegmentSize; at most a quarter of the reserve in force (see Options.Reserve)
	// MaxGroupBytes bounds one group commit (default 8 MiB).
	MaxGroupBytes int
	Logger        *slog.Logger // default slog.Default()
	// ZeroAhead keeps the head segment written with zeros this far past
	// its data, by a goroutine of its own, so that group commits do not
	// grow the file (see zeroFill). 0 turns it off; DefaultZeroAhead is
	// what the store uses on the real disk.
	ZeroAhead int64
	// CheckpointIdle and CheckpointEvery say when the writer records the
	// acknowledged mark in the manifest: once it has been idle for
	// CheckpointIdle (default DefaultCheckpointIdle), and before a group
	// when the last checkpoint is older than CheckpointEvery (default
	// DefaultCheckpointEvery). Negative turns either off; Close and every
	// rotation and removal of a segment still record it.
	CheckpointIdle, CheckpointEvery time.Duration
	// Reserve is disk space Append leaves free: an Append that would take
	// the free space below it fails with ErrNoSpace, while AppendReserved
	// may use it. The store appends what frees space (settlements,
	// deletes, compaction) reserved, so that a disk filled by new data
	// can still be emptied. It is at most an eighth of the file system
	// (a small disk is not all reserve). 0 is none; it needs an FS that
	// is a SpaceFS.
	Reserve int64
	// ObserveSync, when set, is called with the duration of each group
	// commit's fsync, on the writer (it must not block): the host's
	// fsync latency histogram.
	ObserveSync func(time.Duration)
}

// Pos is where a frame starts: its segment and the offset of its header.
type Pos struct {
	Segment uint64
	Offset  int64
}

// PayloadOffset is the offset of the frame's payload in its segment.
func (p Pos) PayloadOffset() int64 { return p.Offset + HeaderSize }

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }

// RecoveryReport says what Open found.
type RecoveryReport struct {
	Segments int
	Frames   int
	Bytes    int64 // bytes of valid frames replayed
	Duration time.Duration
	// Truncated is set when a torn tail was cut off the last segment:
	// File, Offset (where the valid data ends) and Dropped bytes say what.
	Truncated bool
	File      string
	Offset    int64
	Dropped   int64
	Reason    string
	// Created is set when there was no journal: a new, empty one was
	// made. Migrated is set when a format 2 journal got its manifest.
	Created, Migrated bool
	// Acked is the acknowledged mark the manifest held: damage before it
	// fails Open, only damage after it can be a torn tail.
	Acked Mark
	// Restored is set when the last group differed from its copy in the
	// ack file (torn by a crash, or damaged since) and was written back:
	// RestoredBytes at RestoredOffset of RestoredFile.
	Restored       bool
	RestoredFile   string
	RestoredOffset int64
	RestoredBytes  int64
}

// SegmentInfo describes one segment file.
type SegmentInfo struct {
	ID     uint64
	Size   int64 // durable bytes
	Sealed bool  // false for the head, which is appended to
}

// Stats are cumulative counters since Open.
type Stats struct {
	Appends uint64 // frames made durable
	Groups  uint64 // group commits, each one write of the segment and one of the ack file, synced at once (a group too large for the ack file's copy: one after the other)
	Failed  uint64 // frames failed
	// Where the writer's time went: writing groups, syncing them, and
	// running their onDurable callbacks (the store applying them to
	// memory). The rest it spent waiting for frames.
	WriteTime, SyncTime, CallbackTime time.Duration
}

// Journal is an append-only log of frames in segment files. It is safe for
// concurrent use.
type Journal struct {
	fs       FS
	dir      string
	segSize  int64
	maxGroup int
	log      *slog.Logger

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*request
	queued int // bytes of the frames in queue
	wake   int // Append signals the writer once queue holds this many
	closed bool
	broken error
	segs   map[uint64]*segment
	head   *segment
	done   chan struct{}

	// The writer's own: the size of the last group and how long its sync
	// took, for gather.
	lastGroup int
	lastSync  time.Duration
	// observeSync is Options.ObserveSync.
	observeSync func(time.Duration)

	appends, groups, failed     atomic.Uint64
	writeNs, syncNs, callbackNs atomic.Int64

	fill zeroFill

	// mfMu serialises manifest writes (taken before mu). mark is the
	// acknowledged mark last written, lastCheckpoint when (both under mu);
	// ckStopped (under mfMu) is set by Close, after which no checkpoint
	// writes; ckRunning is set while kickCheckpoint's goroutine runs.
	mfMu            sync.Mutex
	mark            Mark
	lastCheckpoint  time.Time
	ckIdle, ckEvery time.Duration
	ckStopped       bool
	ckRunning       atomic.Bool
	idleTimer       *time.Timer
	// idleFrom is when the idle timer was last (re)armed, busyAt when
	// the writer last took a group with the timer armed (mu).
	idleFrom, busyAt time.Time
	// reserve is Options.Reserve; free the disk space left when the
	// journal last looked (-1: unknown), at freeAt; total the file
	// system's size (-1: unknown). Under mu.
	reserve, free, total int64
	freeAt               time.Time
	// freeAsked numbers the looks at the free space, freeGot is the one
	// recorded (see refreshFree). Under mu.
	freeAsked, freeGot uint64
	// noCloseMark makes Close skip recording the mark: tests use it to
	// stop a journal the way a crash would leave its manifest.
	noCloseMark bool

	// ackF is the ack file (AckName), ackSeq the sequence number of the
	// mark it holds; the writer's own once Open returns. noAck makes the
	// writer skip it: tests use it to leave acknowledged frames looking
	// like a crash's unacknowledged tail.
	ackF   File
	ackSeq uint64
	noAck  bool
	// ackV1 says the ack file is of format 1, which Open replaces;
	// ackBuf is the writer's buffer for a slot.
	ackV1  bool
	ackBuf []byte
}

type segment struct {
	id      uint64
	name    string
	f       File
	salt    uint64 // from the segment header; mixed into every frame's CRC
	size    int64  // durable size; written by the writer under mu
	refs    int
	removed bool
}

type request struct {
	rotate    bool // Rotate's: no payload, seal the head instead
	payload   []byte
	onDurable func(Pos)
	pos       Pos
	err       error
	done      chan struct{}
}

// SegmentName is the file name of segment id.
func SegmentName(id uint64) string { return fmt.Sprintf("%016d%s", id, segmentSuffix) }

func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	return id, err == nil && id > 0
}

// Open opens the journal in dir, creating it if needed, and replays every
// frame in order through replay (which may be nil). The payload passed to
// replay is only valid during the call. A torn tail of the last segment is
// cut off and reported; any other damage fails Open with a *CorruptError.
func Open(ctx context.Context, dir string, opts Options, replay func(Pos, []byte) error) (*Journal, RecoveryReport, error) {
	start := time.Now()
	j := &Journal{
		fs:          opts.FS,
		dir:         dir,
		segSize:     opts.SegmentSize,
		maxGroup:    opts.MaxGroupBytes,
		log:         opts.Logger,
		observeSync: opts.ObserveSync,
		segs:        map[uint64]*segment{},
		done:        make(chan struct{}),
	}
	if j.fs == nil {
		j.fs = OSFS{}
	}
	if j.segSize <= 0 {
		j.segSize = DefaultSegmentSize
	}
	if j.maxGroup <= 0 {
		j.maxGroup = defaultMaxGroup
	}
	if j.log == nil {
		j.log = slog.Default()
	}
	j.cond = sync.NewCond(&j.mu)
	j.fill.ahead, j.fill.limit, j.fill.room = opts.ZeroAhead, j.segSize, j.roomToZero
	j.reserve, j.free, j.total = opts.Reserve, -1, -1
	j.ckIdle, j.ckEvery = opts.CheckpointIdle, opts.CheckpointEvery
	if j.ckIdle == 0 {
		j.ckIdle = DefaultCheckpointIdle
	}
	if j.ckEvery == 0 {
		j.ckEvery = DefaultCheckpointEvery
	}
	var rep RecoveryReport
	fail := func(err error) (*Journal, RecoveryReport, error) {
		j.closeFiles()
		return nil, rep, err
	}

	// The journal holds message bodies and secrets: only the host's user
	// may read it.
	if err := j.fs.MkdirAll(dir, 0o700); err != nil {
		return fail(fmt.Errorf("journal: %w", err))
	}
	if j.refreshFree(); j.reserve > 0 && j.total > 0 {
		if j.total/8 < MinReserve {
			return fail(fmt.Errorf("%w: the file system of %s holds %d bytes; the journal needs at least %d, an eighth of which (at least %d) it keeps free for what gets a full disk going again (settlements, deletes, compaction, the manifest)",
				ErrDiskTooSmall, dir, j.total, 8*MinReserve, MinReserve))
		}
		// A compaction rewrites one segment's live records before the
		// segment goes: a segment must fit in the half of the reserve
		// that settlements leave, with room for the manifest.
		j.segSize = min(j.segSize, j.reserveLocked()/4)
	}
	j.fill.limit = j.segSize
	names, err := j.fs.ReadDir(dir)
	if err != nil {
		return fail(fmt.Errorf("journal: %w", err))
	}
	var onDisk []uint64
	for _, name := range names {
		if id, ok := parseSegmentName(name); ok {
			onDisk = append(onDisk, id)
		}
	}
	slices.Sort(onDisk)
	ids, mark, created, migrated, err := j.listSegments(onDisk)
	if err != nil {
		return fail(err)
	}
	j.mark = mark
	// The ack file's mark is as of the last group commit; the manifest's
	// only as of its last checkpoint. Frames below either were
	// acknowledged.
	ack, haveAck, err := j.readAck()
	if err != nil {
		return fail(err)
	}
	ackMark := ack.mark
	switch {
	case haveAck && created:
		// Neither a manifest nor a segment: the journal is new (or was
		// deleted whole, which the host warns about); an ack file left
		// over marks nothing and is replaced.
		j.ackF.Close()
		j.ackF, haveAck, ack = nil, false, ackSlot{}
	case haveAck && ackMark.Segment > ids[len(ids)-1]:
		return fail(&CorruptError{File: join(dir, AckName), Offset: 0, Reason: fmt.Sprintf("the acknowledged mark is in segment %d, after the last segment the manifest lists", ackMark.Segment)})
	case haveAck:
		mark = later(mark, ackMark)
	}
	rep.Created, rep.Migrated, rep.Acked = created, migrated, mark
	var r segReader
	for i, id := range ids {
		s := &segment{id: id, name: join(dir, SegmentName(id))}
		s.f, err = j.fs.OpenFile(s.name, os.O_RDWR, 0)
		if err != nil {
			return fail(fmt.Errorf("journal: %w", err))
		}
		j.segs[id] = s
		j.head = s
		if err := j.repairFromAck(s, ack, &rep); err != nil {
			return fail(err)
		}
		if err := j.recoverSegment(ctx, &r, s, i == len(ids)-1, mark, replay, &rep); err != nil {
			return fail(err)
		}
		rep.Segments++
	}
	if j.head == nil {
		if err := j.createSegment(1); err != nil {
			return fail(err)
		}
	} else if j.staleLocked() {
		// What recovery kept is durable: record it as acknowledged (and
		// give a migrated journal its manifest).
		j.mfMu.Lock()
		err := j.writeManifest()
		j.mfMu.Unlock()
		if err != nil {
			return fail(err)
		}
	}
	// What recovery kept is durable: it is the acknowledged mark now.
	end := Mark{j.head.id, j.head.size}
	if haveAck && j.ackV1 {
		// Format 1: replaced whole by a file of the current format.
		j.ackF.Close()
		j.ackF, haveAck = nil, false
	}
	if !haveAck {
		err = j.createAck(end)
	} else if ackMark != end {
		err = j.writeAck(end)
	}
	if err != nil {
		return fail(err)
	}
	// Recovery left the head's file as its data plus, at most, zeros.
	written, err := j.head.f.Size()
	if err != nil {
		return fail(fmt.Errorf("journal: %w", err))
	}
	j.fill.start(j.log.Warn)
	j.fill.follow(j.head, j.head.size, written)
	j.refreshFree()
	rep.Duration = time.Since(start)
	go j.run()
	return j, rep, nil
}

// segReader reads a segment through a large buffer: replay reads frames
// in order, and one ReadAt per frame would dominate recovery time.
type segReader struct {
	f     File
	buf   []byte
	start int64
	n     int
}

const readChunk = 4 << 20

func (r *segReader) reset(f File) { r.f, r.start, r.n = f, 0, 0 }

// slice returns n bytes at off; the caller has checked they exist.
func (r *segReader) slice(off int64, n int) ([]byte, error) {
	if off >= r.start && off+int64(n) <= r.start+int64(r.n) {
		return r.buf[off-r.start : off-r.start+int64(n)], nil
	}
	want := max(n, readChunk)
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	got, err := r.f.ReadAt(r.buf, off)
	r.start, r.n = off, got
	if got < n {
		if err == nil {
			err = errors.New("short read")
		}
		return nil, err
	}
	return r.buf[:n], nil
}

func (j *Journal) recoverSegment(ctx context.Context, r *segReader, s *segment, last bool, mark Mark, replay func(Pos, []byte) error, rep *RecoveryReport) error {
	size, err := s.f.Size()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if s.id == mark.Segment && size < mark.Offset {
		return &CorruptError{File: s.name, Offset: size, Reason: fmt.Sprintf("the file ends before the acknowledged mark at offset %d", mark.Offset)}
	}
	r.reset(s.f)
	hdrErr := ""
	if size < SegmentHeaderSize {
		hdrErr = fmt.Sprintf("incomplete segment header (%d bytes)", size)
	} else {
		hdr, err := r.slice(0, SegmentHeaderSize)
		if err != nil {
			return fmt.Errorf("journal: read %s: %w", s.name, err)
		}
		if s.salt, _, err = parseSegmentHeader(hdr); err != nil {
			hdrErr = err.Error()
		}
	}
	if hdrErr != "" {
		// A segment's header is synced before any frame is written to
		// it, and before the manifest lists it, so a crash can leave a
		// bad header only on a last segment that holds nothing else and
		// that a format 2 journal (no manifest) was creating.
		if !last {
			return &CorruptError{File: s.name, Offset: 0, Reason: hdrErr + " in a sealed segment"}
		}
		if mark.Segment >= s.id {
			return &CorruptError{File: s.name, Offset: 0, Reason: hdrErr + " in a segment the manifest lists"}
		}
		if size > SegmentHeaderSize {
			return &CorruptError{File: s.name, Offset: 0, Reason: hdrErr + ", and data follows it"}
		}
		return j.reinitSegment(s, size, hdrErr, rep)
	}
	off := int64(SegmentHeaderSize)
	for off < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		reason := ""
		var payload []byte
		if size-off < HeaderSize {
			reason = "incomplete frame header"
		} else {
			hdr, err := r.slice(off, HeaderSize)
			if err != nil {
				return fmt.Errorf("journal: read %s: %w", s.name, err)
			}
			length := int64(uint32(hdr[0]) | uint32(hdr[1])<<8 | uint32(hdr[2])<<16 | uint32(hdr[3])<<24)
			switch {
			case length == 0 || length > MaxPayload:
				reason = fmt.Sprintf("frame length %d out of range", length)
			case HeaderSize+length > size-off:
				reason = fmt.Sprintf("frame of %d bytes runs past the end of the file (%d bytes left)", length, size-off-HeaderSize)
			default:
				frame, err := r.slice(off, int(HeaderSize+length))
				if err != nil {
					return fmt.Errorf("journal: read %s: %w", s.name, err)
				}
				payload, _, err = DecodeFrame(frame, s.salt, off)
				if err != nil {
					reason = "checksum mismatch"
				}
			}
		}
		if reason != "" {
			return j.damaged(s, off, size, last, mark, reason, rep)
		}
		if replay != nil {
			if err := replay(Pos{s.id, off}, payload); err != nil {
				return fmt.Errorf("journal: replay %s at offset %d: %w", s.name, off, err)
			}
		}
		rep.Frames++
		rep.Bytes += int64(len(payload)) + HeaderSize
		off += int64(len(payload)) + HeaderSize
	}
	s.size = size
	return nil
}

// damaged decides what a bad frame at off means. Only the tail of the
// last segment can be torn by a crash, because every group is synced
// before the next one is written and a segment is sealed only after its
// last group was synced. Even there, a valid frame after the bad one means
// the bad one was once complete: that is media damage, and dropping
// acknowledged frames after it silently is not an option.
func (j *Journal) damaged(s *segment, off, size int64, last bool, mark Mark, reason string, rep *RecoveryReport) error {
	if !last {
		return &CorruptError{File: s.name, Offset: off, Reason: reason + " in a sealed segment"}
	}
	if mark.covers(s.id, off) {
		return &CorruptError{File: s.name, Offset: off, Reason: fmt.Sprintf("%s before the acknowledged mark at offset %d", reason, mark.Offset)}
	}
	rest := make([]byte, size-off)
	if n, err := s.f.ReadAt(rest, off); n < len(rest) {
		return fmt.Errorf("journal: read %s: %w", s.name, err)
	}
	if !slices.ContainsFunc(rest, func(b byte) bool { return b != 0 }) {
		// Zeros after the data: space zeroed ahead (Options.ZeroAhead), or
		// what a file system that grew the file before the data reached
		// the disk leaves of an unsynced group. Neither holds a frame;
		// the space stays for the next writes.
		s.size = off
		return nil
	}
	if p := findFrame(rest[1:], s.salt, off+1); p >= 0 {
		return &CorruptError{File: s.name, Offset: off, Reason: fmt.Sprintf("%s, and a valid frame follows at offset %d", reason, off+1+int64(p))}
	}
	if err := s.f.Truncate(off); err != nil {
		return fmt.Errorf("journal: cut torn tail of %s: %w", s.name, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("journal: cut torn tail of %s: %w", s.name, err)
	}
	rep.Truncated, rep.File, rep.Offset, rep.Dropped, rep.Reason = true, s.name, off, size-off, reason
	j.log.Warn("journal: cut torn tail", "file", s.name, "offset", off, "dropped", size-off, "reason", reason)
	s.size = off
	return nil
}

// findFrame returns the first offset in b, which lies at offset off of a
// segment of salt, at which a valid frame of that segment starts, or -1.
func findFrame(b []byte, salt uint64, off int64) int {
	for p := 0; p+HeaderSize < len(b); p++ {
		if _, _, err := DecodeFrame(b[p:], salt, off+int64(p)); err == nil {
			return p
		}
	}
	return -1
}

// reinitSegment rewrites the header of a last segment whose creation was
// torn by a crash (it holds no frame), with a fresh salt.
func (j *Journal) reinitSegment(s *segment, size int64, reason string, rep *RecoveryReport) error {
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("journal: rewrite torn header of %s: %w", s.name, err)
	}
	salt, err := writeSegmentHeader(s.f)
	if err != nil {
		return fmt.Errorf("journal: rewrite torn header of %s: %w", s.name, err)
	}
	s.salt, s.size = salt, SegmentHeaderSize
	if size > 0 {
		reason = "torn segment header: " + reason
		rep.Truncated, rep.File, rep.Offset, rep.Dropped, rep.Reason = true, s.name, 0, size, reason
		j.log.Warn("journal: rewrote torn segment header", "file", s.name, "dropped", size, "reason", reason)
	}
	return nil
}

// writeSegmentHeader writes a new segment header to the empty file f and
// syncs it, so that no frame is ever written behind a header that could
// still be lost.
func writeSegmentHeader(f File) (uint64, error) {
	salt := newSalt()
	if _, err := f.WriteAt(AppendSegmentHeader(nil, salt), 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return salt, nil
}

func (j *Journal) createSegment(id uint64) error {
	name := join(j.dir, SegmentName(id))
	// O_TRUNC, not O_EXCL: a file of this number can only be left over from
	// a rotation whose SyncDir failed, and nothing was written to it.
	f, err := j.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: create segment: %w", err)
	}
	salt, err := writeSegmentHeader(f)
	if err == nil {
		err = j.fs.SyncDir(j.dir)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("journal: create segment %s: %w", name, err)
	}
	s := &segment{id: id, name: name, f: f, salt: salt, size: SegmentHeaderSize}
	j.mfMu.Lock()
	defer j.mfMu.Unlock()
	j.mu.Lock()
	old := j.head
	j.segs[id] = s
	j.head = s
	j.mu.Unlock()
	// Only once the manifest lists it does the segment get frames: a
	// crash before leaves a file of no more than a header, which Open
	// removes.
	if err := j.writeManifest(); err != nil {
		j.mu.Lock()
		delete(j.segs, id)
		j.head = old
		j.mu.Unlock()
		f.Close()
		j.fs.Remove(name)
		return fmt.Errorf("journal: create segment %s: %w", name, err)
	}
	return nil
}

// Append makes payload durable as one frame and returns where it is. Frames
// are durable in the order of the Append calls that queue them. onDurable,
// when not nil, is called with the frame's position on the journal's writer
// goroutine, in frame order, after the frame is durable and before any
// Append of its group returns: the store applies the frame to memory there,
// so that memory changes in exactly the journal's order. onDurable must be
// quick and must not call the journal.
//
// ctx is only checked before the frame is queued: once queued, the frame
// may become durable, and the caller must learn whether it did.
func (j *Journal) Append(ctx context.Context, payload []byte, onDurable func(Pos)) (Pos, error) {
	return j.append(ctx, payload, onDurable, useNoReserve)
}

// AppendReserved is Append allowed to use half of the reserve
// (Options.Reserve): for frames that lead to space being freed
// (settlements, deletes), which must not fail because new data filled the
// disk. The other half is AppendReclaim's.
func (j *Journal) AppendReserved(ctx context.Context, payload []byte, onDurable func(Pos)) (Pos, error) {
	return j.append(ctx, payload, onDurable, useHalfReserve)
}

// AppendReclaim is Append allowed to use all of the reserve: for
// compaction's rewrites, which hand whole segments back. Settlements
// cannot take the half of the reserve it keeps, and a segment is at most
// a quarter of the reserve on a file system whose size the journal knows,
// so a compaction can always rewrite one segment's live records and
// record its removal in the manifest.
func (j *Journal) AppendReclaim(ctx context.Context, payload []byte, onDurable func(Pos)) (Pos, error) {
	return j.append(ctx, payload, onDurable, useAllReserve)
}

// How much of the reserve an append may use.
const (
	useNoReserve = iota
	useHalfReserve
	useAllReserve
)

func (j *Journal) append(ctx context.Context, payload []byte, onDurable func(Pos), use int) (Pos, error) {
	if len(payload) == 0 || len(payload) > MaxPayload {
		return Pos{}, fmt.Errorf("journal: payload of %d bytes: want 1 to %d", len(payload), MaxPayload)
	}
	if err := ctx.Err(); err != nil {
		return Pos{}, err
	}
	r := &request{payload: payload, onDurable: onDurable, done: make(chan struct{})}
	j.mu.Lock()
	// lowSpace first: it may release mu, and closed and broken must be
	// read after it.
	switch {
	case use != useAllReserve && j.lowSpace(len(payload), use):
		free, reserve := j.free, j.reserveLocked()
		if use == useHalfReserve {
			tail := j.fill.tail(j.head, j.head.size)
			j.mu.Unlock()
			return Pos{}, fmt.Errorf("%w: %d bytes free and %d zeroed ahead, %d kept for compaction", ErrNoSpace, free, tail, reserve/2)
		}
		j.mu.Unlock()
		return Pos{}, fmt.Errorf("%w: %d bytes free, %d kept for settlements, deletes and compaction", ErrNoSpace, free, reserve)
	case j.closed:
		j.mu.Unlock()
		return Pos{}, ErrClosed
	case j.broken != nil:
		err := j.broken
		j.mu.Unlock()
		return Pos{}, err
	}
	j.queue = append(j.queue, r)
	j.queued += len(payload) + HeaderSize
	if len(j.queue) >= j.wake || j.queued >= j.maxGroup {
		j.cond.Signal()
	}
	j.mu.Unlock()
	<-r.done
	return r.pos, r.err
}

func (j *Journal) run() {
	defer close(j.done)
	var buf []byte
	for {
		j.mu.Lock()
		j.wake = 1
		for len(j.queue) == 0 && !j.closed {
			j.armIdleCheckpoint()
			j.cond.Wait()
		}
		if len(j.queue) == 0 {
			j.mu.Unlock()
			return
		}
		if j.idleTimer != nil {
			j.busyAt = time.Now() // not idle: the armed checkpoint waits on
		}
		if j.ckEvery > 0 && j.staleLocked() && time.Since(j.lastCheckpoint) >= j.ckEvery {
			// Busy for a while: record the mark beside the groups, at
			// most once per CheckpointEvery.
			j.kickCheckpoint()
		}
		j.gather()
		n, bytes := 0, 0
		for n < len(j.queue) && (n == 0 || bytes+len(j.queue[n].payload)+HeaderSize <= j.maxGroup && !j.queue[n].rotate) {
			bytes += len(j.queue[n].payload) + HeaderSize
			n++
			if j.queue[0].rotate {
				break
			}
		}
		group := slices.Clone(j.queue[:n])
		j.queue = slices.Delete(j.queue, 0, n)
		j.queued -= bytes
		broken := j.broken
		j.mu.Unlock()
		j.lastGroup = len(group)
		if broken != nil {
			j.lastGroup = 0
			j.finish(group, broken)
			continue
		}
		if group[0].rotate {
			j.lastGroup = 0
			if err := j.rotate(j.head); err != nil {
				j.finish(group, err)
				continue
			}
			j.refreshFree()
			close(group[0].done)
			continue
		}
		buf = j.commit(group, buf[:0], bytes)
		j.refreshFree()
	}
}

// armIdleCheckpoint starts the idle timer when the writer waits with the
// mark behind the durable end: when it fires after CheckpointIdle with no
// group taken since the writer last went idle, the mark is written; a group
// taken meanwhile (busyAt) puts it off until the writer has been idle that
// long. Without that, a writer that empties its queue between groups, as
// it does under one request at a time, would write the manifest (a write
// and two syncs) every CheckpointIdle while busy, not once per
// CheckpointEvery: 50 times a second, about 6% of a sandboxed host's CPU
// on single sends. Called with mu held.
func (j *Journal) armIdleCheckpoint() {
	if j.ckIdle < 0 || j.idleTimer != nil || !j.staleLocked() {
		return
	}
	j.idleFrom, j.busyAt = time.Now(), time.Time{}
	j.idleTimer = time.AfterFunc(j.ckIdle, j.idleCheckpoint)
}

// idleCheckpoint is the idle timer's: the mark once the writer has been
// idle for CheckpointIdle since its last group.
func (j *Journal) idleCheckpoint() {
	j.mu.Lock()
	if j.idleTimer == nil { // stopped by Close
		j.mu.Unlock()
		return
	}
	last := j.idleFrom
	if j.busyAt.After(last) {
		last = j.busyAt
	}
	if idle := time.Since(last); len(j.queue) > 0 || idle < j.ckIdle {
		// Groups were taken since the timer was armed: wait until the
		// last of them is CheckpointIdle old (while the writer stays
		// busy, the busy path's CheckpointEvery records the mark).
		wait := j.ckIdle - idle
		if wait <= 0 {
			wait = j.ckIdle
		}
		j.idleTimer.Reset(wait)
		j.mu.Unlock()
		return
	}
	j.idleTimer = nil
	j.mu.Unlock()
	j.checkpoint()
}

// kickCheckpoint writes the mark in a goroutine of its own, unless one
// is already at it: a checkpoint never holds up a group commit.
func (j *Journal) kickCheckpoint() {
	if j.ckRunning.CompareAndSwap(false, true) {
		go func() {
			defer j.ckRunning.Store(false)
			j.checkpoint()
		}()
	}
}

// gather holds the next group back until the writers of the group just
// made durable have queued their next frames, for at most the duration
// of the last sync (and maxGather): a writer that misses the group waits
// a whole sync anyway. Called with mu held and the queue not empty.
//
// Without it, group commit fills only half under concurrency: a group's
// writers are all blocked in it, so when its sync returns the queue is
// empty; the writer would take the first frame to come back and sync it
// alone (or with a few), while the rest queue up behind that sync: groups
// alternate between a few frames and nearly all of them. The next write
// still starts as soon as the writers are back, which takes microseconds
// against a sync's hundreds, and a writer that does not come back costs
// at most the window, once.
func (j *Journal) gather() {
	want := j.lastGroup
	window := min(j.lastSync, maxGather)
	if len(j.queue) >= want || j.queued >= j.maxGroup || j.closed || window <= 0 {
		return
	}
	expired := false
	t := time.AfterFunc(window, func() {
		j.mu.Lock()
		expired = true
		j.cond.Broadcast()
		j.mu.Unlock()
	})
	j.wake = want
	for len(j.queue) < want && j.queued < j.maxGroup && !j.closed && !expired {
		j.cond.Wait()
	}
	t.Stop()
	j.wake = 1
}

// commit writes group, and the acknowledged mark past it with a copy of
// the group to the ack file, syncs both at once and only then releases
// its Appends (a group too large for the copy: synced before its mark).
func (j *Journal) commit(group []*request, buf []byte, bytes int) []byte {
	h := j.head
	if h.size > SegmentHeaderSize && h.size+int64(bytes) > j.segSize {
		if err := j.rotate(h); err != nil {
			j.finish(group, err)
			return buf
		}
		h = j.head
	}
	for _, r := range group {
		r.pos = Pos{h.id, h.size + int64(len(buf))}
		buf = AppendFrame(buf, h.salt, r.pos.Offset, r.payload)
	}
	j.fill.beforeWrite(h, h.size+int64(len(buf)))
	end := Mark{h.id, h.size + int64(len(buf))}
	// A group that fits in an ack slot is written there too, with the
	// mark past it, and both files are synced at once: a crash that
	// leaves the mark without the group leaves its copy, from which Open
	// restores it (repairFromAck). A larger group is synced before its
	// mark is written.
	together := !j.noAck && len(buf) <= ackCopyMax
	start := time.Now()
	_, err := h.f.WriteAt(buf, h.size)
	touched := false // the ack slot was written to
	if err == nil && together {
		err, touched = j.putAck(end, h.size, buf), true
	}
	if err == nil {
		wrote := time.Now()
		j.writeNs.Add(int64(wrote.Sub(start)))
		var ackDone chan error
		if together {
			ackDone = make(chan error, 1)
			go func() { ackDone <- j.syncAck() }()
		}
		err = h.f.Sync()
		if err != nil {
			err = fmt.Errorf("journal: append to %s: %w", h.name, err)
		}
		if together {
			if aerr := <-ackDone; err == nil {
				err = aerr
			}
		}
		j.lastSync = time.Since(wrote)
		j.syncNs.Add(int64(j.lastSync))
		if err == nil && j.observeSync != nil {
			j.observeSync(j.lastSync)
		}
		if err == nil && together {
			j.ackSeq++
		}
	} else {
		err = fmt.Errorf("journal: append to %s: %w", h.name, err)
	}
	if err == nil && !j.noAck && !together {
		// The group is durable; before any of its Appends returns, the
		// acknowledged mark moves past it, so that damage to an
		// acknowledged frame is never taken for a torn tail.
		err, touched = j.writeAck(end), true
	}
	if err != nil && touched {
		// The new mark (and the group's copy) may have reached the disk:
		// put the old mark back before the group is cut off, or the next
		// Open would find the file ending before the mark, or restore
		// the failed group from its copy.
		if aerr := j.writeAck(Mark{h.id, h.size}); aerr != nil {
			j.fill.afterWrite(h, h.size, false)
			j.mu.Lock()
			j.broken = fmt.Errorf("%w: restoring the acknowledged mark failed: %w", ErrBroken, aerr)
			j.mu.Unlock()
			j.log.Error("journal: refusing further writes", "file", join(j.dir, AckName), "err", aerr, "cause", err)
			j.finish(group, err)
			return buf
		}
	}
	if err != nil {
		j.fill.afterWrite(h, h.size, false)
		// Cut the group off so that the file never holds a frame that was
		// reported as failed: replay would resurrect it.
		j.fill.release()
		terr := h.f.Truncate(h.size)
		if terr == nil {
			terr = h.f.Sync()
		}
		if terr == nil {
			j.fill.follow(h, h.size, h.size)
		}
		if terr != nil {
			j.mu.Lock()
			j.broken = fmt.Errorf("%w: cutting a failed group off %s failed: %w", ErrBroken, h.name, terr)
			j.mu.Unlock()
			j.log.Error("journal: refusing further writes", "file", h.name, "err", terr, "cause", err)
		}
		j.finish(group, err)
		return buf
	}
	j.mu.Lock()
	h.size += int64(len(buf))
	j.mu.Unlock()
	j.fill.afterWrite(h, h.size, true)
	j.appends.Add(uint64(len(group)))
	j.groups.Add(1)
	start = time.Now()
	for _, r := range group {
		if r.onDurable != nil {
			r.onDurable(r.pos)
		}
	}
	j.callbackNs.Add(int64(time.Since(start)))
	for _, r := range group {
		close(r.done)
	}
	return buf
}

// rotate seals the head h and starts the next segment. A head that holds
// no frame stays.
func (j *Journal) rotate(h *segment) error {
	if h.size <= SegmentHeaderSize {
		return nil
	}
	if err := j.seal(h); err != nil {
		return err
	}
	if err := j.createSegment(h.id + 1); err != nil {
		return err
	}
	j.fill.follow(j.head, j.head.size, j.head.size)
	return nil
}

// Rotate seals the head segment and starts a new one, in order with the
// Appends queued before it, so that the store can compact what the old
// head holds (only sealed segments are compacted). A head with no frame
// is left as it is.
func (j *Journal) Rotate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &request{rotate: true, done: make(chan struct{})}
	j.mu.Lock()
	switch {
	case j.closed:
		j.mu.Unlock()
		return ErrClosed
	case j.broken != nil:
		err := j.broken
		j.mu.Unlock()
		return err
	}
	j.queue = append(j.queue, r)
	j.queued += HeaderSize // what the writer subtracts for each request
	j.cond.Signal()
	j.mu.Unlock()
	<-r.done
	return r.err
}

// refreshFree asks the FS how much space is left, for the reserve.
func (j *Journal) refreshFree() {
	if j.reserve <= 0 {
		return
	}
	sfs, ok := j.fs.(SpaceFS)
	if !ok {
		return
	}
	// Looks run concurrently (the writer, compaction's removals, the
	// filler): only a look begun after the one recorded may replace it,
	// or a stale "full" could outlive the removal that freed the space.
	j.mu.Lock()
	j.freeAsked++
	ticket := j.freeAsked
	j.mu.Unlock()
	free, total, err := sfs.FreeSpace(j.dir)
	if err != nil {
		free, total = -1, -1
	}
	j.mu.Lock()
	if ticket > j.freeGot {
		j.free, j.total, j.freeAt, j.freeGot = free, total, time.Now(), ticket
	}
	j.mu.Unlock()
}

// roomToZero says whether n more bytes of zeros ahead leave the reserve
// free (zeroFill.room).
func (j *Journal) roomToZero(n int64) bool {
	if j.reserve <= 0 {
		return true
	}
	j.refreshFree()
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.free < 0 || j.free-n-int64(j.queued) >= j.reserveLocked()
}

// reserveLocked is the reserve in force: Options.Reserve, but at most an
// eighth of the file system, so that a small disk is not all reserve.
// Called with mu held.
func (j *Journal) reserveLocked() int64 {
	if j.total > 0 {
		return max(min(j.reserve, j.total/8), MinReserve)
	}
	return j.reserve
}

// lowSpace reports whether an append of n bytes would take the free space
// below what use leaves of the reserve. Space freed by others (an operator deleting files)
// is noticed: a refusal looks again when the last look is older than
// freeRecheck. Called with mu held; it may release it briefly.
func (j *Journal) lowSpace(n, use int) bool {
	low := func() bool {
		keep := j.reserveLocked()
		need := int64(j.queued + n + HeaderSize)
		if use == useHalfReserve {
			keep /= 2
			// What fits in the zeros ahead of the head's data takes no
			// free space: a settlement or a delete still goes there
			// when something else filled the disk.
			if need -= j.fill.tail(j.head, j.head.size); need <= 0 {
				return false
			}
		}
		return j.reserve > 0 && j.free >= 0 && j.free-need < keep
	}
	if !low() {
		return false
	}
	if time.Since(j.freeAt) < freeRecheck {
		return true
	}
	j.mu.Unlock()
	j.refreshFree()
	j.mu.Lock()
	return low()
}

// freeRecheck bounds how long a refusal trusts the last look at the
// free space.
const freeRecheck = 50 * time.Millisecond

// FreeSpace is the disk space left when the journal last looked, and
// whether it knows (it looks only when it has a reserve).
func (j *Journal) FreeSpace() (int64, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.free, j.free >= 0
}

// Reserve is the reserve in force (see Options.Reserve).
func (j *Journal) Reserve() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.reserveLocked()
}

// seal cuts the head back to its data before the next segment starts, so
// that a sealed segment never ends in zeros (recovery accepts a zero tail
// only on the last segment).
func (j *Journal) seal(h *segment) error {
	j.fill.release()
	size, err := h.f.Size()
	if err == nil && size > h.size {
		if err = h.f.Truncate(h.size); err == nil {
			err = h.f.Sync()
		}
	}
	if err != nil {
		j.fill.follow(h, h.size, h.size)
		return fmt.Errorf("journal: seal %s: %w", h.name, err)
	}
	return nil
}

func (j *Journal) finish(group []*request, err error) {
	j.failed.Add(uint64(len(group)))
	for _, r := range group {
		r.err = err
		close(r.done)
	}
}

// ReadAt reads from segment seg at off, as io.ReaderAt does. It is safe
// while the segment is being removed: the file stays open until the read
// ends, and a read after removal fails with ErrNoSegment.
func (j *Journal) ReadAt(p []byte, seg uint64, off int64) (int, error) {
	j.mu.Lock()
	s := j.segs[seg]
	if s == nil {
		j.mu.Unlock()
		return 0, fmt.Errorf("%w: %d", ErrNoSegment, seg)
	}
	s.refs++
	j.mu.Unlock()
	n, err := s.f.ReadAt(p, off)
	j.mu.Lock()
	s.refs--
	if s.removed && s.refs == 0 {
		s.f.Close()
	}
	j.mu.Unlock()
	return n, err
}

// ReadFrame reads and checks the frame at pos; the payload is the caller's.
func (j *Journal) ReadFrame(pos Pos) ([]byte, error) {
	j.mu.Lock()
	s := j.segs[pos.Segment]
	j.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("journal: read frame %v: %w", pos, ErrNoSegment)
	}
	var hdr [HeaderSize]byte
	if _, err := j.ReadAt(hdr[:], pos.Segment, pos.Offset); err != nil {
		return nil, fmt.Errorf("journal: read frame %v: %w", pos, err)
	}
	length := uint32(hdr[0]) | uint32(hdr[1])<<8 | uint32(hdr[2])<<16 | uint32(hdr[3])<<24
	if length == 0 || length > MaxPayload {
		return nil, fmt.Errorf("journal: read frame %v: %w: %d", pos, ErrBadLength, length)
	}
	frame := make([]byte, HeaderSize+int(length))
	if _, err := j.ReadAt(frame, pos.Segment, pos.Offset); err != nil {
		return nil, fmt.Errorf("journal: read frame %v: %w", pos, err)
	}
	payload, _, err := DecodeFrame(frame, s.salt, pos.Offset)
	if err != nil {
		return nil, fmt.Errorf("journal: read frame %v: %w", pos, err)
	}
	return payload, nil
}

// Segments lists the segments, oldest first; the last is the head.
func (j *Journal) Segments() []SegmentInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]SegmentInfo, 0, len(j.segs))
	for _, s := range j.segs {
		out = append(out, SegmentInfo{ID: s.id, Size: s.size, Sealed: s != j.head})
	}
	slices.SortFunc(out, func(a, b SegmentInfo) int { return cmpUint(a.ID, b.ID) })
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RemoveSegment deletes segment id, which must be the oldest one and
// sealed. Only the oldest may go: a record in a later segment can cancel
// one in an earlier segment (a delete after a put), and removing a later
// segment first would bring the cancelled record back on replay.
func (j *Journal) RemoveSegment(id uint64) error {
	j.mfMu.Lock()
	defer j.mfMu.Unlock()
	j.mu.Lock()
	s := j.segs[id]
	switch {
	case s == nil:
		j.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrNoSegment, id)
	case s == j.head:
		j.mu.Unlock()
		return fmt.Errorf("journal: segment %d is the head", id)
	}
	for other := range j.segs {
		if other < id {
			j.mu.Unlock()
			return fmt.Errorf("journal: segment %d is not the oldest (%d is older)", id, other)
		}
	}
	delete(j.segs, id)
	j.mu.Unlock()
	// The manifest drops the segment before its file goes: a crash in
	// between leaves a file older than the first listed, which Open
	// removes; the other order would leave a manifest naming a missing
	// file, which Open refuses.
	if err := j.writeManifest(); err != nil {
		j.mu.Lock()
		j.segs[id] = s
		j.mu.Unlock()
		return fmt.Errorf("journal: remove segment %s: %w", s.name, err)
	}
	j.mu.Lock()
	s.removed = true
	closeNow := s.refs == 0
	j.mu.Unlock()
	if closeNow {
		s.f.Close()
	}
	if err := j.fs.Remove(s.name); err != nil {
		return fmt.Errorf("journal: remove segment: %w", err)
	}
	if err := j.fs.SyncDir(j.dir); err != nil {
		return fmt.Errorf("journal: remove segment %s: %w", s.name, err)
	}
	j.refreshFree()
	return nil
}

// Stats returns the journal's counters.
func (j *Journal) Stats() Stats {
	return Stats{Appends: j.appends.Load(), Groups: j.groups.Load(), Failed: j.failed.Load(),
		WriteTime: time.Duration(j.writeNs.Load()), SyncTime: time.Duration(j.syncNs.Load()), CallbackTime: time.Duration(j.callbackNs.Load())}
}

// Dir is the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Close waits for queued frames, stops the writer and closes the files.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.closed = true
	j.cond.Broadcast()
	j.mu.Unlock()
	<-j.done
	j.fill.close()
	j.mu.Lock()
	if j.idleTimer != nil {
		j.idleTimer.Stop()
		j.idleTimer = nil
	}
	j.mu.Unlock()
	// Everything is durable now: record it as acknowledged, so that
	// damage to the last frames is reported as damage on the next Open.
	var err error
	j.mfMu.Lock()
	if j.stale() && !j.noCloseMark {
		err = j.writeManifest()
	}
	j.ckStopped = true
	j.mfMu.Unlock()
	return errors.Join(err, j.closeFiles())
}

func (j *Journal) closeFiles() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var errs []error
	if j.ackF != nil {
		errs = append(errs, j.ackF.Close())
		j.ackF = nil
	}
	for _, s := range j.segs {
		if s.f != nil {
			errs = append(errs, s.f.Close())
		}
	}
	return errors.Join(errs...)
}
