package store

import (
	"context"
	"fmt"
)

// Memory is the state machine with no journal: every change is lost when
// the process exits. It is for tests of other packages and for the
// ":memory:" development mode, never for a host whose queues must survive
// a restart.
type Memory struct {
	core
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty, non-durable Store.
func NewMemory() Store { return &Memory{core{st: newState(true)}} }

// Apply applies muts atomically. It never fails for want of a disk.
func (m *Memory) Apply(ctx context.Context, muts ...Mutation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, mu := range muts {
		switch mu.(type) {
		case PutResource, DeleteResource, PutOperation, DeleteOperation, PutIdempotency, DeleteIdempotency,
			AcceptMessage, DeliverMessages, ExtendLease, RetryMessage, RemoveMessages, DropQueue:
		default:
			return fmt.Errorf("store: unknown mutation %T", mu)
		}
	}
	meta, msgs := mutationKinds(muts)
	m.lock(meta, msgs)
	defer m.unlock(meta, msgs)
	if m.closed {
		return ErrClosed
	}
	m.st.apply(muts, 0, 0, nil)
	return nil
}

// Bodies returns copies of messages' bodies.
func (m *Memory) Bodies(ctx context.Context, queue string, ids []string) ([][]byte, error) {
	if err := m.rlock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	out := make([][]byte, len(ids))
	hint := noHint
	for i, id := range ids {
		if e, ok := m.st.message(queue, id, &hint); ok {
			out[i] = cloneBytes(m.st.bodies[e.pos])
		}
	}
	return out, nil
}

// Close makes every later call fail with ErrClosed. Closing twice is not
// an error.
func (m *Memory) Close() error {
	m.lock(true, true)
	defer m.unlock(true, true)
	m.closed = true
	m.st = newState(true)
	return nil
}
