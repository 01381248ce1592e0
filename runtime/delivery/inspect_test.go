package delivery

import (
	"slices"
	"testing"
)

// TestInspectAndMessagePages: counts by state, and pages that walk every
// message once in accept order, including one that arrived out of order
// (the expiry index's heap).
func TestInspectAndMessagePages(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	sent := h.send("q", "m0", "m1", "m2")
	r.next(t) // m0 in flight
	delayed := h.sendDelay("q", "later", 60)
	h.quiesce()
	in, err := h.e.Inspect(h.ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{MsgInFlight: 1, MsgAvailable: 2, MsgDelayed: 1, MsgRetryWaiting: 0, MsgRemoving: 0}
	for k, v := range want {
		if in.ByState[k] != v {
			t.Errorf("%s = %d, want %d (%v)", k, in.ByState[k], v, in.ByState)
		}
	}
	if in.Messages != 4 || in.Bytes != int64(len("m0m1m2later")) || in.Batches != 1 {
		t.Errorf("inspection %+v", in)
	}
	// The counts since start come with the inspection (the console's
	// rates): 4 accepted, 1 delivered, none acknowledged yet.
	// The batch in flight is listed: its consumer, size and state.
	if len(in.InFlight) != 1 || in.InFlight[0].ConsumerUID != "c" || in.InFlight[0].Messages != 1 || in.InFlight[0].State != "running" || in.InFlight[0].Formed == 0 || in.InFlight[0].ID == "" {
		t.Errorf("batches in flight %+v", in.InFlight)
	}
	if c := in.SinceStart; c == nil || c.Accepted != 4 || c.Delivered != 1 || c.Acknowledged != 0 || c.Retried != 0 {
		t.Errorf("since start %+v", in.SinceStart)
	}

	// An out-of-order arrival: a message accepted earlier than the run's
	// back goes to the heap; pages still list accept order.
	q := h.e.queue("q")
	q.mu.Lock()
	odd := newMsg("odd", q.expiry.peek().acceptedAt-1000, 0, 0, 3, 0)
	q.add(odd)
	odd.inExp = true
	q.expiry.heapPush(entry{odd, odd.expGen})
	q.expiry.live++
	odd.where = inAvail
	q.avail.push(odd)
	q.mu.Unlock()

	var got []string
	var cur Cursor
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pages do not end")
		}
		page, next, more, err := h.e.MessagePage(h.ctx, "q", cur, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			got = append(got, m.ID)
		}
		if !more {
			break
		}
		cur = next
	}
	wantIDs := append([]string{"odd"}, append(slices.Clone(sent), delayed)...)
	if !slices.Equal(got, wantIDs) {
		t.Fatalf("pages listed %v, want %v", got, wantIDs)
	}
	page, _, _, _ := h.e.MessagePage(h.ctx, "q", Cursor{}, 10)
	states := map[string]string{}
	for _, m := range page {
		states[m.ID] = m.State
	}
	if states[sent[0]] != MsgInFlight || states[sent[1]] != MsgAvailable || states[delayed] != MsgDelayed {
		t.Errorf("states %v", states)
	}
	release <- nil
	h.waitFinished(1)
}
