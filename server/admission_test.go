package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/controller"
)

func TestAuthentication(t *testing.T) {
	h := newHarness(t, nil)
	h.expect(h.do("GET", res("s1"), "", nil), 401, "unauthenticated")
	h.expect(h.do("GET", res("s1"), "nope", nil), 401, "unauthenticated")
	r := h.do("GET", res("s1"), "", nil, "Authorization", "Basic abc")
	h.expect(r, 401, "unauthenticated")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Fatal("no WWW-Authenticate")
	}
	// openapi.json needs no token.
	r = h.do("GET", "/v2/openapi.json", "", nil)
	h.expect(r, 200, "")
	if r.str("openapi") == "" || r.get("paths") == nil {
		t.Fatalf("openapi: %.200s", r.body)
	}
	// Neither does the capabilities document; without one the server declares none.
	r = h.do("GET", "/v2/capabilities", "", nil)
	h.expect(r, 200, "")
	if caps, ok := r.get("capabilities").([]any); !ok || len(caps) != 0 {
		t.Fatalf("capabilities: %.200s", r.body)
	}
}

func TestCrossSpaceIsNotFound(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	// other holds no grant in s1: every route of s1 answers 404.
	h.expect(h.do("GET", res("s1"), tOther, nil), 404, "not_found")
	h.expect(h.do("GET", res("s1")+"/"+q, tOther, nil), 404, "not_found")
	h.expect(h.do("POST", res("s1"), tOther, map[string]any{"name": "x", "formUrl": fQueue, "spec": queueSpec()}), 404, "not_found")
	h.expect(h.do("DELETE", res("s1")+"/"+q, tOther, nil), 404, "not_found")
	// The UID read from s2 is missing too.
	h.expect(h.do("GET", res("s2")+"/"+q, tOther, nil), 404, "not_found")
	h.expect(h.do("DELETE", res("s2")+"/"+q, tOther, nil), 404, "not_found")
}

func TestForbidden(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	h.expect(h.do("POST", res("s1"), tViewer, map[string]any{"name": "x", "formUrl": fQueue, "spec": queueSpec()}), 403, "forbidden")
	h.expect(h.do("DELETE", res("s1")+"/"+q, tViewer, nil), 403, "forbidden")
	h.expect(h.do("GET", res("s1")+"/"+q, tViewer, nil), 200, "")
	if len(h.list("s1", tViewer)) != 1 {
		t.Fatal("viewer list")
	}
}

func TestNarrowedEditor(t *testing.T) {
	h := newHarness(t, nil)
	w, _ := h.worker("s1", "w")
	// queue-editor may create queues ...
	r := h.do("POST", res("s1"), tQueueEd, map[string]any{"name": "mine", "formUrl": fQueue, "spec": queueSpec()})
	h.expect(r, 202, "")
	h.waitDone("s1", r.str("id"))
	// ... but not workers, and cannot read or delete them.
	h.expect(h.do("POST", res("s1"), tQueueEd, map[string]any{"name": "w2", "formUrl": fWorker, "spec": map[string]any{"handlers": []string{"fetch"}}}), 403, "forbidden")
	h.expect(h.do("GET", res("s1")+"/"+w, tQueueEd, nil), 403, "forbidden")
	h.expect(h.do("DELETE", res("s1")+"/"+w, tQueueEd, nil), 403, "forbidden")
	// Lists show only the Forms the principal may read.
	items := h.list("s1", tQueueEd)
	if len(items) != 1 || items[0]["formUrl"] != fQueue {
		t.Fatalf("narrowed list: %v", items)
	}
	if len(h.list("s1", tAdmin)) != 3 {
		t.Fatal("admin list")
	}
}

func TestReferenceNeedsReadPermission(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	// no-worker may create consumers but cannot read ModuleWorkers.
	r := h.do("POST", res("s1"), tNoWorker, map[string]any{"name": "c", "formUrl": fConsumer, "spec": consumerSpec(q, w)})
	h.expect(r, 403, "forbidden")
	if !slices.Equal(r.pointers(), []string{"/spec/worker/resourceUid"}) {
		t.Fatalf("pointers %v", r.pointers())
	}
	if h.eng.callsOf("Attach") != 0 || len(h.list("s1", tAdmin)) != 3 {
		t.Fatal("a refused request had an effect")
	}
}

