package chunked

import (
	"math/rand/v2"
	"testing"
)

// item stands for an entry: a value and a pointer (entries that hold
// pointers are cleared when dropped).
type item struct {
	pos uint64
	p   *int
}

// A Deque against a plain slice, through random pushes, front drops and
// truncations that cross chunk boundaries and empty the deque.
func TestDequeFollowsAPlainSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Deque[item]
	var want []item
	next := uint64(1)
	check := func(step int, op string) {
		t.Helper()
		if s.Len() != len(want) {
			t.Fatalf("step %d (%s): len %d, want %d", step, op, s.Len(), len(want))
		}
		for i := range want {
			if *s.At(i) != want[i] {
				t.Fatalf("step %d (%s): entry %d is %+v, want %+v", step, op, i, *s.At(i), want[i])
			}
		}
		// Nothing outside the entries holds a value (a dropped entry's
		// pointer would keep what it points to alive).
		for c, ch := range s.chunks {
			for k := range ch {
				if j := c*ChunkLen + k; (j < s.head || j >= s.head+s.n) && ch[k] != (item{}) {
					t.Fatalf("step %d (%s): chunk %d position %d, outside the entries, holds %+v", step, op, c, k, ch[k])
				}
			}
		}
		// Every chunk but a lone first one is whole; the deque holds no
		// chunk beyond the one its last entry lies in, and none before
		// the one its first lies in.
		if len(s.chunks) > 1 {
			for i, c := range s.chunks {
				if len(c) != ChunkLen {
					t.Fatalf("step %d (%s): chunk %d of %d has %d entries", step, op, i, len(s.chunks), len(c))
				}
			}
			if s.head >= ChunkLen {
				t.Fatalf("step %d (%s): head %d past the first chunk", step, op, s.head)
			}
			if last := (s.head + s.n - 1) >> chunkShift; s.n > 0 && last < len(s.chunks)-1 {
				t.Fatalf("step %d (%s): %d chunks for entries up to chunk %d", step, op, len(s.chunks), last)
			}
		}
	}
	for step := range 4000 {
		switch r := rng.IntN(10); {
		case r < 6: // a burst of accepts
			for range rng.IntN(3 * ChunkLen / 2) {
				e := item{pos: next, p: new(int)}
				next++
				s.Push(e)
				want = append(want, e)
			}
			check(step, "push")
		case r < 9: // removed at the front
			k := rng.IntN(len(want) + 1)
			s.DropFront(k)
			want = want[k:]
			check(step, "dropFront")
		default: // renumbered
			n := rng.IntN(len(want) + 1)
			s.Truncate(n)
			want = want[:n]
			check(step, "truncate")
		}
	}
}

// Why a Deque: an entry written once never moves while it grows, and a
// Deque drained from the front gives its chunks back.
func TestDequeNeverMovesAFullChunk(t *testing.T) {
	var s Deque[item]
	for i := range ChunkLen {
		s.Push(item{pos: uint64(i + 1)})
	}
	first := s.At(0)
	for i := range 10 * ChunkLen {
		s.Push(item{pos: uint64(ChunkLen + i + 1)})
	}
	if s.At(0) != first || first.pos != 1 {
		t.Fatal("entry 0 moved while the Deque grew past its first chunk")
	}
	if len(s.chunks) != 11 {
		t.Fatalf("%d chunks for %d entries, want 11", len(s.chunks), s.Len())
	}
	s.DropFront(10 * ChunkLen)
	if len(s.chunks) != 1 || s.Len() != ChunkLen || s.At(0).pos != uint64(10*ChunkLen+1) {
		t.Fatalf("after draining ten chunks' worth: %d chunks, %d entries, entry 0 at %d", len(s.chunks), s.Len(), s.At(0).pos)
	}
	if s.spare == nil {
		t.Fatal("no chunk was kept for reuse")
	}
}

// A small Deque costs what it holds: its lone chunk grows from a few
// entries, and shrinks again when it empties.
func TestDequeSmallStaysSmall(t *testing.T) {
	var s Deque[item]
	for i := range 5 {
		s.Push(item{pos: uint64(i + 1)})
	}
	if len(s.chunks) != 1 || len(s.chunks[0]) > 16 {
		t.Fatalf("five entries take %d chunks, the first of %d entries", len(s.chunks), len(s.chunks[0]))
	}
	for i := range 3 * ChunkLen {
		s.Push(item{pos: uint64(i + 6)})
	}
	s.Truncate(10)
	if len(s.chunks) != 1 || len(s.chunks[0]) > 1024 {
		t.Fatalf("ten entries after a truncate take %d chunks, the first of %d entries", len(s.chunks), len(s.chunks[0]))
	}
	for i := range 10 {
		if s.At(i).pos != uint64(i+1) {
			t.Fatalf("entry %d lost its value: %+v", i, *s.At(i))
		}
	}
}
