package store

// Read-ahead for message bodies
//
// The delivery engine reads a batch's bodies with one Bodies call, in
// accept order, and the bodies of one Apply lie in one frame, a hundred or
// so bytes apart: a run of small preads at nearly consecutive offsets.
// readAhead serves such a run from memory. A read that starts at most
// raGap bytes past the end of a recent read of the same segment, or inside
// or just past a chunk, is sequential: on a miss it fills a chunk with up
// to raChunk bytes of the segment from its own offset (raFirst for the
// first fill of a run, twice the last one's for the next, so that a short
// run or a false start reads little), and the next bodies of the run are
// copied out of that chunk. Any other read is one pread of
// its body, as without read-ahead, so random access costs no more, and the
// first body of a run is read that way too.
//
// Exactness. A chunk only ever holds bytes below the segment's durable end
// as it was before the chunk was read (Journaled.ends: the end of the last
// frame applied in that segment). The journal never changes those bytes:
// it only cuts back a failed group, which never became durable, and
// removes whole segments, oldest first. So a chunk equals the file for as
// long as its segment exists. Compaction drops a removed segment's chunks
// (drop), and a fill that raced the removal is not kept. Every body served
// is still checked against its CRC, and on any doubt (a failed or short
// fill, a checksum mismatch) the body is read directly, which reports
// exactly what it did before. Bodies are copied out: a caller never shares
// a chunk's memory, and a chunk is refilled only while no reader can reach
// it (busy, under mu).
//
// Memory is bounded: raChunks buffers of raChunk bytes, 1 MiB in all,
// allocated on first use.

import (
	"errors"
	"sync"

	"github.com/takoform/queuehost/runtime/journal"
)

const (
	raChunks  = 8         // chunks, shared by all segments and streams
	raChunk   = 128 << 10 // bytes per chunk
	raFirst   = 16 << 10  // the first fill of a run; each next one doubles, up to raChunk
	raMaxBody = 16 << 10  // larger bodies are read directly
	raGap     = 4 << 10   // how far past a read the next one still counts as sequential
	raStreams = 16        // recent direct reads remembered to detect a run
)

type readAhead struct {
	mu     sync.Mutex
	tick   uint64
	floor  uint64 // segments below it were removed
	chunks [raChunks]raChunkBuf
	recent [raStreams]raRead
	next   int // in recent, round robin
}

type raChunkBuf struct {
	seg   uint64
	start int64 // offset in seg of buf[0]
	n     int64 // valid bytes in buf; 0: empty
	win   int64 // bytes the last fill asked for
	buf   []byte
	used  uint64 // tick of the last use, for LRU
	busy  bool   // being filled; no reader may look at buf
}

type raRead struct {
	seg uint64
	end int64
}

// read returns a copy of the body e locates when read-ahead can serve it;
// ok is false when the caller must read it directly. err is only ever
// journal.ErrNoSegment (the segment went: look the message up again).
func (r *readAhead) read(s *Journaled, e *msgEntry) (b []byte, ok bool, err error) {
	size := int64(e.size)
	if size <= 0 || size > raMaxBody {
		return nil, false, nil
	}
	seg, off := e.seg(), e.off()
	r.mu.Lock()
	r.tick++
	var cont *raChunkBuf // a chunk this read continues
	for i := range r.chunks {
		c := &r.chunks[i]
		if c.busy || c.n == 0 || c.seg != seg || off < c.start {
			continue
		}
		if off+size <= c.start+c.n {
			c.used = r.tick
			b = make([]byte, size)
			copy(b, c.buf[off-c.start:])
			r.mu.Unlock()
			return b, true, nil
		}
		if off <= c.start+c.n+raGap {
			cont = c
		}
	}
	victim := cont
	if victim == nil && r.sequential(seg, off) {
		for i := range r.chunks {
			if c := &r.chunks[i]; !c.busy && (victim == nil || c.used < victim.used) {
				victim = c
			}
		}
	}
	if victim == nil || seg < r.floor {
		r.recent[r.next] = raRead{seg, off + size}
		r.next = (r.next + 1) % raStreams
		r.mu.Unlock()
		return nil, false, nil
	}
	win := int64(raFirst)
	if cont != nil {
		win = min(2*cont.win, raChunk)
	}
	victim.busy, victim.n, victim.win = true, 0, win
	buf := victim.buf
	r.mu.Unlock()

	if buf == nil {
		buf = make([]byte, raChunk)
	}
	want := min(max(win, size), s.durableEnd(seg)-off)
	var n int
	if want >= size {
		n, err = s.j.ReadAt(buf[:want], seg, off)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	victim.busy, victim.buf = false, buf
	if err != nil || int64(n) < want || want < size || seg < r.floor {
		// Not kept: the direct read says what went wrong, if anything.
		if errors.Is(err, journal.ErrNoSegment) {
			return nil, false, journal.ErrNoSegment
		}
		return nil, false, nil
	}
	victim.seg, victim.start, victim.n, victim.used = seg, off, want, r.tick
	b = make([]byte, size)
	copy(b, buf)
	return b, true, nil
}

// sequential reports whether a read at seg/off follows a recent direct
// read closely; called with mu held.
func (r *readAhead) sequential(seg uint64, off int64) bool {
	for _, p := range r.recent {
		if p.seg == seg && p.end != 0 && p.end <= off && off-p.end <= raGap {
			return true
		}
	}
	return false
}

// drop forgets segment seg, which compaction removed, and every older one.
func (r *readAhead) drop(seg uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.floor = max(r.floor, seg+1)
	for i := range r.chunks {
		if c := &r.chunks[i]; !c.busy && c.seg < r.floor {
			c.n = 0
		}
	}
	for i := range r.recent {
		if r.recent[i].seg < r.floor {
			r.recent[i] = raRead{}
		}
	}
}
