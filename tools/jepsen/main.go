// Command jepsen is an independent checker of several active takohost
// processes on one PostgreSQL database, in the manner of Jepsen's
// total-queue test: it talks to the hosts only as a user would — the Host
// API to build a topology, a worker's fetch route to send numbered
// messages through a producer Binding, and the worker ABI, whose queue
// handler reports every delivery and every resolved acknowledge to a
// recorder in this process (the worker's outbound fetch, allowed to the
// recorder's loopback address with -allow-fetch) — while a nemesis
// SIGKILLs hosts, freezes a host process alone or its whole process group
// past its lease (SIGSTOP, SIGCONT), restarts a private PostgreSQL server
// (-m fast and -m immediate) and terminates the hosts' connections
// (pg_terminate_backend), on a seeded schedule. The checker (package
// history) is a pure function of the recorded history and knows nothing
// of the host; it imports none of the host's packages, nor does this
// command (it starts the takohost binary; it uses only gen/api through
// internal/apiclient).
//
// No clock orders anything: the history is ordered by the recorder's
// sequence (a fault is recorded before its SIGSTOP, SIGCONT or SIGKILL),
// and the nemesis's own timings — a freeze of twice the lease plus a
// second, PostgreSQL down for 1 to 3 s — are durations on Go's monotonic
// clock, so a wall clock that jumps or drifts changes neither.
//
//	go run ./tools/jepsen [-seed 1] [-duration 5m] [-hosts 3] [-kills 24] [-freezes 10] [-pg-restarts 6] [-terminates 6] [-max-retries 3] [-no-dlq] [-v] [-keep]
//	go run ./tools/jepsen -control -duration 3m     (the fault-free control: no nemesis at all)
//	go run ./tools/jepsen -recheck DIR/history.json [-max-retries 3] [-no-dlq] [-undrained]
//
// -recheck runs the checker again over the history a run kept (-keep),
// without starting anything: the checker is a pure function of the
// history, so a history checked by a later checker reads as if the run had
// been made with it.
//
// It prints the checker's table and exits 1 on any violation, 2 when the
// run could not be made; a machine without the PostgreSQL server binaries
// (initdb, pg_ctl) skips it with a message and exits 0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/takoform/queuehost/tools/jepsen/history"
)

func main() {
	var cfg Config
	control := flag.Bool("control", false, "the fault-free control run: no fault at all (overrides the fault counts)")
	flag.Int64Var(&cfg.Seed, "seed", 0, "random seed of the load and the nemesis (0: from the clock; printed)")
	flag.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "load duration (the nemesis may extend it to finish its schedule)")
	flag.IntVar(&cfg.Hosts, "hosts", 3, "active hosts on one database")
	flag.StringVar(&cfg.Bin, "bin", "", "takohost binary (default: go build ./cmd/takohost into a temporary directory)")
	flag.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "the hosts' -cluster-ttl")
	flag.IntVar(&cfg.MaxRetries, "max-retries", 3, "maxRetries of the work queue's consumer")
	flag.BoolVar(&cfg.NoDLQ, "no-dlq", false, "no dead-letter queue: exhausted messages are discarded")
	flag.Float64Var(&cfg.FailFrac, "fail", 0.15, "fraction of messages the handler fails (retry or throw) on their first attempts")
	flag.Float64Var(&cfg.DeadFrac, "dead", 0.03, "fraction of messages the handler fails on every attempt")
	flag.IntVar(&cfg.Senders, "senders", 2, "concurrent senders")
	flag.IntVar(&cfg.Kills, "kills", 24, "SIGKILLs of a host (each started again)")
	flag.IntVar(&cfg.Freezes, "freezes", 10, "freezes past the lease, alternately of the host process alone and of its process group")
	flag.IntVar(&cfg.PGRestarts, "pg-restarts", 6, "restarts of the private PostgreSQL server, alternately -m fast and -m immediate")
	flag.IntVar(&cfg.Terminates, "terminates", 6, "pg_terminate_backend rounds over the hosts' connections")
	flag.StringVar(&cfg.PGServer, "pg-server", "", "run on a fresh database of this server (postgres://...) instead of a private server (no PostgreSQL restarts then)")
	flag.DurationVar(&cfg.Drain, "drain", 120*time.Second, "bound of the final drain")
	flag.BoolVar(&cfg.Verbose, "v", false, "print every fault")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep the data directory, the host and PostgreSQL logs and history.json")
	recheck := flag.String("recheck", "", "check a kept history.json again instead of running (with -max-retries, -no-dlq, -undrained as the run had them)")
	undrained := flag.Bool("undrained", false, "with -recheck: the run's queues did not drain")
	flag.Parse()
	if *recheck != "" {
		os.Exit(recheckFile(*recheck, cfg, !*undrained))
	}
	if *control {
		cfg.Kills, cfg.Freezes, cfg.PGRestarts, cfg.Terminates = 0, 0, 0, 0
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1_000_000
	}
	cfg.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen:", err)
		os.Exit(2)
	}
	res.Print(os.Stdout, cfg)
	if res.Failed() {
		os.Exit(1)
	}
}

// recheckFile checks a kept history again and prints the table; its exit
// code is main's.
func recheckFile(path string, cfg Config, drained bool) int {
	b, err := os.ReadFile(path)
	var evs []history.Event
	if err == nil {
		err = json.Unmarshal(b, &evs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jepsen: -recheck:", err)
		return 2
	}
	dlq := "dead"
	if cfg.NoDLQ {
		dlq = ""
	}
	r := history.Check(evs, history.Config{Queue: "work", DLQ: dlq, MaxRetries: cfg.MaxRetries, Drained: drained})
	fmt.Printf("jepsen: %s rechecked (%d events)\n%s", path, len(evs), r.Table())
	if r.Violations() > 0 {
		return 1
	}
	return 0
}