func TestEnvelope(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "q", "formUrl": fQueue, "spec": queueSpec(), "colour": "red"})
	h.expect(r, 400, "invalid_request")
	if len(r.pointers()) == 0 {
		t.Fatalf("no errors: %s", r.body)
	}
	r = h.do("POST", res("s1"), tAdmin, `{"name":"q","formUrl":"`+fQueue+`","spec":{"messageRetentionSeconds":60}}`, "Content-Type", "text/plain")
	h.expect(r, 400, "invalid_request")
	h.expect(h.do("POST", res("s1"), tAdmin, `{"name":`), 400, "invalid_request")
	big := `{"name":"q","formUrl":"` + fQueue + `","spec":{"messageRetentionSeconds":60,"x":"` + strings.Repeat("a", MaxBodyBytes) + `"}}`
	h.expect(h.do("POST", res("s1"), tAdmin, big), 400, "invalid_request")
	deep := `{"name":"q","formUrl":"` + fQueue + `","spec":{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}`
	r = h.do("POST", res("s1"), tAdmin, deep)
	h.expect(r, 400, "invalid_request")
	if !strings.Contains(r.str("detail"), "64") {
		t.Fatalf("depth detail: %s", r.body)
	}
	// A PUT with an unknown top-level member is refused the same way.
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	h.expect(h.do("PUT", res("s1")+"/"+q, tAdmin, map[string]any{"spec": queueSpec(), "name": "x"}), 400, "invalid_request")
	h.expect(h.do("GET", "/v2/spaces/s1/operations/x?wait=61", tAdmin, nil), 400, "invalid_request")
	h.expect(h.do("GET", "/v2/spaces/s1/operations/x?wait=abc", tAdmin, nil), 400, "invalid_request")
}

func TestSpecValidation(t *testing.T) {
	h := newHarness(t, nil)
	r := h.create("s1", "q", fQueue, map[string]any{"messageRetentionSeconds": 60.0, "deliveryDelaySeconds": 1})
	h.expect(r, 202, "") // 60.0 marshals as 60 in Go: accepted
	h.expect(h.do("POST", res("s1"), tAdmin, `{"name":"q2","formUrl":"`+fQueue+`","spec":{"messageRetentionSeconds":5.0}}`), 422, "invalid_spec")
	r = h.do("POST", res("s1"), tAdmin, `{"name":"q3","formUrl":"`+fQueue+`","spec":{"messageRetentionSeconds":60,"colour":1}}`)
	h.expect(r, 422, "invalid_spec")
	if !slices.Contains(r.pointers(), "/spec/colour") && !slices.Contains(r.pointers(), "/spec") {
		t.Fatalf("pointer: %s", r.body)
	}
	r = h.create("s1", "q4", fQueue, queueSpec(), map[string]any{"secrets": map[string]any{"A": "b"}})
	h.expect(r, 422, "invalid_spec")
	if !slices.Contains(r.pointers(), "/privateInputs") {
		t.Fatalf("pointer: %s", r.body)
	}
	r = h.create("s1", "q5", fQueue+"x", queueSpec())
	h.expect(r, 422, "unknown_form")
	h.expect(h.create("s1", "q5", strings.TrimSuffix(fQueue, "/"), queueSpec()), 422, "unknown_form")
	r = h.do("POST", res("s1"), tAdmin, map[string]any{"name": "q6", "formUrl": fQueue, "offering": "cloud", "spec": queueSpec()})
	h.expect(r, 422, "unknown_offering")
	if n := len(h.list("s1", tAdmin)); n != 1 {
		t.Fatalf("refused requests stored resources: %d", n)
	}
}

