package delivery

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/takoform/queuehost/runtime/internal/chunked"
)

// TestMsgOrderMatchesSort drives msgOrder with random pushes (mostly in
// order, some far out of order), sorted groups, removals from anywhere and
// pops, and checks every peek, pop and Len against a plain sorted list.
func TestMsgOrderMatchesSort(t *testing.T) {
	// The visibility order, the expiry order, and a serialized queue's
	// available order (accept sequence only; a retry goes back in front).
	for _, mode := range []string{"visible", "expiry", "seq"} {
		byExpiry := mode == "expiry"
		seeds := uint64(16)
		if mode == "seq" {
			seeds = 2 // fewer: the oracle's linear scans cost most in this mode
		}
		for seed := range seeds {
			r := rand.New(rand.NewPCG(seed, 7))
			o := &msgOrder{byExpiry: byExpiry, bySeq: mode == "seq"}
			var live []*msg
			in := map[*msg]bool{}
			var seq uint64
			clock := int64(1000)
			newM := func() *msg {
				seq++
				clock += int64(r.IntN(3))
				at := clock
				switch r.IntN(20) {
				case 0: // a send whose write finished late
					at -= int64(r.IntN(50))
				case 1: // a clock step back, far behind the run
					at -= 100000
				}
				return &msg{acceptedAt: at, visibleAt: at + int64(r.IntN(2)), seq: seq}
			}
			gen := func(m *msg) *uint32 {
				if byExpiry {
					return &m.expGen
				}
				return &m.visGen
			}
			// check compares got with the oracle's minimum and Len with
			// the oracle's size plus popped (1 right after a pop, which
			// the oracle has not seen yet).
			check := func(step int, got *msg, popped int) {
				t.Helper()
				var want *msg
				if len(live) > 0 {
					want = slices.MinFunc(live, func(a, b *msg) int {
						if o.less(a, b) {
							return -1
						}
						if o.less(b, a) {
							return 1
						}
						return 0
					})
				}
				if got != want {
					t.Fatalf("%s order, seed %d step %d: got %+v, want %+v", mode, seed, step, got, want)
				}
				if o.Len()+popped != len(live) {
					t.Fatalf("%s order, seed %d step %d: Len %d, want %d", mode, seed, step, o.Len()+popped, len(live))
				}
			}
			for step := range 8000 {
				switch op := r.IntN(10); {
				case op < 4:
					m := newM()
					o.push(m)
					live, in[m] = append(live, m), true
				case op < 5:
					// One send: same accept time, increasing seq.
					base := newM()
					group := []*msg{base}
					for range r.IntN(30) {
						seq++
						group = append(group, &msg{acceptedAt: base.acceptedAt, visibleAt: base.visibleAt, seq: seq})
					}
					o.pushSorted(group)
					for _, m := range group {
						live, in[m] = append(live, m), true
					}
				case op < 7 && len(live) > 0:
					// Removed from anywhere (acknowledged, expired).
					i := r.IntN(len(live))
					m := live[i]
					live = slices.Delete(live, i, i+1)
					delete(in, m)
					*gen(m)++
					o.removed()
				case op < 9:
					m := o.pop()
					if m != nil {
						check(step, m, 1)
					} else {
						check(step, m, 0)
					}
					if m != nil {
						i := slices.Index(live, m)
						live = slices.Delete(live, i, i+1)
						delete(in, m)
						if r.IntN(3) == 0 {
							// Back in later (a retry), same generation.
							m.visibleAt += 10
							o.push(m)
							live, in[m] = append(live, m), true
						}
					}
				default:
					check(step, o.peek(), 0)
				}
			}
			for len(live) > 0 {
				m := o.pop()
				check(-1, m, 1)
				i := slices.Index(live, m)
				live = slices.Delete(live, i, i+1)
			}
			if m := o.pop(); m != nil || o.Len() != 0 {
				t.Fatalf("%s order, seed %d: not empty at the end: %+v, Len %d", mode, seed, m, o.Len())
			}
		}
	}
}

// TestMsgOrderCompacts: removing most messages does not keep their
// entries: memory stays proportional to what is live.
func TestMsgOrderCompacts(t *testing.T) {
	o := &msgOrder{}
	var ms []*msg
	for i := range 100000 {
		m := &msg{visibleAt: int64(i), acceptedAt: int64(i), seq: uint64(i)}
		ms = append(ms, m)
		o.push(m)
	}
	// Remove all but the first: the front stays, so nothing is popped
	// lazily; only compaction can free the entries.
	for _, m := range ms[1:] {
		m.visGen++
		o.removed()
	}
	if n := o.run.Len() + len(o.heap); n > 2*o.Len()+1024+1 {
		t.Fatalf("%d entries held for %d live messages", n, o.Len())
	}
	if o.pop() != ms[0] || o.pop() != nil {
		t.Fatal("wrong messages after compaction")
	}
}

// A run that builds up a backlog never moves the entries it holds (a
// slice that grew by append copied each about four times over, with the
// engine's lock held), and gives its chunks back as it drains.
func TestOrderRunNeverMovesItsEntries(t *testing.T) {
	var o msgOrder
	const n = 10 * chunked.ChunkLen
	var first *entry
	for i := range n {
		o.push(newMsg(fmt.Sprint(i), int64(i), int64(i), 0, 1, uint64(i)))
		if i == chunked.ChunkLen-1 { // the first chunk is whole
			first = o.run.At(0)
		}
	}
	if o.Len() != n || len(o.heap) != 0 || o.run.Len() != n {
		t.Fatalf("%d live, %d in the run, %d in the heap, want %d in the run", o.Len(), o.run.Len(), len(o.heap), n)
	}
	if o.run.At(0) != first {
		t.Fatal("the run's first entry moved while the backlog grew")
	}
	for i := range n {
		if m := o.pop(); m == nil || m.seq != uint64(i) {
			t.Fatalf("pop %d: %v", i, m)
		}
	}
	if o.run.Len() != 0 || o.Len() != 0 {
		t.Fatalf("after draining: %d in the run, %d live", o.run.Len(), o.Len())
	}
}
