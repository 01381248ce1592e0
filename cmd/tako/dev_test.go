package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/host"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never appeared:\n%s", want, b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dev with no host running starts one in-process on a data directory,
// applies the project, streams the worker's log, re-applies when a module
// file is saved (one new version), and stops the host on Ctrl-C.
func TestDevStartsAHostAndReappliesOnSave(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := copyExample(t)
	data := filepath.Join(t.TempDir(), "data")
	base := "http://" + addr

	useConfigDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "-dir", dir, "-data", data, "-host", base, "-token", ""}, &out, &errb)
	}()
	waitFor(t, &out, "started one here")
	waitFor(t, &out, "dev: registered this host as the context dev in ")
	waitFor(t, &out, "dev: applied to space demo: 5 created, 1 updated")
	// Another terminal reaches dev's host through the context dev alone.
	if code, o, e := bare(t, "queues", "-context", "dev"); code != 0 || !strings.Contains(o, "tasks-dead") {
		t.Fatalf("queues -context dev: %d %s %s", code, o, e)
	}

	tok := filepath.Join(data, "admin-token")
	fetch := func(body string) {
		t.Helper()
		var o, e bytes.Buffer
		if code := run(t.Context(), []string{"fetch", "-host", base, "-token-file", tok, "-space", "demo", "-data", body, "hello"}, &o, &e); code != 0 {
			t.Fatalf("fetch: %d %s", code, e.String())
		}
	}
	fetch("world")
	waitFor(t, &out, "[hello] log hello, world")

	if err := os.WriteFile(filepath.Join(dir, "src", "greet.js"), []byte("export function greet(g, n) { return `${g} from dev, ${n}`; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "dev: change seen; applying")
	waitFor(t, &out, "dev: applied to space demo: 1 created, 1 updated, 1 deleted")
	fetch("moon")
	waitFor(t, &out, "[hello] log hello from dev, moon")

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("dev exited %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not stop")
	}
	// The host it started is gone, and its data directory stays.
	if _, err := os.Stat(filepath.Join(data, "host.json")); err != nil {
		t.Fatalf("the data directory did not survive: %v", err)
	}
	var o, e bytes.Buffer
	if code := run(t.Context(), []string{"health", "-host", base}, &o, &e); code != exitUnreachable {
		t.Fatalf("health after dev stopped: %d %s", code, e.String())
	}
}

// tail -f keeps following across a host restart on the same data
// directory and address: the line from before is printed once, the line
// logged after the restart appears (its seq is above the cursor), nothing
// repeats.
func TestTailFollowsAcrossARestart(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	start := func(listen string) *host.Host {
		t.Helper()
		h, err := host.New(context.Background(), host.Config{DataDir: data, Listen: listen, Logger: quiet(), ShutdownGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := start("127.0.0.1:0")
	addr := h.Addr()
	dir := copyExample(t)
	r := applyJSON(t, h, "apply", "-dir", dir)
	workerUID := changes(r, "create", "worker")[0].UID
	post(t, h, "demo", workerUID, "one")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"tail", "-f", "-space", "demo", "-host", h.URL(), "-token", h.AdminToken(), "hello"}, &out, &errb)
	}()
	waitFor(t, &out, "hello, one")

	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = start(addr)
	defer h.Shutdown(context.Background())
	post(t, h, "demo", workerUID, "two")
	waitFor(t, &out, "hello, two")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("tail -f exited %d: %s", code, errb.String())
	}
	if n, m := strings.Count(out.String(), "hello, one"), strings.Count(out.String(), "hello, two"); n != 1 || m != 1 {
		t.Fatalf("lines repeated or lost (one %d, two %d):\n%s", n, m, out.String())
	}
	// The log itself survived the restart: a plain tail reads both lines,
	// in order, from the worker's file under the data directory.
	all := waitLog(t, h, dir, "hello", "hello, two")
	if i, j := strings.Index(all, "hello, one"), strings.Index(all, "hello, two"); i < 0 || j < i {
		t.Fatalf("the log after the restart:\n%s", all)
	}
	logFile := filepath.Join(data, host.LogsDir, workerUID+".log")
	if _, err := os.Stat(logFile); err != nil {
		t.Fatalf("the worker's log file: %v", err)
	}
	// Deleting the worker frees its log.
	if code, _, errs := tako(t, h, "delete", "-yes", "-dir", dir); code != 0 {
		t.Fatalf("delete: %d %s", code, errs)
	}
	if _, err := os.Stat(logFile); !os.IsNotExist(err) {
		t.Fatalf("the deleted worker's log file is still there: %v", err)
	}
}