func TestRefusedRequestStoresNothing(t *testing.T) {
	h := newHarness(t, nil)
	key := "Idempotency-Key"
	bad := map[string]any{"name": "q", "formUrl": fQueue, "spec": map[string]any{"messageRetentionSeconds": 1}}
	h.expect(h.do("POST", res("s1"), tAdmin, bad, key, "k1"), 422, "invalid_spec")
	if len(h.list("s1", tAdmin)) != 0 {
		t.Fatal("resource stored")
	}
	ops, _ := h.st.UnfinishedOperations(t.Context())
	if len(ops) != 0 {
		t.Fatal("operation stored")
	}
	if _, err := h.st.Idempotency(t.Context(), mustScope(t, "admin", "s1", "POST", res("s1")), "k1"); err == nil {
		t.Fatal("idempotency key stored for a refused request")
	}
	// The corrected retry with the same key is accepted, not a key reuse.
	good := map[string]any{"name": "q", "formUrl": fQueue, "spec": queueSpec()}
	h.expect(h.do("POST", res("s1"), tAdmin, good, key, "k1"), 202, "")
}

func TestNames(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	h.expect(h.create("s1", "q", fQueue, queueSpec()), 409, "name_conflict")
	h.expect(h.create("s1", "q", fWorker, map[string]any{"handlers": []string{"fetch"}}), 409, "name_conflict")
	// Same name in another space is fine.
	h.mustCreate("s2", "q", fQueue, queueSpec())
	h.mustDelete("s1", q)
	q2 := h.mustCreate("s1", "q", fQueue, queueSpec())
	if q2 == q {
		t.Fatal("UID reused")
	}
	h.expect(h.create("s1", "Bad_Name", fQueue, queueSpec()), 400, "invalid_request")
}

func TestLimitExceeded(t *testing.T) {
	h := newHarness(t, nil, func(o *controller.Options) { o.MaxResourcesPerSpace = 2 })
	h.mustCreate("s1", "a", fQueue, queueSpec())
	h.mustCreate("s1", "b", fQueue, queueSpec())
	h.expect(h.create("s1", "c", fQueue, queueSpec()), 422, "limit_exceeded")
	h.mustCreate("s2", "c", fQueue, queueSpec())
}

func TestConsumerConflict(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	h.mustCreate("s1", "c1", fConsumer, consumerSpec(q, w))
	r := h.create("s1", "c2", fConsumer, consumerSpec(q, w))
	h.expect(r, 409, "consumer_conflict")
	if h.eng.callsOf("Attach") != 1 {
		t.Fatal("second consumer attached")
	}
}

func TestDeadLetterCycles(t *testing.T) {
	h := newHarness(t, nil)
	w, _ := h.worker("s1", "w")
	a := h.mustCreate("s1", "a", fQueue, queueSpec())
	b := h.mustCreate("s1", "b", fQueue, queueSpec())
	c := h.mustCreate("s1", "c", fQueue, queueSpec())
	// Length 1: a consumer dead-lettering into its own queue.
	h.expect(h.create("s1", "self", fConsumer, consumerSpec(a, w, a)), 422, "dead_letter_cycle")
	// a -> b is fine; b -> a by update closes a cycle of length 2.
	ca := h.mustCreate("s1", "ca", fConsumer, consumerSpec(a, w, b))
	cb := h.mustCreate("s1", "cb", fConsumer, consumerSpec(b, w))
	r := h.put("s1", cb, consumerSpec(b, w, a))
	h.expect(r, 422, "dead_letter_cycle")
	if !slices.Contains(r.pointers(), "/spec/deadLetterQueue/resourceUid") {
		t.Fatalf("pointer: %s", r.body)
	}
	// Length 3: a -> b -> c, then c -> a by update.
	h.mustPut("s1", cb, consumerSpec(b, w, c))
	cc := h.mustCreate("s1", "cc", fConsumer, consumerSpec(c, w))
	h.expect(h.put("s1", cc, consumerSpec(c, w, a)), 422, "dead_letter_cycle")
	// Self-reference by update.
	h.expect(h.put("s1", cc, consumerSpec(c, w, c)), 422, "dead_letter_cycle")
	// Breaking the chain lets c -> a through.
	h.mustPut("s1", ca, consumerSpec(a, w))
	h.mustPut("s1", cc, consumerSpec(c, w, a))
}

