// Command bench measures the host layer by layer and writes docs/BENCHMARKS.md.
//
//	go run ./tools/bench -out docs/BENCHMARKS.md [-quick] [-only NAME,...] [-dir DIR] [-backlog N]
//
// The raw limits of the disk under the data directory (fdatasync rate and
// synced sequential bandwidth) are measured first, and every later figure
// is reported next to the limit it is bounded by and its ratio to it: on a
// shared machine the absolute figures move, the ratios much less. Layers
// are measured separately — raw disk, journal, store, delivery engine with
// a Go handler, with the goja handler, the full host over HTTP — so that
// the ratio between two adjacent layers says where the time goes.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/takoform/queuehost/runtime/sandbox"
)

// bench holds the run's settings and what earlier phases measured that
// later ones compare with.
type bench struct {
	dir      string
	quick    bool
	pointDur time.Duration
	backlog  int
	recovery int64
	queues   int
	heavy    bool // run the 1 GiB recovery and the backlog
	rep      *report
	prog     *progress
	// results holds figures later phases and targets compare with, by key.
	results map[string]float64
	// extras for targets
	e2e   map[string]e2eResult
	notes map[string]string
	// spreads holds the rounds of the ratios decided on rounds (verdict.go).
	spreads   map[string]spread
	isoPoints []string // the isolation points measured, in order
	mfPoints  []string // the Miniflare points measured, in order
	profiles  []profileRun
	probes    []limitProbe
}

// phases in the order they run; -only selects by name.
var phaseNames = []string{"disk", "journal", "recovery", "store", "pg", "cluster", "cluster-real", "engine", "serial", "overhead", "latency", "host", "admission", "isolation", "miniflare", "idle", "backlog"}

