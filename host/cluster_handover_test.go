package host

import (
	"context"
	"encoding/json"
	"errors"
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

// oneHost is a cluster host driven by hand: no loop runs, placement is
// place() called by the test, so the order of events is fixed. Its
// handler announces each batch on started and waits for finish (or its
// context's end, reported on cut), then acknowledges and reports the
// acknowledge's outcome on acked.
type oneHost struct {
	c               *cluster
	pg              *pgstore.Store
	eng             *delivery.Engine
	started         chan *abi.Batch
	finish          chan struct{}
	acked, cut      chan error
	queue, consumer string
}

func startOneHost(t *testing.T, ctx context.Context) *oneHost {
	t.Helper()
	pg, err := pgstore.Open(ctx, pgstore.Config{URL: pgtest.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	const ttl = 2 * time.Second
	o := &oneHost{pg: pg, started: make(chan *abi.Batch, 4), finish: make(chan struct{}), acked: make(chan error, 4), cut: make(chan error, 4), queue: "r-q", consumer: "r-c"}
	c := newCluster(pg, "a", "", ttl, quietLogger())
	c.bg, c.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { c.cancel(); c.wg.Wait() })
	o.c = c
	h := abi.HandlerFunc(func(hctx context.Context, b *abi.Batch) error {
		o.started <- b
		select {
		case <-o.finish:
		case <-hctx.Done():
			o.cut <- context.Cause(hctx)
		}
		o.acked <- b.Acknowledge(context.Background(), b.Messages[0].ID)
		return nil
	})
	o.eng = delivery.New(fencedStore{Store: pg, c: c}, resolveTo{h}, delivery.Options{Remote: c, Logger: quietLogger()})
	c.eng = o.eng
	if err := o.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.eng.Stop(context.Background()) })
	spec, _ := json.Marshal(map[string]any{})
	if err := pg.Apply(ctx, store.PutResource{Resource: store.Resource{UID: o.consumer, Space: "s", Name: "c", State: store.StateActive, Spec: spec, Observed: spec}}); err != nil {
		t.Fatal(err)
	}
	c.queues[o.queue] = delivery.QueueConfig{UID: o.queue, Name: "q", MessageRetentionSeconds: 3600}
	c.consumers[o.consumer] = delivery.ConsumerConfig{UID: o.consumer, Name: "c", QueueUID: o.queue, WorkerUID: "w", MaxBatchSize: 1, MaxConcurrency: 1, MaxRetries: 3}
	c.byQueue[o.queue] = o.consumer
	// Alone, the host takes the queue.
	c.place(ctx)
	if !c.isOwned(o.queue) {
		t.Fatal("the host, alone, did not take the queue")
	}
	return o
}

// runOne sends one message and waits until its handler started.
func (o *oneHost) runOne(t *testing.T, ctx context.Context) *abi.Batch {
	t.Helper()
	if _, err := o.eng.Send(ctx, o.queue, []abi.OutgoingMessage{{Body: []byte("m")}}); err != nil {
		t.Fatal(err)
	}
	b := <-o.started
	if b.Messages[0].Attempts != 1 {
		t.Fatalf("first delivery with attempts %d", b.Messages[0].Attempts)
	}
	return b
}

// notCut fails if the running handler's context ends within a while.
func (o *oneHost) notCut(t *testing.T, what string) {
	t.Helper()
	select {
	case cause := <-o.cut:
		t.Fatalf("%s cut the running handler (%v); its attempt is counted with no handler run", what, cause)
	case <-time.After(300 * time.Millisecond):
	}
}

// finishAcked lets the handler finish and checks that its acknowledge
// landed.
func (o *oneHost) finishAcked(t *testing.T, ctx context.Context) {
	t.Helper()
	close(o.finish)
	if err := <-o.acked; err != nil {
		t.Fatalf("the running handler's acknowledge: %v", err)
	}
	sms, err := o.pg.Messages(ctx, o.queue)
	if err != nil {
		t.Fatal(err)
	}
	if len(sms) != 0 {
		t.Fatalf("the acknowledged message is still stored: %+v", sms)
	}
}

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
func TestHandOverLetsRunningHandlersFinish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := startOneHost(t, ctx)
	o.runOne(t, ctx)

	// A host to which the queue hashes joins; the next placement hands
	// the queue over.
	other := ""
	for i := 0; other == ""; i++ {
		if id := fmt.Sprintf("b%d", i); rendezvous(o.queue, []string{"a", id}) == id {
			other = id
		}
	}
	if err := o.pg.Heartbeat(ctx, store.Member{ID: other}, o.c.ttl); err != nil {
		t.Fatal(err)
	}
	o.c.place(ctx)
	o.notCut(t, "the hand-over")
	if held, err := o.pg.LeaseHeld(ctx, queueLease(o.queue)); err != nil || !held {
		t.Fatalf("the lease was given up while the handler ran (held %v, %v)", held, err)
	}
	o.finishAcked(t, ctx)
	// Then the queue is unloaded and its lease released.
	deadline := time.Now().Add(10 * time.Second)
	for {
		held, err := o.pg.LeaseHeld(ctx, queueLease(o.queue))
		if err != nil {
			t.Fatal(err)
		}
		if !held && !o.c.isOwned(o.queue) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue was not handed over after its handler finished (owned %v, lease held %v)", o.c.isOwned(o.queue), held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case b := <-o.started:
		t.Fatalf("a new batch started during the hand-over: attempts %d", b.Messages[0].Attempts)
	default:
	}
}

// TestLateFencedWriteKeepsTheCurrentLease (issue #35, attempts jump): a
// write made under an earlier lease of a queue and refused late — it
// waited out a database restart in the store's retries while the host
// lost the queue and took it again under a new epoch — must not unload
// the queue held under the new epoch. Before, any fenced write unloaded
// the queue: the handlers running under the current lease were cut
// before their first statement (tools/jepsen seed 41: a batch of 5
// cancelled 0.5 s after the queue was taken again, every message's next
// delivery with attempts one too many).
func TestLateFencedWriteKeepsTheCurrentLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := startOneHost(t, ctx)
	old, _ := o.c.leaseOf(o.queue)
	// The lease moves on (as when it expired during an outage); the
	// host's next placement finds it lost, unloads the queue and takes
	// it again under a new epoch.
	if err := o.pg.Revoke(ctx, old.Name); err != nil {
		t.Fatal(err)
	}
	o.c.place(ctx)
	if o.c.isOwned(o.queue) {
		o.c.place(ctx) // the first placement only found the lease lost
	}
	o.c.place(ctx)
	cur, ok := o.c.leaseOf(o.queue)
	if !ok || cur.Epoch == old.Epoch {
		t.Fatalf("the host did not take the queue again under a new epoch: %+v (held %v), old epoch %d", cur, ok, old.Epoch)
	}
	o.runOne(t, ctx)
	// Now the write made under the old lease comes back refused.
	err := o.pg.ApplyFenced(ctx, old, store.RetryMessage{Queue: o.queue, ID: "late"})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a write under the old lease: %v, want fenced", err)
	}
	o.c.fenced(o.queue, old)
	o.notCut(t, "a late fenced write under the old lease")
	if l, ok := o.c.leaseOf(o.queue); !ok || l.Epoch != cur.Epoch {
		t.Fatalf("after a late fenced write under epoch %d the host holds %+v (%v), want epoch %d", old.Epoch, l, ok, cur.Epoch)
	}
	o.finishAcked(t, ctx)
}
