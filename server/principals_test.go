package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/internal/apiclient"
)

// The principal routes: only an administrator reaches them; a created
// principal's token works at once with its grants only, is shown once and
// never listed; a revoked one's token stops at once; bad input is
// invalid_request and changes nothing; the last administrator stays.
func TestPrincipalRoutes(t *testing.T) {
	h := newHarness(t, nil)
	h.mustCreate("s1", "q", fQueue, queueSpec())

	h.expect(h.do("GET", "/v2/principals", "", nil), 401, "unauthenticated")
	for _, tok := range []string{tViewer, tQueueEd, tOther} {
		h.expect(h.do("GET", "/v2/principals", tok, nil), 403, "forbidden")
		h.expect(h.do("POST", "/v2/principals", tok, map[string]any{"name": "x", "grants": []any{map[string]any{"space": "s1", "role": "editor"}}}), 403, "forbidden")
		h.expect(h.do("DELETE", "/v2/principals/viewer", tok, nil), 403, "forbidden")
	}

	created := h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "ci", "grants": []any{map[string]any{"space": "s1", "role": "viewer"}}})
	h.expect(created, 201, "")
	tok, id := created.str("token"), created.str("principal", "id")
	if len(tok) < 40 || !strings.HasPrefix(id, "pr_") || created.str("principal", "name") != "ci" {
		t.Fatalf("created: %s", created.body)
	}
	// At once: the viewer token reads s1, cannot write, cannot see s2.
	if n := len(h.list("s1", tok)); n != 1 {
		t.Fatalf("the new viewer lists %d resources", n)
	}
	h.expect(h.do("POST", res("s1"), tok, map[string]any{"name": "q2", "formUrl": fQueue, "spec": queueSpec()}), 403, "forbidden")
	h.expect(h.do("GET", res("s2"), tok, nil), 404, "not_found")

	list := h.do("GET", "/v2/principals", tAdmin, nil)
	h.expect(list, 200, "")
	if !strings.Contains(string(list.body), `"name":"ci"`) || strings.Contains(string(list.body), "tokenSha256") || strings.Contains(string(list.body), tok) {
		t.Fatalf("list: %s", list.body)
	}

	// Bad input changes nothing.
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "ci", "grants": []any{map[string]any{"space": "s1", "role": "viewer"}}}), 409, "name_conflict")
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "y", "grants": []any{map[string]any{"space": "s1", "role": "owner"}}}), 400, "invalid_request")
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "Bad Name", "grants": []any{map[string]any{"space": "s1", "role": "viewer"}}}), 400, "invalid_request")
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "y", "grants": []any{}}), 400, "invalid_request")
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "y", "grants": []any{map[string]any{"space": "S/1", "role": "viewer"}}}), 400, "invalid_request")
	h.expect(h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "y", "grants": []any{map[string]any{"space": "s1", "role": "viewer", "forms": []string{"queue"}}}}), 400, "invalid_request")
	if again := h.do("GET", "/v2/principals", tAdmin, nil); strings.Count(string(again.body), `"id"`) != 6 {
		t.Fatalf("bad input changed the principals: %s", again.body)
	}

	// Revoke by ID: the token stops at once.
	gone := h.do("DELETE", "/v2/principals/"+id, tAdmin, nil)
	h.expect(gone, 200, "")
	if gone.str("name") != "ci" {
		t.Fatalf("revoked: %s", gone.body)
	}
	h.expect(h.do("GET", res("s1"), tok, nil), 401, "unauthenticated")
	h.expect(h.do("DELETE", "/v2/principals/"+id, tAdmin, nil), 404, "not_found")
	// By name; and the last administrator stays.
	h.expect(h.do("DELETE", "/v2/principals/viewer", tAdmin, nil), 200, "")
	h.expect(h.do("GET", res("s1"), tViewer, nil), 401, "unauthenticated")
	h.expect(h.do("DELETE", "/v2/principals/admin", tAdmin, nil), 409, "last_admin")
	h.expect(h.do("GET", res("s1"), tAdmin, nil), 200, "")
	// With a second administrator, the first may go.
	second := h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "ops", "grants": []any{map[string]any{"space": "*", "role": "editor"}}})
	h.expect(second, 201, "")
	h.expect(h.do("DELETE", "/v2/principals/admin", second.str("token"), nil), 200, "")
	h.expect(h.do("GET", "/v2/principals", tAdmin, nil), 401, "unauthenticated")
}

// A long poll begun before its token is revoked ends at once with 401
// (#36): the revocation, not the wait, decides when it ends. Another
// principal's long poll goes on.
func TestRevokeEndsLongPolls(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	paused := make(chan struct{}, 8)
	h := newHarness(t, nil, func(o *controller.Options) { o.SyncWait = 50 * time.Millisecond }, pauseHook(release, paused))
	r := h.create("s1", "q", fQueue, queueSpec())
	h.expect(r, 202, "")
	<-paused
	created := h.do("POST", "/v2/principals", tAdmin, map[string]any{"name": "poller", "grants": []any{map[string]any{"space": "s1", "role": "viewer"}}})
	h.expect(created, 201, "")
	tok := created.str("token")
	type result struct {
		r    *resp
		took time.Duration
	}
	poll := func(token string) chan result {
		ch := make(chan result, 1)
		go func() {
			start := time.Now()
			c := &apiclient.Client{Base: h.base, Token: token, HTTP: h.client}
			res, err := c.Do(context.Background(), "GET", "/v2/spaces/s1/operations/"+r.str("id")+"?wait=30", nil, nil)
			if err != nil {
				ch <- result{r: &resp{status: -1, body: []byte(err.Error())}}
				return
			}
			out := &resp{status: res.Status, header: res.Header, body: res.Body}
			_ = json.Unmarshal(res.Body, &out.json)
			ch <- result{out, time.Since(start)}
		}()
		return ch
	}
	revoked, other := poll(tok), poll(tViewer)
	time.Sleep(200 * time.Millisecond) // both are waiting
	h.expect(h.do("DELETE", "/v2/principals/poller", tAdmin, nil), 200, "")
	select {
	case got := <-revoked:
		h.expect(got.r, 401, "unauthenticated")
		if !strings.Contains(got.r.str("detail"), "revoked") || got.took > 10*time.Second {
			t.Fatalf("the revoked poll: %s after %v", got.r.body, got.took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the revoked token's long poll did not end")
	}
	select {
	case got := <-other:
		t.Fatalf("the other principal's poll ended: %d %s", got.r.status, got.r.body)
	case <-time.After(100 * time.Millisecond):
	}
}
