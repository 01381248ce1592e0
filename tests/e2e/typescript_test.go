package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestTypeScriptPackage checks the TypeScript package (typescript/) as its
// users get it: npm ci from its lock, src/api.d.ts exactly what
// openapi-typescript generates from gen/api/openapi.json (make typescript
// regenerates it), the worker and client declarations type-check against
// test/worker.ts (whose @ts-expect-error lines must stay errors), and the
// client talks to a real host binary (test/client.test.mjs).
func TestTypeScriptPackage(t *testing.T) {
	needNode(t)
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "typescript")
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	run(nil, "npm", "ci", "--no-audit", "--no-fund")
	run(nil, "npm", "run", "--silent", "check-generated")
	run(nil, "npm", "run", "--silent", "typecheck")

	bin, err := harness.BuildHost()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	h, err := harness.NewHost(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	token, err := harness.AdminToken(data)
	if err != nil {
		t.Fatal(err)
	}
	out := run([]string{"TAKOHOST_URL=" + h.Base(), "TAKOHOST_TOKEN=" + token}, "node", "--test", "test/")
	if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# pass 0") {
		t.Fatalf("node --test did not pass every test:\n%s", out)
	}
}

// needNode skips a test that needs Node.js and npm where they are not
// installed, and fails it in CI, which must have them.
func needNode(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed; CI must have it (.ci/run installs what the tests need)", tool)
			}
			t.Skipf("%s is not installed: the test needs Node.js and npm", tool)
		}
	}
}
