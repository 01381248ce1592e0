package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestSecretsNeverLeak runs a full scenario with a WorkerVersion holding
// privateInputs.secrets (creation, reads, lists, Operations, fetch, a
// thrown error, logs, deliveries, refused updates and creates that carry the
// secret, idempotent replays, a restart) and greps every response body and
// header, the host's whole output, every Operation and every problem for
// the secret value.
func TestSecretsNeverLeak(t *testing.T) {
	secret := "s3cr3t-" + harness.NewToken()
	e := startEnv(t, hostOpts{noStart: true})
	var mu sync.Mutex
	var seen []*harness.Response
	e.start()
	e.admin.Record = func(r *harness.Response) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
	}
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{Secrets: map[string]string{"API_SECRET": secret}, MaxBatchSize: 1})
	c := e.admin
	sp := "/v2/spaces/" + topo.Space
	do := func(method, path string, b any, hdr http.Header) *harness.Response {
		t.Helper()
		t0 := time.Now()
		r, err := c.Do(ctx, method, path, b, hdr)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Logf("slow answer (%s): %s", d.Round(time.Millisecond), r)
		}
		return r
	}

	// Reads.
	do("GET", sp+"/resources/"+topo.Version, nil, nil)
	do("GET", sp+"/resources", nil, nil)
	do("GET", sp+"/resources?formUrl="+harness.FormVersion, nil, nil)
	// The worker really has the secret: it sends it as a credential to the
	// recorder's sink (that is the worker's business, not a host leak).
	r := do("POST", sp+"/resources/"+topo.Worker+"/fetch/secret-use", "{}", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"hasSecret":true`) {
		t.Fatalf("secret-use: %s", r)
	}
	got := false
	for _, h := range e.rec.SinkHeaders() {
		if h.Get("Authorization") == "Bearer "+secret {
			got = true
		}
	}
	if !got {
		t.Fatalf("the worker's env did not carry the secret to its outbound call")
	}
	r = do("POST", sp+"/resources/"+topo.Worker+"/fetch/secret-throw", "{}", nil)
	if r.Status != 500 {
		t.Errorf("a throwing fetch handler answered %s, want 500 worker_error", r)
	} else {
		checkProblem(t, r, "worker_error")
	}
	// Deliveries run with the secret in env.
	if sr, _, err := harness.Send(ctx, c, topo.Space, topo.Worker, "WORK", []string{body("sec-1", "ack"), body("sec-2", "throw")}); err != nil || !sr.OK {
		t.Fatalf("send: %v %+v", err, sr)
	}
	if err := harness.Poll(20*time.Second, func() error {
		if len(e.rec.Deliveries("sec-1")) == 0 {
			return fmt.Errorf("sec-1 not delivered")
		}
		return nil
	}); err != nil {
		t.Errorf("%v; events: %d", err, e.rec.Len())
	}

	// Refusals that carry the secret in the request.
	vspec := func(extra map[string]any) map[string]any {
		s := map[string]any{
			"worker": harness.Ref(topo.Worker), "mainModule": "worker.js",
			"modules": []any{map[string]any{"name": "worker.js", "content": harness.WorkerJS}},
			"vars":    map[string]any{"RECORDER": e.rec.URL(), "SCOPE": "x", "DLQ": "dead"},
		}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	refusals := []struct {
		name string
		body map[string]any
	}{
		{"secret name not an identifier", map[string]any{"name": "v-bad1", "formUrl": harness.FormVersion, "spec": vspec(nil),
			"privateInputs": map[string]any{"secrets": map[string]any{"bad-name": secret}}}},
		{"secret name collides with a var", map[string]any{"name": "v-bad2", "formUrl": harness.FormVersion, "spec": vspec(nil),
			"privateInputs": map[string]any{"secrets": map[string]any{"RECORDER": secret}}}},
		{"unknown privateInputs member", map[string]any{"name": "v-bad3", "formUrl": harness.FormVersion, "spec": vspec(nil),
			"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": secret}, "extra": secret}}},
		{"secret value not a string", map[string]any{"name": "v-bad4", "formUrl": harness.FormVersion, "spec": vspec(nil),
			"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": []any{secret}}}}},
		{"module syntax error", map[string]any{"name": "v-bad5", "formUrl": harness.FormVersion,
			"spec":          vspec(map[string]any{"modules": []any{map[string]any{"name": "worker.js", "content": "export default { fetch( }"}}}),
			"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": secret}}}},
		{"secrets on a queue", map[string]any{"name": "q-bad", "formUrl": harness.FormQueue, "spec": harness.QueueSpec(0),
			"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": secret}}}},
		{"secret in the wrong member", map[string]any{"name": "q-bad2", "formUrl": harness.FormQueue, "spec": harness.QueueSpec(0),
			"privateInputs": secret}},
	}
	for _, rf := range refusals {
		r := do("POST", sp+"/resources", rf.body, nil)
		if r.Status < 400 || r.Status >= 500 {
			t.Errorf("%s: want a 4xx problem, got %s", rf.name, r)
		}
	}
	// An update of the immutable version with another secret value.
	r = do("PUT", sp+"/resources/"+topo.Version, map[string]any{"spec": vspec(nil),
		"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": secret + "-changed"}}}, nil)
	if r.Status != 422 {
		t.Errorf("PUT of an immutable version: %s", r)
	}
	// Idempotent create with the secret, its replay, and a reuse with
	// another secret value.
	good := map[string]any{"name": "v-idem", "formUrl": harness.FormVersion, "spec": vspec(nil),
		"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": secret}}}
	key := http.Header{"Idempotency-Key": {"secret-idem-1"}}
	r1 := do("POST", sp+"/resources", good, key)
	r2 := do("POST", sp+"/resources", good, key)
	if r1.Status != 202 || r2.Status != 202 || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("idempotent create and replay: %s / %s", r1, r2)
	}
	other := map[string]any{"name": "v-idem", "formUrl": harness.FormVersion, "spec": vspec(nil),
		"privateInputs": map[string]any{"secrets": map[string]any{"API_SECRET": secret + "-2"}}}
	if r3 := do("POST", sp+"/resources", other, key); r3.Code() != "idempotency_key_reuse" {
		t.Errorf("key reuse with another secret: %s", r3)
	}
	do("GET", sp+"/resources/"+topo.Worker+"/logs", nil, nil)

	// Every Operation seen so far, before and after a restart.
	opIDs := map[string]bool{}
	mu.Lock()
	for _, r := range seen {
		var op harness.Operation
		if r.Status == 202 && json.Unmarshal(r.Body, &op) == nil && op.ID != "" {
			opIDs[op.ID] = true
		}
	}
	mu.Unlock()
	for id := range opIDs {
		do("GET", sp+"/operations/"+id, nil, nil)
	}
	code, took, err := e.host.Term(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGTERM: exit %d after %s", code, took.Round(time.Millisecond))
	e.start()
	do("GET", sp+"/resources/"+topo.Version, nil, nil)
	do("GET", sp+"/resources", nil, nil)
	for id := range opIDs {
		do("GET", sp+"/operations/"+id, nil, nil)
	}
	do("GET", sp+"/resources/"+topo.Worker+"/logs?limit=1000", nil, nil)

	// The grep.
	mu.Lock()
	defer mu.Unlock()
	problems := 0
	for _, r := range seen {
		if r.Problem != nil {
			problems++
		}
		if strings.Contains(string(r.Body), secret) {
			t.Errorf("secret in the body of %s", r)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, secret) {
					t.Errorf("secret in header %s of %s %s", k, r.Method, r.Path)
				}
			}
		}
		if strings.Contains(string(r.Body), "privateInputs") && r.Status == 200 {
			t.Errorf("privateInputs appears in a read: %s", r)
		}
	}
	out := e.host.Out.String()
	if strings.Contains(out, secret) {
		i := strings.Index(out, secret)
		lo := max(0, i-300)
		t.Errorf("secret in the host's output: ...%s...", out[lo:min(len(out), i+100)])
	}
	t.Logf("grepped %d responses (%d problems, %d Operations) and %d bytes of host output: the secret is absent", len(seen), problems, len(opIDs), len(out))
}
