package store

import (
	"math/rand/v2"
	"testing"
)

// slots against a plain slice, through random pushes, front drops and
// truncations that cross chunk boundaries and empty the deque.
func TestSlotsFollowAPlainSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s slots
	var want []msgEntry
	next := uint64(1)
	check := func(step int, op string) {
		t.Helper()
		if s.len() != len(want) {
			t.Fatalf("step %d (%s): len %d, want %d", step, op, s.len(), len(want))
		}
		for i := range want {
			if *s.at(i) != want[i] {
				t.Fatalf("step %d (%s): slot %d is %+v, want %+v", step, op, i, *s.at(i), want[i])
			}
		}
		// Every chunk but a lone first one is whole; the deque holds no
		// chunk beyond the one its last slot lies in, and none before
		// the one its first lies in.
		if len(s.chunks) > 1 {
			for i, c := range s.chunks {
				if len(c) != chunkLen {
					t.Fatalf("step %d (%s): chunk %d of %d has %d entries", step, op, i, len(s.chunks), len(c))
				}
			}
			if s.head >= chunkLen {
				t.Fatalf("step %d (%s): head %d past the first chunk", step, op, s.head)
			}
			if last := (s.head + s.n - 1) >> chunkShift; s.n > 0 && last < len(s.chunks)-1 {
				t.Fatalf("step %d (%s): %d chunks for slots up to chunk %d", step, op, len(s.chunks), last)
			}
		}
	}
	for step := range 4000 {
		switch r := rng.IntN(10); {
		case r < 6: // a burst of accepts
			for range rng.IntN(3 * chunkLen / 2) {
				e := msgEntry{pos: next, attempts: int32(next)}
				next++
				s.push(e)
				want = append(want, e)
			}
			check(step, "push")
		case r < 9: // removed at the front
			k := rng.IntN(len(want) + 1)
			for i := range k {
				*s.at(i) = msgEntry{}
			}
			s.dropFront(k)
			want = want[k:]
			check(step, "dropFront")
		default: // renumbered
			n := rng.IntN(len(want) + 1)
			s.truncate(n)
			want = want[:n]
			check(step, "truncate")
		}
	}
}

// Why slots exist: a slot filled once never moves while the queue grows,
// and a queue drained from the front gives its chunks back.
func TestSlotsNeverMoveAFullChunk(t *testing.T) {
	var s slots
	for i := range chunkLen {
		s.push(msgEntry{pos: uint64(i + 1)})
	}
	first := s.at(0)
	for i := range 10 * chunkLen {
		s.push(msgEntry{pos: uint64(chunkLen + i + 1)})
	}
	if s.at(0) != first || first.pos != 1 {
		t.Fatal("slot 0 moved while the queue grew past its first chunk")
	}
	if len(s.chunks) != 11 {
		t.Fatalf("%d chunks for %d slots, want 11", len(s.chunks), s.len())
	}
	for i := range 10 * chunkLen {
		*s.at(i) = msgEntry{}
	}
	s.dropFront(10 * chunkLen)
	if len(s.chunks) != 1 || s.len() != chunkLen || s.at(0).pos != uint64(10*chunkLen+1) {
		t.Fatalf("after draining ten chunks' worth: %d chunks, %d slots, slot 0 at %d", len(s.chunks), s.len(), s.at(0).pos)
	}
	if s.spare == nil {
		t.Fatal("no chunk was kept for reuse")
	}
}

// A small queue costs what it holds: its lone chunk grows from a few
// entries, and shrinks again when it empties.
func TestSlotsSmallQueueStaysSmall(t *testing.T) {
	var s slots
	for i := range 5 {
		s.push(msgEntry{pos: uint64(i + 1)})
	}
	if len(s.chunks) != 1 || len(s.chunks[0]) > 16 {
		t.Fatalf("five entries take %d chunks, the first of %d entries", len(s.chunks), len(s.chunks[0]))
	}
	for i := range 3 * chunkLen {
		s.push(msgEntry{pos: uint64(i + 6)})
	}
	s.truncate(10)
	if len(s.chunks) != 1 || len(s.chunks[0]) > 1024 {
		t.Fatalf("ten entries after a truncate take %d chunks, the first of %d entries", len(s.chunks), len(s.chunks[0]))
	}
	for i := range 10 {
		if s.at(i).pos != uint64(i+1) {
			t.Fatalf("slot %d lost its entry: %+v", i, *s.at(i))
		}
	}
}
