package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/membudget"
)

func TestFetchRoute(t *testing.T) {
	h := newHarness(t, nil)
	w, v := h.worker("s1", "w", "fetch", "queue")
	r := h.do("POST", res("s1")+"/"+w+"/fetch/a/b%20c?x=1&y=2", tAdmin, "payload")
	if r.status != 201 || string(r.body) != "POST http://worker.invalid/a/b%20c?x=1&y=2 "+v+" payload" || r.header.Get("X-Seen-Auth") != "" {
		t.Fatalf("fetch: %d %q %v", r.status, r.body, r.header)
	}
	r = h.do("GET", res("s1")+"/"+w+"/fetch", tAdmin, nil)
	if r.status != 201 || !strings.HasPrefix(string(r.body), "GET http://worker.invalid/ ") {
		t.Fatalf("fetch without path: %d %q", r.status, r.body)
	}
	if r.header.Get(ResponseSourceHeader) != "worker" {
		t.Fatalf("a worker's response is not marked as the worker's: %v", r.header)
	}
	// The caller's credentials for the host's origin never reach the worker.
	r = h.do("GET", res("s1")+"/"+w+"/fetch/x", tAdmin, nil, "Cookie", "c=1", "Proxy-Authorization", "Basic eA==")
	if r.header.Get("X-Seen-Cookie") != "" || r.header.Get("X-Seen-Proxy-Auth") != "" {
		t.Fatalf("the worker saw Cookie %q, Proxy-Authorization %q", r.header.Get("X-Seen-Cookie"), r.header.Get("X-Seen-Proxy-Auth"))
	}
	// A worker cannot break the response's framing, set a cookie on the
	// host's origin, or pass for the host (#14).
	r = h.do("GET", res("s1")+"/"+w+"/fetch/x", tAdmin, nil, "X-Forge", "1")
	if r.status != 401 || string(r.body) != `{"code":"unauthenticated"}` {
		t.Fatalf("forged answer: %d %q", r.status, r.body)
	}
	if r.header.Get("Set-Cookie") != "" || r.header.Get("X-Request-Id") == "forged" || r.header.Get(ResponseSourceHeader) != "worker" {
		t.Fatalf("the worker set host headers: %v", r.header)
	}
	h.expect(h.do("GET", res("s1")+"/"+w+"/fetch/x", tAdmin, nil, "X-Throw", "1"), 500, "worker_error")
	// Invoking needs editor on ModuleWorker.
	h.expect(h.do("GET", res("s1")+"/"+w+"/fetch/x", tViewer, nil), 403, "forbidden")
	h.expect(h.do("GET", res("s1")+"/"+w+"/fetch/x", tOther, nil), 404, "not_found")
	h.expect(h.do("GET", res("s1")+"/"+w+"/fetch/x", "", nil), 401, "unauthenticated")
	// No fetch declared, no version selected.
	w2 := h.mustCreate("s1", "w2", fWorker, map[string]any{"handlers": []string{"queue"}})
	r = h.do("GET", res("s1")+"/"+w2+"/fetch", tAdmin, nil)
	h.expect(r, 404, "not_found")
	if !strings.Contains(r.str("detail"), "fetch") {
		t.Fatalf("detail: %s", r.body)
	}
	w3 := h.mustCreate("s1", "w3", fWorker, map[string]any{"handlers": []string{"fetch"}})
	r = h.do("GET", res("s1")+"/"+w3+"/fetch", tAdmin, nil)
	h.expect(r, 404, "not_found")
	if !strings.Contains(r.str("detail"), "no selected version") {
		t.Fatalf("detail: %s", r.body)
	}
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	h.expect(h.do("GET", res("s1")+"/"+q+"/fetch", tAdmin, nil), 404, "not_found")
	// Logs need read on ModuleWorker.
	h.expect(h.do("GET", res("s1")+"/"+w+"/logs", tViewer, nil), 200, "")
	h.expect(h.do("GET", res("s1")+"/"+w+"/logs", tQueueEd, nil), 403, "forbidden")
	h.expect(h.do("GET", res("s1")+"/"+q+"/logs", tAdmin, nil), 404, "not_found")
}

