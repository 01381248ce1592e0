package delivery

import "github.com/takoform/queuehost/runtime/store"

// deadLetter is the dead-letter metadata (spec/peers.md §Dead-letter
// metadata) of m, of queue q, moved by p at now: written with the new
// message in the same Apply, for operators only. q.mu must not be held.
func (p *plan) deadLetter(q *queue, m *msg, now int64) *store.DeadLetter {
	q.mu.Lock()
	name, attempts := q.cfg.Name, m.attempts
	q.mu.Unlock()
	return &store.DeadLetter{SourceQueue: q.uid, SourceQueueName: name, Consumer: p.consumerUID, ConsumerName: p.consumerName,
		Reason: store.ReasonRetriesExhausted, Attempts: attempts, OriginalID: m.id, DeadLetteredAt: now}
}
