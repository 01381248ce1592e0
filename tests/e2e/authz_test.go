package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestAuthorisationMatrix runs every Host API route against every kind of
// caller and checks the status spec/host-api.md §Authentication and
// authorisation fixes: 401 without or with a bad token, 404 for a principal
// with no grant in the space (never leaking existence), 403 for a grant
// without the role or the Form, 2xx otherwise.
func TestAuthorisationMatrix(t *testing.T) {
	e := startEnv(t, hostOpts{principals: true})
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{NoConsumers: true})
	c := e.admin
	// An Operation to read: the admin's create of one more worker.
	r, err := c.Do(ctx, "POST", "/v2/spaces/"+spaceA+"/resources", map[string]any{
		"name": "mx-op", "formUrl": harness.FormWorker, "spec": map[string]any{"handlers": []string{"fetch"}}}, nil)
	if err != nil || r.Status != 202 {
		t.Fatalf("create mx-op: %v %s", err, r)
	}
	var op harness.Operation
	if err := r.JSON(&op); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitOp(ctx, spaceA, op.ID, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	workerSpec := map[string]any{"handlers": []string{"fetch", "queue"}, "version": harness.Ref(topo.Version)}
	sp := "/v2/spaces/" + spaceA

	// Code that a QueueConsumer runs: the admin's worker "mx-fed" consumes
	// the queue "mx-fed-q" through the consumer "mx-fed-c", and has two
	// versions, so that each caller can try to select the one not selected.
	fedQ, err := c.Create(ctx, spaceA, "mx-fed-q", harness.FormQueue, harness.QueueSpec(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	fedW, err := c.Create(ctx, spaceA, "mx-fed", harness.FormWorker, map[string]any{"handlers": []string{"queue"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fedVersion := func(name string) map[string]any {
		return map[string]any{"worker": harness.Ref(fedW), "mainModule": "worker.js",
			"modules": []any{map[string]any{"name": "worker.js", "content": harness.WorkerJS}},
			"vars":    map[string]any{"RECORDER": e.rec.URL(), "SCOPE": name, "DLQ": "none"}}
	}
	fedV := [2]string{}
	for i, n := range []string{"mx-fed-v1", "mx-fed-v2"} {
		if fedV[i], err = c.Create(ctx, spaceA, n, harness.FormVersion, fedVersion(n), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Put(ctx, spaceA, fedW, map[string]any{"handlers": []string{"queue"}, "version": harness.Ref(fedV[0])}); err != nil {
		t.Fatal(err)
	}
	consumerSpec := func(q string) map[string]any {
		return map[string]any{"queue": harness.Ref(q), "worker": harness.Ref(fedW), "maxBatchSize": 1, "maxBatchTimeoutSeconds": 0,
			"maxConcurrency": 1, "maxRetries": 0, "retryDelaySeconds": 0}
	}
	if _, err := c.Create(ctx, spaceA, "mx-fed-c", harness.FormConsumer, consumerSpec(fedQ), nil); err != nil {
		t.Fatal(err)
	}
	// Queues without a consumer, one per caller, for create-consumer.
	freeQ := map[string]string{}

	type route struct {
		name   string
		method string
		// path and body are computed per caller (create and delete need
		// fresh names and targets).
		req func(caller string) (path string, body any)
		// want maps a caller to the expected status; callers absent from
		// the map expect the route's default.
		want map[string]int
	}
	std := func(viewer, editor, narrow, coder int) map[string]int {
		return map[string]int{"none": 401, "bad": 401, "other": 404, "admin": 0, "viewer": viewer, "editor": editor, "narrow": narrow, "coder": coder}
	}
	adminOnly := func(ok int) map[string]int {
		return map[string]int{"none": 401, "bad": 401, "other": 403, "admin": ok, "viewer": 403, "editor": 403, "narrow": 403, "coder": 403}
	}
	fixed := func(p string, b any) func(string) (string, any) {
		return func(string) (string, any) { return p, b }
	}
	delTargets := map[string]string{}
	routes := []route{
		{"list", "GET", fixed(sp+"/resources", nil), std(200, 200, 200, 200)},
		{"list-by-form", "GET", fixed(sp+"/resources?formUrl="+harness.FormWorker, nil), std(200, 200, 200, 200)},
		{"create-worker", "POST", func(who string) (string, any) {
			return sp + "/resources", map[string]any{"name": "mx-c-" + who, "formUrl": harness.FormWorker, "spec": map[string]any{"handlers": []string{"fetch"}}}
		}, std(403, 202, 403, 202)},
		{"create-queue", "POST", func(who string) (string, any) {
			return sp + "/resources", map[string]any{"name": "mx-q-" + who, "formUrl": harness.FormQueue, "spec": harness.QueueSpec(0)}
		}, std(403, 202, 202, 403)},
		{"get-worker", "GET", fixed(sp+"/resources/"+topo.Worker, nil), std(200, 200, 403, 200)},
		{"get-queue", "GET", fixed(sp+"/resources/"+topo.Queue, nil), std(200, 200, 200, 200)},
		{"put-worker", "PUT", fixed(sp+"/resources/"+topo.Worker, map[string]any{"spec": workerSpec}), std(403, 202, 403, 202)},
		{"put-queue", "PUT", fixed(sp+"/resources/"+topo.Queue, map[string]any{"spec": harness.QueueSpec(0)}), std(403, 202, 202, 403)},
		// The queue extensions purge and redrive (spec/peers.md) need
		// editor of the queue's Form, as an update of the queue does.
		{"purge-queue", "POST", func(who string) (string, any) { return sp + "/resources/" + freeQ[who] + "/purge", nil }, std(403, 202, 202, 403)},
		{"redrive-queue", "POST", fixed(sp+"/resources/"+topo.Queue+"/redrive", map[string]any{}), std(403, 202, 202, 403)},
		{"delete-worker", "DELETE", func(who string) (string, any) { return sp + "/resources/" + delTargets[who], nil }, std(403, 202, 403, 202)},
		{"get-operation", "GET", fixed(sp+"/operations/"+op.ID, nil), std(200, 200, 403, 200)},
		// The Operation list leaves out what a caller may not read (a
		// narrow principal sees its Forms' Operations only).
		{"list-operations", "GET", fixed(sp+"/operations", nil), std(200, 200, 200, 200)},
		// Principals: only an administrator (editor on "*", no Form list).
		{"list-principals", "GET", fixed("/v2/principals", nil), adminOnly(200)},
		{"create-principal", "POST", func(who string) (string, any) {
			return "/v2/principals", map[string]any{"name": "mx-p-" + who, "grants": []any{map[string]any{"space": spaceA, "role": "viewer"}}}
		}, adminOnly(201)},
		{"revoke-principal", "DELETE", func(who string) (string, any) { return "/v2/principals/mx-r-" + who, nil }, adminOnly(200)},
		{"logs", "GET", fixed(sp+"/resources/"+topo.Worker+"/logs", nil), std(200, 200, 403, 200)},
		{"fetch", "POST", fixed(sp+"/resources/"+topo.Worker+"/fetch/hello", "{}"), std(403, 200, 403, 200)},
		{"fetch-root", "GET", fixed(sp+"/resources/"+topo.Worker+"/fetch", nil), std(403, 200, 403, 200)},
		{"openapi", "GET", fixed("/v2/openapi.json", nil), map[string]int{"none": 200, "bad": 200, "other": 200, "admin": 200, "viewer": 200, "editor": 200, "narrow": 200, "coder": 200}},
		// Changing the code behind an attached consumer needs editor on
		// the queues it consumes, checked before any side effect.
		{"version-of-fed", "POST", func(who string) (string, any) {
			return sp + "/resources", map[string]any{"name": "mx-fv-" + who, "formUrl": harness.FormVersion, "spec": fedVersion("mx-fv-" + who)}
		}, std(403, 202, 403, 403)},
		{"select-fed", "PUT", func(string) (string, any) {
			// The version not selected now, so that every PUT changes the code.
			r, _, err := c.Get(ctx, spaceA, fedW)
			next := fedV[0]
			if err == nil && fmt.Sprint(r.Spec["version"]) == fmt.Sprint(map[string]any{"resourceUid": fedV[0]}) {
				next = fedV[1]
			}
			return sp + "/resources/" + fedW, map[string]any{"spec": map[string]any{"handlers": []string{"queue"}, "version": harness.Ref(next)}}
		}, std(403, 202, 403, 403)},
		{"create-consumer", "POST", func(who string) (string, any) {
			return sp + "/resources", map[string]any{"name": "mx-cc-" + who, "formUrl": harness.FormConsumer, "spec": consumerSpec(freeQ[who])}
		}, std(403, 202, 403, 403)},
		// A producer Binding call needs the invoking principal's rights as
		// well as the version's creator's (the admin here): 200 is the
		// fetch's status; sendOK below says whether the send went through.
		{"fetch-send", "POST", fixed(sp+"/resources/"+topo.Worker+"/fetch/send", map[string]any{"binding": "WORK", "bodies": []string{`{"k":"mx"}`}}), std(403, 200, 403, 200)},
	}
	callers := []string{"none", "bad", "viewer", "editor", "narrow", "coder", "other", "admin"}
	for _, who := range callers {
		// A principal per caller for revoke-principal to try.
		if r, err := c.Do(ctx, "POST", "/v2/principals", map[string]any{"name": "mx-r-" + who, "grants": []any{map[string]any{"space": spaceA, "role": "viewer"}}}, nil); err != nil || r.Status != 201 {
			t.Fatalf("create principal mx-r-%s: %v %s", who, err, r)
		}
		if freeQ[who], err = c.Create(ctx, spaceA, "mx-fq-"+who, harness.FormQueue, harness.QueueSpec(0), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Whose invocation may send: the invoker's rights and the creator's.
	sendOK := map[string]bool{"editor": true, "admin": true, "coder": false}
	token := func(who string) string {
		switch who {
		case "none":
			return ""
		case "bad":
			return "not-a-token-of-anyone"
		}
		return e.tok[who]
	}
	type cell struct{ route, caller string }
	got := map[cell]int{}
	n := 0
	for _, rt := range routes {
		for _, who := range callers {
			if rt.name == "delete-worker" {
				uid, err := c.Create(ctx, spaceA, "mx-d-"+who, harness.FormWorker, map[string]any{"handlers": []string{"fetch"}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				delTargets[who] = uid
			}
			want := rt.want[who]
			path, b := rt.req(who)
			cl := e.admin.With(token(who))
			res, err := cl.Do(ctx, rt.method, path, b, nil)
			n++
			if err != nil {
				t.Errorf("%s as %s: %v", rt.name, who, err)
				continue
			}
			got[cell{rt.name, who}] = res.Status
			if want == 0 {
				if res.Status < 200 || res.Status > 299 {
					t.Errorf("%s as %s: want 2xx, got %s", rt.name, who, res)
				}
			} else if res.Status != want {
				t.Errorf("%s as %s: want %d, got %s", rt.name, who, want, res)
			}
			if res.Status >= 400 {
				checkProblem(t, res, map[int]string{401: "unauthenticated", 403: "forbidden", 404: "not_found"}[res.Status])
			}
			if rt.name == "fetch-send" && res.Status == 200 {
				var out struct {
					OK   bool   `json:"ok"`
					Name string `json:"name"`
				}
				if err := res.JSON(&out); err != nil {
					t.Errorf("fetch-send as %s: %v", who, err)
				} else if out.OK != sendOK[who] || (!out.OK && out.Name != "backend_unavailable") {
					t.Errorf("fetch-send as %s: the send resolved=%v (%s), want resolved=%v", who, out.OK, out.Name, sendOK[who])
				} else {
					t.Logf("fetch-send as %s: send resolved=%v %s", who, out.OK, out.Name)
				}
			}
			if res.Status == 401 && res.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s as %s: 401 without WWW-Authenticate", rt.name, who)
			}
			if res.Status == 202 {
				var o harness.Operation
				if res.JSON(&o) == nil && o.ID != "" {
					c.WaitOp(ctx, spaceA, o.ID, 20*time.Second)
				}
			}
		}
	}

	// Existence never leaks to another space's principal: an existing UID
	// and a made-up one read exactly alike (status, code, detail).
	other := e.client("other")
	for _, p := range []string{"/resources/" + topo.Worker, "/operations/" + op.ID, "/resources/" + topo.Worker + "/logs"} {
		a, err1 := other.Do(ctx, "GET", sp+p, nil, nil)
		missing := strings.Replace(strings.Replace(p, topo.Worker, "no-such-uid", 1), op.ID, "no-such-op", 1)
		b, err2 := other.Do(ctx, "GET", sp+missing, nil, nil)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if a.Status != b.Status || a.Code() != b.Code() || a.Problem == nil || b.Problem == nil || a.Detail() != b.Detail() {
			t.Errorf("another space's principal tells existing from missing: %s vs %s", a, b)
		}
	}
	// The space itself: a space nobody uses reads as the one that exists.
	a, _ := other.Do(ctx, "GET", sp+"/resources", nil, nil)
	b, _ := other.Do(ctx, "GET", "/v2/spaces/nobody-here/resources", nil, nil)
	if a == nil || b == nil || a.Status != 404 || b.Status != 404 || a.Detail() != b.Detail() {
		t.Errorf("space existence leaks: %s vs %s", a, b)
	}
	// Lists return only what the principal may read.
	l, err := e.client("narrow").List(ctx, spaceA)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range l {
		if r.FormURL != harness.FormQueue {
			t.Errorf("narrow principal's list shows a %s resource %s", r.FormURL, r.Name)
		}
	}

	t.Logf("authorisation matrix: %d routes x %d callers = %d requests", len(routes), len(callers), n)
	var names []string
	for _, rt := range routes {
		names = append(names, rt.name)
	}
	t.Log("\n" + renderMatrix(names, callers, func(r, c string) int { return got[cell{r, c}] }))
}

func renderMatrix(routes, callers []string, at func(r, c string) int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s", "route")
	for _, c := range callers {
		fmt.Fprintf(&b, " %7s", c)
	}
	b.WriteString("\n")
	for _, r := range routes {
		fmt.Fprintf(&b, "%-16s", r)
		for _, c := range callers {
			fmt.Fprintf(&b, " %7d", at(r, c))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// checkProblem checks the Host API problem members.
func checkProblem(t *testing.T, r *harness.Response, code string) {
	t.Helper()
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("%s: Content-Type %q, want application/problem+json", r, r.Header.Get("Content-Type"))
		return
	}
	if r.Problem == nil {
		t.Errorf("%s: problem does not decode", r)
		return
	}
	if code != "" && r.Problem.Code != code {
		t.Errorf("%s: code %q, want %q", r, r.Problem.Code, code)
	}
	if r.Problem.Code == "" {
		t.Errorf("%s: problem without code", r)
	}
	if r.Problem.Status != r.Status {
		t.Errorf("%s: problem status %d differs from HTTP %d", r, r.Problem.Status, r.Status)
	}
	if rid := r.Header.Get("X-Request-Id"); rid == "" || rid != r.RequestID() {
		t.Errorf("%s: requestId %q vs X-Request-Id %q", r, r.RequestID(), rid)
	}
	want := "https://queuehost.takoform.dev/problems/" + r.Problem.Code
	if r.Problem.Type != want {
		t.Errorf("%s: type %q, want %q", r, r.Problem.Type, want)
	}
}

// TestPrincipalNameReuse: authority is tied to a principal's immutable ID,
// not to its name. A principal revoked and created again under the same
// name (what tako tokens revoke and create do to host.json) does not revive
// the right of the old one's WorkerVersion to send.
func TestPrincipalNameReuse(t *testing.T) {
	e := startEnv(t, hostOpts{principals: true})
	ctx := ctxT(t, 120*time.Second)
	c, ed := e.admin, e.client("editor")
	q, err := c.Create(ctx, spaceA, "nr-q", harness.FormQueue, harness.QueueSpec(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ed.Create(ctx, spaceA, "nr-w", harness.FormWorker, map[string]any{"handlers": []string{"fetch"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ed.Create(ctx, spaceA, "nr-v1", harness.FormVersion, map[string]any{
		"worker": harness.Ref(w), "mainModule": "worker.js",
		"modules":               []any{map[string]any{"name": "worker.js", "content": harness.WorkerJS}},
		"vars":                  map[string]any{"RECORDER": e.rec.URL(), "SCOPE": t.Name(), "DLQ": "none"},
		"queueProducerBindings": []any{map[string]any{"name": "WORK", "resource": harness.Ref(q)}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ed.Put(ctx, spaceA, w, map[string]any{"handlers": []string{"fetch"}, "version": harness.Ref(v)}); err != nil {
		t.Fatal(err)
	}
	send := func(cl *harness.Client) (ok bool, name string) {
		t.Helper()
		res, err := cl.Do(ctx, "POST", "/v2/spaces/"+spaceA+"/resources/"+w+"/fetch/send", map[string]any{"binding": "WORK", "bodies": []string{`{"k":"nr"}`}}, nil)
		if err != nil || res.Status != 200 {
			t.Fatalf("fetch: %v %s", err, res)
		}
		var out struct {
			OK   bool   `json:"ok"`
			Name string `json:"name"`
		}
		if err := res.JSON(&out); err != nil {
			t.Fatal(err)
		}
		return out.OK, out.Name
	}
	if ok, name := send(c); !ok {
		t.Fatalf("before the revocation the editor's version cannot send: %s", name)
	}

	if code, _, err := e.host.Term(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("stop: %d %v", code, err)
	}
	path := filepath.Join(e.host.DataDir, auth.ConfigFile)
	cfg, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var old auth.Principal
	kept := cfg.Principals[:0]
	for _, p := range cfg.Principals {
		if p.Name == "editor" {
			old = p
			continue
		}
		kept = append(kept, p)
	}
	if old.ID == "" {
		t.Fatalf("host.json holds no ID for the editor: %+v", cfg.Principals)
	}
	id, err := auth.NewPrincipalID()
	if err != nil {
		t.Fatal(err)
	}
	tok := harness.NewToken()
	cfg.Principals = append(kept, auth.Principal{ID: id, Name: "editor", TokenSHA256: auth.HashToken(tok), Grants: old.Grants})
	if err := auth.Save(path, cfg); err != nil {
		t.Fatal(err)
	}
	e.start()

	// The admin may send, but the version's creator is gone: refused.
	if ok, name := send(c); ok || name != "backend_unavailable" {
		t.Errorf("after the editor was revoked and a new \"editor\" created, its old version sent (resolved=%v %s)", ok, name)
	}
	// Nor does the new principal of that name make it send.
	if ok, name := send(c.With(tok)); ok || name != "backend_unavailable" {
		t.Errorf("invoked by the new \"editor\", the old editor's version sent (resolved=%v %s)", ok, name)
	}
	// A version the new principal creates sends.
	v2, err := c.With(tok).Create(ctx, spaceA, "nr-v2", harness.FormVersion, map[string]any{
		"worker": harness.Ref(w), "mainModule": "worker.js",
		"modules":               []any{map[string]any{"name": "worker.js", "content": harness.WorkerJS}},
		"vars":                  map[string]any{"RECORDER": e.rec.URL(), "SCOPE": t.Name(), "DLQ": "none"},
		"queueProducerBindings": []any{map[string]any{"name": "WORK", "resource": harness.Ref(q)}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.With(tok).Put(ctx, spaceA, w, map[string]any{"handlers": []string{"fetch"}, "version": harness.Ref(v2)}); err != nil {
		t.Fatal(err)
	}
	if ok, name := send(c.With(tok)); !ok {
		t.Errorf("the new editor's own version cannot send: %s", name)
	}
}
