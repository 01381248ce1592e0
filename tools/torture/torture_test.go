package main

import (
	"context"
	"errors"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestPrivatePGRestart starts the private PostgreSQL server of -pg-private,
// writes a row, stops it (-m fast, then -m immediate) and starts it again:
// the committed rows survive both, the URL stays the same, and Close
// removes the directory.
func TestPrivatePGRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: initdb and two restarts take several seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pgtest.StartPrivateServer(ctx, "torture")
	if errors.Is(err, pgtest.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := pg.Dir
	defer pg.Close(false)
	exec := func(sql string) int {
		t.Helper()
		c, err := pgx.Connect(ctx, pg.URL)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, pg.LogTail())
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	exec(`SELECT count(*) FROM (SELECT 1) x`)
	c, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `CREATE TABLE t (i int); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	for i, mode := range []string{"fast", "immediate"} {
		if err := pg.Stop(mode); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// The open connection is gone with the server.
			if err := c.Ping(ctx); err == nil {
				t.Fatal("a connection survived the server's stop")
			}
			c.Close(ctx)
		}
		if err := pg.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if n := exec(`SELECT count(*) FROM t`); n != 1 {
			t.Fatalf("after -m %s: %d rows, want 1", mode, n)
		}
	}
	pg.Close(false)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left %s behind: %v", dir, err)
	}
}

// TestPrivatePGSkipped: without the PostgreSQL binaries, -pg-private skips
// the run with a message naming what is missing, starts no host and
// reports no violation.
func TestPrivatePGSkipped(t *testing.T) {
	old := pgtest.PGBinDir
	pgtest.PGBinDir = t.TempDir()
	defer func() { pgtest.PGBinDir = old }()
	t.Setenv("PATH", t.TempDir())
	var out strings.Builder
	res, err := Run(context.Background(), Config{Kills: 1, PGPrivate: true, PGRestarts: 1, Bin: "/nonexistent", Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped == "" || len(res.Violations) > 0 || res.Starts != 0 {
		t.Fatalf("skipped %q, violations %v, starts %d", res.Skipped, res.Violations, res.Starts)
	}
	if !strings.Contains(out.String(), "SKIPPED") || !strings.Contains(out.String(), "initdb") {
		t.Fatalf("no clear skip message: %q", out.String())
	}
}
