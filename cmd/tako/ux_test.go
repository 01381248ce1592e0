package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/host"
)

// Every command has help with a description, its flags and at least one
// example; help, -h and a mistyped command or subcommand answer as a user
// expects.
func TestHelpVersionCompletionDidYouMean(t *testing.T) {
	for _, c := range commands {
		code, out, errs := bare(t, c.name, "-h")
		if code != 0 || !strings.HasPrefix(errs, "usage: tako "+c.name) || !strings.Contains(errs, "\nexamples:\n  ") || out != "" {
			t.Errorf("tako %s -h: %d\n%s", c.name, code, errs)
		}
		if c.common && !strings.Contains(errs, "-context string") {
			t.Errorf("tako %s -h lists no -context:\n%s", c.name, errs)
		}
		if len(strings.Fields(c.desc)) < 8 {
			t.Errorf("tako %s: a description of a few words: %q", c.name, c.desc)
		}
	}
	if code, out, _ := bare(t, "help"); code != 0 || !strings.Contains(out, "  login       store a host") {
		t.Errorf("help:\n%s", out)
	}
	if code, _, errs := bare(t, "help", "apply"); code != 0 || !strings.Contains(errs, "restores what it updated") {
		t.Errorf("help apply: %d\n%s", code, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"aply"}, `unknown command "aply"; did you mean "apply"?`},
		{[]string{"contxt"}, `did you mean "context"?`},
		{[]string{"queues", "purg", "tasks"}, `queues: unknown subcommand "purg"; did you mean "purge"?`},
		{[]string{"tokens", "revok", "x"}, `did you mean "revoke"?`},
		{[]string{"ops", "lst"}, `did you mean "list"?`},
		{[]string{"completion", "tcsh"}, "completion: bash, zsh or fish"},
	} {
		code, _, errs := bare(t, append(c.args, "-host", "http://127.0.0.1:1")...)
		if c.args[0] == "completion" {
			code, _, errs = bare(t, c.args...)
		}
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("tako %v: %d %s", c.args, code, errs)
		}
	}
	code, out, _ := bare(t, "version")
	if code != 0 || !regexp.MustCompile(`^tako github.com/takoform/queuehost \S+( revision [0-9a-f]+.*)? go1\.\S+\n$`).MatchString(out) {
		t.Errorf("version: %d %q", code, out)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errs := bare(t, "completion", sh)
		if code != 0 || !strings.Contains(out, "redrive") || !strings.Contains(out, "-dry-run") || !strings.Contains(out, "login") {
			t.Errorf("completion %s: %d %s", sh, code, errs)
		}
		if p, err := exec.LookPath(sh); err == nil {
			f := filepath.Join(t.TempDir(), "c")
			write(t, f, out)
			cmd := exec.Command(p, "-n", f)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s -n of the completion: %v %s", sh, err, b)
			}
		}
	}
	if p, err := exec.LookPath("bash"); err == nil {
		// The bash completion completes a subcommand.
		_, script, _ := bare(t, "completion", "bash")
		cmd := exec.Command(p, "-c", script+"\nCOMP_WORDS=(tako queues red); COMP_CWORD=2; _tako; echo ${COMPREPLY[@]}")
		if b, err := cmd.Output(); err != nil || strings.TrimSpace(string(b)) != "redrive" {
			t.Errorf("bash completion of queues red: %q %v", b, err)
		}
	}
}

// A Host API refusal is one sentence with the problem code; a body that
// is not a problem document is never quoted as cut-off JSON.
func TestErrorSentences(t *testing.T) {
	detail := "messageRetentionSeconds must be an integer from 60 to 1209600"
	e := problemError("create queue q", 400, &api.Problem{Code: "invalid_spec", Status: 400, Title: "Invalid spec", Detail: &detail}, nil)
	if got := e.Error(); got != "create queue q: messageRetentionSeconds must be an integer from 60 to 1209600 (invalid_spec, HTTP 400)" {
		t.Errorf("%q", got)
	}
	body := []byte(`{"code":"worker_error","status":500,"title":"Worker error","detail":"the handler threw TypeError: x is not a function"}`)
	if got := problemError("send to queue tasks", 500, nil, body).Error(); got != "send to queue tasks: the handler threw TypeError: x is not a function (worker_error, HTTP 500)" {
		t.Errorf("%q", got)
	}
	long := []byte(`{"items":[` + strings.Repeat(`{"a":1},`, 100) + `{}]}`)
	if got := problemError("fetch hello", 502, nil, long).Error(); got != "fetch hello: refused (HTTP 502)" {
		t.Errorf("%q", got)
	}
	if got := problemError("fetch hello", 500, nil, []byte("boom\x1b[2J\nsecond line")).Error(); got != `fetch hello: boom\x1b[2J (HTTP 500)` {
		t.Errorf("%q", got)
	}
}

