package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestPartialBatchNotHeld: with maxBatchTimeoutSeconds 0 ("0 does not
// wait", QC-INPUT-8) a batch that is not full is delivered at once; nothing else has
// to happen on the queue (another send, a settlement, a restart) for it to
// go out.
func TestPartialBatchNotHeld(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 60*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 5})
	start := time.Now()
	sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("lonely", "ack")})
	if err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(5*time.Second, func() error {
		if len(e.rec.Deliveries("lonely")) == 0 {
			return fmt.Errorf("one message in a queue whose consumer has maxBatchSize 5 and maxBatchTimeoutSeconds 0 is not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if d := e.rec.Deliveries("lonely")[0]; d.Msg.Attempts != 1 || d.Msg.ID != sr.IDs[0] {
		t.Errorf("delivered as %+v, want id %s attempts 1", d.Msg, sr.IDs[0])
	}
	t.Logf("a partial batch went out after %s", time.Since(start).Round(time.Millisecond))
}
