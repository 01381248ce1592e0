package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/store"
)

func TestWaitLongPoll(t *testing.T) {
	release := make(chan struct{})
	paused := make(chan struct{}, 1)
	h := newHarness(t, nil, func(o *controller.Options) { o.SyncWait = 10 * time.Millisecond }, pauseHook(release, paused))
	r := h.create("s1", "q", fQueue, queueSpec())
	h.expect(r, 202, "")
	if r.str("state") != "running" || r.header.Get("Location") != "/v2/spaces/s1/operations/"+r.str("id") {
		t.Fatalf("accepted: %s %v", r.body, r.header)
	}
	<-paused
	// A short wait returns unfinished, with Retry-After.
	start := time.Now()
	short := h.do("GET", "/v2/spaces/s1/operations/"+r.str("id")+"?wait=1", tAdmin, nil)
	if el := time.Since(start); short.str("state") != "running" || el < 900*time.Millisecond || short.header.Get("Retry-After") != "1" {
		t.Fatalf("wait=1 returned %s after %v", short.body, el)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		close(release)
	}()
	start = time.Now()
	done := h.do("GET", "/v2/spaces/s1/operations/"+r.str("id")+"?wait=30", tAdmin, nil)
	el := time.Since(start)
	if done.str("state") != "succeeded" || el > 5*time.Second || el < 250*time.Millisecond {
		t.Fatalf("long poll returned %s after %v", done.body, el)
	}
}

func TestIdempotency(t *testing.T) {
	h := newHarness(t, nil)
	body := map[string]any{"name": "q", "formUrl": fQueue, "spec": queueSpec()}
	first := h.do("POST", res("s1"), tAdmin, body, "Idempotency-Key", "key-1")
	h.expect(first, 202, "")
	if first.header.Get("Idempotent-Replayed") != "" || first.str("idempotencyKey") != "key-1" {
		t.Fatalf("first: %v %s", first.header, first.body)
	}
	// Same key, same body (members in another order, other white space): the same Operation.
	again := h.do("POST", res("s1"), tAdmin, `{ "spec": {"messageRetentionSeconds": 3600}, "formUrl": "`+fQueue+`", "name": "q" }`, "Idempotency-Key", `"key-1"`)
	h.expect(again, 202, "")
	if again.str("id") != first.str("id") || again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("replay: %v %s", again.header, again.body)
	}
	if n := len(h.list("s1", tAdmin)); n != 1 {
		t.Fatalf("%d resources after a replay", n)
	}
	// Same key, another body.
	body["name"] = "q2"
	h.expect(h.do("POST", res("s1"), tAdmin, body, "Idempotency-Key", "key-1"), 422, "idempotency_key_reuse")
	// The scope includes the principal and the path.
	h.expect(h.do("POST", res("s2"), tAdmin, body, "Idempotency-Key", "key-1"), 202, "")
	// Malformed keys.
	for _, k := range []string{"has space", `"unterminated`, strings.Repeat("k", 256), `"bad\escape"`} {
		h.expect(h.do("POST", res("s1"), tAdmin, body, "Idempotency-Key", k), 400, "invalid_request")
	}
	// DELETE and PUT replays return their Operation even after the resource changed.
	uid := first.str("resourceUid")
	sp := queueSpec()
	sp["deliveryDelaySeconds"] = 3
	p1 := h.put("s1", uid, sp, "Idempotency-Key", "put-1", "If-Match", h.getRes("s1", uid).str("etag"))
	h.expect(p1, 202, "")
	h.waitDone("s1", p1.str("id"))
	p2 := h.put("s1", uid, sp, "Idempotency-Key", "put-1", "If-Match", `"1-stale"`)
	h.expect(p2, 202, "")
	if p2.str("id") != p1.str("id") || p2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("PUT replay: %s", p2.body)
	}
	d1 := h.del("s1", uid, "Idempotency-Key", "del-1")
	h.expect(d1, 202, "")
	h.waitDone("s1", d1.str("id"))
	d2 := h.del("s1", uid, "Idempotency-Key", "del-1")
	h.expect(d2, 202, "")
	if d2.str("id") != d1.str("id") || d2.str("state") != "succeeded" {
		t.Fatalf("DELETE replay: %s", d2.body)
	}
}