func TestReferences(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w, _ := h.worker("s1", "w")
	otherQ := h.mustCreate("s2", "q", fQueue, queueSpec())

	missing := h.create("s1", "c", fConsumer, consumerSpec("r-nope", w))
	h.expect(missing, 422, "invalid_reference")
	cross := h.create("s1", "c", fConsumer, consumerSpec(otherQ, w))
	h.expect(cross, 422, "invalid_reference")
	if missing.str("detail") != cross.str("detail") || string(mustJSON(missing.get("errors"))) != string(mustJSON(cross.get("errors"))) {
		t.Fatalf("another space's UID is distinguishable from a missing one:\n%s\n%s", missing.body, cross.body)
	}
	// Wrong Form: a worker where a queue belongs.
	r := h.create("s1", "c", fConsumer, consumerSpec(w, w))
	h.expect(r, 422, "invalid_reference")
	if !slices.Equal(r.pointers(), []string{"/spec/queue/resourceUid"}) {
		t.Fatalf("pointers %v", r.pointers())
	}
	// A queue being deleted.
	gate := make(chan struct{})
	h.eng.mu.Lock()
	h.eng.removeGate = gate
	h.eng.mu.Unlock()
	d := h.del("s1", q)
	h.expect(d, 202, "")
	if st := h.getRes("s1", q).str("state"); st != "deleting" {
		t.Fatalf("state %s", st)
	}
	r = h.create("s1", "c", fConsumer, consumerSpec(q, w))
	h.expect(r, 422, "invalid_reference")
	if !strings.Contains(r.body2(), "being deleted") {
		t.Fatalf("detail: %s", r.body)
	}
	// An Operation in progress refuses another one on the resource.
	h.expect(h.put("s1", q, queueSpec()), 409, "operation_in_progress")
	h.expect(h.del("s1", q), 409, "operation_in_progress")
	close(gate)
	h.waitDone("s1", d.str("id"))
	h.expect(h.getRes("s1", q), 404, "not_found")
}

func (r *resp) body2() string { return string(r.body) }

func TestImmutables(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	q2 := h.mustCreate("s1", "q2", fQueue, queueSpec())
	w, v := h.worker("s1", "w")
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	r := h.put("s1", c, consumerSpec(q2, w))
	h.expect(r, 422, "invalid_spec")
	if !slices.Equal(r.pointers(), []string{"/spec/queue"}) {
		t.Fatalf("pointers %v", r.pointers())
	}
	// Other consumer settings change.
	sp := consumerSpec(q, w)
	sp["maxBatchSize"] = 50
	h.mustPut("s1", c, sp)
	if h.eng.callsOf("UpdateConsumer") != 1 {
		t.Fatal("engine not updated")
	}
	if g := h.getRes("s1", c).get("generation"); g != 2.0 {
		t.Fatalf("generation %v", g)
	}
	// Any change to a WorkerVersion is refused; an identical PUT is a no-op.
	changed := versionSpec(w, queueModule+"// changed\n")
	h.expect(h.put("s1", v, changed), 422, "invalid_spec")
	vs := versionSpec(w, queueModule)
	vs["vars"] = map[string]any{"A": "b"}
	h.expect(h.put("s1", v, vs), 422, "invalid_spec")
	r = h.put("s1", v, versionSpec(w, queueModule))
	h.expect(r, 202, "")
	op := h.waitDone("s1", r.str("id"))
	if op.str("state") != "succeeded" || op.str("effect") != "none" {
		t.Fatalf("no-op PUT: %s", op.body)
	}
	r = h.do("PUT", res("s1")+"/"+v, tAdmin, map[string]any{"spec": versionSpec(w, queueModule), "privateInputs": map[string]any{"secrets": map[string]any{"S": "x"}}})
	h.expect(r, 422, "invalid_spec")
}

