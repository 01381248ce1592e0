package store

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func reversed(ids []string) []string {
	out := slices.Clone(ids)
	slices.Reverse(out)
	return out
}

func shuffled(ids []string) []string {
	out := slices.Clone(ids)
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// The index keeps hex IDs decoded and any other ID as a string; both must
// read back exactly, through leases, retries, removals and the slice
// compaction of tidy.
func TestIndexIDsLeasesAndTidy(t *testing.T) {
	for _, memory := range []bool{false, true} {
		st := newState(memory)
		seg := uint64(1) // Memory applies everything at segment 0
		if memory {
			seg = 0
		}
		meta := []recMeta{{bodyOff: 40, size: 100}}
		want := map[string]Message{}
		var ids []string
		for i := range 300 {
			id := fmt.Sprintf("%032x", i)
			switch i % 5 {
			case 1:
				id = fmt.Sprintf("%032X", i+0xabc) // upper case: not the engine's form
			case 2:
				id = fmt.Sprintf("%031x", i) // too short
			case 3:
				id = fmt.Sprint("m-", i)
			}
			ids = append(ids, id)
			m := Message{Queue: "q", ID: id, AcceptedAt: int64(i), VisibleAt: int64(i)}
			st.apply([]Mutation{AcceptMessage{Message: m, Body: []byte("b")}}, seg, int64(i+1)*200, meta)
			m.Size = 1
			want[id] = m
		}
		check := func(when string) {
			t.Helper()
			got := st.messages("q")
			if len(got) != len(want) || st.messageCount() != int64(len(want)) {
				t.Fatalf("%s: %d messages, count %d, want %d", when, len(got), st.messageCount(), len(want))
			}
			for _, m := range got {
				if !reflect.DeepEqual(m, want[m.ID]) {
					t.Fatalf("%s: %+v, want %+v", when, m, want[m.ID])
				}
				if e, ok := st.message("q", m.ID, nil); !ok || !reflect.DeepEqual(st.messageOf("q", m.ID, e), m) {
					t.Fatalf("%s: lookup of %q", when, m.ID)
				}
			}
			// Runs of hinted lookups, in accept order, backwards and
			// shuffled, over present and removed IDs, find the same.
			for _, order := range [][]string{ids, reversed(ids), shuffled(ids)} {
				hint := noHint
				for _, id := range order {
					e, ok := st.message("q", id, &hint)
					m, present := want[id]
					if ok != present || ok && !reflect.DeepEqual(st.messageOf("q", id, e), m) {
						t.Fatalf("%s: hinted lookup of %q: found %v, want %v", when, id, ok, present)
					}
				}
			}
		}
		check("accepted")
		st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "batch-1", IDs: ids[:100]}}, seg, 0, []recMeta{{}})
		st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "batch-2", IDs: ids[50:150]}}, seg, 0, []recMeta{{}})
		for i, id := range ids[:150] {
			m := want[id]
			m.Attempts, m.Lease = 1, "batch-1"
			if i >= 50 {
				m.Attempts, m.Lease = m.Attempts+1, "batch-2"
			}
			if i >= 100 {
				m.Attempts = 1
			}
			want[id] = m
		}
		check("delivered")
		st.apply([]Mutation{RetryMessage{Queue: "q", ID: ids[60], VisibleAt: 999}}, seg, 0, []recMeta{{}})
		m := want[ids[60]]
		m.Lease, m.VisibleAt = "", 999
		want[ids[60]] = m
		check("retried")
		// Remove all but every seventh: enough for tidy to compact the slice.
		var gone []string
		for i, id := range ids {
			if i%7 != 0 {
				gone = append(gone, id)
				delete(want, id)
			}
		}
		st.apply([]Mutation{RemoveMessages{Queue: "q", IDs: gone}}, seg, 0, []recMeta{{}})
		if q := st.queues["q"]; q.dead != 0 || q.msgs.Len() != len(want) {
			t.Fatalf("not tidied: %d dead, %d slots", q.dead, q.msgs.Len())
		}
		check("removed and tidied")
		// Accept over an existing ID replaces it.
		again := Message{Queue: "q", ID: ids[0], AcceptedAt: 7, VisibleAt: 8, Size: 1}
		st.apply([]Mutation{AcceptMessage{Message: again, Body: []byte("c")}}, seg, 99999, meta)
		want[ids[0]] = again
		check("replaced")
		leased := slices.ContainsFunc(st.messages("q"), func(m Message) bool { return m.Lease != "" })
		st.apply([]Mutation{DropQueue{Queue: "q"}}, seg, 0, []recMeta{{}})
		if !leased || len(st.leases.idx) != 0 || len(st.queues) != 0 || len(st.live) != 0 || memory && len(st.bodies) != 0 {
			t.Fatalf("after drop: leased %v, leases %v, queues %d, live %v, bodies %d", leased, st.leases.idx, len(st.queues), st.live, len(st.bodies))
		}
	}
}