func TestStoreFailureChangesNothing(t *testing.T) {
	fs := &failingStore{Store: store.NewMemory()}
	h := newHarness(t, fs)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	fs.fail.Store(true)
	h.expect(h.create("s1", "q2", fQueue, queueSpec()), 503, "backend_unavailable")
	h.expect(h.del("s1", q), 503, "backend_unavailable")
	fs.fail.Store(false)
	if n := len(h.list("s1", tAdmin)); n != 1 {
		t.Fatalf("%d resources", n)
	}
	if ops, _ := fs.UnfinishedOperations(t.Context()); len(ops) != 0 {
		t.Fatalf("unfinished operations: %v", ops)
	}
	if h.eng.callsOf("AddQueue") != 1 || h.eng.callsOf("RemoveQueue") != 0 {
		t.Fatalf("engine calls %v", h.eng.calls)
	}
	// The host recovers once the store does.
	h.mustCreate("s1", "q2", fQueue, queueSpec())
	h.mustDelete("s1", q)
}

func TestConsumerDeleteWaitsForDetach(t *testing.T) {
	h := newHarness(t, nil, func(o *controller.Options) { o.SyncWait = 20 * time.Millisecond })
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	gate := make(chan struct{})
	h.eng.mu.Lock()
	h.eng.detachGate = gate
	h.eng.mu.Unlock()
	d := h.del("s1", c)
	h.expect(d, 202, "")
	time.Sleep(100 * time.Millisecond)
	op := h.do("GET", "/v2/spaces/s1/operations/"+d.str("id"), tAdmin, nil)
	if op.str("state") != "running" || h.getRes("s1", c).str("state") != "deleting" {
		t.Fatalf("before the stop boundary: %s", op.body)
	}
	// The queue stays referenced until the consumer is gone.
	h.expect(h.del("s1", q), 409, "dependency_conflict")
	close(gate)
	if done := h.waitDone("s1", d.str("id")); done.str("state") != "succeeded" || done.str("effect") != "applied" {
		t.Fatalf("after Detach: %s", done.body)
	}
	h.expect(h.getRes("s1", c), 404, "not_found")
	h.mustDelete("s1", q)
}

func TestCreateOfSameNameInProgress(t *testing.T) {
	release := make(chan struct{})
	paused := make(chan struct{}, 1)
	h := newHarness(t, nil, func(o *controller.Options) { o.SyncWait = 10 * time.Millisecond }, pauseHook(release, paused))
	r := h.create("s1", "q", fQueue, queueSpec())
	<-paused
	h.expect(h.create("s1", "q", fQueue, queueSpec()), 409, "operation_in_progress")
	h.expect(h.put("s1", r.str("resourceUid"), queueSpec()), 409, "operation_in_progress")
	// A reference to a resource still being created is refused.
	h.expect(h.create("s1", "w", fVersion, versionSpec("x", queueModule, r.str("resourceUid"))), 422, "invalid_reference")
	close(release)
	h.waitDone("s1", r.str("id"))
	h.expect(h.create("s1", "q", fQueue, queueSpec()), 409, "name_conflict")
}

func TestAttachFailureIsFailedWithoutEffect(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	h.eng.mu.Lock()
	// The engine's error names a host file, as a store's does.
	const hostPath = "/var/lib/takohost/data/journal/00000007.seg"
	h.eng.failAttach = errString("engine refused: write " + hostPath + ": no space left on device")
	h.eng.mu.Unlock()
	r := h.create("s1", "c", fConsumer, consumerSpec(q, w))
	h.expect(r, 202, "")
	op := h.waitDone("s1", r.str("id"))
	if op.str("state") != "failed" || op.str("effect") != "none" || op.str("error", "code") != "backend_unavailable" {
		t.Fatalf("op: %s", op.body)
	}
	// A viewer reads the failed Operation: its backend_unavailable says
	// what happened, never the host's files (the host's log keeps them).
	vop := h.do("GET", "/v2/spaces/s1/operations/"+r.str("id"), tViewer, nil)
	h.expect(vop, 200, "")
	if strings.Contains(string(vop.body), hostPath) || strings.Contains(string(vop.body), "engine refused") {
		t.Fatalf("the Operation's error shows the engine's own text to a viewer: %s", vop.body)
	}
	if !strings.Contains(h.log.String(), hostPath) {
		t.Fatal("the host's log lost the cause")
	}
	h.expect(h.getRes("s1", r.str("resourceUid")), 404, "not_found")
	h.eng.mu.Lock()
	h.eng.failAttach = nil
	h.eng.mu.Unlock()
	h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	h := newHarness(t, nil)
	h.expect(h.do("GET", "/v2/nothing", tAdmin, nil), 404, "not_found")
	h.expect(h.do("GET", "/", "", nil), 404, "not_found")
	r := h.do("PATCH", res("s1"), tAdmin, nil)
	h.expect(r, 405, "method_not_allowed")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow %q", allow)
	}
	h.expect(h.do("GET", "/v2/spaces/s1/operations/op-nope", tAdmin, nil), 404, "not_found")
	// A client request ID is echoed.
	r = h.do("GET", "/v2/nothing", tAdmin, nil, "X-Request-Id", "abc-123")
	if r.header.Get("X-Request-Id") != "abc-123" || r.str("requestId") != "abc-123" {
		t.Fatalf("request id: %v %s", r.header, r.body)
	}
}

