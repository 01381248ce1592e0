package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/takoform/queuehost/client"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestPullClientsInGoAndNode: two programs that are not part of the host,
// a Go one (examples/pullclient, through package client) and a Node one
// (typescript/examples/pull.mjs, through the TypeScript package as its
// users import it), publish to one queue and consume it over HTTP with a
// consumer token (spec/peers.md §Pull consumers), against the host binary:
// every message published by either is acknowledged by exactly one of
// them, and the queue ends empty.
func TestPullClientsInGoAndNode(t *testing.T) {
	needNode(t)
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.BuildHost()
	if err != nil {
		t.Fatal(err)
	}
	goApp := filepath.Join(t.TempDir(), "pullclient")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", goApp, "./examples/pullclient")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/pullclient: %v\n%s", err, out)
	}
	npm := exec.CommandContext(t.Context(), "npm", "ci", "--no-audit", "--no-fund")
	npm.Dir = filepath.Join(root, "typescript")
	if out, err := npm.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
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
	admin, err := harness.AdminToken(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const space = "apps"
	c, err := client.New(h.Base(), admin, space)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQueue(ctx, "work", client.QueueSpec{MessageRetentionSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.CreatePullConsumer(ctx, "work-pull", q, client.PullConsumerSpec{MaxBatchSize: 10, MaxRetries: 3, VisibilityTimeoutSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	// The applications' token: publish to and consume this queue, nothing else.
	body, _ := json.Marshal(map[string]any{"name": "app", "grants": []any{
		map[string]any{"space": space, "role": "publisher", "queues": []string{q}},
		map[string]any{"space": space, "role": "consumer", "queues": []string{q}},
	}})
	req, _ := http.NewRequest("POST", h.Base()+"/v2/principals", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != 201 || created.Token == "" {
		t.Fatalf("creating the application's principal: %d", resp.StatusCode)
	}

	env := append(os.Environ(), "TAKOHOST_URL="+h.Base(), "TAKOHOST_TOKEN="+created.Token, "TAKOHOST_SPACE="+space, "QUEUE_UID="+q, "CONSUMER_UID="+pc)
	run := func(name string, args ...string) []string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir, cmd.Env = filepath.Join(root, "typescript"), env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
		}
		return strings.Fields(out.String())
	}
	run(goApp, "publish", "go", "6")
	run("node", "examples/pull.mjs", "publish", "node", "6")
	byGo := run(goApp, "drain", "5")
	byNode := run("node", "examples/pull.mjs", "drain", "100")
	if len(byGo) != 5 {
		t.Fatalf("the Go program acknowledged %d messages, want 5: %v", len(byGo), byGo)
	}
	all := append(slices.Clone(byGo), byNode...)
	slices.Sort(all)
	var want []string
	for _, p := range []string{"go", "node"} {
		for i := 1; i <= 6; i++ {
			want = append(want, p+"-"+string(rune('0'+i)))
		}
	}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("acknowledged %v (Go %v, Node %v), want each of %v once", all, byGo, byNode, want)
	}
	l, err := c.Pull(ctx, pc, client.PullOptions{})
	if err != nil || len(l.Messages) != 0 {
		t.Fatalf("the queue is not empty after both drained: %+v, %v", l, err)
	}
	t.Logf("Go acknowledged %v; Node acknowledged %v", byGo, byNode)
}
