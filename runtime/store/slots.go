package store

// slots is a queue's index entries in order, slot 0 first: a deque of
// chunks of chunkLen entries.
//
// Why chunks: one slice that doubles copies every entry at each doubling,
// into memory the kernel must first map, while the store's lock is held.
// At a backlog of millions that is a pause of hundreds of milliseconds for
// every send, and in the producer benchmark, whose queue grows by a
// million messages in seconds, the copy alone was 9–20% of the host's CPU.
// A chunk, once filled, never moves: a growing queue adds chunks, and a
// queue drained from the front (first in, first out, the usual order)
// gives whole chunks back. A queue that has never held more than chunkLen
// entries keeps them in one slice that grows by doubling from a few
// entries, so that ten thousand small queues cost what their messages
// need and no more.
//
// Slot i lies at chunks[j/chunkLen][j%chunkLen], j = head+i: every chunk
// but a lone first one holds chunkLen entries, and a lone one fewer, so
// the same formula holds for both.
type slots struct {
	chunks [][]msgEntry
	head   int // where slot 0 lies in chunks[0]
	n      int // slots in use, removed ones included
	spare  []msgEntry
}

const (
	chunkShift = 12
	chunkLen   = 1 << chunkShift // 4096 entries, 224 KiB
	chunkMask  = chunkLen - 1
)

func (s *slots) len() int { return s.n }

// at is slot i (0 ≤ i < len).
func (s *slots) at(i int) *msgEntry {
	j := s.head + i
	return &s.chunks[j>>chunkShift][j&chunkMask]
}

// push adds e as the last slot.
func (s *slots) push(e msgEntry) {
	j := s.head + s.n
	if c := j >> chunkShift; c >= len(s.chunks) || j&chunkMask >= len(s.chunks[c]) {
		j = s.makeRoom()
	}
	s.chunks[j>>chunkShift][j&chunkMask] = e
	s.n++
}

// makeRoom makes room for one more slot and returns where it lies.
func (s *slots) makeRoom() int {
	switch {
	case len(s.chunks) == 0:
		s.chunks, s.head = [][]msgEntry{make([]msgEntry, 16)}, 0
	case len(s.chunks) == 1 && len(s.chunks[0]) < chunkLen:
		// A lone chunk that is full: when removed slots at its front are
		// at least half of those in use, the slots move there (no
		// allocation, and in steady first-in-first-out traffic one move
		// per n accepts); otherwise it doubles.
		c := s.chunks[0]
		if s.head > 0 && s.head >= s.n/2 {
			copy(c, c[s.head:s.head+s.n])
			clear(c[s.n : s.head+s.n])
		} else {
			nc := make([]msgEntry, min(2*len(c)+16, chunkLen))
			copy(nc, c[s.head:s.head+s.n])
			s.chunks[0] = nc
		}
		s.head = 0
	default:
		c := s.spare
		s.spare = nil
		if c == nil {
			c = make([]msgEntry, chunkLen)
		}
		s.chunks = append(s.chunks, c)
	}
	return s.head + s.n
}

// dropFront removes the first k slots, which the caller has cleared.
func (s *slots) dropFront(k int) {
	s.head += k
	s.n -= k
	for s.head >= chunkLen && len(s.chunks) > 1 {
		s.release(s.chunks[0])
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.head -= chunkLen
	}
}

// truncate keeps the first n slots (n ≤ len), clearing the others and
// giving back the chunks no slot uses any more; a lone chunk far larger
// than what it holds is made smaller.
func (s *slots) truncate(n int) {
	for i := n; i < s.n; i++ {
		*s.at(i) = msgEntry{}
	}
	s.n = n
	if keep := max(1, (s.head+n+chunkMask)>>chunkShift); keep < len(s.chunks) {
		for i := keep; i < len(s.chunks); i++ {
			s.release(s.chunks[i])
			s.chunks[i] = nil
		}
		s.chunks = s.chunks[:keep]
	}
	if len(s.chunks) == 1 && len(s.chunks[0]) > 4*n+1024 {
		nc := make([]msgEntry, max(2*n, 16))
		copy(nc, s.chunks[0][s.head:s.head+n])
		s.chunks[0], s.head = nc, 0
	}
}

// release keeps one freed full chunk for the next that a queue needs.
func (s *slots) release(c []msgEntry) {
	if s.spare == nil && len(c) == chunkLen {
		clear(c)
		s.spare = c
	}
}
