package server

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/takoform/queuehost/runtime/store"
)

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
