package host

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/schemas"
)

// startClusterHost starts an active host of a cluster on db; dir holds
// host.json and the admin token, which the hosts of a cluster share.
func startClusterHost(t *testing.T, db, dir string) *Host {
	t.Helper()
	return startClusterHostFaulty(t, db, dir, nil)
}

// startClusterHostFaulty is startClusterHost with the fault hook f (nil:
// none).
func startClusterHostFaulty(t *testing.T, db, dir string, f *Faults) *Host {
	t.Helper()
	h, err := New(context.Background(), Config{
		DataDir: dir, StoreURL: db, ClusterActive: true, ClusterTTL: 2 * time.Second,
		Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: 2 * time.Second, UnsafeInProcessWorkers: true,
		Faults: f,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	return h
}

// outcome is how one racing request ended: "ok" (accepted, and its
// Operation succeeded), else the problem's code.
func outcome(ctx context.Context, c *apiclient.Client, r *apiclient.Response, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	if r.Status != 202 {
		var p struct{ Code string }
		_ = r.JSON(&p)
		if testing.Verbose() {
			fmt.Printf("refused: %s\n", r.Body)
		}
		return p.Code
	}
	var op apiclient.Operation
	if err := r.JSON(&op); err != nil {
		return "error: " + err.Error()
	}
	fin, err := c.WaitOp(ctx, "demo", op.ID, 30*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	if fin.State != "succeeded" {
		return "op " + fin.State
	}
	return "ok"
}

// race runs a and b at the same moment and returns their outcomes.
func race(a, b func() string) (string, string) {
	var wg sync.WaitGroup
	var oa, ob string
	start := make(chan struct{})
	wg.Go(func() { <-start; oa = a() })
	wg.Go(func() { <-start; ob = b() })
	close(start)
	wg.Wait()
	return oa, ob
}

// TestClusterAdmissionRaces: two active hosts on one database receive the
// same conflicting request at the same moment, many rounds; exactly one
// wins every time (name uniqueness, one consumer per queue, dead-letter
// cycles, dependency checks on delete), and an idempotency key sent to
// both yields one Operation.
func TestClusterAdmissionRaces(t *testing.T) {
	db := pgtest.Database(t)
	dir := t.TempDir()
	ha, hb := startClusterHost(t, db, dir), startClusterHost(t, db, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ca, cb := apiclient.New(ha.URL(), ha.AdminToken()), apiclient.New(hb.URL(), hb.AdminToken())
	must := func(uid string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return uid
	}
	queue := map[string]any{"messageRetentionSeconds": 3600}
	q0 := must(ca.Create(ctx, "demo", "q0", schemas.FormAtLeastOnceQueue, queue, nil))
	w := must(ca.Create(ctx, "demo", "w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch", "queue"}}, nil))
	v := must(ca.Create(ctx, "demo", "w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": workerModule}},
		"queueProducerBindings": []any{map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": q0}}},
	}, nil))
	if err := ca.Put(ctx, "demo", w, map[string]any{"handlers": []string{"fetch", "queue"}, "version": map[string]any{"resourceUid": v}}); err != nil {
		t.Fatal(err)
	}
	consumer := func(q, dlq string) map[string]any {
		s := map[string]any{
			"queue": map[string]any{"resourceUid": q}, "worker": map[string]any{"resourceUid": w},
			"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 0,
		}
		if dlq != "" {
			s["deadLetterQueue"] = map[string]any{"resourceUid": dlq}
		}
		return s
	}
	post := func(c *apiclient.Client, name, form string, spec any) func() string {
		return func() string {
			r, err := c.Post(ctx, "demo", name, form, spec, nil)
			return outcome(ctx, c, r, err)
		}
	}
	oneWins := func(what string, oa, ob string, loser ...string) {
		t.Helper()
		wins := 0
		for _, o := range []string{oa, ob} {
			if o == "ok" {
				wins++
				continue
			}
			lost := false
			for _, l := range loser {
				lost = lost || o == l
			}
			if !lost {
				t.Fatalf("%s: an outcome is %q, want ok or one of %v (outcomes %q, %q)", what, o, loser, oa, ob)
			}
		}
		if wins != 1 {
			t.Fatalf("%s: %d of the two racing requests won (outcomes %q, %q), want exactly 1", what, wins, oa, ob)
		}
	}
	const rounds = 12
	for i := range rounds {
		// The same name from both hosts.
		name := fmt.Sprintf("n%d", i)
		oa, ob := race(post(ca, name, schemas.FormAtLeastOnceQueue, queue), post(cb, name, schemas.FormAtLeastOnceQueue, queue))
		oneWins("name "+name, oa, ob, "name_conflict", "operation_in_progress")

		// Two consumers of one queue.
		q := must(ca.Create(ctx, "demo", fmt.Sprintf("c%d", i), schemas.FormAtLeastOnceQueue, queue, nil))
		oa, ob = race(post(ca, fmt.Sprintf("ca%d", i), schemas.FormQueueConsumer, consumer(q, "")), post(cb, fmt.Sprintf("cb%d", i), schemas.FormQueueConsumer, consumer(q, "")))
		// (A loser may also find a referenced record still settling from
		// its create on the other host: invalid_reference. Either way
		// exactly one wins.)
		oneWins("consumers of one queue", oa, ob, "consumer_conflict", "invalid_reference")

		// x -> dlq y on one host, y -> dlq x on the other: a cycle.
		x := must(ca.Create(ctx, "demo", fmt.Sprintf("x%d", i), schemas.FormAtLeastOnceQueue, queue, nil))
		y := must(cb.Create(ctx, "demo", fmt.Sprintf("y%d", i), schemas.FormAtLeastOnceQueue, queue, nil))
		oa, ob = race(post(ca, fmt.Sprintf("cx%d", i), schemas.FormQueueConsumer, consumer(x, y)), post(cb, fmt.Sprintf("cy%d", i), schemas.FormQueueConsumer, consumer(y, x)))
		oneWins("dead-letter cycle", oa, ob, "dead_letter_cycle", "invalid_reference")

		// Deleting a queue on one host while a consumer of it is created
		// on the other: never both.
		d := must(cb.Create(ctx, "demo", fmt.Sprintf("d%d", i), schemas.FormAtLeastOnceQueue, queue, nil))
		oa, ob = race(func() string {
			r, err := ca.Remove(ctx, "demo", d)
			return outcome(ctx, ca, r, err)
		}, post(cb, fmt.Sprintf("cd%d", i), schemas.FormQueueConsumer, consumer(d, "")))
		oneWins("delete against a new dependant", oa, ob, "dependency_conflict", "not_found", "invalid_reference", "operation_in_progress")

		// One idempotency key on both hosts: one Operation.
		key := fmt.Sprintf("key-%d", i)
		idem := func(c *apiclient.Client) func() string {
			return func() string {
				h := http.Header{}
				h.Set("Idempotency-Key", key)
				r, err := c.Do(ctx, "POST", "/v2/spaces/demo/resources", map[string]any{
					"name": fmt.Sprintf("k%d", i), "formUrl": schemas.FormAtLeastOnceQueue, "spec": queue,
				}, h)
				if err != nil {
					return "error: " + err.Error()
				}
				var op apiclient.Operation
				if r.Status != 202 || r.JSON(&op) != nil {
					return fmt.Sprintf("status %d %s", r.Status, r.Body)
				}
				return op.ID
			}
		}
		oa, ob = race(idem(ca), idem(cb))
		if oa != ob {
			t.Fatalf("idempotency key %s sent to both hosts: operations %q and %q, want one", key, oa, ob)
		}
	}
	// Every name is held once.
	list, err := ca.List(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, r := range list {
		names[r.Name]++
	}
	for n, k := range names {
		if k != 1 {
			t.Errorf("name %q is held by %d resources", n, k)
		}
	}
}

// TestClusterOperationResumesOnAnotherHost: an Operation accepted by one
// host, whose host stops after its intent is durable and before its
// effect, is finished by another host of the cluster (which resumes the
// unfinished Operations no live host drives).
func TestClusterOperationResumesOnAnotherHost(t *testing.T) {
	db := pgtest.Database(t)
	dir := t.TempDir()
	hb := startClusterHost(t, db, dir)
	held := make(chan struct{}, 1)
	ha, err := New(context.Background(), Config{
		DataDir: dir, StoreURL: db, ClusterActive: true, ClusterTTL: time.Second,
		Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: time.Second, UnsafeInProcessWorkers: true,
		// The accepting host stops between the intent and the effect.
		AfterIntent: func(ctx context.Context, op store.Operation) {
			held <- struct{}{}
			<-ctx.Done()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ha.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca := apiclient.New(ha.URL(), ha.AdminToken())
	r, err := ca.Post(ctx, "demo", "orphan", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600}, nil)
	if err != nil || r.Status != 202 {
		t.Fatalf("create: %v %v", err, r)
	}
	var op apiclient.Operation
	if err := r.JSON(&op); err != nil {
		t.Fatal(err)
	}
	<-held
	if err := ha.Shutdown(ctx); err != nil {
		t.Logf("shutdown of the accepting host: %v", err)
	}
	cb := apiclient.New(hb.URL(), hb.AdminToken())
	fin, err := cb.WaitOp(ctx, "demo", op.ID, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if fin.State != "succeeded" || fin.Effect != "applied" {
		t.Fatalf("the Operation of the stopped host reads %s/%s on the other host, want succeeded/applied", fin.State, fin.Effect)
	}
	list, err := cb.List(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, res := range list {
		found = found || (res.Name == "orphan" && res.UID == op.ResourceUID)
	}
	if !found {
		t.Fatalf("the resource of the resumed Operation is not listed: %+v", list)
	}
}
