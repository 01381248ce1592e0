package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// slowStore makes every Apply wait, as a journal's fsync does, so that
// admissions overlap while their first writes are in flight.
type slowStore struct{ store.Store }

func (s slowStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	time.Sleep(5 * time.Millisecond)
	return s.Store.Apply(ctx, muts...)
}

// Admissions of one space whose first writes are in flight together still
// decide as if they ran one after the other: one create per name, one
// consumer per queue, and one Operation per Idempotency-Key.
func TestConcurrentAdmissionsSeeEachOthersReservations(t *testing.T) {
	st := slowStore{store.NewMemory()}
	c, err := New(Options{Store: st, Engine: newMemEngine(), Workers: noWorkers{}, ObserveInterval: time.Hour, SyncWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	ctx := t.Context()
	spec := []byte(`{"messageRetentionSeconds":60}`)

	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, codes := 0, map[string]int{}
	ops := map[string]bool{}
	for i := range n {
		wg.Add(2)
		go func() { // the same name
			defer wg.Done()
			_, _, err := c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: "same", FormURL: schemas.FormAtLeastOnceQueue, Spec: spec})
			mu.Lock()
			defer mu.Unlock()
			var p *problem.Problem
			switch {
			case err == nil:
				accepted++
			case errors.As(err, &p):
				codes[p.Code]++
			default:
				t.Error(err)
			}
		}()
		go func() { // the same key, other names would be a new resource each
			defer wg.Done()
			op, _, err := c.Create(ctx, CreateRequest{Principal: admin, Space: "s", Name: fmt.Sprintf("k%d", i%1), FormURL: schemas.FormAtLeastOnceQueue, Spec: spec,
				Idempotency: Idempotency{Key: "k", Scope: "scope", Fingerprint: "fp"}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			ops[op.ID] = true
		}()
	}
	wg.Wait()
	if accepted != 1 || codes[problem.CodeOperationInProgress]+codes[problem.CodeNameConflict] != n-1 {
		t.Fatalf("same name: %d accepted, refusals %v", accepted, codes)
	}
	if len(ops) != 1 {
		t.Fatalf("one key made %d Operations", len(ops))
	}
	list, _ := st.Resources(ctx, "s", "")
	if len(list) != 2 {
		t.Fatalf("%d resources, want 2", len(list))
	}
}
