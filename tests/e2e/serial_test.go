package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestSerializedAcrossKill (the serialized-queue extension, spec/peers.md
// §Serialized queues) on the real binary: a queue created in the offering
// "serialized" with a consumer allowing 4 batches at once delivers one
// message at a time in accept order; a head that always throws is
// delivered 1 + maxRetries times in a row and dead-lettered, then the next
// is delivered; the host is killed (SIGKILL) while a head is being handled,
// and after the start the head is delivered again (attempts counted) before
// the rest, and later sends come after everything sent before.
func TestSerializedAcrossKill(t *testing.T) { serializedAcrossKill(t, nil) }

// TestSerializedAcrossKillPostgres is TestSerializedAcrossKill with the
// host's store in PostgreSQL: the offering is a column of the queue's
// record, and the IDs carry the order there too.
func TestSerializedAcrossKillPostgres(t *testing.T) {
	serializedAcrossKill(t, []string{"-store", pgtest.Database(t)})
}

func serializedAcrossKill(t *testing.T, args []string) {
	e := startEnv(t, hostOpts{args: args})
	ctx := ctxT(t, 180*time.Second)
	topo := e.topology(harness.TopologyOptions{Offering: "serialized", MaxBatchSize: 1, Concurrency: 4})
	r, err := e.admin.Do(ctx, "GET", "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue, nil, nil)
	if err != nil || r.Status != 200 || !strings.Contains(string(r.Body), `"offering":"serialized"`) {
		t.Fatalf("the work queue does not read offering serialized: %v %s", err, r)
	}
	var keys, bodies []string
	for i := range 20 {
		k := fmt.Sprintf("s%02d", i)
		do := any("ack")
		switch i {
		case 5:
			do = "throw" // 1 + maxRetries (2) deliveries, then dead-lettered
		case 10:
			do = []string{"sleep:8000", "ack"} // the host is killed meanwhile
		}
		keys = append(keys, k)
		bodies = append(bodies, body(k, do))
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(60*time.Second, func() error {
		if len(e.rec.Deliveries("s10")) == 0 {
			return fmt.Errorf("s10 not delivered yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(e.rec.Deliveries("s11")); n != 0 {
		t.Fatalf("s11 was delivered while the head s10 was being handled")
	}
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	e.start()
	for _, k := range []string{"r1", "r2"} {
		if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body(k, "ack")}); err != nil || !sr.OK {
			t.Fatalf("send %s after the restart: %v %+v", k, err, sr)
		}
		keys = append(keys, k)
	}
	if err := harness.Poll(90*time.Second, func() error {
		if len(e.rec.Deliveries("r2")) == 0 {
			return fmt.Errorf("r2 not delivered yet")
		}
		for _, d := range e.rec.Deliveries("s05") {
			if d.Queue == topo.DLQName {
				return nil
			}
		}
		return fmt.Errorf("s05 has not arrived in the dead-letter queue")
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	pos := map[string]int{}
	for i, k := range keys {
		pos[k] = i
	}
	var seq []string
	last := -1
	var open string // the batch of the work queue being handled
	for _, ev := range e.rec.Events() {
		if ev.Queue != topo.QueueName {
			continue
		}
		if !ev.Recv.Before(killedAt) && open != "" && !strings.HasPrefix(open, "after:") {
			open = "" // the batch the kill ended never reports settled
		}
		switch ev.Kind {
		case "delivery":
			if open != "" {
				t.Fatalf("batch %s was delivered while batch %s was being handled", ev.BatchID, strings.TrimPrefix(open, "after:"))
			}
			open = ev.BatchID
			if !ev.Recv.Before(killedAt) {
				open = "after:" + ev.BatchID
			}
			for _, m := range ev.Messages {
				seq = append(seq, fmt.Sprintf("%s#%d", m.K, m.Attempts))
				p := pos[m.K]
				if p < last {
					t.Fatalf("deliveries out of accept order: %v", seq)
				}
				last = p
			}
		case "settled":
			if strings.TrimPrefix(open, "after:") == ev.BatchID {
				open = ""
			}
		}
	}
	want := []string{"s00#1", "s01#1", "s02#1", "s03#1", "s04#1", "s05#1", "s05#2", "s05#3", "s06#1", "s07#1", "s08#1", "s09#1", "s10#1", "s10#2"}
	for _, k := range keys[11:] {
		want = append(want, k+"#1")
	}
	if fmt.Sprint(seq) != fmt.Sprint(want) {
		t.Fatalf("deliveries from the serialized queue:\n got %v\nwant %v", seq, want)
	}
}
