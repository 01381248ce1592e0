package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestSIGTERMUnderLoad stops the host with SIGTERM while handlers run and
// sends arrive: it must exit 0 within the grace period, let the handler
// that finishes in time settle, acknowledge nothing unsettled (the handler
// still running when the grace ends is delivered again after restart, with
// attempts + 1), take no new batch once stopping, and restart cleanly.
func TestSIGTERMUnderLoad(t *testing.T) {
	const grace = 2 * time.Second
	e := startEnv(t, hostOpts{args: []string{"-shutdown-grace", grace.String(), "-handler-timeout", "20s"}})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxRetries: 5, MaxBatchSize: 1, Concurrency: 4})
	c := e.admin

	sent := map[string]string{} // key -> id
	var mu sync.Mutex
	send := func(k string, do any) error {
		sr, _, err := harness.Send(ctx, c, topo.Space, topo.Worker, "WORK", []string{body(k, do)})
		if err != nil {
			return err
		}
		if !sr.OK {
			return fmt.Errorf("send %s rejected: %s %s", k, sr.Name, sr.Message)
		}
		mu.Lock()
		sent[k] = sr.IDs[0]
		mu.Unlock()
		return nil
	}
	// slow outlives the grace period; quick finishes inside it.
	if err := send("slow", []string{"sleep:8000", "ack"}); err != nil {
		t.Fatal(err)
	}
	if err := send("quick", []string{"sleep:700", "ack"}); err != nil {
		t.Fatal(err)
	}
	if err := harness.Poll(20*time.Second, func() error {
		if len(e.rec.Deliveries("slow")) == 0 || len(e.rec.Deliveries("quick")) == 0 {
			return fmt.Errorf("slow and quick not both delivered yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Load while stopping: sends keep coming until the host refuses them.
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	loadErrs := map[string]int{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			default:
			}
			k := fmt.Sprintf("load-%d", i)
			sr, r, err := harness.Send(ctx, c, topo.Space, topo.Worker, "WORK", []string{body(k, "ack")})
			mu.Lock()
			switch {
			case err == nil && sr.OK:
				sent[k] = sr.IDs[0]
			case err == nil:
				loadErrs["rejected "+sr.Name]++
			case r != nil:
				loadErrs[fmt.Sprintf("status %d %s", r.Status, r.Code())]++
				if r.Status >= 500 && r.Status != 503 {
					t.Errorf("send during shutdown answered %s", r)
				}
			default:
				loadErrs["transport"]++
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)

	termAt := time.Now()
	code, took, err := e.host.Term(grace + 10*time.Second)
	close(stopLoad)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if took > grace+3*time.Second {
		t.Errorf("SIGTERM took %s, grace is %s", took, grace)
	}
	t.Logf("SIGTERM: exit %d after %s (grace %s); sends during shutdown: %v", code, took.Round(time.Millisecond), grace, loadErrs)

	// No batch may start once the host is stopping (1 s of slack for the
	// signal and the report's trip).
	for _, ev := range e.rec.Events() {
		if ev.Kind == "delivery" && ev.Recv.After(termAt.Add(time.Second)) {
			t.Errorf("a batch started %s after SIGTERM: %+v", ev.Recv.Sub(termAt).Round(time.Millisecond), ev.Messages)
		}
	}
	quickAcked := false
	for _, ev := range e.rec.Events() {
		if ev.Kind == "settled" {
			for _, id := range ev.Acked {
				if id == sent["quick"] {
					quickAcked = true
				}
			}
		}
	}
	if !quickAcked {
		t.Errorf("the handler that finished inside the grace period did not see its acknowledgement resolve")
	}
	if n := len(e.rec.Deliveries("slow")); n != 1 {
		t.Errorf("slow delivered %d times before restart, want 1", n)
	}
	before := e.rec.Len()

	// Clean restart; the interrupted message comes back with attempts 2.
	e.start()
	if err := harness.Poll(30*time.Second, func() error {
		ds := e.rec.Deliveries("slow")
		if len(ds) < 2 {
			return fmt.Errorf("slow delivered %d times, want a redelivery after restart", len(ds))
		}
		if ds[1].Msg.Attempts != 2 || ds[1].Msg.ID != sent["slow"] {
			return fmt.Errorf("slow redelivered as %+v, want id %s attempts 2", ds[1].Msg, sent["slow"])
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// Everything sent is acknowledged; nothing acknowledged comes back.
	mu.Lock()
	keys := make(map[string]string, len(sent))
	for k, v := range sent {
		keys[k] = v
	}
	mu.Unlock()
	if err := harness.Poll(30*time.Second, func() error {
		acked := ackedIDs(e.rec, topo.QueueName)
		for k, id := range keys {
			if _, ok := acked[id]; !ok {
				return fmt.Errorf("%s (%s) not acknowledged yet", k, id)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	time.Sleep(time.Second)
	if d := dupsAfterAck(e.rec); len(d) > 0 {
		t.Errorf("delivered again after a resolved acknowledgement: %v", d)
	}
	if n := len(e.rec.Deliveries("quick")); n != 1 {
		t.Errorf("quick (acknowledged inside the grace period) delivered %d times", n)
	}
	t.Logf("after restart: %d more events; %d messages sent in all", e.rec.Len()-before, len(keys))
}

// ackedIDs is queue's message IDs whose acknowledgement resolved.
func ackedIDs(rec *harness.Recorder, queue string) map[string]int {
	out := map[string]int{}
	for _, ev := range rec.Events() {
		if ev.Kind == "settled" && ev.Queue == queue {
			for _, id := range ev.Acked {
				if _, ok := out[id]; !ok {
					out[id] = ev.Seq
				}
			}
		}
	}
	return out
}

// dupsAfterAck lists deliveries reported after the message's
// acknowledgement was reported resolved.
func dupsAfterAck(rec *harness.Recorder) []string {
	evs := rec.Events()
	at := map[string]int{}
	for _, ev := range evs {
		if ev.Kind == "settled" {
			for _, id := range ev.Acked {
				if _, ok := at[ev.Queue+"/"+id]; !ok {
					at[ev.Queue+"/"+id] = ev.Seq
				}
			}
		}
	}
	var out []string
	for _, ev := range evs {
		if ev.Kind != "delivery" {
			continue
		}
		for _, m := range ev.Messages {
			if s, ok := at[ev.Queue+"/"+m.ID]; ok && ev.Seq > s {
				out = append(out, fmt.Sprintf("%s/%s key %s attempts %d", ev.Queue, m.ID, m.K, m.Attempts))
			}
		}
	}
	return out
}
