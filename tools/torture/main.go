// Command torture is the crash-and-fault torture driver of the reference
// host: it runs the real cmd/takohost binary on a temporary data directory
// and a loopback port, builds a small topology over the Host API, applies a
// mixed load (resource churn, sends through a worker's producer Binding,
// deliveries that acknowledge, retry, throw and dead-letter), SIGKILLs the
// host at seeded random moments, restarts it on the same data directory,
// and at the end checks that nothing was lost, nothing acknowledged came
// back, every Operation ended and no name is held twice.
//
//	go run ./tools/torture -kills 60 [-duration 3m] [-seed 1] [-bin bin/takohost] [-store postgres://... [-db-disconnects N] [-cluster 3 [-freezes 1]]]
//	go run ./tools/torture -kills 30 -pg-private -pg-restarts 2 [-cluster 3 -freezes 2] [-db-disconnects N]
//
// It prints its figures and exits 1 on any violation, 2 on a setup error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/takoform/queuehost/runtime/sandbox"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

func main() {
	sandbox.Main()
	var cfg Config
	flag.IntVar(&cfg.Kills, "kills", 10, "SIGKILLs to deliver during the load")
	flag.DurationVar(&cfg.Duration, "duration", 0, "load duration (default: 2s per kill, at least 20s)")
	flag.Int64Var(&cfg.Seed, "seed", 0, "random seed (0: from the clock; printed)")
	flag.StringVar(&cfg.Bin, "bin", "", "host binary (default: go build ./cmd/takohost)")
	flag.DurationVar(&cfg.Drain, "drain", 120*time.Second, "how long the final drain may take")
	flag.BoolVar(&cfg.Verbose, "v", false, "print every kill and restart")
	flag.BoolVar(&cfg.KeepData, "keep", false, "keep the data directory and the host log")
	flag.StringVar(&cfg.StoreServer, "store", "", "run the host on a fresh database of this PostgreSQL server (postgres://...) instead of its journal")
	flag.DurationVar(&cfg.StoreTTL, "cluster-ttl", 0, "with -store: the host's active lease (default 2s)")
	flag.IntVar(&cfg.StoreDisconnects, "db-disconnects", 0, "with -store: terminate every connection to the database this many times during the load (what a PostgreSQL restart does)")
	flag.IntVar(&cfg.Cluster, "cluster", 0, "with -store: run this many ACTIVE hosts on the database (-cluster-active); the load goes round-robin and every kill SIGKILLs one of them at random")
	flag.IntVar(&cfg.Freezes, "freezes", 1, "with -cluster: freeze the work queue's owner (SIGSTOP) past its lease this many times, then resume it (its late writes must be fenced)")
	flag.BoolVar(&cfg.PGPrivate, "pg-private", false, "run the hosts on a private PostgreSQL server the torture starts itself (initdb into a temporary directory, a free port; as root, run as the postgres user) instead of -store; skipped when the binaries are missing")
	flag.IntVar(&cfg.PGRestarts, "pg-restarts", 0, "with -pg-private: stop the private server (-m fast, then -m immediate, alternately) and start it again this many times during the load")
	hostile := flag.Duration("hostile", 0, "instead of the kill torture: the hostile-worker soak for this long (hostile workers beside a bystander; reports host RSS, CPU and the bystander's p99)")
	flag.Parse()
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1_000_000
	}
	cfg.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *hostile > 0 {
		os.Exit(runHostile(ctx, HostileConfig{Duration: *hostile, Bin: cfg.Bin, Out: os.Stdout}))
	}
	os.Exit(run(ctx, cfg))
}

func runHostile(ctx context.Context, cfg HostileConfig) int {
	defer harness.RemoveBuild()
	res, err := RunHostile(ctx, cfg)
	if err != nil {
		return exitCode(nil, err)
	}
	return exitCode(res.Violations, nil)
}

func run(ctx context.Context, cfg Config) int {
	defer harness.RemoveBuild()
	res, err := Run(ctx, cfg)
	if err != nil {
		return exitCode(nil, err)
	}
	return exitCode(res.Violations, nil)
}

// exitCode is the driver's exit status: 2 when the run could not be done,
// 1 when it found violations, 0 otherwise.
func exitCode(violations []string, err error) int {
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "torture:", err)
		return 2
	case len(violations) > 0:
		return 1
	}
	return 0
}
