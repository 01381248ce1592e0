package delivery

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// memStore is a private test double of store.Store (messages only) until
// the shared in-memory store builds; it also counts and logs Applies and
// can be told to fail them.
type memStore struct {
	mu      sync.Mutex
	queues  map[string]map[string]*stored
	applies [][]store.Mutation
	// fail, when set, is consulted before each Apply; a non-nil result
	// fails the Apply with nothing applied.
	fail func(muts []store.Mutation) error
}

type stored struct {
	m    store.Message
	body []byte
}

func newMemStore() *memStore { return &memStore{queues: map[string]map[string]*stored{}} }

func (s *memStore) setFail(f func([]store.Mutation) error) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

func (s *memStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(muts); err != nil {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	s.applies = append(s.applies, append([]store.Mutation(nil), muts...))
	for _, mu := range muts {
		switch m := mu.(type) {
		case store.AcceptMessage:
			q := s.queues[m.Message.Queue]
			if q == nil {
				q = map[string]*stored{}
				s.queues[m.Message.Queue] = q
			}
			q[m.Message.ID] = &stored{m: m.Message, body: append([]byte(nil), m.Body...)}
		case store.DeliverMessages:
			for _, id := range m.IDs {
				if st := s.queues[m.Queue][id]; st != nil {
					st.m.Attempts++
					st.m.Lease = m.Batch
				}
			}
		case store.RetryMessage:
			if st := s.queues[m.Queue][m.ID]; st != nil {
				st.m.Lease = ""
				st.m.VisibleAt = m.VisibleAt
			}
		case store.RemoveMessages:
			for _, id := range m.IDs {
				delete(s.queues[m.Queue], id)
			}
		case store.DropQueue:
			delete(s.queues, m.Queue)
		}
	}
	return nil
}

func (s *memStore) Resource(context.Context, string) (store.Resource, error) {
	return store.Resource{}, store.ErrNotFound
}
func (s *memStore) ResourceByName(context.Context, string, string) (store.Resource, error) {
	return store.Resource{}, store.ErrNotFound
}
func (s *memStore) Resources(context.Context, string, string) ([]store.Resource, error) {
	return nil, nil
}
func (s *memStore) Operation(context.Context, string) (store.Operation, error) {
	return store.Operation{}, store.ErrNotFound
}
func (s *memStore) UnfinishedOperations(context.Context) ([]store.Operation, error) { return nil, nil }
func (s *memStore) Idempotency(context.Context, string, string) (store.IdempotencyRecord, error) {
	return store.IdempotencyRecord{}, store.ErrNotFound
}

func (s *memStore) Messages(ctx context.Context, queue string) ([]store.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Message
	for _, st := range s.queues[queue] {
		out = append(out, st.m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *memStore) Message(ctx context.Context, queue, id string) (store.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.queues[queue][id]
	if st == nil {
		return store.Message{}, store.ErrNotFound
	}
	return st.m, nil
}

func (s *memStore) MessageCount(ctx context.Context, queue string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[queue]), nil
}

func (s *memStore) Body(ctx context.Context, queue, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.queues[queue][id]
	if st == nil {
		return nil, store.ErrNotFound
	}
	return append([]byte(nil), st.body...), nil
}

func (s *memStore) Close() error { return nil }

// removals returns the IDs removed from queue for reason, in order.
func (s *memStore) removals(queue, reason string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, g := range s.applies {
		for _, mu := range g {
			if r, ok := mu.(store.RemoveMessages); ok && r.Queue == queue && r.Reason == reason {
				out = append(out, r.IDs...)
			}
		}
	}
	return out
}

func (s *memStore) applyCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applies)
}

var _ store.Store = (*memStore)(nil)
