package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// The purge and redrive extensions (spec/peers.md §Purge, §Redrive) on the
// real binary, killed (SIGKILL) while they run and started again on its
// data directory.

// queueBodies lists every message body a queue holds, by its "k".
func queueBodies(t *testing.T, e *env, space, uid string) map[string]int {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	out := map[string]int{}
	tok := ""
	for range 100 {
		p := "/v2/spaces/" + space + "/resources/" + uid + "/messages?limit=100"
		if tok != "" {
			p += "&pageToken=" + tok
		}
		r, err := e.admin.Do(ctx, "GET", p, nil, nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("messages of %s: %v %s", uid, err, r)
		}
		var pg struct {
			Items []struct {
				BodyPreview []byte `json:"bodyPreview"`
			} `json:"items"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := r.JSON(&pg); err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			out[string(it.BodyPreview)]++
		}
		if tok = pg.NextPageToken; tok == "" {
			return out
		}
	}
	t.Fatal("the pages do not end")
	return nil
}

func postOp(t *testing.T, e *env, path string, body any) *harness.Operation {
	t.Helper()
	r, err := e.admin.Do(ctxT(t, 20*time.Second), "POST", path, body, nil)
	if err != nil || r.Status != 202 {
		t.Fatalf("POST %s: %v %s", path, err, r)
	}
	var op harness.Operation
	if err := r.JSON(&op); err != nil {
		t.Fatal(err)
	}
	return &op
}

// TestPurgeAcrossKill: a purge requested just before the host is killed
// is either done or resumed by the next start; either way it ends
// succeeded with every message of the time removed, and what is sent after
// it is kept.
func TestPurgeAcrossKill(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{NoConsumers: true})
	var bodies []string
	for i := range 25 {
		bodies = append(bodies, body(fmt.Sprintf("p%02d", i), "ack"))
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	op := postOp(t, e, "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue+"/purge", nil)
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	done, err := e.admin.WaitOp(ctx, topo.Space, op.ID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != "succeeded" || done.Kind != "purge" || done.Progress["removed"] != 25 {
		t.Fatalf("the purge after the kill: %+v", done)
	}
	if n := len(queueBodies(t, e, topo.Space, topo.Queue)); n != 0 {
		t.Fatalf("%d messages left after the purge", n)
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("after", "ack")}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	// A restart does not run the finished purge again.
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	if got := queueBodies(t, e, topo.Space, topo.Queue); len(got) != 1 {
		t.Fatalf("after the second restart the queue holds %v", got)
	}
}

// TestRedriveAcrossKill: a rate-limited redrive killed half way resumes
// at the next start and ends with every message in exactly one of the two
// queues, and its progress counting exactly the messages moved: the move
// of each is one atomic write, never lost, never duplicated.
func TestRedriveAcrossKill(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 180*time.Second)
	topo := e.topology(harness.TopologyOptions{NoConsumers: true})
	target, err := e.admin.Create(ctx, topo.Space, "redrive-target", harness.FormQueue, harness.QueueSpec(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var bodies []string
	for i := range n {
		bodies = append(bodies, body(fmt.Sprintf("r%02d", i), "ack"))
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	op := postOp(t, e, "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue+"/redrive",
		map[string]any{"targetQueue": harness.Ref(target), "maxMessagesPerSecond": 8})
	if op.Kind != "redrive" || op.Progress["total"] != n {
		t.Fatalf("accepted %+v", op)
	}
	if err := harness.Poll(30*time.Second, func() error {
		got, _, err := e.admin.Operation(ctx, topo.Space, op.ID, 0)
		if err != nil {
			return err
		}
		if got.State != "running" || got.Progress["moved"] < 6 {
			return fmt.Errorf("redrive %s/%s moved %d", got.State, got.Effect, got.Progress["moved"])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	done, err := e.admin.WaitOp(ctx, topo.Space, op.ID, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != "succeeded" || done.Effect != "applied" || done.Progress["moved"] != n || done.Progress["total"] != n {
		t.Fatalf("the redrive after the kill: %+v", done)
	}
	src, dst := queueBodies(t, e, topo.Space, topo.Queue), queueBodies(t, e, topo.Space, target)
	if len(src) != 0 || len(dst) != n {
		t.Fatalf("after the redrive the source holds %d, the target %d", len(src), len(dst))
	}
	for _, b := range bodies {
		if dst[b] != 1 {
			t.Fatalf("%s is %d times in the target", b, dst[b])
		}
	}
}

// TestDeadLetterMetadataAndRedriveToSource: on the binary, a dead-lettered
// message is listed with its source queue, consumer, reason and attempts,
// still after a SIGKILL and restart, and a redrive without a target sends
// it back to that source queue.
func TestDeadLetterMetadataAndRedriveToSource(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 180*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxRetries: -1, MaxBatchSize: 1})
	// The dead-letter queue keeps what arrives (its consumer would
	// acknowledge it at once).
	setDelivery(t, e, topo.Space, topo.DLQ, false)
	var bodies []string
	for i := range 4 {
		bodies = append(bodies, body(fmt.Sprintf("d%02d", i), "throw"))
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	type listed struct {
		Attempts   int `json:"attempts"`
		DeadLetter *struct {
			SourceQueueUid    string `json:"sourceQueueUid"`
			SourceQueueName   string `json:"sourceQueueName"`
			ConsumerUid       string `json:"consumerUid"`
			Reason            string `json:"reason"`
			Attempts          int    `json:"attempts"`
			OriginalMessageId string `json:"originalMessageId"`
		} `json:"deadLetter"`
	}
	list := func(uid string) []listed {
		t.Helper()
		r, err := e.admin.Do(ctx, "GET", "/v2/spaces/"+topo.Space+"/resources/"+uid+"/messages?limit=100", nil, nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("messages: %v %s", err, r)
		}
		var pg struct {
			Items []listed `json:"items"`
		}
		if err := r.JSON(&pg); err != nil {
			t.Fatal(err)
		}
		return pg.Items
	}
	check := func(when string) {
		t.Helper()
		if err := harness.Poll(30*time.Second, func() error {
			items := list(topo.DLQ)
			if len(items) != 4 {
				return fmt.Errorf("the dead-letter queue lists %d messages", len(items))
			}
			for _, it := range items {
				dl := it.DeadLetter
				if dl == nil || dl.SourceQueueUid != topo.Queue || dl.SourceQueueName != topo.QueueName || dl.ConsumerUid != topo.Consumer ||
					dl.Reason != "retries_exhausted" || dl.Attempts != 1 || dl.OriginalMessageId == "" {
					return fmt.Errorf("listed %+v", dl)
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check("after dead-lettering")
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	check("after a SIGKILL and restart")

	// Back to the source, which holds them (paused) as new messages.
	setDelivery(t, e, topo.Space, topo.Queue, false)
	op := postOp(t, e, "/v2/spaces/"+topo.Space+"/resources/"+topo.DLQ+"/redrive", map[string]any{})
	done, err := e.admin.WaitOp(ctx, topo.Space, op.ID, 30*time.Second)
	if err != nil || done.State != "succeeded" || done.Progress["moved"] != 4 || done.Progress["total"] != 4 {
		t.Fatalf("redrive: %+v %v", done, err)
	}
	back := list(topo.Queue)
	if len(back) != 4 || len(list(topo.DLQ)) != 0 {
		t.Fatalf("after the redrive the source lists %d, the dead-letter queue %d", len(back), len(list(topo.DLQ)))
	}
	for _, it := range back {
		if it.DeadLetter != nil || it.Attempts != 0 {
			t.Fatalf("a redriven message is listed %+v", it)
		}
	}
}
