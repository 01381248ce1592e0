package delivery

import (
	"sort"
	"sync/atomic"
	"time"
)

// counters are one queue's cumulative message counts since the engine
// started, counted once the change is durable. They are atomics so that
// a scrape never takes the queue's lock for them.
type counters struct {
	accepted, delivered, acknowledged, retried, deadLettered, discarded, expired atomic.Uint64
	// outcomes counts the attempts that ended, by outcome (outcomeNames);
	// causes the messages dead-lettered away, by cause.
	outcomes [len(outcomeNames)]atomic.Uint64
	causes   causeCounts
}

// QueueCounters is a snapshot of one queue: cumulative counts since the
// engine started (a restart begins again at zero, as Prometheus counters
// may) and the current backlog.
type QueueCounters struct {
	UID  string
	Name string
	// Messages accepted by Send (dead-letter moves into the queue are not
	// counted here), delivered to a handler (each attempt), acknowledged,
	// scheduled for a retry, dead-lettered away, discarded after their
	// last retry, and removed as expired.
	Accepted, Delivered, Acknowledged, Retried, DeadLettered, Discarded, Expired uint64
	// Outcomes counts the messages' attempts that ended, by how
	// (store.Outcome*), and DeadLetteredBy the messages dead-lettered
	// away by cause (forensics.Fingerprint of their history; at most
	// 50 causes, then OtherCause).
	Outcomes       map[string]uint64
	DeadLetteredBy []CauseCount
	// Backlog is the messages the queue holds (not yet acknowledged or
	// removed), BacklogBytes their bodies' size, OldestAge the age of the
	// oldest of them (0 when empty), InFlightBatches the batches
	// dispatched and not yet finished.
	Backlog         int
	BacklogBytes    int64
	OldestAge       time.Duration
	InFlightBatches int
}

// BatchObservation is one finished handler invocation, for
// Options.ObserveBatch.
type BatchObservation struct {
	ConsumerUID, QueueUID string
	Messages              int
	Duration              time.Duration
	// Failed: the handler threw, returned a rejected promise or panicked
	// (a handler past its time limit counts once it returns).
	Failed bool
}

// Counters snapshots every queue of the engine, ordered by UID.
func (e *Engine) Counters() []QueueCounters {
	e.mu.Lock()
	qs := make([]*queue, 0, len(e.queues))
	for _, q := range e.queues {
		qs = append(qs, q)
	}
	e.mu.Unlock()
	now := e.nowMs()
	out := make([]QueueCounters, 0, len(qs))
	for _, q := range qs {
		c := &q.count
		qc := QueueCounters{UID: q.uid,
			Accepted: c.accepted.Load(), Delivered: c.delivered.Load(), Acknowledged: c.acknowledged.Load(),
			Retried: c.retried.Load(), DeadLettered: c.deadLettered.Load(), Discarded: c.discarded.Load(), Expired: c.expired.Load(),
			Outcomes: c.outcomeMap(), DeadLetteredBy: c.causes.snapshot()}
		q.mu.Lock()
		if q.removed {
			q.mu.Unlock()
			continue
		}
		qc.Name = q.cfg.Name
		qc.Backlog, qc.BacklogBytes = q.held, q.heldBytes
		qc.InFlightBatches = len(q.batches)
		// The expiry order's first message is the oldest accepted of those
		// whose expiry has not been found yet (retention is per queue).
		oldest := int64(-1)
		if m := q.expiry.peek(); m != nil {
			oldest = m.acceptedAt
		}
		q.mu.Unlock()
		if oldest >= 0 && now > oldest {
			qc.OldestAge = time.Duration(now-oldest) * time.Millisecond
		}
		out = append(out, qc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// Event kinds of Options.OnEvent.
const (
	EventDeadLettered = "dead_lettered" // moved to the dead-letter queue after the last retry
	EventDiscarded    = "discarded"     // dropped after the last retry (no dead-letter queue)
	EventExpired      = "expired"       // removed when the queue's retention passed
	// EventRedelivered: left unsettled in a batch when an earlier run
	// ended (a restart, or another host's engine on a shared store), and
	// delivered again. Its WorkerUID is "": the queue's consumer is not
	// attached yet when the messages load.
	EventRedelivered = "redelivered"
)

// Event is something that happened to a queue's messages that the
// worker's author should see in the worker's log, not only on the host's
// stdout: Count messages of QueueUID, consumed by WorkerUID ("" when the
// queue has no consumer).
type Event struct {
	Kind                string
	QueueUID, WorkerUID string
	DeadLetterQueueUID  string // for EventDeadLettered
	Count               int
	// MessageIDs are the first EventIDs of the Count messages' IDs (in
	// their queue, before any move), so that a log line names them.
	MessageIDs []string
}

// EventIDs is the most message IDs an Event carries.
const EventIDs = 10

func (q *queue) emit(kind string, ms []*msg, dlq string) {
	n := len(ms)
	if n == 0 || q.e.onEvent == nil {
		return
	}
	ids := make([]string, 0, min(n, EventIDs))
	for _, m := range ms[:min(n, EventIDs)] {
		ids = append(ids, m.id)
	}
	ev := Event{Kind: kind, QueueUID: q.uid, Count: n, DeadLetterQueueUID: dlq, MessageIDs: ids}
	if q.consumer != nil {
		ev.WorkerUID = q.consumer.cfg.WorkerUID
	}
	q.e.onEvent(ev)
}
