package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestAGoProgramPublishes runs, against the host binary, a Go program that
// is not part of the host (testdata/publisher, built on the client
// package): with a publisher token made by tako tokens create, it
// publishes to the example project's queue, twice with one
// Idempotency-Key, and the example's worker handles the message once; the
// same token may not publish to the project's other queue.
func TestAGoProgramPublishes(t *testing.T) {
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildHost()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	tako := buildTako(t, tmp)
	publisher := filepath.Join(tmp, "publisher")
	build := exec.Command("go", "build", "-o", publisher, "./tests/e2e/testdata/publisher")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the publisher: %v\n%s", err, out)
	}
	data := filepath.Join(tmp, "data")
	h, err := harness.NewHost(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	adminToken, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) (string, error) {
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TAKO_HOST="+h.Base(), "TAKO_TOKEN="+strings.TrimSpace(string(adminToken)))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return strings.TrimSpace(string(out) + "\n" + stderr.String()), err
		}
		return strings.TrimSpace(string(out)), nil
	}
	if out, err := run(tako, "apply", "-dir", "examples/hello"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	tok, err := run(tako, "tokens", "create", "orders-app", "-grant", "demo:publisher:tasks")
	if err != nil {
		t.Fatalf("tokens create: %v\n%s", err, tok)
	}
	uid, err := run(publisher, "-host", h.Base(), "-token", strings.TrimSpace(string(adminToken)), "-space", "demo", "-queue-name", "tasks", "-print-uid")
	if err != nil {
		t.Fatalf("look the queue up: %v\n%s", err, uid)
	}
	first, err := run(publisher, "-host", h.Base(), "-token", tok, "-space", "demo", "-queue", uid, "-key", "order-42", "from a Go program")
	if err != nil {
		t.Fatalf("publish: %v\n%s", err, first)
	}
	again, err := run(publisher, "-host", h.Base(), "-token", tok, "-space", "demo", "-queue", uid, "-key", "order-42", "from a Go program")
	if err != nil || again != first {
		t.Fatalf("the retry with the key answered %q (%v), the first %q", again, err, first)
	}
	deadline := time.Now().Add(30 * time.Second)
	var settled time.Time
	for {
		out, err := run(tako, "tail", "-space", "demo", "hello")
		if err != nil {
			t.Fatalf("tail: %v\n%s", err, out)
		}
		n := strings.Count(out, "hello, from a Go program")
		if n == 1 && settled.IsZero() {
			// Seen once: look again a while later for a second delivery.
			settled = time.Now().Add(2 * time.Second)
		} else if n == 1 && time.Now().After(settled) {
			break
		} else if n > 1 || time.Now().After(deadline) {
			t.Fatalf("the worker logged the message %d times, want 1:\n%s", n, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	dead, err := run(publisher, "-host", h.Base(), "-token", strings.TrimSpace(string(adminToken)), "-space", "demo", "-queue-name", "tasks-dead", "-print-uid")
	if err != nil {
		t.Fatalf("look the dead-letter queue up: %v\n%s", err, dead)
	}
	if out, err := run(publisher, "-host", h.Base(), "-token", tok, "-space", "demo", "-queue", dead, "x"); err == nil || !strings.Contains(out, "code: forbidden") {
		t.Fatalf("a publish to another queue with the publisher's token: %v\n%s", err, out)
	}
}
