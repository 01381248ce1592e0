package host

import (
	"sync"
	"time"

	"github.com/takoform/queuehost/runtime/delivery"
)

// InvocationsKept is how many finished queue handler invocations the host
// keeps per worker (GET …/invocations; the web console's worker page).
const InvocationsKept = 50

// maxInvocationWorkers bounds the workers the host keeps invocations of
// (a worker deleted since start is forgotten once this many others ran).
const maxInvocationWorkers = 10000

// Invocation is one finished queue handler invocation: a batch.
type Invocation struct {
	ConsumerUID, QueueUID string
	Messages              int
	Duration              time.Duration
	Finished              time.Time
	Failed                bool
}

// invocations keeps the newest InvocationsKept invocations of each worker
// in memory since the host started, like the /metrics counters: a view
// for an operator, not a record.
type invocations struct {
	mu  sync.Mutex
	by  map[string][]Invocation // worker UID -> newest last
	now func() time.Time
}

func newInvocations(now func() time.Time) *invocations {
	return &invocations{by: map[string][]Invocation{}, now: now}
}

func (iv *invocations) add(workerUID string, o delivery.BatchObservation) {
	if iv == nil {
		return
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	l, ok := iv.by[workerUID]
	if !ok && len(iv.by) >= maxInvocationWorkers {
		for k := range iv.by {
			delete(iv.by, k)
			break
		}
	}
	if len(l) >= InvocationsKept {
		l = append(l[:0], l[1:]...)
	}
	iv.by[workerUID] = append(l, Invocation{ConsumerUID: o.ConsumerUID, QueueUID: o.QueueUID, Messages: o.Messages,
		Duration: o.Duration, Finished: iv.now(), Failed: o.Failed})
}

// list returns up to limit of the worker's invocations, newest first.
func (iv *invocations) list(workerUID string, limit int) []Invocation {
	if iv == nil {
		return nil
	}
	iv.mu.Lock()
	defer iv.mu.Unlock()
	l := iv.by[workerUID]
	out := make([]Invocation, 0, min(limit, len(l)))
	for i := len(l) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, l[i])
	}
	return out
}

func (iv *invocations) forget(workerUID string) {
	if iv == nil {
		return
	}
	iv.mu.Lock()
	delete(iv.by, workerUID)
	iv.mu.Unlock()
}