type noHandlers struct{}

func (noHandlers) Resolve(context.Context, string) (abi.Handler, error) {
	return nil, controller.ErrNoVersion
}

// TestWithRealEngine drives the real delivery engine: observed comes from
// its QueueStats, deleting a queue removes it from the engine.
func TestWithRealEngine(t *testing.T) {
	h := newHarness(t, nil)
	eng := delivery.New(h.st, noHandlers{}, delivery.Options{Logger: slog.New(slog.DiscardHandler)})
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		eng.Stop(ctx)
	})
	h.ts.Close()
	h.stop()
	ctl, srv := startServer(t, controller.Options{Store: h.st, Engine: eng, Workers: h.wk, Logger: slog.New(slog.DiscardHandler), ObserveInterval: time.Hour}, h.wk)
	t.Cleanup(func() { _ = ctl.Stop(context.Background()) })
	h = &harness{t: t, st: h.st, ctl: ctl, srv: srv, wk: h.wk, log: h.log}
	h.ts = newTestServer(t, srv)
	h.base, h.client = h.ts.URL, h.ts.Client()

	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	if _, err := eng.Send(t.Context(), q, []abi.OutgoingMessage{{Body: []byte("a")}, {Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	ctl.ObserveAll(t.Context())
	g := h.getRes("s1", q)
	if g.get("observed", "queueExists") != true || g.get("observed", "messageCount") != 2.0 {
		t.Fatalf("observed: %s", g.body)
	}
	w, _ := h.worker("s1", "w")
	c := h.mustCreate("s1", "c", fConsumer, consumerSpec(q, w))
	if g := h.getRes("s1", c); g.get("observed", "consumerAttached") != true {
		t.Fatalf("consumer observed: %s", g.body)
	}
	h.mustDelete("s1", c)
	h.mustDelete("s1", q)
	if _, err := eng.QueueStats(t.Context(), q); err == nil {
		t.Fatal("the engine still holds the deleted queue")
	}
}

// A worker's response keeps only the headers on the allow-list (#36):
// nothing that gives it authority over the host's origin passes, and
// every worker response is a sandboxed document that is never sniffed.
func TestWorkerResponseHeaderAllowList(t *testing.T) {
	h := newHarness(t, nil)
	w, _ := h.worker("s1", "w", "fetch")
	set := map[string][]string{
		// Dropped.
		"Content-Security-Policy":             {"default-src *"},
		"Content-Security-Policy-Report-Only": {"default-src *"},
		"Access-Control-Allow-Origin":         {"*"},
		"Access-Control-Allow-Credentials":    {"true"},
		"Refresh":                             {"0; url=https://evil.example/"},
		"Strict-Transport-Security":           {"max-age=63072000; includeSubDomains"},
		"Link":                                {"<https://evil.example/x.css>; rel=stylesheet"},
		"Www-Authenticate":                    {`Basic realm="takohost"`},
		"Set-Cookie":                          {"a=b"},
		"Clear-Site-Data":                     {`"*"`},
		"Alt-Svc":                             {`h2="evil.example:443"`},
		"X-Frame-Options":                     {"ALLOWALL"},
		"X-Content-Type-Options":              {"sniff"},
		"X-Forwarded-Host":                    {"evil.example"},
		"Permissions-Policy":                  {"camera=*"},
		"Cross-Origin-Opener-Policy":          {"unsafe-none"},
		// Kept.
		"Content-Type":     {"text/html; charset=utf-8"},
		"Cache-Control":    {"no-store"},
		"Etag":             {`"v1"`},
		"X-App-Version":    {"7"},
		"Content-Language": {"en"},
	}
	for _, loc := range []struct {
		value string
		kept  bool
	}{
		{"next", true}, {"/v2/spaces/s1/resources", true}, {"?page=2", true},
		{"https://evil.example/", false}, {"//evil.example/", false}, {"/\\evil.example/", false},
		{"javascript:alert(1)", false}, {"http:evil.example", false},
	} {
		set["Location"] = []string{loc.value}
		r := h.do("GET", res("s1")+"/"+w+"/fetch/x", tAdmin, nil, "X-Set-Headers", string(mustJSON(set)))
		if r.status != 201 {
			t.Fatalf("fetch: %d %s", r.status, r.body)
		}
		if got := r.header.Get("Location"); (got == loc.value) != loc.kept || (!loc.kept && got != "") {
			t.Fatalf("Location %q: got %q, kept %v", loc.value, got, loc.kept)
		}
		for k, vs := range set {
			if k == "Location" {
				continue
			}
			kept := k == "Content-Type" || k == "Cache-Control" || k == "Etag" || k == "X-App-Version" || k == "Content-Language"
			got := r.header.Values(k)
			switch {
			case kept && (len(got) != 1 || got[0] != vs[0]):
				t.Fatalf("%s: got %q, want %q", k, got, vs)
			case !kept && slices.Contains(got, vs[0]):
				t.Fatalf("%s: the worker's %q passed: %v", k, vs[0], r.header)
			}
		}
		if r.header.Get("Content-Security-Policy") != "sandbox; default-src 'none'" || r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get(ResponseSourceHeader) != "worker" {
			t.Fatalf("the host's own headers: %v", r.header)
		}
	}
}

// The fetch route reserves a request body in the host's budget before
// reading it (#36): over 8 MiB or over the worker's whole share is 413
// payload_too_large; over what the share has free now is 503
// memory_budget_in_use with Retry-After, with or without a
// Content-Length; nothing reaches the worker then, and once the share is
// free the same body passes whole. Nothing stays reserved.
func TestFetchBodyBudget(t *testing.T) {
	h := newHarness(t, nil)
	h.srv.budget = membudget.New(membudget.Limits{Total: 4 << 20, PerWorker: 1 << 20})
	w, v := h.worker("s1", "w", "fetch")
	post := func(body []byte, chunked bool) (*http.Response, string) {
		t.Helper()
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // no length known
		}
		req, _ := http.NewRequest("POST", h.base+res("s1")+"/"+w+"/fetch/x", rd)
		req.Header.Set("Authorization", "Bearer "+tAdmin)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	small := bytes.Repeat([]byte("s"), 200<<10)
	for _, c := range []struct {
		name    string
		body    []byte
		chunked bool
		status  int
		code    string
	}{
		{"over 8 MiB", make([]byte, MaxBodyBytes+1), false, 413, "payload_too_large"},
		{"over 8 MiB, chunked", make([]byte, MaxBodyBytes+1), true, 413, "payload_too_large"},
		{"over the worker's share", make([]byte, 2<<20), false, 413, "payload_too_large"},
	} {
		resp, b := post(c.body, c.chunked)
		if resp.StatusCode != c.status || !strings.Contains(b, `"code":"`+c.code+`"`) {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, b)
		}
	}
	held, err := h.srv.budget.Reserve(membudget.Holder{Worker: w}, 900<<10)
	if err != nil {
		t.Fatal(err)
	}
	before := h.wk.fetchCount()
	for _, chunked := range []bool{false, true} {
		resp, b := post(small, chunked)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(b, `"code":"memory_budget_in_use"`) || !strings.Contains(b, "this worker holds") {
			t.Fatalf("share in use (chunked %v): %d %v %s", chunked, resp.StatusCode, resp.Header, b)
		}
	}
	if n := h.wk.fetchCount(); n != before {
		t.Fatalf("a refused body reached the worker (%d fetches, %d before)", n, before)
	}
	held.Release()
	for _, chunked := range []bool{false, true} {
		resp, b := post(small, chunked)
		if resp.StatusCode != 201 || b != "POST http://worker.invalid/x "+v+" "+string(small) {
			t.Fatalf("with the share free (chunked %v): %d %.100s", chunked, resp.StatusCode, b)
		}
	}
	if u := h.srv.budget.Used(); u != 0 {
		t.Fatalf("%d bytes still reserved", u)
	}
}
