package host

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/schemas"
)

func counters(uid string, backlog int, accepted uint64) delivery.QueueCounters {
	return delivery.QueueCounters{UID: uid, Backlog: backlog, Accepted: accepted}
}

// TestHistorySteps: an idle stretch stores no point, a change stores the
// last unchanged sample and the new one, so that the line steps where the
// figures changed; the answer ends at the latest sample.
func TestHistorySteps(t *testing.T) {
	hs := newHistory()
	t0 := time.Unix(1_000_000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * HistoryInterval) }
	for i := range 5 {
		hs.sample(at(i), []delivery.QueueCounters{counters("q", 0, 0)})
	}
	if n := len(hs.queues["q"].points); n != 0 {
		t.Fatalf("an idle queue stored %d points", n)
	}
	ps := hs.points("q", at(4))
	if len(ps) != 2 || ps[0].TimeMillis != t0.UnixMilli() || ps[1].TimeMillis != at(4).UnixMilli() || ps[1].Messages != 0 {
		t.Fatalf("idle queue: %+v, want a flat line from the first sample to the last", ps)
	}
	hs.sample(at(5), []delivery.QueueCounters{counters("q", 7, 7)})
	hs.sample(at(6), []delivery.QueueCounters{counters("q", 7, 7)})
	hs.sample(at(7), []delivery.QueueCounters{counters("q", 7, 7)})
	ps = hs.points("q", at(7))
	got := ""
	for _, p := range ps {
		got += fmt.Sprintf("%d:%d/%d ", (p.TimeMillis-t0.UnixMilli())/HistoryInterval.Milliseconds(), p.Messages, p.Accepted)
	}
	if want := "0:0/0 4:0/0 5:7/7 7:7/7 "; got != want {
		t.Fatalf("points %q, want %q", got, want)
	}
	// An hour later only the window is answered.
	hs.sample(at(400), []delivery.QueueCounters{counters("q", 1, 9)})
	for _, p := range hs.points("q", at(400)) {
		if p.TimeMillis < at(400).Add(-HistoryWindow).UnixMilli() {
			t.Fatalf("point %d older than the window", p.TimeMillis)
		}
	}
	// A queue the engine no longer holds is forgotten.
	hs.sample(at(401), nil)
	if hs.points("q", at(401)) != nil || len(hs.queues) != 0 {
		t.Fatal("a removed queue's history is kept")
	}
}

// TestHistoryBounds: a queue keeps at most an hour of points, and all
// queues together at most historyBudget.
func TestHistoryBounds(t *testing.T) {
	hs := newHistory()
	t0 := time.Unix(1_000_000, 0)
	const queues = 1000
	cs := make([]delivery.QueueCounters, queues)
	for i := range 2 * int(HistoryWindow/HistoryInterval) {
		for j := range cs {
			cs[j] = counters(fmt.Sprintf("q%04d", j), i, uint64(i))
		}
		hs.sample(t0.Add(time.Duration(i)*HistoryInterval), cs)
	}
	total := 0
	for _, q := range hs.queues {
		total += len(q.points)
		if len(q.points) > int(HistoryWindow/HistoryInterval) {
			t.Fatalf("a queue keeps %d points", len(q.points))
		}
	}
	if total > historyBudget {
		t.Fatalf("%d points kept, budget %d", total, historyBudget)
	}
	if want := historyBudget / queues; total != want*queues {
		t.Fatalf("%d points kept, want %d per queue", total, want)
	}
}

// TestHistoryOfIdleQueuesIsSmall measures what 10 000 queues that never
// change cost after an hour of sampling: their last sample each, no
// points.
func TestHistoryOfIdleQueuesIsSmall(t *testing.T) {
	const queues = 10000
	cs := make([]delivery.QueueCounters, queues)
	for j := range cs {
		cs[j] = counters(fmt.Sprintf("0123456789abcdef0123456789ab%04d", j), 0, 0)
	}
	var with, without runtime.MemStats
	hs := newHistory()
	t0 := time.Unix(1_000_000, 0)
	start := time.Now()
	for i := range int(HistoryWindow / HistoryInterval) {
		hs.sample(t0.Add(time.Duration(i)*HistoryInterval), cs)
	}
	took := time.Since(start) / time.Duration(HistoryWindow/HistoryInterval)
	runtime.GC()
	runtime.ReadMemStats(&with)
	hs.mu.Lock() // keeps hs alive up to here
	hs.mu.Unlock()
	hs = nil
	runtime.GC()
	runtime.ReadMemStats(&without)
	used := int64(with.HeapAlloc) - int64(without.HeapAlloc)
	t.Logf("10 000 idle queues: %d bytes kept (%d per queue), %v per sample of all of them", used, used/queues, took)
	if used > 4<<20 {
		t.Fatalf("10 000 idle queues keep %d bytes of history, want under 4 MiB", used)
	}
	runtime.KeepAlive(cs)
}

// TestQueueHistoryRoute reads a queue's history through the Host API: the
// host's own samples of its engine, oldest first; a worker has none.
func TestQueueHistoryRoute(t *testing.T) {
	h := startHost(t, t.TempDir())
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("jobs", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"queue"}})
	now := time.Now()
	h.history.sample(now.Add(-20*time.Second), h.eng.Counters())
	h.history.sample(now.Add(-10*time.Second), h.eng.Counters())
	st, body, raw := c.do("GET", "/v2/spaces/demo/resources/"+q+"/history", nil)
	if st != 200 {
		t.Fatalf("history: %d %s", st, raw)
	}
	ps, _ := body["points"].([]any)
	if body["queueUid"] != q || body["intervalSeconds"] != 10.0 || len(ps) < 2 {
		t.Fatalf("history: %s", raw)
	}
	if p := ps[0].(map[string]any); p["messages"] != 0.0 || p["timeMillis"].(float64) > float64(now.UnixMilli()) {
		t.Fatalf("first point %v", p)
	}
	if st, body, raw := c.do("GET", "/v2/spaces/demo/resources/"+w+"/history", nil); st != 404 || body["code"] != "not_a_queue" {
		t.Fatalf("a worker's history: %d %s", st, raw)
	}
	if st, _, raw := newClient(t, h.URL(), "").do("GET", "/v2/spaces/demo/resources/"+q+"/history", nil); st != 401 {
		t.Fatalf("without a token: %d %s", st, raw)
	}
}
