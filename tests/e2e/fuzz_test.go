package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// fuzzHost is one in-process host (package host, DataDir ":memory:")
// driven through its handler, with a small topology to reference.
type fuzzHost struct {
	h       *host.Host
	handler http.Handler
	tok     string
	uids    map[string]string // placeholder -> UID
	targets []string          // PUT targets: queue, consumer, worker, version
}

const fuzzSpace = "fz"

const fuzzWorker = `export default {
  async fetch(request, env) { return new Response("ok"); },
  async queue(batch, env) { batch.acknowledgeAll(); },
};
`

func newFuzzHost(tb testing.TB) *fuzzHost {
	tb.Helper()
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: host.MemoryDataDir, HandlerTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Skipf("in-process host: %v", err)
	}
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Shutdown(sctx)
	})
	fh := &fuzzHost{h: h, handler: h.Handler(), tok: h.AdminToken(), uids: map[string]string{}}
	mk := func(name, form string, spec any) string {
		b, _ := json.Marshal(map[string]any{"name": name, "formUrl": form, "spec": spec})
		rr := fh.do("POST", "/v2/spaces/"+fuzzSpace+"/resources", b)
		if rr.Code != 202 {
			tb.Fatalf("fuzz topology %s: %d %s", name, rr.Code, rr.Body)
		}
		var op harness.Operation
		json.Unmarshal(rr.Body.Bytes(), &op)
		for i := 0; i < 100; i++ {
			g := fh.do("GET", "/v2/spaces/"+fuzzSpace+"/operations/"+op.ID+"?wait=5", nil)
			json.Unmarshal(g.Body.Bytes(), &op)
			if op.State == "succeeded" {
				return op.ResourceUID
			}
			if op.State == "failed" {
				tb.Fatalf("fuzz topology %s failed: %s", name, g.Body)
			}
		}
		tb.Fatalf("fuzz topology %s did not finish", name)
		return ""
	}
	q := mk("q", harness.FormQueue, harness.QueueSpec(0))
	dlq := mk("dlq", harness.FormQueue, harness.QueueSpec(0))
	w := mk("w", harness.FormWorker, map[string]any{"handlers": []string{"fetch", "queue"}})
	v := mk("w-v1", harness.FormVersion, map[string]any{"worker": harness.Ref(w), "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": fuzzWorker}},
		"queueProducerBindings": []any{map[string]any{"name": "Q", "resource": harness.Ref(q)}}})
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"handlers": []string{"fetch", "queue"}, "version": harness.Ref(v)}})
	if rr := fh.do("PUT", "/v2/spaces/"+fuzzSpace+"/resources/"+w, b); rr.Code != 202 {
		tb.Fatalf("select version: %d %s", rr.Code, rr.Body)
	}
	time.Sleep(100 * time.Millisecond)
	cons := mk("c", harness.FormConsumer, map[string]any{"queue": harness.Ref(q), "worker": harness.Ref(w),
		"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 0,
		"deadLetterQueue": harness.Ref(dlq)})
	fh.uids = map[string]string{"QUEUE_UID": q, "DLQ_UID": dlq, "WORKER_UID": w, "VERSION_UID": v, "CONSUMER_UID": cons}
	fh.targets = []string{q, cons, w, v}
	return fh
}

func (fh *fuzzHost) do(method, path string, body []byte) *httptest.ResponseRecorder {
	var rd io.Reader = http.NoBody
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+fh.tok)
	rr := httptest.NewRecorder()
	fh.handler.ServeHTTP(rr, req)
	return rr
}

// settle waits for a 202's Operation, so that it cannot change the state
// under the next input.
func (fh *fuzzHost) settle(rr *httptest.ResponseRecorder) {
	if rr.Code != 202 {
		return
	}
	var op harness.Operation
	if json.Unmarshal(rr.Body.Bytes(), &op) != nil || op.ID == "" {
		return
	}
	for i := 0; i < 5; i++ {
		g := fh.do("GET", "/v2/spaces/"+fuzzSpace+"/operations/"+op.ID+"?wait=2", nil)
		if json.Unmarshal(g.Body.Bytes(), &op) != nil || op.State == "succeeded" || op.State == "failed" {
			return
		}
	}
}

// expand replaces the UID placeholders seeds use.
func (fh *fuzzHost) expand(b []byte) []byte {
	for k, v := range fh.uids {
		b = bytes.ReplaceAll(b, []byte(k), []byte(v))
	}
	return b
}

