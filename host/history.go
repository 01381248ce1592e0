package host

import (
	"context"
	"sync"
	"time"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/startstop"
)

// The queue history (GET …/history, console/README.md): every
// HistoryInterval the host reads each queue's counters from the engine
// (Engine.Counters: O(1) per queue, no walk of its messages, the figures
// /metrics exports) and keeps the last HistoryWindow of them, so that the
// console's backlog charts start with the last hour instead of empty.
//
// Bounds. A queue whose figures do not change stores no point: it keeps
// only its last sample (about 160 bytes with its map entry, measured by
// TestHistoryOfIdleQueuesIsSmall: 1.5 MB and ~7 ms a sample for 10 000
// queues), and the route
// answers a flat line from when sampling began. A queue that changes keeps
// at most HistoryWindow/HistoryInterval points (360, 64 bytes each); all
// queues together keep at most historyBudget points (about 13 MB), each
// queue's share shrinking (to no fewer than historyMinPoints) when many
// change at once. Like the counters, the history starts again empty at a
// restart: an operator's view, not a record.
const (
	HistoryInterval  = controller.HistoryInterval
	HistoryWindow    = time.Hour
	historyBudget    = 200_000
	historyMinPoints = 30
)

// historyFigures are the sampled figures of one queue: its backlog and its
// cumulative counts since the engine started.
type historyFigures struct {
	messages, bytes, inFlightBatches                         int64
	accepted, acknowledged, retried, deadLettered, delivered uint64
}

type historyPoint struct {
	t int64 // Unix milliseconds
	historyFigures
}

type queueHistory struct {
	first int64 // when sampling of the queue began (ms)
	last  historyPoint
	// points holds the changes: each sample that differs from the one
	// before it, preceded by the last unchanged sample, so that a line
	// drawn through the points steps where the figures changed rather than
	// ramping across an idle stretch. Oldest first.
	points []historyPoint
}

// history keeps the bounded time series of every queue of this host's
// engine.
type history struct {
	mu     sync.Mutex
	queues map[string]*queueHistory
}

func newHistory() *history { return &history{queues: map[string]*queueHistory{}} }

func figuresOf(c *delivery.QueueCounters) historyFigures {
	return historyFigures{messages: int64(c.Backlog), bytes: c.BacklogBytes, inFlightBatches: int64(c.InFlightBatches),
		accepted: c.Accepted, acknowledged: c.Acknowledged, retried: c.Retried, deadLettered: c.DeadLettered, delivered: c.Delivered}
}

// sample records one reading of every queue at now; a queue the engine no
// longer holds is forgotten.
func (hs *history) sample(now time.Time, cs []delivery.QueueCounters) {
	t := now.UnixMilli()
	cut := now.Add(-HistoryWindow).UnixMilli()
	hs.mu.Lock()
	defer hs.mu.Unlock()
	seen := make(map[string]struct{}, len(cs))
	changing := 0
	for i := range cs {
		c := &cs[i]
		seen[c.UID] = struct{}{}
		f := figuresOf(c)
		q := hs.queues[c.UID]
		if q == nil {
			hs.queues[c.UID] = &queueHistory{first: t, last: historyPoint{t, f}}
			continue
		}
		if f != q.last.historyFigures {
			if len(q.points) == 0 && q.first < q.last.t {
				q.points = append(q.points, historyPoint{q.first, q.last.historyFigures})
			}
			if n := len(q.points); n == 0 || q.points[n-1].t < q.last.t {
				q.points = append(q.points, q.last)
			}
			q.points = append(q.points, historyPoint{t, f})
		}
		q.last = historyPoint{t, f}
		q.points = trimBefore(q.points, cut)
		if len(q.points) > 0 {
			changing++
		}
	}
	for uid := range hs.queues {
		if _, ok := seen[uid]; !ok {
			delete(hs.queues, uid)
		}
	}
	// Each changing queue's share of the budget.
	keep := int(HistoryWindow / HistoryInterval)
	if changing > 0 {
		keep = max(historyMinPoints, min(keep, historyBudget/changing))
	}
	for _, q := range hs.queues {
		if n := len(q.points); n > keep {
			q.points = append(q.points[:0], q.points[n-keep:]...)
		}
		if len(q.points) == 0 && cap(q.points) > 0 {
			q.points = nil // an idle queue keeps no array
		}
	}
}

func trimBefore(ps []historyPoint, cut int64) []historyPoint {
	i := 0
	for i < len(ps) && ps[i].t < cut {
		i++
	}
	if i == 0 {
		return ps
	}
	return append(ps[:0], ps[i:]...)
}

// points answers the queue's series over the last HistoryWindow before
// now, oldest first (nil when the queue was never sampled).
func (hs *history) points(uid string, now time.Time) []controller.HistoryPoint {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	q := hs.queues[uid]
	if q == nil {
		return nil
	}
	cut := now.Add(-HistoryWindow).UnixMilli()
	var ps []historyPoint
	if len(q.points) == 0 {
		// Unchanged since sampling began: a flat line to the last sample.
		if q.first < q.last.t {
			ps = append(ps, historyPoint{max(q.first, cut), q.last.historyFigures})
		}
	} else {
		ps = append(ps, q.points...)
	}
	if n := len(ps); n == 0 || ps[n-1].t < q.last.t {
		ps = append(ps, q.last)
	}
	out := make([]controller.HistoryPoint, 0, len(ps))
	for _, p := range ps {
		if p.t < cut {
			continue
		}
		out = append(out, controller.HistoryPoint{TimeMillis: p.t, Messages: p.messages, Bytes: p.bytes, InFlightBatches: p.inFlightBatches,
			Accepted: p.accepted, Delivered: p.delivered, Acknowledged: p.acknowledged, Retried: p.retried, DeadLettered: p.deadLettered})
	}
	return out
}

// QueueHistory is controller.Env's History.
func (hs *history) QueueHistory(uid string) []controller.HistoryPoint {
	return hs.points(uid, time.Now())
}

// historySampler is the host part that samples the engine every
// HistoryInterval.
type historySampler struct {
	h *Host
	startstop.Base
}

func (s *historySampler) Start(context.Context) error {
	s.Every(HistoryInterval, true, func(context.Context) {
		if s.h.eng != nil {
			s.h.history.sample(time.Now(), s.h.eng.Counters())
		}
	})
	return nil
}
