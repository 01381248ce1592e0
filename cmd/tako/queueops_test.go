package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/host"
)

// queues purge and redrive (spec/peers.md §Purge, §Redrive) on the example
// project: the progress is printed as plain lines off a terminal, the
// result is the Operation's, and refusals exit 1 with the problem.
func TestQueuesPurgeRedrive(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	for _, q := range []string{"tasks", "tasks-dead"} {
		if code, _, errs := tako(t, h, "queues", "pause", q, "-space", "demo"); code != 0 {
			t.Fatalf("pause %s: %s", q, errs)
		}
	}
	send := func(n int) {
		t.Helper()
		for range n {
			if code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", "a message"); code != 0 {
				t.Fatalf("send: %s", errs)
			}
		}
	}
	send(3)
	code, out, errs := tako(t, h, "queues", "purge", "tasks", "-yes", "-space", "demo")
	if code != 0 || !strings.HasSuffix(out, "purge tasks: succeeded, 3 messages removed\n") {
		t.Fatalf("purge: %d %q %s", code, out, errs)
	}

	// Messages sent to tasks directly have no source: without -to they
	// stay; with it they move, at most 3 a second, the progress printed
	// as it changes.
	send(8)
	code, out, errs = tako(t, h, "queues", "redrive", "tasks", "-space", "demo")
	if code != 0 || !strings.HasSuffix(out, "redrive tasks: succeeded, 0 of 8 moved, 8 skipped\n") {
		t.Fatalf("redrive without a target: %d %q %s", code, out, errs)
	}
	code, out, errs = tako(t, h, "queues", "redrive", "tasks", "-to", "tasks-dead", "-rate", "2", "-space", "demo")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 2 || lines[len(lines)-1] != "redrive tasks: succeeded, 8 of 8 moved, 0 skipped" ||
		!strings.HasPrefix(lines[0], "redrive tasks: running, ") || strings.Contains(out, "\r") {
		t.Fatalf("redrive to tasks-dead: %d %q %s", code, out, errs)
	}

	// -output json: the Operation, nothing else.
	code, out, errs = tako(t, h, "queues", "purge", "tasks-dead", "-yes", "-space", "demo", "-output", "json")
	var op api.Operation
	if code != 0 || json.Unmarshal([]byte(out), &op) != nil || op.Kind != "purge" || op.Progress == nil || *op.Progress.Removed != 8 {
		t.Fatalf("purge -output json: %d %q %s", code, out, errs)
	}

	// A finished Operation is not cancelled; bad uses are usage errors.
	if code, _, errs := tako(t, h, "queues", "cancel", op.Id, "-space", "demo"); code != exitFailed || !strings.Contains(errs, "operation_not_cancellable") {
		t.Fatalf("cancel of a purge: %d %s", code, errs)
	}
	if code, _, errs := tako(t, h, "queues", "purge", "nope", "-space", "demo"); code != exitFailed || !strings.Contains(errs, `no queue named "nope"`) {
		t.Fatalf("purge of an unknown queue: %d %s", code, errs)
	}
	for _, args := range [][]string{{"queues", "purge"}, {"queues", "purge", "tasks", "-to", "tasks-dead"}, {"queues", "redrive", "a", "b"}} {
		if code, _, errs := tako(t, h, append(args, "-space", "demo")...); code != exitUsage {
			t.Fatalf("tako %v: exit %d %s, want a usage error", args, code, errs)
		}
	}
}

// On a terminal the progress is one line that each report overwrites,
// cleared at the end.
func TestFollowOnATerminal(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	for _, q := range []string{"tasks", "tasks-dead"} {
		if code, _, errs := tako(t, h, "queues", "pause", q, "-space", "demo"); code != 0 {
			t.Fatalf("pause %s: %s", q, errs)
		}
	}
	for range 8 {
		if code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", "m"); code != 0 {
			t.Fatalf("send: %s", errs)
		}
	}
	cl, err := newClient(h.URL(), h.AdminToken(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := cl.named(t.Context(), formQueue, "tasks")
	dst, _ := cl.named(t.Context(), formQueue, "tasks-dead")
	rate := 2
	r, err := cl.api.RedriveQueueWithResponse(t.Context(), "demo", src.Uid, &api.RedriveQueueParams{},
		api.QueueRedriveRequest{TargetQueue: &api.Reference{ResourceUid: dst.Uid}, MaxMessagesPerSecond: &rate})
	if err != nil || r.JSON202 == nil {
		t.Fatalf("redrive: %v %s", err, r.Body)
	}
	var b strings.Builder
	op, err := cl.follow(t.Context(), "redrive queue tasks", *r.JSON202, &b, true)
	if err != nil || op.State != api.OperationStateSucceeded {
		t.Fatalf("follow: %v %+v", err, op)
	}
	out := b.String()
	if !strings.HasPrefix(out, "\r\033[Kredrive tasks: running, ") || !strings.HasSuffix(out, "\r\033[K") || strings.Contains(out, "\n") {
		t.Fatalf("terminal output %q", out)
	}
}
