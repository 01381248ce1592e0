package journal

import (
	"errors"
	"sync"
)

// DefaultZeroAhead is how far Options.ZeroAhead keeps the head segment
// zeroed ahead of its data when the caller asks for the default.
const DefaultZeroAhead = 4 << 20

var errZeroReserve = errors.New("the free disk space is at the reserve")

// zeroChunk is what the filler writes (and syncs) at a time.
const zeroChunk = 1 << 20

// zeroFill keeps the head segment written with zeros some way past its
// data, so that a group commit writes into space the file already has and
// its fdatasync does not also commit a new file size: on the disks measured
// here such a sync is 1.4–1.8 times as fast (the bench's raw disk section
// measures it). The zeros are written and synced by a goroutine of its own,
// never where the writer writes or is about to.
//
// A zero tail is harmless on disk: a zero length never parses as a frame,
// so recovery reads it as the end of the data (see recoverSegment), and a
// segment is cut back to its data when it is sealed, so only the head ever
// has one.
type zeroFill struct {
	ahead int64 // 0: off
	limit int64 // the segment size: nothing is zeroed past it

	mu      sync.Mutex
	cond    *sync.Cond
	seg     *segment // the head being filled; nil: none (sealing, failed, off)
	failed  *segment // zeroing failed here: not tried again in this segment
	end     int64    // zeros or data are written and synced up to here
	data    int64    // the end of the head's durable data
	writing int64    // the end of the write in flight, 0 when none
	busy    bool     // a chunk is being zeroed at [end, end+zeroChunk)
	stop    bool
	done    chan struct{}
	zeros   []byte
	log     func(msg string, args ...any)
	// room, when set, says whether n more bytes of zeros leave the disk
	// reserve free (see Options.Reserve): zeros ahead are a speed-up and
	// must never take the space that settlements, compaction and the
	// manifest need to get a full disk going again.
	room func(n int64) bool
}

func (z *zeroFill) start(log func(msg string, args ...any)) {
	z.cond = sync.NewCond(&z.mu)
	z.done = make(chan struct{})
	z.log = log
	if z.ahead <= 0 {
		close(z.done)
		return
	}
	z.zeros = make([]byte, zeroChunk)
	go z.run()
}

// follow makes s, whose data ends at data and whose file is written (zeros
// or data) up to end, the segment to fill. It waits for a chunk in flight.
func (z *zeroFill) follow(s *segment, data, end int64) {
	z.mu.Lock()
	for z.busy {
		z.cond.Wait()
	}
	z.seg, z.data, z.end, z.writing = s, data, max(end, data), 0
	if s == z.failed {
		z.seg = nil
	}
	z.cond.Broadcast()
	z.mu.Unlock()
}

// release stops filling (before the head is sealed or cut back) and waits
// for a chunk in flight; follow resumes.
func (z *zeroFill) release() {
	z.mu.Lock()
	for z.busy {
		z.cond.Wait()
	}
	z.seg = nil
	z.mu.Unlock()
}

// beforeWrite is called by the writer before it writes [off, end) of s: it
// waits while a chunk in flight would overlap, and keeps the filler away
// from the range until afterWrite.
func (z *zeroFill) beforeWrite(s *segment, end int64) {
	z.mu.Lock()
	for z.busy && z.seg == s && end > z.end {
		z.cond.Wait()
	}
	z.writing = end
	z.mu.Unlock()
}

// afterWrite records that s's durable data ends at data (or, when ok is
// false, that the write failed and nothing past the old end was kept).
func (z *zeroFill) afterWrite(s *segment, data int64, ok bool) {
	z.mu.Lock()
	z.writing = 0
	if z.seg == s && ok {
		z.data = data
		z.end = max(z.end, data)
		if z.end-z.data < z.ahead/2 {
			z.cond.Broadcast()
		}
	}
	z.mu.Unlock()
}

// tail is how far s's file is written (with zeros) past data, when s is
// the segment being filled. It may be called with the journal's mu held.
func (z *zeroFill) tail(s *segment, data int64) int64 {
	if z.ahead <= 0 {
		return 0
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.seg != s {
		return 0
	}
	return max(z.end-data, 0)
}

func (z *zeroFill) close() {
	z.mu.Lock()
	z.stop = true
	z.cond.Broadcast()
	z.mu.Unlock()
	<-z.done
}

func (z *zeroFill) run() {
	defer close(z.done)
	z.mu.Lock()
	defer z.mu.Unlock()
	for {
		for !z.stop && !z.due() {
			z.cond.Wait()
		}
		if z.stop {
			return
		}
		s := z.seg
		off := max(z.end, z.writing)
		n := min(int64(zeroChunk), z.limit-off)
		z.busy = true
		z.mu.Unlock()
		var err error
		if z.room != nil && !z.room(n) {
			err = errZeroReserve
		} else if _, err = s.f.WriteAt(z.zeros[:n], off); err == nil {
			err = s.f.Sync()
		}
		z.mu.Lock()
		z.busy = false
		if err != nil {
			// Leave this segment alone (a full disk, say): writes then
			// grow the file as they would without zeroing ahead.
			z.log("journal: zeroing ahead of the head segment failed; writes grow the file until the next segment", "file", s.name, "err", err)
			z.failed = s
			if z.seg == s {
				z.seg = nil
			}
		} else if z.seg == s {
			z.end = max(z.end, off+n)
		}
		z.cond.Broadcast()
	}
}

// due says whether the filler has work: a segment to fill whose zeros do
// not reach ahead past its data. z.mu held.
func (z *zeroFill) due() bool {
	if z.seg == nil || z.busy {
		return false
	}
	off := max(z.end, z.writing)
	return off < z.limit && off-z.data < z.ahead
}
