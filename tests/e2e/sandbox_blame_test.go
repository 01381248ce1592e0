package e2e

import (
	"fmt"
	"net/http"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestSandboxCrashChargesOnlyItsCause: one poison message whose handler
// exhausts its sandbox's memory, delivered while four innocent batches of
// the same worker are running in the same sandbox (the recorder's gate
// holds each innocent until the sandbox ends, and lets the poison start
// allocating only once all four are held). With maxRetries 1 and a
// dead-letter queue: every innocent message is delivered with attempts 1
// only and acknowledged (the batches the end interrupted ran again alone,
// in the same attempt); the poison is charged, delivered twice and
// dead-lettered.
func TestSandboxCrashChargesOnlyItsCause(t *testing.T) {
	const innocents = 4
	e := startEnv(t, hostOpts{})
	var mu sync.Mutex
	held := 0
	ended := make(chan struct{})
	var once sync.Once
	e.rec.SetGate(func(r *http.Request) {
		switch path.Base(r.URL.Path) {
		case "innocent":
			select {
			case <-ended:
				return
			default:
			}
			mu.Lock()
			held++
			mu.Unlock()
			select {
			case <-r.Context().Done(): // the sandbox that asked ended
				once.Do(func() { close(ended) })
			case <-ended:
			case <-time.After(60 * time.Second):
			}
		case "hog":
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := held
				mu.Unlock()
				if n >= innocents {
					return
				}
			}
		}
	})
	topo := e.topology(harness.TopologyOptions{MaxRetries: 1, MaxBatchSize: 1, Concurrency: innocents + 1})
	ctx := ctxT(t, 180*time.Second)
	var bodies []string
	for i := range innocents {
		bodies = append(bodies, body(fmt.Sprintf("innocent-%d", i), "gate:innocent"))
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("poison", "hog")}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}

	acked := func(id string) bool {
		for _, ev := range e.rec.Events() {
			for _, a := range ev.Acked {
				if a == id {
					return true
				}
			}
		}
		return false
	}
	err := harness.Poll(120*time.Second, func() error {
		for i := range innocents {
			k := fmt.Sprintf("innocent-%d", i)
			d := e.rec.Deliveries(k)
			if len(d) == 0 || !acked(d[0].Msg.ID) {
				return fmt.Errorf("%s not acknowledged yet (deliveries %+v)", k, d)
			}
		}
		for _, d := range e.rec.Deliveries("poison") {
			if d.Queue == topo.DLQName {
				return nil
			}
		}
		return fmt.Errorf("the poison message is not dead-lettered yet (deliveries %+v)", e.rec.Deliveries("poison"))
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("the innocent batches were not running when the sandbox ended")
	}
	for i := range innocents {
		k := fmt.Sprintf("innocent-%d", i)
		for _, d := range e.rec.Deliveries(k) {
			if d.Queue != topo.QueueName || d.Msg.Attempts != 1 {
				t.Errorf("%s delivered on %s with attempts %d; want only attempts 1 on %s", k, d.Queue, d.Msg.Attempts, topo.QueueName)
			}
		}
	}
	var poison []int
	for _, d := range e.rec.Deliveries("poison") {
		if d.Queue == topo.QueueName {
			poison = append(poison, d.Msg.Attempts)
		}
	}
	if len(poison) == 0 || poison[len(poison)-1] != 2 {
		t.Errorf("poison deliveries on %s with attempts %v; want the last at 2 (1 + maxRetries)", topo.QueueName, poison)
	}
	if !e.host.Running() {
		t.Fatal("the host process ended")
	}
}
