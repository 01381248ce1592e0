package delivery

import (
	"fmt"
	"testing"
)

// benchQueue is an engine queue holding n messages in its index (no store
// behind them: a page reads the index only).
func benchQueue(b *testing.B, n int) (*harness, *queue) {
	h := newHarness(&testing.T{})
	if err := h.e.AddQueue(h.ctx, QueueConfig{UID: "q", Name: "q", MessageRetentionSeconds: 86400}); err != nil {
		b.Fatal(err)
	}
	q := h.e.queue("q")
	q.mu.Lock()
	ms := make([]*msg, n)
	for i := range ms {
		ms[i] = newMsg(fmt.Sprintf("m%08d", i), int64(1_000_000+i/100), 0, 0, 100, uint64(i+1))
		q.add(ms[i])
		ms[i].inExp = true
	}
	q.expiry.pushSorted(ms)
	q.mu.Unlock()
	return h, q
}

// BenchmarkMessagePage: one page of 100 from the middle of a queue of
// 10 000 and of 1 000 000 messages; the two cost about the same (a binary
// search and a walk of the page), not a scan of the queue.
func BenchmarkMessagePage(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			h, _ := benchQueue(b, n)
			mid := Cursor{AcceptedAt: int64(1_000_000 + n/200), Seq: uint64(n / 2)}
			b.ResetTimer()
			for b.Loop() {
				page, _, _, err := h.e.MessagePage(h.ctx, "q", mid, 100)
				if err != nil || len(page) != 100 {
					b.Fatalf("%d %v", len(page), err)
				}
			}
		})
	}
}

// BenchmarkInspect: the counts by state of a queue of 1 000 and of
// 1 000 000 messages (a tenth of them delayed) cost about the same: they
// are kept as messages change, not counted by a walk (walk= is that walk,
// for comparison).
func BenchmarkInspect(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		h := newHarness(&testing.T{})
		if err := h.e.AddQueue(h.ctx, QueueConfig{UID: "q", Name: "q", MessageRetentionSeconds: 86400}); err != nil {
			b.Fatal(err)
		}
		q := h.e.queue("q")
		now := h.e.nowMs()
		q.mu.Lock()
		ms := make([]*msg, 0, 1000)
		for i := range n {
			visible := now
			if i%10 == 0 {
				visible = now + 60_000 + int64(i)
			}
			ms = append(ms, newMsg(fmt.Sprintf("m%08d", i), now, visible, 0, 100, uint64(i+1)))
			if len(ms) == cap(ms) || i == n-1 {
				q.insertSent(ms, now)
				ms = ms[:0]
			}
		}
		q.mu.Unlock()
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			for b.Loop() {
				in, err := h.e.Inspect(h.ctx, "q")
				if err != nil || in.ByState[MsgDelayed] != (n+9)/10 {
					b.Fatalf("%v %v", in.ByState, err)
				}
			}
		})
		b.Run(fmt.Sprintf("walk/messages=%d", n), func(b *testing.B) {
			for b.Loop() {
				q.mu.Lock()
				by := walkByState(q, now)
				q.mu.Unlock()
				if by[MsgDelayed] != (n+9)/10 {
					b.Fatal(by)
				}
			}
		})
	}
}