// send's refusals are sentences: a body over the limit is found before
// any request; one the host refuses names the problem code.
func TestSendErrors(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", strings.Repeat("x", 127001))
	if code != exitUsage || errs != "tako: send: the body is 127001 bytes, more than a message holds (127000); split it, or send a reference to where it is stored\n" {
		t.Fatalf("a too large send: %d %s", code, errs)
	}
	code, _, errs = tako(t, h, "send", "-space", "demo", "-delay", "99999", "tasks", "x")
	if code != exitFailed || strings.Contains(errs, "{") || !regexp.MustCompile(`^tako: send to queue tasks: .+ \([a-z_]+, HTTP [45]\d\d\)\n$`).MatchString(errs) {
		t.Fatalf("a refused send: %d %q", code, errs)
	}
}

// Control characters in worker log lines are escaped, so a worker can
// neither drive the terminal nor forge a line of its own.
func TestEscapeControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain\ttab":                "plain\ttab",
		"\x1b[31mred\x1b[0m":        `\x1b[31mred\x1b[0m`,
		"a\nforged line\r":          `a\nforged line\r`,
		"bell\x07 del\x7f c1\u009b": `bell\x07 del\x7f c1\u009b`,
		"rtl\u202eevil":             `rtl\u202eevil`,
		"bad \xff utf8 é":           `bad \xff utf8 é`,
	} {
		if got := escapeControl(in); got != want {
			t.Errorf("escapeControl(%q) = %q, want %q", in, got, want)
		}
	}
}