func TestIfMatch(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	g := h.getRes("s1", q)
	etag := g.header.Get("ETag")
	if etag == "" || etag != g.str("etag") || !strings.HasPrefix(etag, `"1-`) {
		t.Fatalf("etag %q / %q", etag, g.str("etag"))
	}
	sp := queueSpec()
	sp["deliveryDelaySeconds"] = 5
	h.expect(h.put("s1", q, sp, "If-Match", `"1-nope"`), 412, "precondition_failed")
	h.expect(h.del("s1", q, "If-Match", `"1-nope"`), 412, "precondition_failed")
	r := h.put("s1", q, sp, "If-Match", etag)
	h.expect(r, 202, "")
	h.waitDone("s1", r.str("id"))
	// The old ETag no longer matches.
	h.expect(h.del("s1", q, "If-Match", etag), 412, "precondition_failed")
	h.expect(h.del("s1", q, "If-Match", h.getRes("s1", q).str("etag")), 202, "")
}

func TestDeletionRules(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	dlq := h.mustCreate("s1", "dlq", fQueue, queueSpec())
	w, v := h.worker("s1", "w")
	// An unselected version binding the queue keeps it.
	v2 := h.mustCreate("s1", "w-v2", fVersion, versionSpec(w, queueModule, q))
	h.expect(h.del("s1", q), 409, "dependency_conflict")
	h.mustDelete("s1", v2)
	// A consumer's dead-letter queue is kept too.
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w, dlq))
	h.expect(h.del("s1", dlq), 409, "dependency_conflict")
	h.expect(h.del("s1", q), 409, "dependency_conflict")
	// The worker is kept by the consumer and the version, the version by the worker.
	h.expect(h.del("s1", w), 409, "dependency_conflict")
	h.expect(h.del("s1", v), 409, "dependency_conflict")
	h.mustDelete("s1", c)
	if h.eng.has("consumer", c) {
		t.Fatal("consumer still attached")
	}
	h.expect(h.del("s1", w), 409, "dependency_conflict") // still its version
	h.mustPut("s1", w, map[string]any{"handlers": []string{"fetch"}})
	h.mustDelete("s1", v)
	h.mustDelete("s1", w)
	h.mustDelete("s1", dlq)
	h.mustDelete("s1", q)
	if h.eng.has("queue", q) || len(h.list("s1", tAdmin)) != 0 {
		t.Fatal("not all deleted")
	}
	h.wk.mu.Lock()
	defer h.wk.mu.Unlock()
	if !slices.Contains(h.wk.evicted, v) {
		t.Fatal("deleted version not evicted from the runtime")
	}
	if !slices.Contains(h.wk.forgotten, w) {
		t.Fatal("deleted worker's log not dropped from the runtime")
	}
}

func TestWorkerRules(t *testing.T) {
	h := newHarness(t, nil)
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	w := h.mustCreate("s1", "w", fWorker, map[string]any{"handlers": []string{"queue"}})
	// A consumer needs a selected version that exports queue.
	h.expect(h.create("s1", "c", fConsumer, consumerSpec(q, w)), 422, "missing_handler")
	fetchOnly := h.mustCreate("s1", "v-fetch", fVersion, versionSpec(w, "export default { async fetch(r) { return new Response('') } };"))
	both := h.mustCreate("s1", "v-both", fVersion, versionSpec(w, queueModule))
	r := h.put("s1", w, map[string]any{"handlers": []string{"queue"}, "version": refTo(fetchOnly)})
	h.expect(r, 422, "missing_handler")
	// A version of another worker.
	w2 := h.mustCreate("s1", "w2", fWorker, map[string]any{"handlers": []string{"fetch"}})
	v2 := h.mustCreate("s1", "w2-v", fVersion, versionSpec(w2, queueModule))
	h.expect(h.put("s1", w, map[string]any{"handlers": []string{"queue"}, "version": refTo(v2)}), 422, "invalid_reference")
	// A worker that does not declare queue.
	h.mustPut("s1", w2, map[string]any{"handlers": []string{"fetch"}, "version": refTo(v2)})
	h.expect(h.create("s1", "c", fConsumer, consumerSpec(q, w2)), 422, "missing_handler")
	h.mustPut("s1", w, map[string]any{"handlers": []string{"queue"}, "version": refTo(both)})
	h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	// While the consumer references it, the worker keeps providing queue.
	h.expect(h.put("s1", w, map[string]any{"handlers": []string{"fetch"}, "version": refTo(both)}), 422, "missing_handler")
	h.expect(h.put("s1", w, map[string]any{"handlers": []string{"queue"}}), 422, "missing_handler")
	h.mustPut("s1", w, map[string]any{"handlers": []string{"queue", "fetch"}, "version": refTo(both)})
	// Declaring fetch then selecting the fetch-only version drops queue.
	h.expect(h.put("s1", w, map[string]any{"handlers": []string{"fetch"}, "version": refTo(fetchOnly)}), 422, "missing_handler")
}