// state is a digest of every resource (uid, name, generation, spec) of the
// space: what a refused request must not change.
func (fh *fuzzHost) state(t *testing.T) string {
	rr := fh.do("GET", "/v2/spaces/"+fuzzSpace+"/resources", nil)
	if rr.Code != 200 {
		t.Fatalf("list: %d %s", rr.Code, rr.Body)
	}
	var l struct {
		Items []struct {
			UID        string          `json:"uid"`
			Name       string          `json:"name"`
			Generation int64           `json:"generation"`
			Spec       json.RawMessage `json:"spec"`
			State      string          `json:"state"`
		} `json:"items"`
	}
	if err := json.Unmarshal(rr.Body.Bytes(), &l); err != nil {
		t.Fatalf("list: %v", err)
	}
	var s []string
	for _, it := range l.Items {
		s = append(s, fmt.Sprintf("%s %s %d %s", it.UID, it.Name, it.Generation, it.Spec))
	}
	sort.Strings(s)
	return strings.Join(s, "\n")
}

// checkAnswer applies the fuzz invariants to one answer.
func checkAnswer(t *testing.T, rr *httptest.ResponseRecorder, before, after string, input []byte) {
	t.Helper()
	st := rr.Code
	if st >= 500 && st != 503 {
		t.Fatalf("%d for %q: %s", st, trunc(input), rr.Body)
	}
	if st >= 400 && st < 500 {
		if ct := rr.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			t.Fatalf("%d with Content-Type %q for %q", st, ct, trunc(input))
		}
		var p harness.Problem
		if err := json.Unmarshal(rr.Body.Bytes(), &p); err != nil || p.Code == "" || p.Status != st {
			t.Fatalf("%d with a problem that has no code or another status (%v): %s", st, err, rr.Body)
		}
		if before != after {
			t.Fatalf("%d %s changed the state for %q:\nbefore:\n%s\nafter:\n%s", st, p.Code, trunc(input), before, after)
		}
	}
	if st != 202 && (st < 400 || st >= 600) {
		t.Fatalf("unexpected status %d for %q: %s", st, trunc(input), rr.Body)
	}
}

func trunc(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func createSeeds() []string {
	fq := harness.FormQueue
	return []string{
		`{"name":"a","formUrl":"` + fq + `","spec":{"deliveryDelaySeconds":0,"messageRetentionSeconds":86400}}`,
		`{"name":"b","formUrl":"` + fq + `","offering":"embedded","spec":{"messageRetentionSeconds":60}}`,
		`{"name":"c","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":60.0}}`,
		`{"name":"c","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":6e1}}`,
		`{"name":"c","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":"60"}}`,
		`{"name":"c","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":-0}}`,
		`{"name":"c","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":99999999999999999999999}}`,
		`{"name":"c","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":60},"privateInputs":{"secrets":{"A":"b"}}}`,
		`{"name":"c","formUrl":"` + fq + `","offering":"other","spec":{"messageRetentionSeconds":60}}`,
		`{"name":"c","formUrl":"` + strings.TrimSuffix(fq, "/") + `","spec":{"messageRetentionSeconds":60}}`,
		`{"name":"Bad_Name","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":60}}`,
		`{"name":"q","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":60}}`,
		`{"name":"c2","formUrl":"` + harness.FormConsumer + `","spec":{"queue":{"resourceUid":"DLQ_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":1,"maxBatchTimeoutSeconds":0,"maxConcurrency":1,"maxRetries":0,"retryDelaySeconds":0,"deadLetterQueue":{"resourceUid":"QUEUE_UID"}}}`,
		`{"name":"c3","formUrl":"` + harness.FormConsumer + `","spec":{"queue":{"resourceUid":"QUEUE_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":1,"maxBatchTimeoutSeconds":0,"maxConcurrency":1,"maxRetries":0,"retryDelaySeconds":0}}`,
		`{"name":"c4","formUrl":"` + harness.FormConsumer + `","spec":{"queue":{"resourceUid":"VERSION_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":1,"maxBatchTimeoutSeconds":0,"maxConcurrency":1,"maxRetries":0,"retryDelaySeconds":0}}`,
		`{"name":"v2","formUrl":"` + harness.FormVersion + `","spec":{"worker":{"resourceUid":"WORKER_UID"},"mainModule":"m.js","modules":[{"name":"m.js","content":"export default { fetch() { return new Response('x') } }"}]},"privateInputs":{"secrets":{"S":"v"}}}`,
		`{"name":"v3","formUrl":"` + harness.FormVersion + `","spec":{"worker":{"resourceUid":"WORKER_UID"},"mainModule":"m.js","modules":[{"name":"m.js","content":"export default {"}]}}`,
		`{"name":"v4","formUrl":"` + harness.FormVersion + `","spec":{"worker":{"resourceUid":"WORKER_UID"},"mainModule":"m.js","modules":[{"name":"m.js","content":"import x from './nope.js'; export default {}"}]}}`,
		`{"name":"w2","formUrl":"` + harness.FormWorker + `","spec":{"handlers":["fetch","fetch"]}}`,
		`{"name":"w3","formUrl":"` + harness.FormWorker + `","spec":{"handlers":["queue"],"version":{"resourceUid":"VERSION_UID"}}}`,
		`{}`, `[]`, `null`, `"x"`, `{"name":"a"}`, `{"name":"a","formUrl":1,"spec":{}}`,
		`{"name":"a","formUrl":"` + fq + `","spec":{},"extra":1}`,
		`{"name":"a","name":"b","formUrl":"` + fq + `","spec":{"messageRetentionSeconds":60}}`,
		"{\"name\":\"\xff\xfe\",\"formUrl\":\"" + fq + "\",\"spec\":{}}",
		`{"name":"a\u0000","formUrl":"` + fq + `","spec":{}}`,
		strings.Repeat("[", 70) + strings.Repeat("]", 70),
	}
}

// FuzzCreateResourceBody posts arbitrary bytes as a create: never a 5xx
// other than 503, a problem with a code on every 4xx, no state change on a
// 4xx.
func FuzzCreateResourceBody(f *testing.F) {
	for _, s := range createSeeds() {
		f.Add([]byte(s))
	}
	fh := newFuzzHost(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fh.expand(data)
		before := fh.state(t)
		rr := fh.do("POST", "/v2/spaces/"+fuzzSpace+"/resources", in)
		checkAnswer(t, rr, before, fh.state(t), in)
		fh.settle(rr)
	})
}

