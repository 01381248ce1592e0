package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tools/jepsen/history"
)

// The short runs of the harness inside `go test`: a fault-free control
// and a seeded run with a few faults of each kind, about a minute and a
// half together. `make torture` runs the long one.

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the host binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// hostBin is TAKOHOST_BIN, or cmd/takohost built once into a temporary
// directory.
func hostBin(t *testing.T) string {
	if p := os.Getenv("TAKOHOST_BIN"); p != "" {
		return p
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "jepsen-bin-"); binErr == nil {
			binPath, binErr = buildHost(binDir)
		}
	})
	if binErr != nil {
		t.Skipf("the host binary cannot be built: %v", binErr)
	}
	return binPath
}

func runShort(t *testing.T, cfg Config) {
	if testing.Short() {
		t.Skip("-short: the harness runs real hosts on PostgreSQL for about a minute")
	}
	cfg.Bin = hostBin(t)
	var out strings.Builder
	cfg.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Log("\n" + out.String())
		t.Fatal(err)
	}
	if res.Skipped != "" {
		if os.Getenv("TAKOHOST_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("TAKOHOST_REQUIRE_POSTGRES=1 and no PostgreSQL for the harness: %s", res.Skipped)
		}
		t.Skipf("no PostgreSQL for the harness: %s", res.Skipped)
	}
	res.Print(&out, cfg)
	t.Log("\n" + out.String())
	if len(res.Setup) > 0 {
		t.Fatalf("the run did not go as planned: %v", res.Setup)
	}
	if res.Report.SentOK < 100 || res.Report.AcksResolved < 100 {
		t.Fatalf("the load did nothing much: %d sends resolved, %d acknowledges resolved", res.Report.SentOK, res.Report.AcksResolved)
	}
	if !res.Drained {
		t.Errorf("the queues did not drain")
	}
	if v := res.Report.Violations(); v > 0 {
		var classes []string
		for _, c := range history.Classes {
			if res.Report.Counts[c] > 0 {
				classes = append(classes, c)
			}
		}
		t.Fatalf("%d violations (%s)", v, strings.Join(classes, ", "))
	}
}

// TestJepsenControl is the fault-free control: three active hosts, no
// fault at all; every class must be zero.
func TestJepsenControl(t *testing.T) {
	cfg := Config{Hosts: 3, Duration: 12 * time.Second, Seed: 11, MaxRetries: 3, FailFrac: 0.15, DeadFrac: 0.03, Drain: 60 * time.Second}
	if s := os.Getenv("TAKOHOST_TEST_POSTGRES"); s != "" {
		cfg.PGServer = s
	}
	runShort(t, cfg)
}

// TestJepsenShort is the short seeded fault run: three active hosts on a
// private PostgreSQL server, two kills, a freeze of a host process and of
// a process group, a PostgreSQL restart and a round of terminated
// connections; every class must be zero, as in the control.
func TestJepsenShort(t *testing.T) {
	runShort(t, Config{Hosts: 3, Duration: 25 * time.Second, Seed: 5, MaxRetries: 3, FailFrac: 0.15, DeadFrac: 0.03,
		Kills: 2, Freezes: 2, PGRestarts: 1, Terminates: 1, Drain: 60 * time.Second, Verbose: true})
}
