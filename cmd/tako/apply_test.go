package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/takoform/queuehost/host"
)

// spaceNames lists the names of every resource in the space.
func spaceNames(t *testing.T, h *host.Host, space string) []string {
	t.Helper()
	cl, err := newClient(h.URL(), h.AdminToken(), space)
	if err != nil {
		t.Fatal(err)
	}
	all, err := cl.list(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for n := range all {
		out = append(out, n)
	}
	return out
}

// apply finds, before its first write, what the host would refuse: a
// syntax error in a module, a handler the worker declares but does not
// export, a worker without the queue handler that a consumer names, a
// number out of the Form's range. Each is a usage error (exit 2) naming
// the entry, and the space stays empty.
func TestApplyChecksBeforeTheFirstWrite(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	cases := []struct {
		name string
		edit func(dir string)
		want []string
	}{
		{"syntax error", func(dir string) {
			write(t, filepath.Join(dir, "src", "greet.js"), "export function greet(g, n) { return `${g}, ${n}`;\n")
		}, []string{"worker hello: src/greet.js:2:1: Unexpected end of file"}},
		{"missing queue handler", func(dir string) {
			write(t, filepath.Join(dir, "src", "index.js"), "export default { async fetch(request, env) { return new Response('x'); } };\n")
		}, []string{"worker hello declares the queue handler, but the default export of src/index.js has no queue function"}},
		{"import of a missing module", func(dir string) {
			write(t, filepath.Join(dir, "src", "index.js"), "import { greet } from './nope.js';\nexport default { fetch() {}, queue() {} };\n")
		}, []string{"worker hello: ", "nope.js"}},
		{"maxRetries -1", func(dir string) {
			edit(t, filepath.Join(dir, ManifestFile), "maxRetries: 3", "maxRetries: -1")
		}, []string{"consumer tasks-consumer: maxRetries", "0"}},
		{"a consumer's worker without the queue handler", func(dir string) {
			edit(t, filepath.Join(dir, ManifestFile), "handlers: [fetch, queue]", "handlers: [fetch]")
		}, []string{"consumer tasks-consumer: worker hello does not declare the queue handler"}},
		{"retention beyond the Form's range", func(dir string) {
			edit(t, filepath.Join(dir, ManifestFile), "messageRetentionSeconds: 86400", "messageRetentionSeconds: 99999999")
		}, []string{"queue tasks: messageRetentionSeconds"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyExample(t)
			c.edit(dir)
			code, out, errs := tako(t, h, "apply", "-dir", dir)
			t.Log(errs)
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q", w)
				}
			}
			if code != exitUsage || !strings.Contains(errs, "nothing was changed") || strings.Contains(out, "created") {
				t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, errs)
			}
			if n := spaceNames(t, h, "demo"); len(n) != 0 {
				t.Fatalf("the space holds %v after a refused apply", n)
			}
		})
	}
}

// When the host refuses a step part-way (here the worker's name is taken
// by a queue of the space, which only the host knows), apply deletes what
// it created, newest first: the space holds what it held before.
func TestApplyRollsBackOnARefusal(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	other := t.TempDir()
	write(t, filepath.Join(other, ManifestFile), "space: demo\nqueues:\n  - name: hello\n    messageRetentionSeconds: 60\n")
	if code, _, errs := tako(t, h, "apply", "-dir", other); code != 0 {
		t.Fatalf("apply: %d %s", code, errs)
	}
	dir := copyExample(t)
	code, out, errs := tako(t, h, "apply", "-dir", dir)
	t.Log(out, errs)
	if code != exitFailed || !strings.Contains(errs, "create worker hello") || !strings.Contains(errs, "apply rolled back the 2 changes it had made, so the space is as it was") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
	if !strings.Contains(out, "+ queue tasks-dead created\n") || !strings.Contains(out, "- queue tasks-dead deleted (rolled back)\n- queue tasks deleted (rolled back)\n") {
		t.Fatalf("stdout:\n%s", out)
	}
	if n := spaceNames(t, h, "demo"); len(n) != 1 || n[0] != "hello" {
		t.Fatalf("the space after the rollback: %v", n)
	}
	// With -output json the refusal is also one JSON object, stderr's last line.
	code, _, errs = tako(t, h, "apply", "-dir", dir, "-output", "json")
	last := strings.Split(strings.TrimSpace(errs), "\n")
	var doc struct{ What, Code string }
	if code != exitFailed || json.Unmarshal([]byte(last[len(last)-1]), &doc) != nil || doc.What != "create worker hello" || doc.Code != "name_conflict" {
		t.Fatalf("a refusal with -output json: %d %s", code, errs)
	}
	if n := spaceNames(t, h, "demo"); len(n) != 1 {
		t.Fatalf("the space after the second rollback: %v", n)
	}
}

// A dry run on a fresh space names the version apply then creates.
func TestDryRunNamesTheVersionApplyCreates(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	plan := applyJSON(t, h, "apply", "-dir", dir, "-dry-run")
	r := applyJSON(t, h, "apply", "-dir", dir)
	p, a := changes(plan, "create", "worker version"), changes(r, "create", "worker version")
	if len(p) != 1 || len(a) != 1 || p[0].Name != a[0].Name {
		t.Fatalf("dry run %+v, apply %+v", p, a)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), old) {
		t.Fatalf("%s holds no %q", path, old)
	}
	write(t, path, strings.Replace(string(raw), old, new, 1))
}