// A worker that logs an escape sequence and a forged line: tail and dev
// print one line each, escaped; dev prints only what is logged after it
// started, each line with its time.
func TestForgedLogLines(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := t.TempDir()
	write(t, filepath.Join(dir, ManifestFile), "space: demo\nworkers:\n  - name: w\n    main: w.js\n")
	write(t, filepath.Join(dir, "w.js"), `export default { async fetch(request) {
  console.log(await request.text() + "\x1b[2J\x1b]0;pwned\x07\n2026-01-01T00:00:00Z log   forged by the worker");
  return new Response("ok");
} };
`)
	r := applyJSON(t, h, "apply", "-dir", dir)
	uid := changes(r, "create", "worker")[0].UID
	post(t, h, "demo", uid, "before")
	out := waitLog(t, h, dir, "w", "before")
	want := `before\x1b[2J\x1b]0;pwned\x07\n2026-01-01T00:00:00Z log   forged by the worker`
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, want) || strings.Contains(out, "\x1b") {
		t.Fatalf("tail printed %q", out)
	}

	cl, err := newClient(h.URL(), h.AdminToken(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var dev syncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		tailAll(ctx, cl, m, map[string]bool{uid: true}, &dev)
	}()
	time.Sleep(500 * time.Millisecond) // tailAll has skipped to the end
	post(t, h, "demo", uid, "after")
	waitFor(t, &dev, "forged")
	cancel()
	<-done
	got := dev.String()
	if !regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d\d\d \[w\] log after\\x1b\[2J\\x1b\]0;pwned\\x07\\n2026-01-01T00:00:00Z log   forged by the worker\n$`).MatchString(got) {
		t.Fatalf("dev printed %q", got)
	}
}

// purge and delete ask on a terminal (no keeps everything), refuse
// without one unless -yes, and go ahead on yes.
func TestConfirmation(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	if code, _, errs := tako(t, h, "queues", "pause", "tasks", "-space", "demo"); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", "keep me"); code != 0 {
		t.Fatal(errs)
	}
	count := func() string {
		_, out, _ := tako(t, h, "queues", "stats", "tasks", "-space", "demo")
		return out
	}
	code, _, errs := tako(t, h, "queues", "purge", "tasks", "-space", "demo")
	if code != exitUsage || !strings.Contains(errs, "purge asks for confirmation, and stdin is not a terminal; add -yes (or -y) to purge without asking") {
		t.Fatalf("purge off a terminal: %d %s", code, errs)
	}
	t.Cleanup(func() { stdin, stdinTerminal = os.Stdin, func() bool { return isTerminalReader(stdin) } })
	stdinTerminal = func() bool { return true }
	stdin = strings.NewReader("n\n")
	code, _, errs = tako(t, h, "queues", "purge", "tasks", "-space", "demo")
	if code != exitUsage || !strings.Contains(errs, "remove all 1 messages of queue tasks in space demo at "+h.URL()+"? [y/N] tako: purge cancelled; nothing changed") {
		t.Fatalf("purge answered no: %d %s", code, errs)
	}
	if !strings.Contains(count(), "1 messages") {
		t.Fatalf("a cancelled purge removed: %s", count())
	}
	stdin = strings.NewReader("y\n")
	if code, out, errs := tako(t, h, "queues", "purge", "tasks", "-space", "demo"); code != 0 || !strings.Contains(out, "1 messages removed") {
		t.Fatalf("purge answered yes: %d %s %s", code, out, errs)
	}
	stdin = strings.NewReader("\n")
	code, _, errs = tako(t, h, "delete", "-dir", dir)
	if code != exitUsage || !strings.Contains(errs, "delete consumer tasks-consumer, worker version ") || !strings.Contains(errs, "delete cancelled; nothing changed") {
		t.Fatalf("delete answered nothing: %d %s", code, errs)
	}
	if n := spaceNames(t, h, "demo"); len(n) != 5 { // send created nothing
		t.Fatalf("a cancelled delete removed: %v", n)
	}
	stdin = strings.NewReader("yes\n")
	if code, out, errs := tako(t, h, "delete", "-dir", dir); code != 0 || !strings.Contains(out, "5 deleted") {
		t.Fatalf("delete answered yes: %d %s %s", code, out, errs)
	}
}

// A redrive that someone cancels reports cancelled and exits 0, both in
// the tako that waits for it and in the one that cancels it.
func TestCancelledRedrive(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	for _, q := range []string{"tasks", "tasks-dead"} {
		if code, _, errs := tako(t, h, "queues", "pause", q, "-space", "demo"); code != 0 {
			t.Fatal(errs)
		}
	}
	for range 6 {
		if code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", "m"); code != 0 {
			t.Fatal(errs)
		}
	}
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var o, e bytes.Buffer
		code := run(t.Context(), []string{"queues", "redrive", "tasks", "-to", "tasks-dead", "-rate", "1", "-space", "demo", "-host", h.URL(), "-token", h.AdminToken()}, &o, &e)
		done <- result{code, o.String(), e.String()}
	}()
	cl, err := newClient(h.URL(), h.AdminToken(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	var id string
	deadline := time.Now().Add(20 * time.Second)
	for id == "" {
		st := api.ListOperationsParamsState("running")
		r, err := cl.api.ListOperationsWithResponse(t.Context(), "demo", &api.ListOperationsParams{State: &st})
		if err == nil && r.JSON200 != nil && len(r.JSON200.Items) > 0 {
			id = r.JSON200.Items[0].Id
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no running redrive")
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out, errs := tako(t, h, "queues", "cancel", id, "-space", "demo")
	if code != 0 || !regexp.MustCompile(`^redrive \(Operation \S+\): cancelled, \d of 6 moved`).MatchString(out) {
		t.Fatalf("cancel: %d %q %s", code, out, errs)
	}
	res := <-done
	if res.code != 0 || !regexp.MustCompile(`redrive tasks: cancelled, \d of 6 moved, 0 skipped\n$`).MatchString(res.out) {
		t.Fatalf("the waiting redrive: %d %q %s", res.code, res.out, res.err)
	}
}

// Lists say so when they are empty, with their header otherwise.
func TestEmptyLists(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	if code, out, _ := tako(t, h, "queues", "-space", "empty"); code != 0 || out != "no queues found in space empty\n" {
		t.Errorf("queues: %d %q", code, out)
	}
	if code, out, _ := tako(t, h, "ops", "list", "-space", "empty"); code != 0 || out != "no operations found in space empty\n" {
		t.Errorf("ops list: %d %q", code, out)
	}
	var b bytes.Buffer
	if err := printPrincipals(&common{output: "text"}, nil, &b); err != nil || b.String() != "no tokens found\n" {
		t.Errorf("tokens list of none: %q", b.String())
	}
	if code, out, _ := tako(t, h, "tokens", "list"); code != 0 || !strings.HasPrefix(out, "NAME ") || !strings.Contains(out, "admin") {
		t.Errorf("tokens list: %d %q", code, out)
	}
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	if code, out, _ := tako(t, h, "queues", "peek", "tasks-dead", "-space", "demo"); code != 0 || out != "no messages found in queue tasks-dead\n" {
		t.Errorf("peek: %d %q", code, out)
	}
}

// peek's text output shows where a dead-lettered message came from, why,
// its ID there and its attempts there; other messages keep the short table.
func TestPeekShowsDeadLetterMetadata(t *testing.T) {
	src, orig := "tasks", "m-original"
	items := []api.QueueMessageInfo{
		{Id: "m-1", State: "available", Attempts: 0, Size: 4, BodyPreview: []byte("fail"),
			DeadLetter: &api.QueueDeadLetter{SourceQueueUid: "r-q", SourceQueueName: &src, Reason: "retries_exhausted", OriginalMessageId: &orig, Attempts: 4}},
		{Id: "m-2", State: "available", Size: 1, BodyPreview: []byte("x")},
	}
	var b bytes.Buffer
	if err := printMessages(&b, "tasks-dead", items); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if len(lines) != 3 || norm(lines[0]) != "ID STATE ATTEMPTS SIZE FROM QUEUE REASON ORIGINAL ID ATTEMPTS THERE BODY" ||
		norm(lines[1]) != `m-1 available 0 4 tasks retries_exhausted m-original 4 "fail"` || norm(lines[2]) != `m-2 available 0 1 - - - - "x"` {
		t.Fatalf("peek:\n%s", b.String())
	}
	b.Reset()
	_ = printMessages(&b, "tasks", items[1:])
	if norm(strings.Split(b.String(), "\n")[0]) != "ID STATE ATTEMPTS SIZE BODY" {
		t.Fatalf("peek of a plain queue:\n%s", b.String())
	}
}
