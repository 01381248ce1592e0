package host

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// The purge and redrive extensions (spec/peers.md §Purge, §Redrive) across
// a restart of the whole host on its journal: an Operation journaled up to
// its intent, or a redrive half done, is resumed by the next start and ends
// with every message accounted for exactly once.

func startHostHeld(t *testing.T, dir string, hold func(store.Operation) bool) *Host {
	t.Helper()
	return startHostFaulty(t, dir, hold, nil)
}

// startHostFaulty is startHostHeld with the fault hook f (nil: none).
func startHostFaulty(t *testing.T, dir string, hold func(store.Operation) bool, f *Faults) *Host {
	t.Helper()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: 2 * time.Second, Faults: f}
	if hold != nil {
		cfg.AfterIntent = func(ctx context.Context, op store.Operation) {
			if hold(op) {
				<-ctx.Done() // the host stops before the effect
			}
		}
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	return h
}

// journalAt opens the journal of a stopped host and returns the
// Operation id and the bodies of the queues, as the next start finds them.
func journalAt(t *testing.T, dir, id string, queues ...string) (store.Operation, []map[string]int) {
	t.Helper()
	js, _, err := store.Open(t.Context(), dir, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	op, err := js.Operation(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []map[string]int
	for _, q := range queues {
		bodies = append(bodies, storedBodies(t, js, q))
	}
	return op, bodies
}

func sendN(t *testing.T, h *Host, queue, prefix string, n int) {
	t.Helper()
	for i := range n {
		if _, err := h.eng.Send(t.Context(), queue, []abi.OutgoingMessage{{Body: fmt.Appendf(nil, "%s-%02d", prefix, i)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// bodiesOf reads every body a queue holds, from the host's store.
func bodiesOf(t *testing.T, h *Host, queue string) map[string]int {
	t.Helper()
	return storedBodies(t, h.st, queue)
}

func storedBodies(t *testing.T, st store.Store, queue string) map[string]int {
	t.Helper()
	ms, err := st.Messages(t.Context(), queue)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range ms {
		b, err := store.Body(t.Context(), st, queue, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		out[string(b)]++
	}
	return out
}

func waitOp(t *testing.T, c *client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, op, raw := c.do("GET", "/v2/spaces/demo/operations/"+id+"?wait=5", nil)
		if s, _ := op["state"].(string); s == "succeeded" || s == "failed" {
			return op
		}
		if time.Now().After(deadline) {
			t.Fatalf("operation %s did not finish: %s", id, raw)
		}
	}
}

func progress(op map[string]any, k string) int {
	p, _ := op["progress"].(map[string]any)
	f, _ := p[k].(float64)
	return int(f)
}

func TestPurgeResumesAfterARestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	h := startHostHeld(t, dir, func(op store.Operation) bool { return op.Kind == "purge" })
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	sendN(t, h, q, "m", 12)
	st, op, raw := c.do("POST", "/v2/spaces/demo/resources/"+q+"/purge", nil)
	if st != 202 || op["state"] != "running" || op["kind"] != "purge" {
		t.Fatalf("purge: %d %s", st, raw)
	}
	id := op["id"].(string)
	// While it is under way the queue takes no other Operation.
	if st, _, raw := c.do("PUT", "/v2/spaces/demo/resources/"+q+"/delivery", map[string]any{"active": false}); st != 409 {
		t.Fatalf("pause during the purge: %d %s", st, raw)
	}
	h.Shutdown(context.Background())
	// What the journal holds at the stop: the purge journaled up to its
	// intent, and every message.
	stopped, bodies := journalAt(t, dir, id, q)
	if stopped.State != store.OpRunning || stopped.Effect != store.EffectNone {
		t.Fatalf("the purge at the stop: %s/%s, want running/none", stopped.State, stopped.Effect)
	}
	if n := len(bodies[0]); n != 12 {
		t.Fatalf("at the stop the queue holds %d messages, want 12", n)
	}

	// The next start resumes the purge while it starts (it may be over
	// before the host answers anything): it is awaited by its ID, never
	// looked for among the unfinished Operations.
	h2 := startHostHeld(t, dir, nil)
	defer h2.Shutdown(context.Background())
	done := waitOp(t, newClient(t, h2.URL(), h2.AdminToken()), id)
	if done["state"] != "succeeded" || done["effect"] != "applied" || progress(done, "removed") != 12 {
		t.Fatalf("resumed purge: %v", done)
	}
	if n := len(bodiesOf(t, h2, q)); n != 0 {
		t.Fatalf("after the restart the queue holds %d messages", n)
	}
}

func TestRedriveResumesAfterARestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold bool // stop before the first move; else after the fourth
	}{{"after its intent", true}, {"half way", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			var hold func(store.Operation) bool
			if tc.hold {
				hold = func(op store.Operation) bool { return op.Kind == "redrive" }
			}
			faults := &Faults{}
			h := startHostFaulty(t, dir, hold, faults)
			c := newClient(t, h.URL(), h.AdminToken())
			src := c.create("dlq", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
			dst := c.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
			sendN(t, h, src, "m", 20)
			// Half way: the fifth move's write into the target (and every
			// retry of it) fails, so that the redrive stands at exactly
			// four moved whenever the host stops, however slow the
			// machine; the test stops it once that write was refused.
			refused := make(chan struct{}, 1)
			if !tc.hold {
				if err := faults.Add(FaultRule{Mode: FailWrites, Count: 1 << 30, Targets: []string{"sends"}, Scope: dst, Skip: 4, hit: refused}); err != nil {
					t.Fatal(err)
				}
			}
			st, op, raw := c.do("POST", "/v2/spaces/demo/resources/"+src+"/redrive", map[string]any{
				"targetQueue": map[string]any{"resourceUid": dst}, "maxMessagesPerSecond": 10})
			if st != 202 || op["kind"] != "redrive" || progress(op, "total") != 20 {
				t.Fatalf("redrive: %d %s", st, raw)
			}
			id := op["id"].(string)
			want := 0 // moved at the stop
			if !tc.hold {
				<-refused
				want = 4
			}
			h.Shutdown(context.Background())
			// What the journal holds at the stop: every message in exactly
			// one of the queues, and the progress counts those moved.
			stopped, bodies := journalAt(t, dir, id, src, dst)
			a, b := bodies[0], bodies[1]
			checkOnce(t, a, b, 20)
			if moved := progressMoved(stopped); moved != len(b) {
				t.Fatalf("progress says %d moved, the target holds %d", moved, len(b))
			}
			if len(b) != want || stopped.State != store.OpRunning {
				t.Fatalf("at the stop: %d moved, the redrive %s; want %d moved, running", len(b), stopped.State, want)
			}

			// The next start (no faults) resumes it from its progress.
			h2 := startHostHeld(t, dir, nil)
			defer h2.Shutdown(context.Background())
			c2 := newClient(t, h2.URL(), h2.AdminToken())
			done := waitOp(t, c2, id)
			if done["state"] != "succeeded" || progress(done, "moved") != 20 || progress(done, "total") != 20 {
				t.Fatalf("resumed redrive: %v", done)
			}
			a, b = bodiesOf(t, h2, src), bodiesOf(t, h2, dst)
			checkOnce(t, a, b, 20)
			if len(a) != 0 {
				t.Fatalf("%d messages left in the dead-letter queue", len(a))
			}
		})
	}
}

func progressMoved(op store.Operation) int {
	var p struct {
		Moved int `json:"moved"`
	}
	jsonUnmarshal(op.Progress, &p)
	return p.Moved
}

// checkOnce: the n bodies are, between the two queues, each exactly once.
func checkOnce(t *testing.T, a, b map[string]int, n int) {
	t.Helper()
	seen := 0
	for i := range n {
		k := fmt.Sprintf("m-%02d", i)
		if a[k]+b[k] != 1 {
			t.Fatalf("message %s is %d times in the source and %d in the target", k, a[k], b[k])
		}
		seen++
	}
	if len(a)+len(b) != seen {
		t.Fatalf("the queues hold %d and %d messages, want %d in all", len(a), len(b), n)
	}
}

func jsonUnmarshal(b []byte, v any) { _ = json.Unmarshal(b, v) }
