package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/host"
)

// A poison message on the example project, through the CLI (spec/peers.md
// §Attempt history, §Dead-letter groups): peek shows its attempts with the
// thrown error, deadletters lists its group, and the group's redrive with
// -dry-run moves nothing and says how many it would.
func TestQueuesDeadLetterForensics(t *testing.T) {
	h := startHost(t, host.MemoryDataDir)
	dir := copyExample(t)
	applyJSON(t, h, "apply", "-dir", dir)
	for range 2 {
		if code, _, errs := tako(t, h, "send", "-space", "demo", "tasks", "fail"); code != 0 {
			t.Fatalf("send: %s", errs)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, errs := tako(t, h, "queues", "peek", "tasks-dead", "-space", "demo", "-output", "json")
		var page api.QueueMessageList
		if code != 0 || json.Unmarshal([]byte(out), &page) != nil {
			t.Fatalf("peek: %d %s %s", code, out, errs)
		}
		if len(page.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never dead-lettered: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, out, errs := tako(t, h, "queues", "peek", "tasks-dead", "-space", "demo")
	if code != 0 || strings.Count(out, "attempts of ") != 2 || strings.Count(out, "Error: asked to fail") != 8 ||
		!strings.Contains(out, " thrown, ") || !strings.Contains(out, "at queue (") {
		t.Fatalf("peek: %d %s %s", code, out, errs)
	}
	code, out, errs = tako(t, h, "queues", "deadletters", "tasks-dead", "-space", "demo")
	group := regexp.MustCompile(`(?m)^([0-9a-f]{16}) +2 +.*Error: asked to fail$`).FindStringSubmatch(out)
	if code != 0 || group == nil || !strings.HasPrefix(out, "queue tasks-dead: 2 dead letters in 1 groups\n") {
		t.Fatalf("deadletters: %d %q %s", code, out, errs)
	}
	code, out, errs = tako(t, h, "queues", "redrive", "tasks-dead", "-group", group[1], "-dry-run", "-space", "demo")
	if code != 0 || out != "redrive tasks-dead (dry run of group "+group[1]+"): 2 of 2 would move, 0 would be skipped; nothing moved\n" {
		t.Fatalf("dry run: %d %q %s", code, out, errs)
	}
	if code, out, _ := tako(t, h, "queues", "stats", "tasks-dead", "-space", "demo"); code != 0 || !strings.HasPrefix(out, "queue tasks-dead: 2 messages") {
		t.Fatalf("after the dry run: %s", out)
	}
	if code, _, errs := tako(t, h, "queues", "purge", "tasks", "-dry-run", "-space", "demo"); code != 2 || !strings.Contains(errs, "-dry-run") {
		t.Fatalf("purge -dry-run: %d %s", code, errs)
	}
}
