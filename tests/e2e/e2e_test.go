// Package e2e holds the end-to-end tests of the reference host: each one
// runs the real cmd/takohost binary (built once per test process) on a
// temporary data directory and a loopback port, and talks to it only over
// HTTP, or (the fuzz targets) runs package host in process. A test skips
// with the reason when the binary cannot be built.
package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// Principals of the authorisation tests, in space "s1" unless said.
const (
	spaceA = "s1"
	spaceB = "s2"
)

type env struct {
	t     *testing.T
	host  *harness.Host
	rec   *harness.Recorder
	admin *harness.Client
	tok   map[string]string // principal -> token
	tmp   string
}

type hostOpts struct {
	args       []string // extra host flags
	dataDir    string   // default: <tmp>/data
	principals bool     // write host.json with the matrix principals
	allowFetch []string // host.json allowedFetchHosts
	wrap       []string // command prefix (unshare ...)
	allowMore  []string // more -allow-fetch patterns besides the recorder
	noStart    bool
}

func hostBin(t *testing.T) string {
	t.Helper()
	bin, err := harness.BuildHost()
	if err != nil {
		t.Skipf("the host binary cannot be built: %v", err)
	}
	return bin
}

// startEnv starts a recorder and a host that may fetch it.
func startEnv(t *testing.T, o hostOpts) *env {
	t.Helper()
	bin := hostBin(t)
	e := &env{t: t, tok: map[string]string{}, tmp: t.TempDir()}
	rec, err := harness.StartRecorder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	e.rec = rec
	data := o.dataDir
	if data == "" {
		data = filepath.Join(e.tmp, "data")
	}
	if o.principals {
		ps := matrixPrincipals()
		for _, p := range ps {
			e.tok[p.Name] = p.Token
		}
		if err := harness.WriteHostJSON(data, ps, o.allowFetch); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"-allow-fetch", strings.Join(append([]string{rec.Addr()}, o.allowMore...), ",")}, o.args...)
	h, err := harness.NewHost(bin, data, args...)
	if err != nil {
		t.Fatal(err)
	}
	h.Wrap = o.wrap
	e.host = h
	t.Cleanup(func() {
		if h.Running() {
			h.Kill()
		}
		if t.Failed() {
			t.Logf("host output (tail):\n%s", harness.Tail(h.Out.String(), 6000))
		}
	})
	if o.noStart {
		return e
	}
	e.start()
	return e
}

func (e *env) start() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.host.Start(ctx); err != nil {
		e.t.Fatalf("host start: %v", err)
	}
	if e.admin == nil {
		tok := e.tok["admin"]
		if tok == "" {
			var err error
			tok, err = harness.AdminToken(e.host.DataDir)
			if err != nil {
				e.t.Fatalf("admin token: %v", err)
			}
			e.tok["admin"] = tok
		}
		e.admin = &harness.Client{Base: e.host.Base(), Token: tok, Timeout: 30 * time.Second}
	}
}

func (e *env) client(principal string) *harness.Client {
	return e.admin.With(e.tok[principal])
}

func (e *env) topology(o harness.TopologyOptions) *harness.Topology {
	e.t.Helper()
	if o.Space == "" {
		o.Space = spaceA
	}
	if o.RecorderURL == "" {
		o.RecorderURL = e.rec.URL()
	}
	if o.Scope == "" {
		o.Scope = e.t.Name()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topo, err := harness.CreateTopology(ctx, e.admin, o)
	if err != nil {
		e.t.Fatalf("topology: %v", err)
	}
	return topo
}

func matrixPrincipals() []harness.Principal {
	return []harness.Principal{
		{Name: "admin", Token: harness.NewToken(), Grants: []harness.Grant{{Space: "*", Role: "editor"}}},
		{Name: "viewer", Token: harness.NewToken(), Grants: []harness.Grant{{Space: spaceA, Role: "viewer"}}},
		{Name: "editor", Token: harness.NewToken(), Grants: []harness.Grant{{Space: spaceA, Role: "editor"}}},
		// An editor narrowed to the queue Form only: every ModuleWorker
		// route is another Form to it.
		{Name: "narrow", Token: harness.NewToken(), Grants: []harness.Grant{{Space: spaceA, Role: "editor", Forms: []string{harness.FormQueue}}}},
		{Name: "other", Token: harness.NewToken(), Grants: []harness.Grant{{Space: spaceB, Role: "editor"}}},
		// An editor of the worker Forms and of consumers who may only read
		// queues: it may change code, but not code that consumes a queue,
		// and its invocations may not send.
		{Name: "coder", Token: harness.NewToken(), Grants: []harness.Grant{
			{Space: spaceA, Role: "editor", Forms: []string{harness.FormWorker, harness.FormVersion, harness.FormConsumer}},
			{Space: spaceA, Role: "viewer", Forms: []string{harness.FormQueue}},
		}},
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func body(k string, do any) string {
	return mustJSON(map[string]any{"k": k, "do": do})
}

// isRoot reports whether the test may mount.
func isRoot() bool { return os.Geteuid() == 0 }

func contains(hay, needle string) bool { return strings.Contains(hay, needle) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