func TestWorkerVersionCompileError(t *testing.T) {
	h := newHarness(t, nil)
	w := h.mustCreate("s1", "w", fWorker, map[string]any{"handlers": []string{"fetch"}})
	r := h.create("s1", "v", fVersion, versionSpec(w, "export default {\n  fetch( SYNTAX_ERROR\n};"))
	h.expect(r, 422, "invalid_spec")
	if !strings.Contains(r.str("detail"), "main.js:2:10") || !slices.Contains(r.pointers(), "/spec/modules/0/content") {
		t.Fatalf("compile error: %s", r.body)
	}
	// Exports are recorded.
	v := h.mustCreate("s1", "v", fVersion, versionSpec(w, queueModule))
	rec, _ := h.st.Resource(t.Context(), v)
	if !slices.Equal(rec.Exports, []string{"fetch", "queue"}) {
		t.Fatalf("exports %v", rec.Exports)
	}
	big := versionSpec(w, strings.Repeat("x", controller.MaxModuleBytes/2+1))
	mods := big["modules"].([]any)
	big["modules"] = append(mods, map[string]any{"name": "b.js", "content": strings.Repeat("y", controller.MaxModuleBytes/2+1)})
	h.expect(h.create("s1", "v-big", fVersion, big), 422, "invalid_spec")
}

func TestSecretsNeverReturned(t *testing.T) {
	h := newHarness(t, nil)
	w := h.mustCreate("s1", "w", fWorker, map[string]any{"handlers": []string{"fetch"}})
	const secret = "s3cr3t-value-0123456789"
	r := h.create("s1", "v", fVersion, versionSpec(w, queueModule), map[string]any{"secrets": map[string]any{"TOKEN": secret}})
	h.expect(r, 202, "")
	op := h.waitDone("s1", r.str("id"))
	g := h.getRes("s1", r.str("resourceUid"))
	l := h.do("GET", res("s1"), tAdmin, nil)
	for _, body := range [][]byte{r.body, op.body, g.body, l.body, h.log.Bytes()} {
		if strings.Contains(string(body), secret) || strings.Contains(string(body), "privateInputs") {
			t.Fatalf("secret leaked: %s", body)
		}
	}
	stored, _ := h.st.Resource(t.Context(), r.str("resourceUid"))
	if !strings.Contains(string(stored.PrivateInputs), secret) {
		t.Fatal("secret not kept for the runtime")
	}
	o, _ := h.st.Operation(t.Context(), r.str("id"))
	if strings.Contains(string(o.Intent), secret) {
		t.Fatal("secret in the Operation's intent")
	}
	v, err := controller.VersionFromResource(stored)
	if err != nil || v.Secrets["TOKEN"] != secret || v.Principal != "pr_admin" {
		t.Fatalf("version %+v %v", v, err)
	}
	// A PUT without privateInputs keeps them.
	h.mustPut("s1", r.str("resourceUid"), versionSpec(w, queueModule))
	stored, _ = h.st.Resource(t.Context(), r.str("resourceUid"))
	if !strings.Contains(string(stored.PrivateInputs), secret) {
		t.Fatal("PUT dropped the secrets")
	}
}