// hexIDReference is the plain decoding hexID must agree with: exactly 32
// digits of 0-9a-f.
func hexIDReference(id string) ([16]byte, bool) {
	var k [16]byte
	if len(id) != 32 {
		return k, false
	}
	val := func(c byte) (byte, bool) {
		switch {
		case '0' <= c && c <= '9':
			return c - '0', true
		case 'a' <= c && c <= 'f':
			return c - 'a' + 10, true
		}
		return 0, false
	}
	for i := range k {
		hi, ok1 := val(id[2*i])
		lo, ok2 := val(id[2*i+1])
		if !ok1 || !ok2 {
			return [16]byte{}, false
		}
		k[i] = hi<<4 | lo
	}
	return k, true
}

// Every byte value at every position, and every length around 32.
func TestHexIDMatchesReference(t *testing.T) {
	base := []byte("0123456789abcdef0f1e2d3c4b5a6978")
	check := func(id string) {
		t.Helper()
		k, ok := hexID(id)
		wk, wok := hexIDReference(id)
		if k != wk || ok != wok {
			t.Fatalf("hexID(%q) = %x, %v; want %x, %v", id, k, ok, wk, wok)
		}
	}
	for pos := range base {
		for c := range 256 {
			id := slices.Clone(base)
			id[pos] = byte(c)
			check(string(id))
		}
	}
	for n := range 40 {
		check(string(slices.Repeat([]byte("a"), n)))
	}
	for i := range 1000 {
		check(fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15))
	}
}

func FuzzHexID(f *testing.F) {
	f.Add("0123456789abcdef0f1e2d3c4b5a6978")
	f.Add("0123456789ABCDEF0F1E2D3C4B5A6978")
	f.Fuzz(func(t *testing.T, id string) {
		k, ok := hexID(id)
		wk, wok := hexIDReference(id)
		if k != wk || ok != wok {
			t.Fatalf("hexID(%q) = %x, %v; want %x, %v", id, k, ok, wk, wok)
		}
	})
}

// A batch delivered again (to the same or another lease) keeps exactly one
// lease reference per message, and the table frees an entry with its last.
func TestDeliverSharesOneLeaseEntry(t *testing.T) {
	st := newState(false)
	meta := []recMeta{{bodyOff: 40, size: 100}}
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("%032x", i)
		ids = append(ids, id)
		st.apply([]Mutation{AcceptMessage{Message: Message{Queue: "q", ID: id}, Body: []byte("b")}}, 1, int64(i+1)*200, meta)
	}
	refs := func() map[string]int32 {
		out := map[string]int32{}
		for id, l := range st.leases.idx {
			out[id] = st.leases.refs[l]
		}
		return out
	}
	st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "b1", IDs: append([]string{"missing"}, ids...)}}, 1, 0, nil)
	if got := refs(); !reflect.DeepEqual(got, map[string]int32{"b1": 10}) {
		t.Fatal(got)
	}
	st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "b1", IDs: ids[:4]}}, 1, 0, nil)
	if got := refs(); !reflect.DeepEqual(got, map[string]int32{"b1": 10}) {
		t.Fatal(got)
	}
	st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "b2", IDs: ids[:4]}}, 1, 0, nil)
	if got := refs(); !reflect.DeepEqual(got, map[string]int32{"b1": 6, "b2": 4}) {
		t.Fatal(got)
	}
	st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "b2", IDs: ids[4:]}}, 1, 0, nil)
	if got := refs(); !reflect.DeepEqual(got, map[string]int32{"b2": 10}) {
		t.Fatal(got)
	}
	st.apply([]Mutation{DeliverMessages{Queue: "q", Batch: "", IDs: ids}}, 1, 0, nil)
	if got := refs(); len(got) != 0 || len(st.leases.free) != 2 {
		t.Fatal(got, st.leases.free)
	}
	for _, id := range ids {
		if e, _ := st.message("q", id, nil); e.lease != 0 || e.attempts != 4 && id < ids[4] || e.attempts != 3 && id >= ids[4] {
			t.Fatal(id, *e)
		}
	}
}

