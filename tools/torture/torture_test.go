package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestTortureShort is the short torture variant that runs inside go test:
// 5 SIGKILLs of the real host under load in well under a minute. `make
// torture` runs the long one (go run ./tools/torture -kills 60).
func TestTortureShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the torture run takes about a minute")
	}
	bin, err := harness.BuildHost()
	if err != nil {
		t.Skipf("the host binary cannot be built: %v", err)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Kills: 5, Duration: 20 * time.Second, Seed: 7, Bin: bin, Drain: 60 * time.Second, Out: &out, Verbose: true, KeepData: os.Getenv("TORTURE_KEEP") != ""})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("%d violations (first: %s)", len(res.Violations), res.Violations[0])
	}
	if res.Kills != 5 {
		t.Errorf("kills = %d, want 5", res.Kills)
	}
	if res.Sent == 0 || res.Delivered == 0 {
		t.Errorf("the load did nothing: sent %d, delivered %d", res.Sent, res.Delivered)
	}
}

// TestHostileShort is the hostile-worker soak inside go test: every hostile
// worker of issue 13 invoked in a loop beside a bystander, for 10 s; the
// host process must survive and the bystander lose nothing.
func TestHostileShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin, err := harness.BuildHost()
	if err != nil {
		t.Skipf("the host binary cannot be built: %v", err)
	}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := RunHostile(ctx, HostileConfig{Duration: 10 * time.Second, Bin: bin, Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("%d violations (first: %s)", len(res.Violations), res.Violations[0])
	}
	if res.Invocations["flat 500"] == 0 || res.Invocations["doubling 500"] == 0 || res.BystanderSent < 20 {
		t.Fatalf("the soak did not run: %v, bystander %d", res.Invocations, res.BystanderSent)
	}
}