func TestAccessLog(t *testing.T) {
	h := newHarness(t, nil)
	h.mustCreate("s1", "q", fQueue, queueSpec())
	log := h.log.String()
	for _, want := range []string{`"method":"POST"`, `"path":"/v2/spaces/s1/resources"`, `"status":202`, `"principal":"admin"`, `"requestId":"req-`, `"durationMs"`} {
		if !strings.Contains(log, want) {
			t.Fatalf("access log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, tAdmin) || strings.Contains(log, "messageRetentionSeconds") {
		t.Fatal("access log holds a token or a body")
	}
}

// restart builds a second server over the same store with a fresh engine,
// as a host restart does (the engine's state is memory only).
func restart(t *testing.T, old *harness, opts ...harnessOpt) *harness {
	t.Helper()
	old.ts.Close()
	old.stop()
	return newHarness(t, old.st, opts...)
}

func TestRestartResumesOperations(t *testing.T) {
	st := store.NewMemory()
	h := newHarness(t, st)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	idem := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "kept", "formUrl": fQueue, "spec": queueSpec()}, "Idempotency-Key", "k")
	h.expect(idem, 202, "")

	// A host that stops after journaling intents (create a queue, update
	// a consumer, delete a consumer).
	release := make(chan struct{})
	paused := make(chan struct{}, 8)
	h = restart(t, h, func(o *controller.Options) { o.SyncWait = 10 * time.Millisecond }, pauseHook(release, paused))
	if !h.eng.has("queue", q) || !h.eng.has("consumer", c) {
		t.Fatal("rebuild did not restore the engine")
	}
	cr := h.create("s1", "q2", fQueue, queueSpec())
	<-paused
	sp := consumerSpec(q, w)
	sp["maxRetries"] = 9
	up := h.put("s1", c, sp)
	<-paused
	h = restart(t, h, func(o *controller.Options) { o.SyncWait = 10 * time.Millisecond }, pauseHook(release, paused))
	dl := h.del("s1", c)
	<-paused

	h = restart(t, h)
	for _, id := range []string{cr.str("id"), up.str("id"), dl.str("id")} {
		if op := h.waitDone("s1", id); op.str("state") != "succeeded" {
			t.Fatalf("resumed %s: %s", id, op.body)
		}
	}
	if !h.eng.has("queue", cr.str("resourceUid")) || h.eng.has("consumer", c) {
		t.Fatalf("engine after recovery: %v", h.eng.calls)
	}
	if h.eng.callsOf("Attach "+c) != 0 {
		t.Fatal("a consumer being deleted was re-attached")
	}
	var names []string
	for _, it := range h.list("s1", tAdmin) {
		names = append(names, it["name"].(string))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"kept", "q", "q2", "w", "w-v1"}) {
		t.Fatalf("resources after recovery: %v", names)
	}
	// The idempotency key survives the restarts.
	again := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "kept", "formUrl": fQueue, "spec": queueSpec()}, "Idempotency-Key", "k")
	if again.status != 202 || again.str("id") != idem.str("id") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay after restart: %s", again.body)
	}
	_ = context.Background
}
