package host

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

type resolveTo struct{ h abi.Handler }

func (r resolveTo) Resolve(context.Context, string) (abi.Handler, error) { return r.h, nil }

// TestHandOverLetsRunningHandlersFinish (issue #35, attempts jump): a
// queue that hashes to another live host after a membership change (a
// host joining, or the views of the members settling after a database
// restart) is handed over without cutting the handler its owner runs:
// the handler's context stays live, its acknowledge resolves under the
// lease the owner still holds, and only then is the lease released.
// Before, the owner unloaded the queue at once: the handler was
// cancelled, often before its first statement, its acknowledge answered
// unknown_batch, and the next delivery came with attempts 2 — a counted
// attempt no handler ran, about five per short fault run of tools/jepsen.
// Placement is driven by hand (no loop runs), so the order is fixed.
func TestHandOverLetsRunningHandlersFinish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := pgstore.Open(ctx, pgstore.Config{URL: pgtest.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	const ttl = 2 * time.Second
	c := newCluster(pg, "a", "", ttl, quietLogger())
	c.bg, c.cancel = context.WithCancel(context.Background())
	defer func() { c.cancel(); c.wg.Wait() }()

	started := make(chan *abi.Batch, 1)
	finish := make(chan struct{})
	acked := make(chan error, 1)
	cut := make(chan error, 1)
	h := abi.HandlerFunc(func(hctx context.Context, b *abi.Batch) error {
		started <- b
		select {
		case <-finish:
		case <-hctx.Done():
			cut <- context.Cause(hctx)
		}
		acked <- b.Acknowledge(context.Background(), b.Messages[0].ID)
		return nil
	})
	eng := delivery.New(fencedStore{Store: pg, c: c}, resolveTo{h}, delivery.Options{Remote: c, Logger: quietLogger()})
	c.eng = eng
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer eng.Stop(context.Background())

	const quid, cuid = "r-q", "r-c"
	spec, _ := json.Marshal(map[string]any{})
	if err := pg.Apply(ctx, store.PutResource{Resource: store.Resource{UID: cuid, Space: "s", Name: "c", State: store.StateActive, Spec: spec, Observed: spec}}); err != nil {
		t.Fatal(err)
	}
	qcfg := delivery.QueueConfig{UID: quid, Name: "q", MessageRetentionSeconds: 3600}
	ccfg := delivery.ConsumerConfig{UID: cuid, Name: "c", QueueUID: quid, WorkerUID: "w", MaxBatchSize: 1, MaxConcurrency: 1, MaxRetries: 3}
	c.queues[quid], c.consumers[cuid], c.byQueue[quid] = qcfg, ccfg, cuid

	// Alone, host a takes the queue and runs a batch.
	c.place(ctx)
	if !c.isOwned(quid) {
		t.Fatal("host a, alone, did not take the queue")
	}
	if _, err := eng.Send(ctx, quid, []abi.OutgoingMessage{{Body: []byte("m")}}); err != nil {
		t.Fatal(err)
	}
	b := <-started
	if b.Messages[0].Attempts != 1 {
		t.Fatalf("first delivery with attempts %d", b.Messages[0].Attempts)
	}

	// A host to which the queue hashes joins; a's next placement hands
	// the queue over.
	other := ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("b%d", i); rendezvous(quid, []string{"a", id}) == id {
			other = id
		}
	}
	if err := pg.Heartbeat(ctx, store.Member{ID: other}, ttl); err != nil {
		t.Fatal(err)
	}
	c.place(ctx)
	select {
	case cause := <-cut:
		t.Fatalf("the hand-over cut the running handler (%v); its attempt is counted with no handler run", cause)
	case <-time.After(300 * time.Millisecond):
	}
	if held, err := pg.LeaseHeld(ctx, queueLease(quid)); err != nil || !held {
		t.Fatalf("the lease was given up while the handler ran (held %v, %v)", held, err)
	}
	close(finish)
	if err := <-acked; err != nil {
		t.Fatalf("the running handler's acknowledge during the hand-over: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.isOwned(quid) {
		if time.Now().After(deadline) {
			t.Fatal("the queue was not handed over after its handler finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held, err := pg.LeaseHeld(ctx, queueLease(quid)); err != nil || held {
		t.Fatalf("after the hand-over the lease is held %v (%v), want released", held, err)
	}
	sms, err := pg.Messages(ctx, quid)
	if err != nil {
		t.Fatal(err)
	}
	if len(sms) != 0 {
		t.Fatalf("the acknowledged message is still stored: %+v", sms)
	}
	select {
	case b := <-started:
		t.Fatalf("a new batch started during the hand-over: attempts %d", b.Messages[0].Attempts)
	default:
	}
}
