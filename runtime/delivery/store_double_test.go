package delivery

import (
	"context"
	"fmt"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// memStore wraps a store.Store (store.NewMemory by default): it logs every
// successful Apply and can be told to fail Applies (a failing store), with
// nothing applied, as the store contract requires.
type memStore struct {
	store.Store
	mu      sync.Mutex
	applies [][]store.Mutation
	// fail, when set, is consulted before each Apply; a non-nil result
	// fails the Apply with nothing applied.
	fail func(muts []store.Mutation) error
	// after, when set, is called after each successful Apply, before it
	// returns (something that happens between a write's commit and what
	// its caller does next).
	after func(muts []store.Mutation)
}

func (s *memStore) setAfter(f func([]store.Mutation)) {
	s.mu.Lock()
	s.after = f
	s.mu.Unlock()
}

func newMemStore() *memStore { return wrapStore(store.NewMemory()) }

func wrapStore(s store.Store) *memStore { return &memStore{Store: s} }

func (s *memStore) setFail(f func([]store.Mutation) error) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

func (s *memStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		if err := fail(muts); err != nil {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	if err := s.Store.Apply(ctx, muts...); err != nil {
		return err
	}
	s.mu.Lock()
	s.applies = append(s.applies, append([]store.Mutation(nil), muts...))
	after := s.after
	s.mu.Unlock()
	if after != nil {
		after(muts)
	}
	return nil
}

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

func (s *memStore) applyLog() [][]store.Mutation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]store.Mutation(nil), s.applies...)
}

var _ store.Store = (*memStore)(nil)
