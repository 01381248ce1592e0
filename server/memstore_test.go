package server

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/takoform/queuehost/runtime/store"
)

// memStore is a minimal store.Store for tests until runtime/store's
// in-memory backend lands; it implements the records the server uses.
type memStore struct {
	mu   sync.Mutex
	res  map[string]store.Resource
	ops  map[string]store.Operation
	idem map[string]store.IdempotencyRecord
}

func newMemStore() *memStore {
	return &memStore{res: map[string]store.Resource{}, ops: map[string]store.Operation{}, idem: map[string]store.IdempotencyRecord{}}
}

func (m *memStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mu := range muts {
		switch x := mu.(type) {
		case store.PutResource:
			m.res[x.Resource.UID] = x.Resource
		case store.DeleteResource:
			delete(m.res, x.UID)
		case store.PutOperation:
			m.ops[x.Operation.ID] = x.Operation
		case store.PutIdempotency:
			m.idem[x.Record.Scope+"\x01"+x.Record.Key] = x.Record
		case store.DeleteIdempotency:
			delete(m.idem, x.Scope+"\x01"+x.Key)
		case store.DropQueue:
		default:
			return fmt.Errorf("memStore: %T unsupported", mu)
		}
	}
	return nil
}

func (m *memStore) Resource(_ context.Context, uid string) (store.Resource, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.res[uid]
	if !ok {
		return store.Resource{}, store.ErrNotFound
	}
	return r, nil
}

func (m *memStore) ResourceByName(_ context.Context, space, name string) (store.Resource, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.res {
		if r.Space == space && r.Name == name {
			return r, nil
		}
	}
	return store.Resource{}, store.ErrNotFound
}

func (m *memStore) Resources(_ context.Context, space, formURL string) ([]store.Resource, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Resource
	for _, r := range m.res {
		if (space == "" || r.Space == space) && (formURL == "" || r.FormURL == formURL) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreateTime.Equal(out[j].CreateTime) {
			return out[i].CreateTime.Before(out[j].CreateTime)
		}
		return out[i].UID < out[j].UID
	})
	return out, nil
}

func (m *memStore) Operation(_ context.Context, id string) (store.Operation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.ops[id]
	if !ok {
		return store.Operation{}, store.ErrNotFound
	}
	return o, nil
}

func (m *memStore) UnfinishedOperations(context.Context) ([]store.Operation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.Operation
	for _, o := range m.ops {
		if !o.Done() {
			out = append(out, o)
		}
	}
	return out, nil
}

func (m *memStore) Idempotency(_ context.Context, scope, key string) (store.IdempotencyRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.idem[scope+"\x01"+key]
	if !ok {
		return store.IdempotencyRecord{}, store.ErrNotFound
	}
	return r, nil
}

func (m *memStore) Messages(context.Context, string) ([]store.Message, error) { return nil, nil }
func (m *memStore) Message(context.Context, string, string) (store.Message, error) {
	return store.Message{}, store.ErrNotFound
}
func (m *memStore) MessageCount(context.Context, string) (int, error) { return 0, nil }
func (m *memStore) Body(context.Context, string, string) ([]byte, error) {
	return nil, store.ErrNotFound
}
func (m *memStore) Close() error { return nil }

// failingStore makes Apply fail while fail is set, as a full disk would.
type failingStore struct {
	store.Store
	fail atomic.Bool
}

func (f *failingStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	if f.fail.Load() {
		return fmt.Errorf("%w: injected", store.ErrUnavailable)
	}
	return f.Store.Apply(ctx, muts...)
}
