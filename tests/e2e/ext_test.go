package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// deliveryState reads the inactive-delivery extension's state of uid.
func deliveryState(t *testing.T, e *env, space, uid string) (queue string, active bool) {
	t.Helper()
	r, err := e.admin.Do(ctxT(t, 20*time.Second), "GET", "/v2/spaces/"+space+"/resources/"+uid+"/delivery", nil, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("GET delivery of %s: %v %s", uid, err, r)
	}
	var st struct {
		QueueUID string `json:"queueUid"`
		Active   bool   `json:"active"`
	}
	if err := r.JSON(&st); err != nil {
		t.Fatal(err)
	}
	return st.QueueUID, st.Active
}

func setDelivery(t *testing.T, e *env, space, uid string, active bool) {
	t.Helper()
	r, err := e.admin.Do(ctxT(t, 20*time.Second), "PUT", "/v2/spaces/"+space+"/resources/"+uid+"/delivery", map[string]any{"active": active}, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("PUT delivery of %s active=%v: %v %s", uid, active, err, r)
	}
}

// TestPauseAcrossRestart (the inactive-delivery extension, spec/peers.md):
// on the real binary, a batch running when the queue is paused finishes
// and is acknowledged; a message sent while paused is accepted and not
// delivered, not even after the host is killed and started again (the
// state is durable); after resume it is delivered once.
func TestPauseAcrossRestart(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 1})
	sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("running", "sleep:1500")})
	if err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(10*time.Second, func() error {
		if len(e.rec.Deliveries("running")) == 0 {
			return fmt.Errorf("running not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	setDelivery(t, e, topo.Space, topo.Queue, false)
	sr, _, err = harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", []string{body("held", "ack")})
	if err != nil || !sr.OK {
		t.Fatalf("send while paused: %v %+v", err, sr)
	}
	// The running batch finishes and acknowledges: one message is left.
	if err := harness.Poll(20*time.Second, func() error {
		n, err := e.admin.MessageCount(ctx, topo.Space, topo.Queue)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("messageCount %d, want 1 (the running batch acknowledged, the held message kept)", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if n := len(e.rec.Deliveries("held")); n != 0 {
		t.Fatalf("a paused queue delivered a message sent while paused (%d times)", n)
	}

	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	if q, active := deliveryState(t, e, topo.Space, topo.Queue); active || q != topo.Queue {
		t.Fatalf("after the restart the queue reads queueUid %s active %v, want %s inactive", q, active, topo.Queue)
	}
	if q, active := deliveryState(t, e, topo.Space, topo.Consumer); active || q != topo.Queue {
		t.Fatalf("after the restart the consumer reads queueUid %s active %v, want %s inactive", q, active, topo.Queue)
	}
	time.Sleep(3 * time.Second)
	if n := len(e.rec.Deliveries("held")); n != 0 {
		t.Fatalf("a queue paused before the restart delivered after it (%d times)", n)
	}

	setDelivery(t, e, topo.Space, topo.Queue, true)
	if err := harness.Poll(20*time.Second, func() error {
		if n := len(e.rec.Deliveries("held")); n != 1 {
			return fmt.Errorf("held delivered %d times after resume, want 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rec.Deliveries("running")); n != 1 {
		t.Errorf("the batch that ran during the pause was delivered %d times, want 1", n)
	}
}

// TestInspectOnTheBinary (the inspection extension): the counts and the
// pages of a queue on the real binary, before and after a restart.
func TestInspectOnTheBinary(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{NoConsumers: true})
	var bodies []string
	for i := range 30 {
		bodies = append(bodies, body(fmt.Sprintf("i%02d", i), "ack"))
	}
	sr, _, err := harness.Send(ctx, e.admin, topo.Space, topo.Worker, "WORK", bodies)
	if err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	// Before a restart the pages follow the engine's accept order, the
	// send's input order; after it, messages of one accept millisecond are
	// in ID order (the store's load order), so only the set is compared.
	check := func(when string, inputOrder bool) {
		t.Helper()
		r, err := e.admin.Do(ctx, "GET", "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue+"/stats", nil, nil)
		if err != nil || r.Status != 200 {
			t.Fatalf("%s: stats: %v %s", when, err, r)
		}
		var st struct {
			Messages int `json:"messages"`
			ByState  struct {
				Available int `json:"available"`
			} `json:"byState"`
		}
		if err := r.JSON(&st); err != nil || st.Messages != 30 || st.ByState.Available != 30 {
			t.Fatalf("%s: stats %s", when, r.Body)
		}
		var ids []string
		tok := ""
		for range 10 {
			p := "/v2/spaces/" + topo.Space + "/resources/" + topo.Queue + "/messages?limit=7"
			if tok != "" {
				p += "&pageToken=" + tok
			}
			r, err := e.admin.Do(ctx, "GET", p, nil, nil)
			if err != nil || r.Status != 200 {
				t.Fatalf("%s: messages: %v %s", when, err, r)
			}
			var pg struct {
				Items []struct {
					ID string `json:"id"`
				} `json:"items"`
				NextPageToken string `json:"nextPageToken"`
			}
			if err := r.JSON(&pg); err != nil {
				t.Fatal(err)
			}
			for _, it := range pg.Items {
				ids = append(ids, it.ID)
			}
			if tok = pg.NextPageToken; tok == "" {
				break
			}
		}
		want := slices.Clone(sr.IDs)
		if !inputOrder {
			slices.Sort(want)
			slices.Sort(ids)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("%s: pages listed %v, want %v", when, ids, want)
		}
	}
	check("before the restart", true)
	if err := e.host.Kill(); err != nil {
		t.Fatal(err)
	}
	e.start()
	check("after the restart", false)
}
