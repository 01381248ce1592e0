package server

import (
	"net/url"
	"testing"
)

// GET /v2/spaces/{space}/operations pages the space's Operations newest
// first, filters by state and resource, leaves out the Operations of Forms
// the principal may not read and those of other spaces, and refuses a bad
// state, limit or token with invalid_request.
func TestListOperations(t *testing.T) {
	h := newHarness(t, nil)
	q1 := h.mustCreate("s1", "q1", fQueue, queueSpec())
	q2 := h.mustCreate("s1", "q2", fQueue, queueSpec())
	h.mustPut("s1", q1, map[string]any{"messageRetentionSeconds": 7200})
	w, _ := h.worker("s1", "w1", "queue")
	h.mustCreate("s2", "elsewhere", fQueue, queueSpec())
	h.eng.mu.Lock()
	h.eng.failAttach = errString("engine refused")
	h.eng.mu.Unlock()
	failed := h.create("s1", "c", fConsumer, consumerSpec(q2, w)) // fails: the engine refuses it
	h.expect(failed, 202, "")
	h.waitDone("s1", failed.str("id"))

	type item struct{ kind, uid, state string }
	page := func(token, query string) ([]item, string) {
		t.Helper()
		r := h.do("GET", "/v2/spaces/s1/operations?"+query, token, nil)
		h.expect(r, 200, "")
		var out []item
		for _, it := range r.get("items").([]any) {
			m := it.(map[string]any)
			out = append(out, item{m["kind"].(string), m["resourceUid"].(string), m["state"].(string)})
		}
		next, _ := r.get("nextPageToken").(string)
		return out, next
	}
	all, next := page(tAdmin, "")
	if next != "" || len(all) < 5 {
		t.Fatalf("first page: %v next %q", all, next)
	}
	if all[0].state != "failed" || all[len(all)-1] != (item{"create", q1, "succeeded"}) {
		t.Fatalf("not newest first: %v", all)
	}
	// Pages of 2 give the same list, in order, without repeats.
	var paged []item
	token := ""
	for {
		p, n := page(tAdmin, "limit=2&pageToken="+url.QueryEscape(token))
		if len(p) > 2 {
			t.Fatalf("a page of %d", len(p))
		}
		paged = append(paged, p...)
		if n == "" {
			break
		}
		token = n
	}
	if len(paged) != len(all) {
		t.Fatalf("paged %v, all %v", paged, all)
	}
	for i := range all {
		if paged[i] != all[i] {
			t.Fatalf("paged %v, all %v", paged, all)
		}
	}
	if got, _ := page(tAdmin, "state=failed"); len(got) != 1 || got[0].uid != failed.str("resourceUid") {
		t.Fatalf("state=failed: %v", got)
	}
	if got, _ := page(tAdmin, "resourceUid="+q1); len(got) != 2 || got[0] != (item{"update", q1, "succeeded"}) || got[1].kind != "create" {
		t.Fatalf("resourceUid=q1: %v", got)
	}
	if got, _ := page(tAdmin, "resourceUid="+q2); len(got) != 1 || got[0].kind != "create" {
		t.Fatalf("resourceUid=q2: %v", got)
	}
	// The queue editor reads no worker: the worker's Operations are left out.
	for _, it := range func() []item { l, _ := page(tQueueEd, ""); return l }() {
		if it.uid == w {
			t.Fatalf("the queue editor sees the worker's Operation: %v", it)
		}
	}
	if got, _ := page(tAdmin, "resourceUid="+w); len(got) != 2 || got[0].kind != "update" {
		t.Fatalf("the worker's Operations: %v", got)
	}
	h.expect(h.do("GET", "/v2/spaces/s1/operations?state=done", tAdmin, nil), 400, "invalid_request")
	h.expect(h.do("GET", "/v2/spaces/s1/operations?limit=0", tAdmin, nil), 400, "invalid_request")
	h.expect(h.do("GET", "/v2/spaces/s1/operations?limit=201", tAdmin, nil), 400, "invalid_request")
	h.expect(h.do("GET", "/v2/spaces/s1/operations?pageToken=bogus", tAdmin, nil), 400, "invalid_request")
	h.expect(h.do("GET", "/v2/spaces/s1/operations", "", nil), 401, "unauthenticated")
	if r := h.do("GET", "/v2/spaces/s1/operations", tOther, nil); r.status == 200 && len(r.get("items").([]any)) > 0 {
		t.Fatalf("another space's principal lists s1's Operations: %s", r.body)
	}
}
