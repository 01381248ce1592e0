package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/runtime/sandbox"
)

// TestMain lets this test binary be the worker sandbox the hosts it starts
// run.
func TestMain(m *testing.M) {
	sandbox.Main()
	// No test reads or writes the user's contexts or takes their settings.
	cfg, err := os.MkdirTemp("", "tako-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", cfg)
	for _, k := range []string{"TAKO_HOST", "TAKO_TOKEN", "TAKO_TOKEN_FILE", "TAKO_CONTEXT"} {
		os.Unsetenv(k)
	}
	code := m.Run()
	os.RemoveAll(cfg)
	os.Exit(code)
}

func startHost(t *testing.T, dir string) *host.Host {
	t.Helper()
	h, err := host.New(context.Background(), host.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet(), ShutdownGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

func quiet() *slogLogger { return discardLogger() }

// tako runs the command as a user would, answering its exit code, stdout
// and stderr.
func tako(t *testing.T, h *host.Host, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	full := append(args, "-host", h.URL(), "-token", h.AdminToken())
	code := run(t.Context(), full, &out, &errb)
	return code, out.String(), errb.String()
}

// copyExample copies examples/hello into a temporary project directory.
func copyExample(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("..", "..", "examples", "hello")
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func applyJSON(t *testing.T, h *host.Host, args ...string) Result {
	t.Helper()
	code, out, errs := tako(t, h, append(args, "-output", "json")...)
	if code != 0 {
		t.Fatalf("tako %v: exit %d: %s %s", args, code, errs, out)
	}
	var r Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("tako %v: %v: %s", args, err, out)
	}
	return r
}

func changes(r Result, action, kind string) []Change {
	var out []Change
	for _, c := range r.Changes {
		if c.Action == action && c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

// post sends body to the worker's fetch route (the example's fetch handler
// puts it on the queue).
func post(t *testing.T, h *host.Host, space, uid, body string) {
	t.Helper()
	req, _ := http.NewRequest("POST", h.URL()+"/v2/spaces/"+space+"/resources/"+uid+"/fetch", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+h.AdminToken())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("fetch: %d %s", res.StatusCode, b)
	}
}

// waitLog runs `tako tail` until its output holds want.
func waitLog(t *testing.T, h *host.Host, dir, worker, want string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, errs := tako(t, h, "tail", "-dir", dir, worker)
		if code != 0 {
			t.Fatalf("tail: exit %d: %s", code, errs)
		}
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never appeared in the log of %s: %s", want, worker, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The developer loop on the example project: apply creates everything and
// a message sent through the worker is handled; a second apply changes
// nothing; changing one module creates exactly one new version, selects
// it and collects the old one; delete removes everything, after which a
// second delete has nothing to do.
func TestApplyReapplyChangeDelete(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)

	plan := applyJSON(t, h, "apply", "-dir", dir, "-dry-run")
	if !plan.DryRun || plan.Summary.Created != 5 || plan.Summary.Updated != 1 {
		t.Fatalf("dry run plan: %+v", plan)
	}
	if r := applyJSON(t, h, "apply", "-dir", dir, "-dry-run"); r.Summary.Created != 5 {
		t.Fatalf("a dry run changed something: %+v", r)
	}

	r := applyJSON(t, h, "apply", "-dir", dir)
	if r.Summary.Created != 5 || r.Summary.Updated != 1 || r.Summary.Deleted != 0 {
		t.Fatalf("first apply: %+v", r)
	}
	workerUID := changes(r, "create", "worker")[0].UID
	oldVersion := changes(r, "create", "worker version")[0].Name

	post(t, h, "demo", workerUID, "world")
	out := waitLog(t, h, dir, "hello", "hello, world")
	if !strings.Contains(out, " log ") {
		t.Fatalf("tail output: %s", out)
	}

	r = applyJSON(t, h, "apply", "-dir", dir)
	if r.Summary != (Summary{Unchanged: 5}) {
		t.Fatalf("re-apply changed something: %+v", r)
	}

	// One module changes: one new version, selected; the old one collected.
	greet := filepath.Join(dir, "src", "greet.js")
	if err := os.WriteFile(greet, []byte("export function greet(g, n) { return `${g} again, ${n}`; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = applyJSON(t, h, "apply", "-dir", dir)
	created, deleted := changes(r, "create", "worker version"), changes(r, "delete", "worker version")
	if len(created) != 1 || len(deleted) != 1 || deleted[0].Name != oldVersion || created[0].Name == oldVersion ||
		len(changes(r, "update", "worker")) != 1 || r.Summary.Created != 1 || r.Summary.Updated != 1 || r.Summary.Deleted != 1 {
		t.Fatalf("apply after a module change: %+v", r)
	}
	post(t, h, "demo", workerUID, "moon")
	waitLog(t, h, dir, "hello", "hello again, moon")
	if r := applyJSON(t, h, "apply", "-dir", dir); r.Summary != (Summary{Unchanged: 5}) {
		t.Fatalf("re-apply after the change: %+v", r)
	}

	r = applyJSON(t, h, "delete", "-yes", "-dir", dir)
	// consumer, worker unselect, one version, worker, two queues
	if r.Summary.Deleted != 5 || r.Summary.Updated != 1 {
		t.Fatalf("delete: %+v", r)
	}
	if r := applyJSON(t, h, "delete", "-yes", "-dir", dir); len(r.Changes) != 0 {
		t.Fatalf("a second delete found something: %+v", r)
	}
	code, out, errs := tako(t, h, "tail", "-space", "demo", "hello")
	if code != exitFailed || !strings.Contains(errs, `no worker named "hello"`) {
		t.Fatalf("tail of a deleted worker: %d %s %s", code, out, errs)
	}
}

// Errors name the resource and the problem, with the documented exit
// codes: a manifest that names an undeclared queue is a usage error
// before any request; a request the host refuses is 1; an unreachable
// host is 3.
func TestErrorsAndExitCodes(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("space: demo\nconsumers:\n  - queue: nope\n    worker: w\n")
	code, _, errs := tako(t, h, "apply", "-dir", dir)
	if code != exitUsage || !strings.Contains(errs, `queue "nope" is not declared`) || !strings.Contains(errs, `worker "w" is not declared`) {
		t.Fatalf("undeclared references: %d %s", code, errs)
	}
	write("space: demo\nqueues:\n  - name: q\n    messageRetentionSeconds: 60\n    retention: 5\n")
	if code, _, errs := tako(t, h, "apply", "-dir", dir); code != exitUsage || !strings.Contains(errs, "retention") {
		t.Fatalf("unknown key: %d %s", code, errs)
	}
	// A retention beyond the Form's limit is found before any request.
	write("space: demo\nqueues:\n  - name: q\n    messageRetentionSeconds: 999999999\n")
	if code, _, errs := tako(t, h, "apply", "-dir", dir); code != exitUsage || !strings.Contains(errs, "queue q: messageRetentionSeconds must be an integer from 60 to 1209600") {
		t.Fatalf("refused spec: %d %s", code, errs)
	}
	// No host: one sentence saying where tako looked and what to do, exit 3.
	write("space: demo\nqueues:\n  - name: q\n    messageRetentionSeconds: 60\n")
	for _, args := range [][]string{{"apply", "-dir", dir}, {"queues"}, {"tail", "hello"}, {"login"}} {
		var out, eb bytes.Buffer
		code := run(t.Context(), append(args, "-host", "http://127.0.0.1:1", "-token", "x"), &out, &eb)
		want := "tako: no host answers at http://127.0.0.1:1 (connection refused); start one with `make run` or `tako dev`, or pick another with --host/--context\n"
		if code != exitUnreachable || eb.String() != want {
			t.Fatalf("tako %v with no host: %d %q", args, code, eb.String())
		}
	}
	if code, _, errs := tako(t, h, "ops", "get", "nope", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "not_found") {
		t.Fatalf("ops get of an unknown Operation: %d %s", code, errs)
	}
}

// The README's walkthrough, run line by line as written, as a user runs
// it beside `make run`: from a directory holding the host's data
// directory (data/, where the host writes admin-token) and a copy of
// examples/, with $TAKO_HOST naming the in-process host (make run's
// address is taken). Each `go run ./cmd/tako ...` line is this command
// with the same arguments and nothing added: after the login line every
// command takes its token and space from the context login stored (the
// token file is removed to prove it), and the text after "#" that follows
// a colon is what its output must contain (tail and peek are retried until
// it does, since delivery is asynchronous).
func TestReadmeWalkthrough(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i, j := strings.Index(s, "<!-- walkthrough -->"), strings.Index(s, "<!-- /walkthrough -->")
	if i < 0 || j < i {
		t.Fatal("README.md has no <!-- walkthrough --> block")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(copyExample(t), filepath.Join(root, "examples", "hello")); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, filepath.Join(root, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(root, "config"))
	t.Setenv("TAKO_HOST", h.URL())
	t.Chdir(root)
	ran := 0
	for _, line := range strings.Split(s[i:j], "\n") {
		cmdline, comment, _ := strings.Cut(line, "#")
		args := strings.Fields(cmdline)
		if len(args) < 3 || args[0] != "go" || args[1] != "run" || args[2] != "./cmd/tako" {
			continue
		}
		args = args[3:]
		want := ""
		if _, after, ok := strings.Cut(comment, ": "); ok {
			want = strings.TrimSpace(after)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var out, errb bytes.Buffer
			code := run(t.Context(), args, &out, &errb)
			if code != 0 {
				t.Fatalf("README: tako %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
			}
			if strings.Contains(out.String(), want) {
				t.Logf("tako %s\n%s", strings.Join(args, " "), out.String())
				break
			}
			retry := args[0] == "tail" || len(args) > 1 && args[1] == "peek"
			if !retry || time.Now().After(deadline) {
				t.Fatalf("README: tako %s: the output does not hold %q: %s", strings.Join(args, " "), want, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		if args[0] == "login" {
			if err := os.Remove(filepath.Join("data", "admin-token")); err != nil {
				t.Fatal(err)
			}
		}
		ran++
	}
	if ran != 9 {
		t.Fatalf("ran %d lines of the walkthrough, want 9", ran)
	}
}

// queues lists the example's queues; pause and resume change the delivery
// state the list shows, and a message sent while paused is handled only
// after resume.
func TestQueuesPauseResume(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	r := applyJSON(t, h, "apply", "-dir", dir)
	workerUID := changes(r, "create", "worker")[0].UID

	list := func() map[string]QueueInfo {
		t.Helper()
		code, out, errs := tako(t, h, "queues", "-space", "demo", "-output", "json")
		if code != 0 {
			t.Fatalf("queues: %d %s", code, errs)
		}
		var qs []QueueInfo
		if err := json.Unmarshal([]byte(out), &qs); err != nil {
			t.Fatal(err)
		}
		m := map[string]QueueInfo{}
		for _, q := range qs {
			m[q.Name] = q
		}
		return m
	}
	qs := list()
	if len(qs) != 2 || !qs["tasks"].Active || !qs["tasks-dead"].Active {
		t.Fatalf("queues: %+v", qs)
	}
	if code, out, errs := tako(t, h, "queues", "pause", "tasks", "-space", "demo"); code != 0 || !strings.Contains(out, "queue tasks: delivery paused") {
		t.Fatalf("pause: %d %s %s", code, out, errs)
	}
	if qs := list(); qs["tasks"].Active || !qs["tasks-dead"].Active {
		t.Fatalf("after pause: %+v", qs)
	}
	code, out, _ := tako(t, h, "queues", "-space", "demo")
	if code != 0 || !strings.Contains(out, "paused") || !strings.Contains(out, "NAME") {
		t.Fatalf("queues table: %s", out)
	}
	post(t, h, "demo", workerUID, "paused world")
	time.Sleep(300 * time.Millisecond) // nothing may be delivered meanwhile (checked below)
	if _, out, _ := tako(t, h, "tail", "-space", "demo", "hello"); strings.Contains(out, "paused world") {
		t.Fatalf("delivered while paused: %s", out)
	}
	// The paused message is there to inspect: counted, and its body previewed.
	deadline := time.Now().Add(10 * time.Second)
	for list()["tasks"].Messages == nil || *list()["tasks"].Messages != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the paused message is not counted: %+v", list())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out, errs := tako(t, h, "queues", "peek", "tasks", "-space", "demo"); code != 0 || !strings.Contains(out, `"paused world"`) || !strings.Contains(out, "available") {
		t.Fatalf("peek: %d %s %s", code, out, errs)
	}
	if code, out, errs := tako(t, h, "queues", "stats", "tasks", "-space", "demo"); code != 0 || !strings.Contains(out, "queue tasks: 1 messages, 12 bytes") || !strings.Contains(out, "delivery active false") {
		t.Fatalf("stats: %d %s %s", code, out, errs)
	}
	if code, out, errs := tako(t, h, "queues", "resume", "tasks", "-space", "demo"); code != 0 || !strings.Contains(out, "delivery active") {
		t.Fatalf("resume: %d %s %s", code, out, errs)
	}
	waitLog(t, h, dir, "hello", "hello, paused world")
	if code, _, errs := tako(t, h, "queues", "pause", "nope", "-space", "demo"); code != exitFailed || !strings.Contains(errs, `no queue named "nope"`) {
		t.Fatalf("pause of an unknown queue: %d %s", code, errs)
	}
}

// send publishes one message through the Host API's publish route and
// creates nothing: the example's worker handles the message, the space
// holds the same resources and Operations as before, and delete of the
// project still removes both queues.
func TestSend(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	before := spaceState(t, h)
	code, out, errs := tako(t, h, "send", "-space", "demo", "tasks", "from send")
	if code != 0 || !strings.Contains(out, "sent to queue tasks: message ") {
		t.Fatalf("send: %d %s %s", code, out, errs)
	}
	waitLog(t, h, dir, "hello", "hello, from send")
	if code, _, errs := tako(t, h, "send", "-space", "demo", "-delay", "43201", "tasks", "x"); code != exitFailed || !strings.Contains(errs, "(invalid_body, HTTP 400)") {
		t.Fatalf("send with a delay out of range: %d %s", code, errs)
	}
	if code, _, errs := tako(t, h, "send", "-space", "demo", "nope", "x"); code != exitFailed || !strings.Contains(errs, `no queue named "nope"`) {
		t.Fatalf("send to an unknown queue: %d %s", code, errs)
	}
	if after := spaceState(t, h); after != before {
		t.Fatalf("send changed the space:\nbefore %s\nafter  %s", before, after)
	}
	r := applyJSON(t, h, "delete", "-yes", "-dir", dir)
	if len(changes(r, "delete", "queue")) != 2 {
		t.Fatalf("delete after send: %+v", r)
	}
}

// spaceState is the demo space's resource names and its number of
// Operations.
func spaceState(t *testing.T, h *host.Host) string {
	t.Helper()
	c, err := newClient(h.URL(), h.AdminToken(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range []string{formQueue, formConsumer, formWorker, formVersion} {
		rs, err := c.list(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		for n := range rs {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	ops, err := c.api.ListOperationsWithResponse(t.Context(), "demo", nil)
	if err != nil || ops.JSON200 == nil {
		t.Fatalf("list operations: %v", err)
	}
	return fmt.Sprintf("%v, %d operations", names, len(ops.JSON200.Items))
}

// A worker with a name of 63 characters gets version names of at most 63
// that apply still recognises as its own to collect.
func TestLongWorkerNameVersions(t *testing.T) {
	long := strings.Repeat("w", 63)
	m := &Manifest{dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(m.dir, "main.js"), []byte("export default {}"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := m.buildVersion(WorkerDecl{Name: long, Main: "main.js"}, "uid", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Name) > 63 || !strings.HasPrefix(b.Name, versionPrefix(long)) || !versionNameRE.MatchString(b.Name) || !nameRE.MatchString(b.Name) {
		t.Fatalf("version name %q", b.Name)
	}
}

// On a terminal a step in progress shows as a line its result overwrites;
// elsewhere (a pipe, a file) only plain result lines are printed.
func TestProgressLines(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	m, err := LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := newClient(h.URL(), h.AdminToken(), m.Space)
	if err != nil {
		t.Fatal(err)
	}
	var tty bytes.Buffer
	if _, err := Apply(t.Context(), cl, m, false, &tty, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tty.String(), "… create queue tasks\r\033[K+ queue tasks created\n") {
		t.Fatalf("terminal output: %q", tty.String())
	}
	var plain bytes.Buffer
	if _, err := Delete(t.Context(), cl, m, false, &plain, false); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(plain.String(), "\r\033…") || !strings.Contains(plain.String(), "- queue tasks deleted\n") {
		t.Fatalf("plain output: %q", plain.String())
	}
}

// A publisher token, created with tokens create -grant SPACE:publisher:QUEUE
// (the queue's name, which tako turns into its UID), sends to that queue by
// UID and may not send elsewhere or read anything.
func TestSendWithAPublisherToken(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	code, out, errs := tako(t, h, "tokens", "create", "app", "-grant", "demo:publisher:tasks")
	if code != 0 {
		t.Fatalf("tokens create: %d %s", code, errs)
	}
	tok := strings.TrimSpace(out)
	c, err := newClient(h.URL(), h.AdminToken(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := c.list(t.Context(), formQueue)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errs := tako(t, h, "tokens", "list"); code != 0 || !strings.Contains(out, "demo:publisher:"+qs["tasks"].Uid) {
		t.Fatalf("tokens list shows the publisher's grant without its queue: %d %s %s", code, out, errs)
	}
	as := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := run(t.Context(), append(args, "-host", h.URL(), "-token", tok), &o, &e)
		return code, o.String(), e.String()
	}
	if code, out, errs := as("send", "-space", "demo", qs["tasks"].Uid, "from the app"); code != 0 || !strings.Contains(out, "message ") {
		t.Fatalf("send as the publisher: %d %s %s", code, out, errs)
	}
	waitLog(t, h, dir, "hello", "hello, from the app")
	var other string
	for n, q := range qs {
		if n != "tasks" {
			other = q.Uid
		}
	}
	if code, _, errs := as("send", "-space", "demo", other, "x"); code != exitFailed || !strings.Contains(errs, "(forbidden, HTTP 403)") {
		t.Fatalf("send to another queue as the publisher: %d %s", code, errs)
	}
	if code, _, errs := as("queues", "-space", "demo"); code != exitFailed || !strings.Contains(errs, "forbidden") {
		t.Fatalf("queues as the publisher: %d %s", code, errs)
	}
}

// send - publishes the bytes on stdin, any bytes, and -key makes a retry
// send nothing again; a body over the limit is refused before any request.
func TestSendFromStdinWithAKey(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	// Paused, so that the messages stay where the test reads them.
	if code, _, errs := tako(t, h, "queues", "-space", "demo", "pause", "tasks"); code != 0 {
		t.Fatalf("pause: %s", errs)
	}
	old := stdin
	t.Cleanup(func() { stdin = old })
	bin := []byte{0xff, 0x00, 'x', 0xfe}
	stdin = bytes.NewReader(bin)
	code, first, errs := tako(t, h, "send", "-space", "demo", "-key", "k1", "tasks", "-")
	if code != 0 {
		t.Fatalf("send -: %d %s", code, errs)
	}
	stdin = bytes.NewReader(bin)
	code, again, errs := tako(t, h, "send", "-space", "demo", "-key", "k1", "tasks", "-")
	if code != 0 || !strings.Contains(again, "not sent again") || strings.Fields(again)[4] != strings.Fields(first)[4] {
		t.Fatalf("the retry with the key: %d %q after %q %s", code, again, first, errs)
	}
	stdin = bytes.NewReader(make([]byte, 127001))
	if code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", "-"); code != exitUsage || !strings.Contains(errs, "the body is more than 127000 bytes, more than a message holds") {
		t.Fatalf("send of 127001 bytes: %d %s", code, errs)
	}
	c, err := newClient(h.URL(), h.AdminToken(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.named(t.Context(), formQueue, "tasks")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.api.ListQueueMessagesWithResponse(t.Context(), "demo", q.Uid, nil)
	if err != nil || r.JSON200 == nil {
		t.Fatalf("list messages: %v %s", err, r.Body)
	}
	if len(r.JSON200.Items) != 1 || !bytes.Equal(r.JSON200.Items[0].BodyPreview, bin) {
		t.Fatalf("the queue holds %+v, want the one message of bytes %x", r.JSON200.Items, bin)
	}
}
