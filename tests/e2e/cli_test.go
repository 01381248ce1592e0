package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// buildTako builds cmd/tako into dir.
func buildTako(t *testing.T, dir string) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tako")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tako")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tako: %v\n%s", err, out)
	}
	return bin
}

// copyTree copies src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
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
}

// The CLI and the host as a user runs them, two binaries: tail -f follows
// a worker's log across a host restart (SIGTERM, start again on the same
// data directory and address) without losing or repeating a line; ops
// list shows what apply did; a token created through the host works at
// once with its grant only, and once revoked is refused at once, without
// a restart, and still after one.
func TestCLIOnTheBinaries(t *testing.T) {
	bin, err := harness.BuildHost()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	tako := buildTako(t, tmp)
	root, _ := harness.ModuleRoot()
	proj := filepath.Join(tmp, "hello")
	copyTree(t, filepath.Join(root, "examples", "hello"), proj)
	data := filepath.Join(tmp, "data")
	h, err := harness.NewHost(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	env := append(os.Environ(), "TAKO_HOST="+h.Base(), "TAKO_TOKEN_FILE="+filepath.Join(data, "admin-token"), "TAKO_TOKEN=", "TAKO_CONTEXT=", "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"))
	run := func(token string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, tako, args...)
		cmd.Env = env
		if token != "" {
			cmd.Env = append(cmd.Env, "TAKO_TOKEN="+token)
		}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("tako %v: %v", args, err)
		}
		return code, o.String(), e.String()
	}
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := run("", args...)
		if code != 0 {
			t.Fatalf("tako %v: exit %d: %s%s\nhost:\n%s", args, code, out, errs, harness.Tail(h.Out.String(), 3000))
		}
		return out
	}
	must("apply", "-dir", proj)
	if out := must("fetch", "-space", "demo", "-data", "one", "hello"); !strings.Contains(out, "queued") {
		t.Fatalf("fetch: %s", out)
	}

	// tail -f, running across the restart.
	var tailOut, tailErr harness.SyncBuffer
	tail := exec.Command(tako, "tail", "-f", "-space", "demo", "hello")
	tail.Env, tail.Stdout, tail.Stderr = env, &tailOut, &tailErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	defer tail.Process.Kill()
	waitOut := func(b *harness.SyncBuffer, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(b.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%q never appeared: %s\n%s", want, b.String(), tailErr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitOut(&tailOut, "hello, one")
	if code, _, err := h.Term(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v", code, err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	must("fetch", "-space", "demo", "-data", "two", "hello")
	waitOut(&tailOut, "hello, two")
	must("fetch", "-space", "demo", "-data", "three", "hello")
	waitOut(&tailOut, "hello, three")
	_ = tail.Process.Signal(syscall.SIGINT)
	if err := tail.Wait(); err != nil {
		t.Fatalf("tail -f after SIGINT: %v: %s", err, tailErr.String())
	}
	got := tailOut.String()
	for _, w := range []string{"hello, one", "hello, two", "hello, three"} {
		if n := strings.Count(got, w); n != 1 {
			t.Fatalf("%q printed %d times:\n%s", w, n, got)
		}
	}
	if i, j, k := strings.Index(got, "hello, one"), strings.Index(got, "hello, two"), strings.Index(got, "hello, three"); !(i < j && j < k) {
		t.Fatalf("out of order:\n%s", got)
	}
	// The log itself survived the restart.
	if out := must("tail", "-space", "demo", "hello"); !strings.Contains(out, "hello, one") || !strings.Contains(out, "hello, three") {
		t.Fatalf("tail after the restart: %s", out)
	}

	// ops list: the apply's creates and the worker's update, newest first
	// (the consumer last, the first queue first).
	// (a header line first; columns aligned with spaces)
	out := must("ops", "list", "-space", "demo", "-limit", "100")
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "CREATED ID KIND") || !strings.Contains(lines[1], "create tasks-consumer (") || !strings.Contains(lines[6], "create tasks (") || !strings.Contains(strings.Join(lines, "\n"), "update hello (") {
		t.Fatalf("ops list:\n%s", out)
	}
	if out := must("ops", "list", "-space", "demo", "-resource", "hello"); strings.Count(out, "\n") != 3 {
		t.Fatalf("ops list -resource hello:\n%s", out)
	}

	// Tokens, effective without a restart.
	tok := strings.TrimSpace(must("tokens", "create", "reader", "-grant", "demo:viewer"))
	if len(tok) < 40 {
		t.Fatalf("token %q", tok)
	}
	if code, out, errs := run(tok, "queues", "-space", "demo"); code != 0 || !strings.Contains(out, "tasks") {
		t.Fatalf("the new viewer: %d %s %s", code, out, errs)
	}
	if code, _, errs := run(tok, "queues", "pause", "tasks", "-space", "demo"); code != 1 || !strings.Contains(errs, "forbidden") {
		t.Fatalf("the viewer paused a queue: %d %s", code, errs)
	}
	must("tokens", "revoke", "reader")
	if code, _, errs := run(tok, "queues", "-space", "demo"); code != 1 || !strings.Contains(errs, "unauthenticated") {
		t.Fatalf("the revoked token: %d %s", code, errs)
	}
	if code, _, err := h.Term(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v", code, err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(tok, "queues", "-space", "demo"); code != 1 || !strings.Contains(errs, "unauthenticated") {
		t.Fatalf("the revoked token after a restart: %d %s", code, errs)
	}
	if out := must("tokens", "list"); strings.Contains(out, "reader") || !strings.Contains(out, "admin") {
		t.Fatalf("tokens list: %s", out)
	}
}

// The README's walkthrough (<!-- walkthrough --> block), line by line, as
// a user runs it: the host binary started as `make run` starts it (a data
// directory data/ and a listen address), each `go run ./cmd/tako …` line
// run as the built tako binary from the directory holding data/ and a copy
// of examples/, with $TAKO_HOST naming the host and a configuration
// directory of its own (login's context gives the rest), its output
// checked against the text after the line's ": ". It logs the time from the
// host's start to the first handled message (the tail line's output).
func TestReadmeWalkthroughOnTheBinaries(t *testing.T) {
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	i, j := strings.Index(s, "<!-- walkthrough -->"), strings.Index(s, "<!-- /walkthrough -->")
	if i < 0 || j < i {
		t.Fatal("README.md has no <!-- walkthrough --> block")
	}
	bin, err := harness.BuildHost()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	tako := buildTako(t, tmp)
	copyTree(t, filepath.Join(root, "examples", "hello"), filepath.Join(tmp, "examples", "hello"))
	data := filepath.Join(tmp, "data")
	h, err := harness.NewHost(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
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
			cmd := exec.CommandContext(t.Context(), tako, args...)
			cmd.Dir = tmp
			cmd.Env = append(os.Environ(), "TAKO_HOST="+h.Base(), "TAKO_TOKEN_FILE=", "TAKO_TOKEN=", "TAKO_CONTEXT=", "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("README: tako %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if strings.Contains(string(out), want) {
				if args[0] == "tail" {
					t.Logf("from the host's start to the first handled message (%q in the log): %s", want, time.Since(started).Round(time.Millisecond))
				}
				break
			}
			retry := args[0] == "tail" || len(args) > 1 && args[1] == "peek"
			if !retry || time.Now().After(deadline) {
				t.Fatalf("README: tako %s: the output does not hold %q: %s", strings.Join(args, " "), want, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		ran++
	}
	if ran != 9 {
		t.Fatalf("ran %d lines of the walkthrough, want 9", ran)
	}
}
