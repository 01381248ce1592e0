package server

import (
	"context"
	"fmt"
	"github.com/takoform/queuehost/controller"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store"
)

// lostAckStore applies the nth Apply that holds a PutOperation (counting
// from 1) and reports an error anyway, as a backend whose commit
// acknowledgement is lost does.
type lostAckStore struct {
	store.Store
	mu  sync.Mutex
	nth int
	n   int
}

func (s *lostAckStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	hit := false
	s.mu.Lock()
	for _, m := range muts {
		if _, ok := m.(store.PutOperation); ok {
			s.n++
			hit = s.n == s.nth
			break
		}
	}
	s.mu.Unlock()
	if err := s.Store.Apply(ctx, muts...); err != nil {
		return err
	}
	if hit {
		return fmt.Errorf("%w: acknowledgement lost", store.ErrUnavailable)
	}
	return nil
}

// The first write of an Operation was applied but reported failed: the
// server reads the Operation back, accepts the request and drives it,
// instead of answering 503 and leaving it running for ever.
func TestLostAckOnAcceptIsReconciled(t *testing.T) {
	st := &lostAckStore{Store: store.NewMemory(), nth: 3} // the update's first write
	h := newHarness(t, st)
	q := h.mustCreate("s1", "q", fQueue, queueSpec()) // PutOperation 1 and 2
	r := h.put("s1", q, map[string]any{"messageRetentionSeconds": 120})
	h.expect(r, 202, "")
	if op := h.waitDone("s1", r.str("id")); op.str("state") != "succeeded" || op.str("effect") != "applied" {
		t.Fatalf("update: %s", op.body)
	}
	if ops, _ := st.UnfinishedOperations(t.Context()); len(ops) != 0 {
		t.Fatalf("unfinished operations: %v", ops)
	}
	h.mustPut("s1", q, map[string]any{"messageRetentionSeconds": 180})
}

// The outcome write of an Operation was applied but reported failed: the
// resource is not left blocked (409 operation_in_progress) by an
// Operation that has succeeded.
func TestLostAckOnOutcomeUnblocksTheResource(t *testing.T) {
	st := &lostAckStore{Store: store.NewMemory(), nth: 2} // the create's outcome
	h := newHarness(t, st)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	h.mustPut("s1", q, map[string]any{"messageRetentionSeconds": 120})
	h.mustDelete("s1", q)
}

// A create of a name whose resource has an unresolved Operation (here a
// delete that has not finished) is operation_in_progress, not name_conflict.
func TestCreateOfABusyNameIsOperationInProgress(t *testing.T) {
	h := newHarness(t, nil, func(o *controller.Options) { o.SyncWait = 20 * time.Millisecond })
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	gate := make(chan struct{})
	h.eng.mu.Lock()
	h.eng.removeGate = gate
	h.eng.mu.Unlock()
	d := h.del("s1", q)
	h.expect(d, 202, "")
	h.expect(h.create("s1", "q", fQueue, queueSpec()), 409, "operation_in_progress")
	close(gate)
	if op := h.waitDone("s1", d.str("id")); op.str("state") != "succeeded" {
		t.Fatalf("delete: %s", op.body)
	}
	h.mustCreate("s1", "q", fQueue, queueSpec())
}