// FuzzUpdateResourceBody puts arbitrary bytes to one of the topology's
// resources (target picks queue, consumer, worker or version), with the
// same invariants.
func FuzzUpdateResourceBody(f *testing.F) {
	seeds := []struct {
		target uint8
		body   string
	}{
		{0, `{"spec":{"deliveryDelaySeconds":5,"messageRetentionSeconds":86400}}`},
		{0, `{"spec":{"deliveryDelaySeconds":43201,"messageRetentionSeconds":86400}}`},
		{0, `{"spec":{"messageRetentionSeconds":86400},"privateInputs":{}}`},
		{0, `{"spec":{"messageRetentionSeconds":86400},"privateInputs":{"secrets":{"X":"y"}}}`},
		{1, `{"spec":{"queue":{"resourceUid":"QUEUE_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":3,"maxBatchTimeoutSeconds":1,"maxConcurrency":2,"maxRetries":1,"retryDelaySeconds":0,"deadLetterQueue":{"resourceUid":"DLQ_UID"}}}`},
		{1, `{"spec":{"queue":{"resourceUid":"DLQ_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":3,"maxBatchTimeoutSeconds":1,"maxConcurrency":2,"maxRetries":1,"retryDelaySeconds":0}}`},
		{1, `{"spec":{"queue":{"resourceUid":"QUEUE_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":3,"maxBatchTimeoutSeconds":1,"maxConcurrency":2,"maxRetries":1,"retryDelaySeconds":0,"deadLetterQueue":{"resourceUid":"QUEUE_UID"}}}`},
		{1, `{"spec":{"queue":{"resourceUid":"QUEUE_UID"},"worker":{"resourceUid":"WORKER_UID"},"maxBatchSize":0,"maxBatchTimeoutSeconds":1,"maxConcurrency":2,"maxRetries":1,"retryDelaySeconds":0}}`},
		{2, `{"spec":{"handlers":["fetch"],"version":{"resourceUid":"VERSION_UID"}}}`},
		{2, `{"spec":{"handlers":["fetch","queue"]}}`},
		{2, `{"spec":{"handlers":["fetch","queue"],"version":{"resourceUid":"QUEUE_UID"}}}`},
		{3, `{"spec":{"worker":{"resourceUid":"WORKER_UID"},"mainModule":"main.js","modules":[{"name":"main.js","content":"x"}]}}`},
		{3, `{"spec":{}}`},
		{0, `{}`}, {0, `{"spec":null}`}, {1, `{"spec":[]}`}, {2, `not json`}, {3, ``},
	}
	for _, s := range seeds {
		f.Add(s.target, []byte(s.body))
	}
	fh := newFuzzHost(f)
	f.Fuzz(func(t *testing.T, target uint8, data []byte) {
		uid := fh.targets[int(target)%len(fh.targets)]
		in := fh.expand(data)
		before := fh.state(t)
		rr := fh.do("PUT", "/v2/spaces/"+fuzzSpace+"/resources/"+uid, in)
		checkAnswer(t, rr, before, fh.state(t), in)
		fh.settle(rr)
	})
}
