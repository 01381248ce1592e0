package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

type probeResult struct {
	Require, Process, Deno, Bun, Fs, GlobalRequire, Module, ImportScripts string
	FnCtorProcess                                                         string `json:"fnCtorProcess"`
	DynamicImport                                                         string `json:"dynamicImport"`
	RequireCall                                                           string `json:"requireCall"`
	Fetch                                                                 *struct {
		OK      bool   `json:"ok"`
		Status  int    `json:"status"`
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"fetch"`
}

// hostsWrap returns a command prefix that runs the host in its own mount
// namespace with hostsFile bind-mounted over /etc/hosts (so that test names
// resolve to link-local addresses for the host alone), or nil when this
// machine does not allow it.
func hostsWrap(t *testing.T, hostsFile string) []string {
	if !isRoot() {
		return nil
	}
	script := `mount --bind "$HOSTS_FILE" /etc/hosts && exec "$0" "$@"`
	check := exec.Command("unshare", "-m", "sh", "-c", script, "grep", "-q", "metadata.test", "/etc/hosts")
	check.Env = append(os.Environ(), "HOSTS_FILE="+hostsFile)
	if out, err := check.CombinedOutput(); err != nil {
		t.Logf("no private /etc/hosts for the host (%v %s): the name cases are skipped", err, out)
		return nil
	}
	return []string{"env", "HOSTS_FILE=" + hostsFile, "unshare", "-m", "sh", "-c", script}
}

// TestWorkerSandbox checks the worker's global surface (no require, no
// process, no file system), the outbound fetch policy (denied by default,
// allowed only to configured hosts, link-local and metadata addresses
// refused even when allowed, by literal, by name and behind a redirect),
// and that an infinite loop is ended by the time limit while another
// worker's deliveries go on.
func TestWorkerSandbox(t *testing.T) {
	tmp := t.TempDir()
	hosts := filepath.Join(tmp, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.1 localhost allowed.test\n169.254.169.254 metadata.test\nfe80::1 ll6.test\n"), 0o644)
	wrap := hostsWrap(t, hosts)

	// A loopback server that no worker may reach.
	var forbiddenHits atomic.Int64
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fsrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forbiddenHits.Add(1); w.Write([]byte("leak")) })}
	go fsrv.Serve(fl)
	t.Cleanup(func() { fsrv.Close() })

	// The recorder's port is known only once startEnv made it: the flags
	// are set after.
	e := startEnv(t, hostOpts{noStart: true, wrap: wrap, args: []string{"-handler-timeout", "2s", "-shutdown-grace", "1s"}})
	recPort := e.rec.Addr()[strings.LastIndex(e.rec.Addr(), ":")+1:]
	e.host.Args = []string{"-allow-fetch", strings.Join([]string{e.rec.Addr(), "allowed.test:" + recPort,
		"169.254.169.254:80", "169.254.169.254", "metadata.test:80", "metadata.test", "[fe80::1]:80", "ll6.test:80", "ll6.test"}, ","),
		"-handler-timeout", "2s", "-shutdown-grace", "1s"}
	e.start()
	ctx := ctxT(t, 120*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 1, MaxRetries: 3})
	c := e.admin
	probe := func(req map[string]any) (*probeResult, time.Duration) {
		t.Helper()
		t0 := time.Now()
		r, err := c.Do(ctx, "POST", "/v2/spaces/"+topo.Space+"/resources/"+topo.Worker+"/fetch/probe", mustJSON(req), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != 200 {
			t.Fatalf("probe %v: %s", req, r)
		}
		var p probeResult
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Fatalf("probe: %v %s", err, r.Body)
		}
		return &p, time.Since(t0)
	}

	// The global surface.
	p, _ := probe(map[string]any{})
	for name, v := range map[string]string{"require": p.Require, "process": p.Process, "Deno": p.Deno, "Bun": p.Bun,
		"fs": p.Fs, "globalThis.require": p.GlobalRequire, "module": p.Module, "importScripts": p.ImportScripts,
		"process via Function": p.FnCtorProcess} {
		if v != "undefined" {
			t.Errorf("typeof %s = %q in a worker, want undefined", name, v)
		}
	}
	if !strings.HasPrefix(p.RequireCall, "error:") {
		t.Errorf("require(\"fs\") in a worker %s", p.RequireCall)
	}
	t.Logf("require(\"fs\") -> %s; import('fs') -> %s", p.RequireCall, p.DynamicImport)
	if !strings.HasPrefix(p.DynamicImport, "error:") {
		t.Errorf("dynamic import('fs') = %q, want an error", p.DynamicImport)
	}

	// Outbound fetch.
	type fcase struct {
		name    string
		url     string
		allowed bool
		needDNS bool
	}
	cases := []fcase{
		{"configured host", e.rec.URL() + "/sink-allowed", true, false},
		{"configured name", "http://allowed.test:" + recPort + "/sink-name", true, true},
		{"loopback port not configured", "http://" + fl.Addr().String() + "/x", false, false},
		{"localhost name not configured", fmt.Sprintf("http://localhost:%d/x", fl.Addr().(*net.TCPAddr).Port), false, false},
		{"metadata literal (configured)", "http://169.254.169.254/latest/meta-data/", false, false},
		{"link-local literal", "http://169.254.1.1/", false, false},
		{"IPv6 link-local literal (configured)", "http://[fe80::1]/", false, false},
		{"IPv4-mapped metadata", "http://[::ffff:169.254.169.254]/", false, false},
		{"name resolving to metadata (configured)", "http://metadata.test/latest/meta-data/", false, true},
		{"name resolving to IPv6 link-local (configured)", "http://ll6.test/", false, true},
		{"redirect to metadata", e.rec.URL() + "/redirect?to=http://169.254.169.254/latest/meta-data/", false, false},
		{"redirect to a port not configured", e.rec.URL() + "/redirect?to=http://" + fl.Addr().String() + "/x", false, false},
		{"not http", "file:///etc/passwd", false, false},
	}
	for _, fc := range cases {
		if fc.needDNS && wrap == nil {
			t.Logf("skip %q: needs a private /etc/hosts", fc.name)
			continue
		}
		p, took := probe(map[string]any{"fetch": fc.url})
		if p.Fetch == nil {
			t.Errorf("%s: no fetch result", fc.name)
			continue
		}
		okStatus := p.Fetch.OK && p.Fetch.Status < 300
		switch {
		case fc.allowed && !okStatus:
			t.Errorf("%s (%s): refused, want allowed: %+v", fc.name, fc.url, p.Fetch)
		case !fc.allowed && okStatus:
			t.Errorf("%s (%s): allowed, want refused: %+v", fc.name, fc.url, p.Fetch)
		case !fc.allowed && took > 1500*time.Millisecond:
			// A refusal by policy is immediate; a slow failure means the
			// host tried to connect.
			t.Errorf("%s (%s): failed only after %s (a connection attempt?): %+v", fc.name, fc.url, took, p.Fetch)
		}
		t.Logf("fetch %-46s -> ok=%v status=%d %s %s (%s)", fc.name, p.Fetch.OK, p.Fetch.Status, p.Fetch.Name, p.Fetch.Message, took.Round(time.Millisecond))
	}
	if n := forbiddenHits.Load(); n != 0 {
		t.Errorf("the server no worker may reach got %d requests", n)
	}
	if e.rec.Sink("/sink-allowed") != 1 {
		t.Errorf("the configured host got %d requests, want 1", e.rec.Sink("/sink-allowed"))
	}

	// An infinite loop (a fetch and a queue handler) ends by the time limit
	// while another worker's deliveries continue.
	other := e.topology(harness.TopologyOptions{Space: "s-other", MaxBatchSize: 1})
	if sr, _, err := harness.Send(ctx, c, topo.Space, topo.Worker, "WORK", []string{body("spinner", []string{"spin", "ack"})}); err != nil || !sr.OK {
		t.Fatalf("send spinner: %v %+v", err, sr)
	}
	var spin *harness.Response
	var spinTook time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t0 := time.Now()
		spin, _ = c.Do(ctx, "GET", "/v2/spaces/"+topo.Space+"/resources/"+topo.Worker+"/fetch/spin", nil, nil)
		spinTook = time.Since(t0)
	}()
	if err := harness.Poll(5*time.Second, func() error {
		if len(e.rec.Deliveries("spinner")) == 0 {
			return fmt.Errorf("spinner not delivered")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	spinAt := time.Now()
	for i := 0; i < 3; i++ {
		k := fmt.Sprintf("bystander-%d", i)
		if sr, _, err := harness.Send(ctx, c, other.Space, other.Worker, "WORK", []string{body(k, "ack")}); err != nil || !sr.OK {
			t.Errorf("send %s while another worker spins: %v %+v", k, err, sr)
		}
	}
	if err := harness.Poll(10*time.Second, func() error {
		for i := 0; i < 3; i++ {
			if len(e.rec.Deliveries(fmt.Sprintf("bystander-%d", i))) == 0 {
				return fmt.Errorf("bystander-%d not delivered", i)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	bystanders := time.Since(spinAt)
	wg.Wait()
	if spin == nil || spin.Status != 500 {
		t.Errorf("a spinning fetch handler answered %s, want 500 worker_error", spin)
	} else {
		checkProblem(t, spin, "worker_error")
	}
	if spinTook > 2*time.Second+3*time.Second {
		t.Errorf("the spinning fetch took %s with a 2 s limit", spinTook)
	}
	if err := harness.Poll(15*time.Second, func() error {
		ds := e.rec.Deliveries("spinner")
		if len(ds) < 2 || ds[1].Msg.Attempts != 2 {
			return fmt.Errorf("the spinning queue handler's message was not redelivered after the time limit: %+v", ds)
		}
		if _, ok := ackedIDs(e.rec, topo.QueueName)[ds[0].Msg.ID]; !ok {
			return fmt.Errorf("spinner not acknowledged on its second delivery")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	t.Logf("spin: fetch ended after %s (%d); bystander worker delivered 3 messages %s after the spin began", spinTook.Round(time.Millisecond), spin.Status, bystanders.Round(time.Millisecond))
	// The host still serves the spinning worker afterwards.
	if r, err := c.Do(ctx, "GET", "/v2/spaces/"+topo.Space+"/resources/"+topo.Worker+"/fetch/hello", nil, nil); err != nil || r.Status != 200 {
		t.Errorf("the worker after its spin: %v %s", err, r)
	}
}
