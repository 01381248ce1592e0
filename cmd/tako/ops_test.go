package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/takoform/queuehost/host"
)

// ops list prints the space's Operations newest first, by resource name,
// filtered by state and resource, and as JSON with -output json.
func TestOpsList(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)

	code, out, errs := tako(t, h, "ops", "list", "-dir", dir, "-limit", "100")
	if code != 0 {
		t.Fatalf("ops list: %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "CREATED ") || !strings.Contains(lines[0], "STATE/EFFECT") {
		t.Fatalf("no header:\n%s", out)
	}
	lines = lines[1:]
	// 5 creates (2 queues, worker, version, consumer) and the worker's
	// update that selects the version.
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	if !strings.Contains(lines[len(lines)-1], " create ") || !strings.Contains(lines[len(lines)-1], "tasks") {
		t.Fatalf("the oldest (last) line is not the first queue's create:\n%s", out)
	}
	for _, l := range lines {
		if !strings.Contains(l, "succeeded/applied") {
			t.Fatalf("line %q", l)
		}
	}

	code, out, errs = tako(t, h, "ops", "list", "-dir", dir, "-resource", "hello", "-output", "json")
	if code != 0 {
		t.Fatalf("ops list -resource: %d %s", code, errs)
	}
	var ops []struct{ Kind, ResourceUid, State string }
	if err := json.Unmarshal([]byte(out), &ops); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(ops) != 2 || ops[0].Kind != "update" || ops[1].Kind != "create" || ops[0].ResourceUid != ops[1].ResourceUid {
		t.Fatalf("the worker's Operations: %+v", ops)
	}
	if code, out, _ := tako(t, h, "ops", "list", "-dir", dir, "-state", "failed"); code != 0 || out != "no operations found in space demo\n" {
		t.Fatalf("no Operation failed: %d %q", code, out)
	}
	if code, out, _ := tako(t, h, "ops", "list", "-dir", dir, "-limit", "2"); code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("-limit 2: %d %q", code, out)
	}
	if code, _, errs := tako(t, h, "ops", "list", "-dir", dir, "-state", "done"); code != exitFailed || !strings.Contains(errs, "invalid_request") {
		t.Fatalf("-state done: %d %s", code, errs)
	}
}
