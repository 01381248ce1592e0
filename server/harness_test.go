package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

const (
	fQueue    = schemas.FormAtLeastOnceQueue
	fConsumer = schemas.FormQueueConsumer
	fWorker   = schemas.FormModuleWorker
	fVersion  = schemas.FormWorkerVersion
)

// Tokens of the test principals.
const (
	tAdmin    = "tok-admin"
	tViewer   = "tok-viewer"
	tQueueEd  = "tok-queue-editor"   // editor on queues only, in s1
	tNoWorker = "tok-no-worker-read" // editor on consumers and queues, cannot read workers
	tOther    = "tok-other"          // editor in s2 only
)

func testAuth() *auth.Config {
	c := &auth.Config{Principals: []auth.Principal{
		{Name: "admin", TokenSHA256: auth.HashToken(tAdmin), Grants: []auth.Grant{{Space: "*", Role: auth.RoleEditor}}},
		{Name: "viewer", TokenSHA256: auth.HashToken(tViewer), Grants: []auth.Grant{{Space: "s1", Role: auth.RoleViewer}}},
		{Name: "queue-editor", TokenSHA256: auth.HashToken(tQueueEd), Grants: []auth.Grant{{Space: "s1", Role: auth.RoleEditor, Forms: []string{fQueue}}}},
		{Name: "no-worker", TokenSHA256: auth.HashToken(tNoWorker), Grants: []auth.Grant{{Space: "s1", Role: auth.RoleEditor, Forms: []string{fQueue, fConsumer}}}},
		{Name: "other", TokenSHA256: auth.HashToken(tOther), Grants: []auth.Grant{{Space: "s2", Role: auth.RoleEditor}}},
	}}
	// Fixed IDs: a restarted harness builds its config again and must find
	// the same principals.
	for i := range c.Principals {
		c.Principals[i].ID = "pr_" + c.Principals[i].Name
	}
	c.PrincipalIDs = true
	return c
}

type harness struct {
	t      *testing.T
	ctl    *controller.Controller
	srv    *Server
	ts     *httptest.Server
	base   string
	client *http.Client
	st     store.Store
	eng    *fakeEngine
	wk     *fakeWorkers
	log    *bytes.Buffer
}

type harnessOpt func(*controller.Options)

func newHarness(t *testing.T, st store.Store, opts ...harnessOpt) *harness {
	t.Helper()
	if st == nil {
		st = store.NewMemory()
	}
	h := &harness{t: t, st: st, eng: newFakeEngine(), wk: &fakeWorkers{}, log: &bytes.Buffer{}}
	o := controller.Options{
		Store: st, Engine: h.eng, Workers: h.wk,
		Logger:          slog.New(slog.NewJSONHandler(&lockedWriter{w: h.log}, nil)),
		ObserveInterval: time.Hour, SyncWait: 2 * time.Second,
	}
	for _, f := range opts {
		f(&o)
	}
	h.ctl, h.srv = startServer(t, o, h.wk)
	h.ts = httptest.NewServer(h.srv)
	h.base, h.client = h.ts.URL, h.ts.Client()
	t.Cleanup(func() {
		h.ts.Close()
		h.stop()
	})
	return h
}

