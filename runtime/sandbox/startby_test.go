package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
)

// TestSandboxRefusesABatchPastItsStartBy (issue #35, defect 2): the
// sandbox, not the host, makes the last check of a batch's start-by
// time (the end of the queue's lease), by the machine's monotonic clock,
// so that a host stopped between its own check and the hand-over cannot
// have a stale batch run when it resumes: a batch that arrives past it
// is not started (abi.ErrNotStarted, the handler does not run).
func TestSandboxRefusesABatchPastItsStartBy(t *testing.T) {
	p := newPool(t, Options{Sender: &recSender{}})
	v := worker("sb", `export default { async queue(batch) { console.log("ran", batch.messages.length); } };`)
	h, err := p.QueueHandler(t.Context(), v)
	if err != nil {
		t.Fatal(err)
	}
	batch := func() *abi.Batch {
		return abi.NewBatch("b1", "jobs", []abi.Message{{ID: "m1", Body: []byte("x"), Attempts: 1}}, abitest.Settler{})
	}
	stale := abi.WithStartBy(context.Background(), time.Now().Add(-time.Millisecond))
	if err := h.HandleBatch(stale, batch()); !errors.Is(err, abi.ErrNotStarted) {
		t.Fatalf("a batch past its start-by: %v, want ErrNotStarted", err)
	}
	if l := logText(p, v); strings.Contains(l, "ran") {
		t.Fatalf("the handler ran a batch past its start-by:\n%s", l)
	}
	current := abi.WithStartBy(context.Background(), time.Now().Add(time.Minute))
	if err := h.HandleBatch(current, batch()); err != nil {
		t.Fatalf("a batch within its start-by: %v", err)
	}
	if l := logText(p, v); !strings.Contains(l, "ran 1") {
		t.Fatalf("the handler did not run a current batch:\n%s", l)
	}
}
