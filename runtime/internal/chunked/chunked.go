// Package chunked is a deque whose entries, once written, never move
// while it grows: the store's index of a queue's messages and the delivery
// engine's message orders keep their entries in one.
//
// # Why chunks
//
// A slice that grows by append copies every entry at each growth, into
// memory the kernel must first map, with the owner's lock held: at a
// backlog of millions that is a pause of hundreds of milliseconds for
// every send (the store's index, 56 bytes an entry: the longest Apply of
// 100 accepts up to 4 million messages was 746 ms as one slice, 21 ms in
// chunks), and in the producer benchmark, whose queue grows by a million
// messages in seconds, runtime.memmove of those copies was 9–20% of the
// host's CPU. A Deque adds chunks of ChunkLen entries as it grows and
// gives whole chunks back as it drains from the front (first in, first
// out, the usual order), keeping one for reuse. A Deque that has never
// held more than ChunkLen entries keeps them in one slice that grows by
// doubling from 16, so that ten thousand small queues cost what they hold.
//
// Entry i lies at chunks[j/ChunkLen][j%ChunkLen], j = head+i: every chunk
// but a lone first one holds ChunkLen entries and a lone one fewer, so the
// same formula holds for both.
package chunked

// Deque is a sequence of entries, entry 0 first. The zero value is empty
// and ready to use.
type Deque[T any] struct {
	chunks [][]T
	head   int // where entry 0 lies in chunks[0]
	n      int
	spare  []T
}

const (
	chunkShift = 12
	// ChunkLen is the entries of one chunk.
	ChunkLen  = 1 << chunkShift
	chunkMask = ChunkLen - 1
)

// Len is the number of entries.
func (d *Deque[T]) Len() int { return d.n }

// At is entry i (0 ≤ i < Len). The pointer stays valid until the entry is
// dropped or the Deque truncated below it.
func (d *Deque[T]) At(i int) *T {
	j := d.head + i
	return &d.chunks[j>>chunkShift][j&chunkMask]
}

// Push adds v as the last entry.
func (d *Deque[T]) Push(v T) {
	j := d.head + d.n
	if c := j >> chunkShift; c >= len(d.chunks) || j&chunkMask >= len(d.chunks[c]) {
		j = d.makeRoom()
	}
	d.chunks[j>>chunkShift][j&chunkMask] = v
	d.n++
}

// makeRoom makes room for one more entry and returns where it lies.
func (d *Deque[T]) makeRoom() int {
	switch {
	case len(d.chunks) == 0:
		d.chunks, d.head = [][]T{make([]T, 16)}, 0
	case len(d.chunks) == 1 && len(d.chunks[0]) < ChunkLen:
		// A lone chunk that is full: when dropped entries at its front
		// are at least half of those in use, the entries move there (no
		// allocation, and in steady first-in-first-out traffic one move
		// per n pushes); otherwise it doubles.
		c := d.chunks[0]
		if d.head > 0 && d.head >= d.n/2 {
			copy(c, c[d.head:d.head+d.n])
			clear(c[d.n : d.head+d.n])
		} else {
			nc := make([]T, min(2*len(c)+16, ChunkLen))
			copy(nc, c[d.head:d.head+d.n])
			d.chunks[0] = nc
		}
		d.head = 0
	default:
		c := d.spare
		d.spare = nil
		if c == nil {
			c = make([]T, ChunkLen)
		}
		d.chunks = append(d.chunks, c)
	}
	return d.head + d.n
}

// DropFront removes the first k entries (k ≤ Len).
func (d *Deque[T]) DropFront(k int) {
	d.clearEntries(0, k)
	d.head += k
	d.n -= k
	for d.head >= ChunkLen && len(d.chunks) > 1 {
		d.release(d.chunks[0])
		d.chunks[0] = nil
		d.chunks = d.chunks[1:]
		d.head -= ChunkLen
	}
	if d.n == 0 && len(d.chunks) == 1 {
		d.head = 0
	}
}

// Truncate keeps the first n entries (n ≤ Len), giving back the chunks no
// entry uses any more; a lone chunk far larger than what it holds is made
// smaller.
func (d *Deque[T]) Truncate(n int) {
	d.clearEntries(n, d.n)
	d.n = n
	if keep := max(1, (d.head+n+chunkMask)>>chunkShift); keep < len(d.chunks) {
		for i := keep; i < len(d.chunks); i++ {
			d.release(d.chunks[i])
			d.chunks[i] = nil
		}
		d.chunks = d.chunks[:keep]
	}
	if len(d.chunks) == 1 && len(d.chunks[0]) > 4*n+1024 {
		nc := make([]T, max(2*n, 16))
		copy(nc, d.chunks[0][d.head:d.head+n])
		d.chunks[0], d.head = nc, 0
	}
}

// clearEntries zeroes entries i to j-1, a chunk's part at a time, so that
// the Deque holds no value it no longer lists.
func (d *Deque[T]) clearEntries(i, j int) {
	for a, b := d.head+i, d.head+j; a < b; {
		c, off := d.chunks[a>>chunkShift], a&chunkMask
		end := min(len(c), off+b-a)
		clear(c[off:end])
		a += end - off
	}
}

// release keeps one freed whole chunk (cleared) for the next that the
// Deque needs.
func (d *Deque[T]) release(c []T) {
	if d.spare == nil && len(c) == ChunkLen {
		clear(c)
		d.spare = c
	}
}