// startServer starts a controller with o and a server over it, as the host
// does.
func startServer(t testing.TB, o controller.Options, wk Workers) (*controller.Controller, *Server) {
	t.Helper()
	ctl, err := controller.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := auth.NewRegistry(testAuth(), "")
	srv, err := New(Options{Controller: ctl, Auth: reg, Principals: reg, Workers: wk, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	return ctl, srv
}

// stop stops the controller (the HTTP test server is closed separately).
func (h *harness) stop() { _ = h.ctl.Stop(context.Background()) }

type lockedWriter struct {
	mu chan struct{}
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	if l.mu == nil {
		l.mu = make(chan struct{}, 1)
	}
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.w.Write(b)
}

type resp struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (r *resp) str(path ...string) string {
	v := r.get(path...)
	s, _ := v.(string)
	return s
}

func (r *resp) get(path ...string) any {
	var v any = r.json
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// pointers lists the problem's errors[].pointer.
func (r *resp) pointers() []string {
	var out []string
	errs, _ := r.json["errors"].([]any)
	for _, e := range errs {
		m, _ := e.(map[string]any)
		p, _ := m["pointer"].(string)
		out = append(out, p)
	}
	return out
}

// do sends one request through internal/apiclient (Do, so that a test can
// send any body and header) and decodes the answer.
func (h *harness) do(method, path, token string, body any, headers ...string) *resp {
	h.t.Helper()
	hdr := http.Header{}
	for i := 0; i+1 < len(headers); i += 2 {
		hdr.Set(headers[i], headers[i+1])
	}
	c := &apiclient.Client{Base: h.base, Token: token, HTTP: h.client}
	r, err := c.Do(h.t.Context(), method, path, body, hdr)
	if err != nil {
		h.t.Fatal(err)
	}
	out := &resp{status: r.Status, header: r.Header, body: r.Body}
	_ = json.Unmarshal(r.Body, &out.json)
	return out
}

// expect checks a status and, for problems, the code.
func (h *harness) expect(r *resp, status int, code string) {
	h.t.Helper()
	if r.status != status || (code != "" && r.str("code") != code) {
		h.t.Fatalf("got %d %s, want %d %s: %s", r.status, r.str("code"), status, code, r.body)
	}
	if r.header.Get("X-Request-Id") == "" {
		h.t.Fatalf("no X-Request-Id")
	}
	if status >= 400 {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			h.t.Fatalf("problem content type %q", ct)
		}
		if r.str("requestId") != r.header.Get("X-Request-Id") || r.str("type") != problem.TypeBase+code || r.str("title") == "" || r.str("instance") == "" {
			h.t.Fatalf("problem members: %s", r.body)
		}
	}
}

func res(space string) string { return "/v2/spaces/" + space + "/resources" }

// create posts a resource and returns the accepted Operation.
func (h *harness) create(space, name, form string, spec any, extra ...any) *resp {
	h.t.Helper()
	body := map[string]any{"name": name, "formUrl": form, "spec": spec}
	if len(extra) > 0 {
		body["privateInputs"] = extra[0]
	}
	return h.do("POST", res(space), tAdmin, body)
}

// mustCreate creates and waits for success, returning the resource UID.
func (h *harness) mustCreate(space, name, form string, spec any, extra ...any) string {
	h.t.Helper()
	r := h.create(space, name, form, spec, extra...)
	h.expect(r, 202, "")
	op := h.waitDone(space, r.str("id"))
	if op.str("state") != "succeeded" {
		h.t.Fatalf("create %s: %s", name, op.body)
	}
	return r.str("resourceUid")
}

func (h *harness) waitDone(space, id string) *resp {
	h.t.Helper()
	r := h.do("GET", "/v2/spaces/"+space+"/operations/"+id+"?wait=10", tAdmin, nil)
	h.expect(r, 200, "")
	return r
}

func (h *harness) put(space, uid string, spec any, headers ...string) *resp {
	h.t.Helper()
	return h.do("PUT", res(space)+"/"+uid, tAdmin, map[string]any{"spec": spec}, headers...)
}

func (h *harness) mustPut(space, uid string, spec any) {
	h.t.Helper()
	r := h.put(space, uid, spec)
	h.expect(r, 202, "")
	if op := h.waitDone(space, r.str("id")); op.str("state") != "succeeded" {
		h.t.Fatalf("put: %s", op.body)
	}
}

func (h *harness) del(space, uid string, headers ...string) *resp {
	h.t.Helper()
	return h.do("DELETE", res(space)+"/"+uid, tAdmin, nil, headers...)
}

func (h *harness) mustDelete(space, uid string) {
	h.t.Helper()
	r := h.del(space, uid)
	h.expect(r, 202, "")
	if op := h.waitDone(space, r.str("id")); op.str("state") != "succeeded" {
		h.t.Fatalf("delete: %s", op.body)
	}
}

func (h *harness) getRes(space, uid string) *resp {
	h.t.Helper()
	return h.do("GET", res(space)+"/"+uid, tAdmin, nil)
}

func (h *harness) list(space, token string) []map[string]any {
	h.t.Helper()
	r := h.do("GET", res(space), token, nil)
	h.expect(r, 200, "")
	var out []map[string]any
	items, _ := r.json["items"].([]any)
	for _, it := range items {
		out = append(out, it.(map[string]any))
	}
	return out
}

func refTo(uid string) map[string]any { return map[string]any{"resourceUid": uid} }

func queueSpec() map[string]any { return map[string]any{"messageRetentionSeconds": 3600} }

func consumerSpec(q, w string, dlq ...string) map[string]any {
	s := map[string]any{
		"queue": refTo(q), "worker": refTo(w),
		"maxBatchSize": 10, "maxBatchTimeoutSeconds": 1, "maxConcurrency": 1, "maxRetries": 3, "retryDelaySeconds": 0,
	}
	if len(dlq) > 0 {
		s["deadLetterQueue"] = refTo(dlq[0])
	}
	return s
}

const queueModule = "export default {\n  async queue(batch, env, ctx) { batch.acknowledgeAll(); },\n  async fetch(request, env, ctx) { return new Response('ok'); },\n};\n"

func versionSpec(worker, content string, bindings ...string) map[string]any {
	s := map[string]any{
		"worker": refTo(worker), "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": content}},
	}
	if len(bindings) > 0 {
		var bs []any
		for i, q := range bindings {
			bs = append(bs, map[string]any{"name": "Q" + string(rune('A'+i)), "resource": refTo(q)})
		}
		s["queueProducerBindings"] = bs
	}
	return s
}

// worker creates a ModuleWorker with handlers and a selected version whose
// module exports both handlers; it returns the worker and version UIDs.
func (h *harness) worker(space, name string, handlers ...string) (string, string) {
	h.t.Helper()
	if len(handlers) == 0 {
		handlers = []string{"queue"}
	}
	w := h.mustCreate(space, name, fWorker, map[string]any{"handlers": []string{"fetch"}})
	v := h.mustCreate(space, name+"-v1", fVersion, versionSpec(w, queueModule))
	h.mustPut(space, w, map[string]any{"handlers": handlers, "version": refTo(v)})
	return w, v
}

// pauseHook holds every Operation after its intent is journaled until
// release is closed, signalling paused each time.
func pauseHook(release <-chan struct{}, paused chan<- struct{}) harnessOpt {
	return func(o *controller.Options) {
		o.AfterIntent = func(ctx context.Context, op store.Operation) {
			select {
			case paused <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

type errString string

func (e errString) Error() string { return string(e) }

func newTestServer(t *testing.T, h http.Handler) *httptest.Server {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}