func main() {
	sandbox.Main() // the benchmarked hosts' worker sandboxes are this binary
	out := flag.String("out", "docs/BENCHMARKS.md", "report file to write (- for stdout)")
	quick := flag.Bool("quick", false, "short points (~1 s) and no heavy phases, for development")
	only := flag.String("only", "", "comma-separated phases to run: "+strings.Join(phaseNames, ","))
	dir := flag.String("dir", "", "data directory for every file the run writes (default: a new temporary directory)")
	backlog := flag.Int("backlog", 0, "messages of 1 KiB in the backlog phase (default 1000000; in -quick the phase runs only when this is set)")
	recoveryMiB := flag.Int("recovery-mib", 0, "journal size for the recovery phase in MiB (default 1024; in -quick the phase runs only when this is set)")
	point := flag.Duration("point", 0, "duration of one measurement point (default 4s, 1s with -quick)")
	child := flag.String("child", "", "internal: run a scale phase in this child process (idle, backlog)")
	childDir := flag.String("child-dir", "", "internal: the child's data directory")
	childProfile := flag.String("child-profile", "", "internal: CPU profile file of the child's measured work")
	queues := flag.Int("queues", 10000, "queues (each with a consumer) in the idle phase")
	flag.Parse()
	if *child != "" {
		runChild(*child, *childDir, *queues, *backlog, *point, *childProfile)
		return
	}

	b := &bench{quick: *quick, rep: &report{}, results: map[string]float64{}, e2e: map[string]e2eResult{}, notes: map[string]string{}, spreads: map[string]spread{}}
	b.rep.Command = "go run ./tools/bench " + strings.Join(os.Args[1:], " ")
	b.pointDur = 4 * time.Second
	if b.quick {
		b.pointDur = time.Second
	}
	if *point > 0 {
		b.pointDur = *point
	}
	b.backlog, b.recovery = 1_000_000, 1<<30
	b.heavy = !b.quick
	if *backlog > 0 {
		b.backlog = *backlog
	}
	if *recoveryMiB > 0 {
		b.recovery = int64(*recoveryMiB) << 20
	}
	selected := map[string]bool{}
	if *only != "" {
		for _, n := range strings.Split(*only, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(phaseNames, n) {
				fmt.Fprintf(os.Stderr, "bench: unknown phase %q (want %s)\n", n, strings.Join(phaseNames, ","))
				os.Exit(2)
			}
			selected[n] = true
		}
	}
	run := func(name string) bool {
		if len(selected) > 0 {
			return selected[name]
		}
		switch name {
		case "recovery":
			return b.heavy || *recoveryMiB > 0
		case "backlog":
			return b.heavy || *backlog > 0
		}
		return true
	}

	if *dir == "" {
		d, err := os.MkdirTemp("", "takobench-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(d)
		b.dir = d
	} else {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		d, err := os.MkdirTemp(*dir, "takobench-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(d)
		b.dir = d
	}
	b.prog = newProgress(false)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	b.rep.Machine = machine(b.dir)
	diskDur := 3 * time.Second
	if b.quick {
		diskDur = time.Second
	}
	b.diskLayer(diskDur)
	if run("journal") {
		b.journalLayer(ctx)
	}
	if run("recovery") {
		b.journalRecovery(ctx, b.recovery)
	}
	b.queues = *queues
	b.layers(ctx, run)
	b.diskDrift(diskDur)
	b.renderProfiles()
	b.checkTargets()
	b.prog.end()

	var buf bytes.Buffer
	if err := b.rep.write(&buf); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *out == "-" {
		os.Stdout.Write(buf.Bytes())
		return
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	logf("bench: wrote %s", *out)
}

func (b *bench) diskLayer(d time.Duration) {
	c := b.prog.phase("disk: fdatasync rate, then synced bandwidth", "fdatasyncs")
	lim, err := measureDisk(b.dir, d, c)
	b.prog.end()
	s := b.rep.section("Raw disk limits",
		fmt.Sprintf("Measured first, in the data directory, for %s each: a 4 KiB write into a file already written with zeros, then fdatasync, in a loop "+
			"(the journal zeroes its head segment ahead of its data, so its syncs flush only data, never a new file size); then 1 MiB writes each followed by fdatasync. "+
			"The journal sections' ratios are to these two figures; every later layer measures them again right before it (the median of three short probes) and uses those, "+
			"listed below with the drift check at the end.", d),
		"limit", "value", "samples")
	if err != nil {
		s.NotMeasured = err.Error()
		fmt.Fprintln(os.Stderr, "bench: disk:", err)
		os.Exit(1)
	}
	b.rep.Limits = lim
	b.probes = append(b.probes, limitProbe{Before: "journal (first measurement)", At: time.Now(), Lim: lim})
	s.row("fdatasync rate (4 KiB writes into zeroed space)", num(lim.FsyncPerSec)+" /s", fmt.Sprint(lim.FsyncSamples))
	s.row("sequential write bandwidth with fdatasync per 1 MiB", num(lim.SyncWriteMBps)+" MiB/s", mib(float64(lim.BandwidthSample)))
	c = b.prog.phase("disk: fdatasync rate of appends", "fdatasyncs")
	app, n, err := fsyncRate(b.dir, d, false, c)
	b.prog.end()
	if err != nil {
		s.note("The fdatasync rate of appends was not measured: %v", err)
	} else {
		s.row("fdatasync rate (4 KiB appends, each sync also commits the file's new size; information)", num(app)+" /s", fmt.Sprint(n))
		s.note("Appending to a file makes every sync commit its new size too: on this disk that costs %s of the syncs into zeroed space, "+
			"which is what the journal's zeroing ahead (runtime/journal, Options.ZeroAhead) saves.", pct(1-app/lim.FsyncPerSec))
	}
}

// diskDrift measures the raw limits again at the end: on a shared machine
// the difference says how much the limits moved during the run.
func (b *bench) diskDrift(d time.Duration) {
	c := b.prog.phase("disk again (drift check)", "fdatasyncs")
	lim, err := measureDisk(b.dir, d, c)
	b.prog.end()
	s := b.rep.Sections[0]
	if err != nil {
		s.note("Re-measuring at the end failed: %v", err)
		return
	}
	b.probes = append(b.probes, limitProbe{Before: "the end of the run (drift check)", At: time.Now(), Lim: lim})
	first := b.probes[0].Lim
	var rows [][]string
	for _, p := range b.probes {
		rows = append(rows, []string{p.Before, p.At.UTC().Format("15:04:05"), num(p.Lim.FsyncPerSec), pct(p.Lim.FsyncPerSec / first.FsyncPerSec),
			num(p.Lim.SyncWriteMBps), pct(p.Lim.SyncWriteMBps / first.SyncWriteMBps)})
	}
	s.note("%s\n\n%s", "The raw limits as measured through the run (a shared disk drifts; each section's ratios use the probe right before it):",
		strings.TrimRight(table([]string{"measured before", "time (UTC)", "fdatasync/s", "vs first", "synced MiB/s", "vs first"}, rows), "\n"))
}