// tokens -data, with the host stopped, adds a principal to host.json whose
// token works, with its grant only, from the host's next start; revoke
// removes it again.
func TestTokensCreateAndRevoke(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	start := func() *host.Host {
		t.Helper()
		h, err := host.New(context.Background(), host.Config{DataDir: data, Listen: "127.0.0.1:0", Logger: quiet(), ShutdownGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := start()
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"tokens", "create", "reader", "-data", data, "-grant", "demo:viewer"}, &out, &errb); code != 0 {
		t.Fatalf("tokens create: %d %s", code, errb.String())
	}
	tok := strings.TrimSpace(out.String())
	if len(tok) < 40 {
		t.Fatalf("token %q", tok)
	}
	raw, _ := os.ReadFile(filepath.Join(data, "host.json"))
	if strings.Contains(string(raw), tok) {
		t.Fatal("host.json holds the token itself")
	}
	h = start()
	as := func(token string, args ...string) (int, string) {
		var o, e bytes.Buffer
		code := run(t.Context(), append(args, "-host", h.URL(), "-token", token), &o, &e)
		return code, e.String()
	}
	if code, errs := as(tok, "queues", "-space", "demo"); code != 0 {
		t.Fatalf("the viewer cannot list: %d %s", code, errs)
	}
	if code, errs := as(tok, "queues", "pause", "tasks", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "forbidden") {
		t.Fatalf("the viewer paused a queue: %d %s", code, errs)
	}
	if code, errs := as(tok, "queues", "-space", "other"); code != exitFailed || !strings.Contains(errs, "not_found") {
		t.Fatalf("the viewer reached another space: %d %s", code, errs)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(t.Context(), []string{"tokens", "revoke", "reader", "-data", data}, &out, &errb); code != 0 {
		t.Fatalf("revoke: %d %s", code, errb.String())
	}
	h = start()
	defer h.Shutdown(context.Background())
	if code, errs := as(tok, "queues", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "unauthenticated") {
		t.Fatalf("a revoked token still works: %d %s", code, errs)
	}
	if code, errs := as(h.AdminToken(), "queues", "-space", "demo"); code != 0 {
		t.Fatalf("the admin after revoke: %d %s", code, errs)
	}
}

// tokens create and revoke through the running host take effect at once,
// and last across a restart; a principal that is not an administrator may
// not manage principals.
func TestTokensThroughTheHost(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	start := func() *host.Host {
		t.Helper()
		h, err := host.New(context.Background(), host.Config{DataDir: data, Listen: "127.0.0.1:0", Logger: quiet(), ShutdownGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := start()
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	as := func(token string, args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := run(t.Context(), append(args, "-host", h.URL(), "-token", token), &o, &e)
		return code, o.String(), e.String()
	}
	code, out, errs := as(h.AdminToken(), "tokens", "create", "reader", "-grant", "demo:viewer")
	if code != 0 {
		t.Fatalf("tokens create: %d %s", code, errs)
	}
	tok := strings.TrimSpace(out)
	if len(tok) < 40 || !strings.Contains(errs, "works now") {
		t.Fatalf("token %q, stderr %s", tok, errs)
	}
	if code, errs := func() (int, string) { c, _, e := as(tok, "queues", "-space", "demo"); return c, e }(); code != 0 {
		t.Fatalf("the new viewer cannot list at once: %d %s", code, errs)
	}
	if code, _, errs := as(tok, "queues", "pause", "tasks", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "forbidden") {
		t.Fatalf("the viewer paused a queue: %d %s", code, errs)
	}
	if code, _, errs := as(tok, "tokens", "create", "sneaky", "-grant", "*:editor"); code != exitFailed || !strings.Contains(errs, "forbidden") {
		t.Fatalf("a viewer created a principal: %d %s", code, errs)
	}
	code, out, _ = as(h.AdminToken(), "tokens", "list")
	if code != 0 || !strings.Contains(out, "reader  ") || !strings.Contains(out, "demo:viewer") || strings.Contains(out, "sneaky") || strings.Contains(out, tok) {
		t.Fatalf("tokens list: %d %s", code, out)
	}
	raw, _ := os.ReadFile(filepath.Join(data, "host.json"))
	if !strings.Contains(string(raw), `"reader"`) || strings.Contains(string(raw), tok) {
		t.Fatalf("host.json after create: %s", raw)
	}

	// Durable: the token works after a restart.
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = start()
	if code, _, errs := as(tok, "queues", "-space", "demo"); code != 0 {
		t.Fatalf("the viewer after a restart: %d %s", code, errs)
	}
	// Revoked: refused at once, and after a restart.
	if code, out, errs := as(h.AdminToken(), "tokens", "revoke", "reader"); code != 0 || !strings.Contains(out, "revoked reader") {
		t.Fatalf("revoke: %d %s %s", code, out, errs)
	}
	if code, _, errs := as(tok, "queues", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "unauthenticated") {
		t.Fatalf("a revoked token still works: %d %s", code, errs)
	}
	if code, _, errs := as(h.AdminToken(), "tokens", "revoke", "admin"); code != exitFailed || !strings.Contains(errs, "last_admin") {
		t.Fatalf("revoking the last admin: %d %s", code, errs)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = start()
	defer h.Shutdown(context.Background())
	if code, _, errs := as(tok, "queues", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "unauthenticated") {
		t.Fatalf("a revoked token works after a restart: %d %s", code, errs)
	}

	// tokens -data while the host runs: the host reloads host.json.
	var o, e bytes.Buffer
	if code := run(t.Context(), []string{"tokens", "create", "offline", "-data", data, "-grant", "demo:viewer"}, &o, &e); code != 0 {
		t.Fatalf("tokens create -data: %d %s", code, e.String())
	}
	offline := strings.TrimSpace(o.String())
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	eventually("the running host takes a principal added to host.json", func() bool {
		code, _, _ := as(offline, "queues", "-space", "demo")
		return code == 0
	})
	if code := run(t.Context(), []string{"tokens", "revoke", "offline", "-data", data}, &o, &e); code != 0 {
		t.Fatalf("tokens revoke -data: %d %s", code, e.String())
	}
	eventually("the running host drops a principal revoked in host.json", func() bool {
		code, _, errs := as(offline, "queues", "-space", "demo")
		return code == exitFailed && strings.Contains(errs, "unauthenticated")
	})
	// The API's principals and the file's are one set: reader is gone,
	// offline too, the admin stays.
	if code, out, _ := as(h.AdminToken(), "tokens", "list"); code != 0 || strings.Contains(out, "reader") || strings.Contains(out, "offline") || !strings.Contains(out, "admin") {
		t.Fatalf("tokens list: %d %s", code, out)
	}
}