func TestOutputAndObserved(t *testing.T) {
	release := make(chan struct{})
	paused := make(chan struct{}, 8)
	h := newHarness(t, nil, func(o *controller.Options) { o.SyncWait = 50 * time.Millisecond }, pauseHook(release, paused))
	r := h.create("s1", "q", fQueue, queueSpec())
	h.expect(r, 202, "")
	<-paused
	g := h.getRes("s1", r.str("resourceUid"))
	if string(mustJSON(g.get("observed"))) != "{}" || g.str("state") != "creating" || string(mustJSON(g.get("output"))) != "{}" {
		t.Fatalf("before the first observation: %s", g.body)
	}
	op := h.do("GET", "/v2/spaces/s1/operations/"+r.str("id"), tAdmin, nil)
	if op.str("state") != "running" || op.header.Get("Retry-After") != "1" {
		t.Fatalf("running op: %s %v", op.body, op.header)
	}
	close(release)
	done := h.waitDone("s1", r.str("id"))
	if done.str("state") != "succeeded" || done.str("effect") != "applied" || done.header.Get("Retry-After") != "" {
		t.Fatalf("done: %s", done.body)
	}
	g = h.getRes("s1", r.str("resourceUid"))
	if string(mustJSON(g.get("observed"))) != `{"messageCount":0,"queueExists":true}` || string(mustJSON(g.get("output"))) != "{}" {
		t.Fatalf("after: %s", g.body)
	}
	h.eng.mu.Lock()
	h.eng.counts[r.str("resourceUid")] = 7
	h.eng.mu.Unlock()
	h.ctl.ObserveAll(t.Context())
	if n := h.getRes("s1", r.str("resourceUid")).get("observed", "messageCount"); n != 7.0 {
		t.Fatalf("messageCount %v", n)
	}
	// A confirmed absence is false; an unconfirmable value keeps the last one.
	h.eng.mu.Lock()
	h.eng.failStats = errString("engine busy")
	h.eng.mu.Unlock()
	h.ctl.ObserveAll(t.Context())
	if n := h.getRes("s1", r.str("resourceUid")).get("observed", "messageCount"); n != 7.0 {
		t.Fatalf("unconfirmed observation overwrote: %v", n)
	}
}

func mustScope(t *testing.T, principal, space, method, path string) string {
	key := "k"
	idem, err := newIdempotency(&key, principal, space, method, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return idem.Scope
}

// TestSerializedOffering: AtLeastOnceQueue is served in the offerings
// "embedded" (the default) and "serialized" (the ext-serialized host
// extension); another Form, or another name, is unknown_offering and
// creates nothing; an update keeps the offering.
func TestSerializedOffering(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("POST", res("s1"), tAdmin, map[string]any{"name": "sq", "formUrl": fQueue, "offering": "serialized", "spec": queueSpec()})
	h.expect(r, 202, "")
	if op := h.waitDone("s1", r.str("id")); op.str("state") != "succeeded" {
		t.Fatalf("create: %s", op.body)
	}
	uid := r.str("resourceUid")
	if got := h.do("GET", res("s1")+"/"+uid, tAdmin, nil); got.str("offering") != "serialized" {
		t.Fatalf("offering reads %q: %s", got.str("offering"), got.body)
	}
	h.mustPut("s1", uid, map[string]any{"messageRetentionSeconds": 120})
	if got := h.do("GET", res("s1")+"/"+uid, tAdmin, nil); got.str("offering") != "serialized" {
		t.Fatalf("after an update the offering reads %q", got.str("offering"))
	}
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	if got := h.do("GET", res("s1")+"/"+q, tAdmin, nil); got.str("offering") != "embedded" {
		t.Fatalf("default offering %q", got.str("offering"))
	}
	r = h.do("POST", res("s1"), tAdmin, map[string]any{"name": "sq2", "formUrl": fQueue, "offering": "Serialized", "spec": queueSpec()})
	h.expect(r, 422, "unknown_offering")
	if d := r.str("detail"); !strings.Contains(d, `"embedded"`) || !strings.Contains(d, `"serialized"`) {
		t.Fatalf("detail does not name the queue's offerings: %s", r.body)
	}
	w, _ := h.worker("s1", "w")
	r = h.do("POST", res("s1"), tAdmin, map[string]any{"name": "c", "formUrl": fConsumer, "offering": "serialized", "spec": consumerSpec(uid, w)})
	h.expect(r, 422, "unknown_offering")
	if !slices.Contains(r.pointers(), "/offering") {
		t.Fatalf("pointer: %s", r.body)
	}
	if n := len(h.list("s1", tAdmin)); n != 4 {
		t.Fatalf("resources after the refusals: %d, want 4 (two queues, a worker and its version)", n)
	}
}
