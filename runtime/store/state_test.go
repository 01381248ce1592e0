package store

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

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
				if e, ok := st.message("q", m.ID); !ok || st.messageOf("q", m.ID, e) != m {
					t.Fatalf("%s: lookup of %q", when, m.ID)
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
		if q := st.queues["q"]; q.dead != 0 || len(q.msgs) != len(want) {
			t.Fatalf("not tidied: %d dead, %d slots", q.dead, len(q.msgs))
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
