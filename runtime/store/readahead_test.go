package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// Bodies read through the read-ahead are exactly what was written, in
// order, out of order and across segments; a read never sees bytes written
// after its chunk was filled; a caller's copy is its own; and compaction
// drops the chunks of the segments it removes.
func TestReadAheadServesExactBodies(t *testing.T) {
	ctx := context.Background()
	s, _, err := Open(ctx, t.TempDir(), Options{Logger: benchLog, SegmentSize: 256 << 10, DisableCompaction: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string][]byte{}
	var order []string
	rng := rand.New(rand.NewPCG(1, 2))
	accept := func(batch int) []string {
		var muts []Mutation
		var ids []string
		for i := range 100 {
			id := fmt.Sprintf("%032x", batch*1000+i)
			if i%7 == 3 {
				id = fmt.Sprint("named-", batch, "-", i)
			}
			body := make([]byte, 1+rng.IntN(300))
			for k := range body {
				body[k] = byte(rng.Uint32())
			}
			if i == 50 {
				body = bytes.Repeat([]byte{7}, raMaxBody+1) // read directly
			}
			want[id] = body
			ids = append(ids, id)
			muts = append(muts, AcceptMessage{Message: Message{Queue: "q", ID: id, Size: len(body)}, Body: body})
		}
		if err := s.Apply(ctx, muts...); err != nil {
			t.Fatal(err)
		}
		order = append(order, ids...)
		return ids
	}
	check := func(ids []string) {
		t.Helper()
		for _, id := range ids {
			b, err := Body(ctx, s, "q", id)
			if err != nil || !bytes.Equal(b, want[id]) {
				t.Fatalf("body of %s: %v; got %d bytes, want %d", id, err, len(b), len(want[id]))
			}
			if len(b) > 0 {
				b[0] ^= 0xff // must not show in the next read
			}
		}
	}
	// Each batch read right after it is written: the chunk then ends at
	// the durable end, and the next batch lands just past it.
	for batch := range 40 {
		check(accept(batch))
		check(accept(batch + 1000)[:10])
	}
	check(order)
	check(order)
	shuffled := append([]string(nil), order...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	check(shuffled)
	filled := 0
	for i := range s.ra.chunks {
		if s.ra.chunks[i].n > 0 {
			filled++
		}
	}
	if filled == 0 {
		t.Fatal("read-ahead never filled a chunk")
	}
	if segs := s.j.Segments(); len(segs) < 4 {
		t.Fatalf("%d segments; the test wants several", len(segs))
	}

	// Remove half of the messages, compact and read the rest from where
	// compaction moved them.
	var gone []string
	for i, id := range order {
		if i%2 == 0 {
			gone = append(gone, id)
			delete(want, id)
		}
	}
	if err := s.Apply(ctx, RemoveMessages{Queue: "q", IDs: gone}); err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, id := range order {
		if want[id] != nil {
			live = append(live, id)
		}
	}
	check(live)
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	oldest := s.j.Segments()[0].ID
	for i := range s.ra.chunks {
		if c := &s.ra.chunks[i]; c.n > 0 && c.seg < oldest {
			t.Fatalf("chunk of removed segment %d kept (oldest now %d)", c.seg, oldest)
		}
	}
	s.mu.RLock()
	for seg := range s.ends {
		if seg < oldest {
			t.Errorf("durable end of removed segment %d kept", seg)
		}
	}
	s.mu.RUnlock()
	check(live)
	check(shuffled[:0])
	for _, id := range gone[:10] {
		if _, err := Body(ctx, s, "q", id); err == nil {
			t.Fatalf("removed message %s still has a body", id)
		}
	}
}

// A chunk holds nothing past the durable end of its segment when it was
// filled, and that end is rebuilt on replay.
func TestReadAheadStopsAtTheDurableEnd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for round := range 2 {
		s, _, err := Open(ctx, dir, Options{Logger: benchLog, DisableCompaction: true})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{fmt.Sprint(round, "a"), fmt.Sprint(round, "b"), fmt.Sprint(round, "c")}
		var muts []Mutation
		for _, id := range ids {
			muts = append(muts, AcceptMessage{Message: Message{Queue: "q", ID: id}, Body: []byte("body-" + id)})
		}
		if err := s.Apply(ctx, muts...); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if b, err := Body(ctx, s, "q", id); err != nil || string(b) != "body-"+id {
				t.Fatal(id, string(b), err)
			}
		}
		seg := s.j.Segments()[0].ID
		end := s.durableEnd(seg)
		if size := s.j.Segments()[0].Size; end != size {
			t.Fatalf("durable end %d, segment size %d", end, size)
		}
		for i := range s.ra.chunks {
			if c := &s.ra.chunks[i]; c.n > 0 && c.start+c.n > end {
				t.Fatalf("chunk [%d,%d) past the durable end %d", c.start, c.start+c.n, end)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