// TestIndexPositions drives one queue with mostly first-in-first-out
// traffic and some stragglers, hex and other IDs, and checks every lookup
// against the messages accepted and not removed: tidy drops the removed
// front by moving base, renumbers when holes are the majority, and
// renumbers before positions could overflow.
func TestIndexPositions(t *testing.T) {
	for _, startBase := range []int32{0, maxPosition - 5000} {
		st := newState(false)
		meta := []recMeta{{bodyOff: 40, size: 100}}
		r := rand.New(rand.NewPCG(uint64(startBase), 9))
		live := map[string]bool{}
		var order []string // accept order, removed ones included
		next := 0
		accept := func() {
			id := fmt.Sprintf("%032x", uint64(next)*0x9e3779b97f4a7c15)
			if next%7 == 0 {
				id = fmt.Sprint("name-", next)
			}
			next++
			st.apply([]Mutation{AcceptMessage{Message: Message{Queue: "q", ID: id}}}, 1, int64(next)*200, meta)
			if q := st.queues["q"]; next == 1 {
				// Start the positions where the test wants them.
				q.base = startBase
				q.byHex = map[[16]byte]int32{}
				q.byName, q.names = nil, nil
				k, isHex := hexID(id)
				q.indexKey(id, k, isHex, 0, q.msgs.At(0))
			}
			live[id] = true
			order = append(order, id)
		}
		remove := func(id string) {
			st.apply([]Mutation{RemoveMessages{Queue: "q", IDs: []string{id}}}, 1, 0, []recMeta{{}})
			delete(live, id)
		}
		renumbered := false
		oldest := 0 // order[0] stays behind until step%500 removes it
		for step := range 20000 {
			accept()
			if len(live) > 50 {
				// Mostly the oldest; sometimes one from the middle,
				// sometimes the oldest is left behind for a while.
				var pick string
				if r.IntN(10) == 0 {
					if id := order[len(order)-1-r.IntN(20)]; live[id] {
						pick = id
					}
				} else {
					for oldest < len(order) && !live[order[oldest]] || oldest == 0 {
						oldest++
					}
					if oldest < len(order) {
						pick = order[oldest]
					}
				}
				if pick != "" {
					remove(pick)
				}
				if step%500 == 0 && live[order[0]] {
					remove(order[0])
				}
			}
			q := st.queues["q"]
			if q.base < startBase {
				renumbered = true
			}
			if int(q.base)+q.msgs.Len() >= 1<<31-1 {
				t.Fatalf("positions overflow: base %d, %d slots", q.base, q.msgs.Len())
			}
			if step%997 == 0 || step == 19999 {
				for id := range live {
					if _, ok := st.message("q", id, nil); !ok {
						t.Fatalf("base %d step %d: %q not found", startBase, step, id)
					}
				}
				if st.messageCount() != int64(len(live)) || len(st.messages("q")) != len(live) {
					t.Fatalf("step %d: %d messages, want %d", step, st.messageCount(), len(live))
				}
				if q.msgs.Len() > 2*len(live)+128 {
					t.Fatalf("step %d: %d slots for %d messages", step, q.msgs.Len(), len(live))
				}
			}
		}
		if startBase > 0 && !renumbered {
			t.Fatalf("positions near the limit were not renumbered")
		}
	}
}
