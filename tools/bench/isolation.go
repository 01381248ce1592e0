package main

import (
	"context"
	"fmt"
	"time"

	"github.com/takoform/queuehost/host"
)

// isolationPoints are the host points measured with worker code in
// sandbox processes and in the host process.
var isolationPoints = []prodMode{
	{"sendBatch(100) ×4 concurrent", 100, 4},
	{"sendBatch(100) ×16 concurrent", 100, 16},
	{"send ×8 concurrent", 1, 8},
	{"send ×64 concurrent", 1, 64},
}

// isolationRounds is how many times the end-to-end point runs in-process,
// sandboxed, sandboxed, in-process. isolationSliced is how many times as
// many rounds each producer point runs, each run that much shorter, so
// that every point keeps its time in each mode (4 × its duration) but
// alternates modes every quarter of its duration: the shared disk's fsync
// rate moves by tens of percent within a second (one probe of this machine
// fell from 7,300 to 450 fdatasync/s from one second to the next, and in
// one 4 s run the in-process host's sendBatch(100) ×4 rate ranged from
// 61,500 to 172,600 msgs/s second by second), and the shorter the runs
// that alternate, the less of such a swing falls on one mode alone.
//
// Interleaving keeps drift within a run out of the ratio, not what differs
// from one run to the next. On one quiet machine within one hour
// (2026-12-04), two full make bench runs of the same code, with other
// processes at 0.4–1.5% of the cores during every isolation point,
// measured single sends from 8 clients at 73.0% (CPU ratio 1.43×, every
// round below 87%) and 84.8% (1.20×), and the phase alone, in a fresh
// process (a build without that column), at 98.9% (1.05×): the CPU a
// crossing costs moves with the machine between runs, and a run's rounds
// all move with it. One run's verdict is therefore one draw; the closing
// of a target on it wants several runs that pass by more than that spread.
//
// What the extra CPU is: on the same machine (2026-12-04, single sends from
// 8 clients, probes that alternated the modes in one process as this phase
// does), the machine made 3.2–4.7 context switches per message in-process
// and 6.5–7.8 sandboxed, and perf over the whole machine put most of the
// sandboxed mode's extra CPU in switching (the kernel's finish_task_switch
// and the unlocks where a virtual CPU takes its pending interrupts) and in
// the Go scheduler's park and wake paths on both sides, not in the frame
// codec or the JavaScript. In one sched_switch recording of each mode, the
// largest single source of extra switches was the host's system monitor
// thread (sysmon), which polls every 20 µs while processors sit in system
// calls (mainly the journal's fdatasync): 2.4 wake-ups per message
// sandboxed against 0.9 in-process. Hence the context-switch columns: they
// show which way a run's ratio went.
const (
	isolationRounds = 2
	isolationSliced = 4
)

// isolationLayer: the cost of running worker code in sandbox processes
// (runtime/sandbox, the default) rather than in the host process
// (Config.UnsafeInProcessWorkers), as throughput ratios of the same run.
func (b *bench) isolationLayer(ctx context.Context) {
	s := b.rep.section("Cost of worker isolation (runtime/sandbox vs in-process goja)",
		fmt.Sprintf("Two hosts in this process, both up for the whole phase (host.New on fresh data directories, 127.0.0.1), the same worker as the host producer section: "+
			"one with worker code in sandbox processes (the default: the fetch handler runs in the worker's sandbox and asks the host for each send over its pipes), "+
			"one with UnsafeInProcessWorkers (goja in the host process). Each point runs on the in-process host, then on the sandboxed one, then on each again in the reverse order, over and over; "+
			"a figure is the mean of its runs in that mode (the machine is shared: interleaving keeps drift out of the ratio); "+
			"each round (in-process, sandboxed, sandboxed, in-process) also gives a ratio of its own, and their range shows how far one round's ratio strays from the mean on this machine. "+
			"Producer points: closed-loop HTTP clients on the worker fetch route, 100 B bodies, %d rounds of %s runs (%s in each mode). "+
			"End-to-end: the same sendBatch(100) ×16 producers with a QueueConsumer attached (maxBatchSize 100, maxConcurrency 4) whose queue handler runs in the sandbox too, "+
			"measured from the first send until the queue's messageCount is back to 0 (every message delivered and acknowledged). "+
			"End-to-end runs %d rounds of %s production each. "+
			"Targets, each decided on the median of the rounds' own ratios with their spread (a threshold inside the spread is reported within noise): isolation costs at most 25%% of throughput (ratio ≥ 75%%) and at most 25%% more CPU per message (sandboxed ÷ in-process ≤ 1.25). "+
			"CPU per message is this process's CPU (both hosts and the HTTP load generator) plus its children's (the sandboxes), over the same runs, ÷ the messages: "+
			"what the two modes spend in all on the same work; CPU use is that CPU ÷ the runs' wall time ÷ the machine's cores "+
			"(so a mode's msgs/s is its CPU use × the cores ÷ its CPU per message: where both modes keep the cores equally busy, the throughput ratio is the inverse of the CPU ratio). "+
			"Other processes is the CPU the rest of the machine used during the point, both modes' runs together (/proc/stat's busy time less this process's and its children's), of all cores: "+
			"a busy neighbour takes CPU from both modes and can cost the sandboxed one more (each of its crossings wakes a process, and a wake waits for a free core), so a point with other processes well above 0%% measured the neighbour too. "+
			"Context switches per message are the machine's (/proc/stat's ctxt) over a mode's runs ÷ its messages: a crossing to or from a sandbox that finds the other side asleep costs at least one, so the difference between the modes counts the wake-ups that isolation adds.",
			isolationRounds*isolationSliced, b.pointDur/isolationSliced, 2*isolationRounds*b.pointDur, isolationRounds, b.pointDur),
		"point", "in-process msgs/s", "sandboxed msgs/s", "sandboxed ÷ in-process", "rounds' ratios (lowest–highest)", "CPU µs/msg in-process", "CPU µs/msg sandboxed", "sandboxed CPU ÷ in-process", "rounds' CPU ratios (lowest–highest)", "CPU use in-process (of all cores)", "CPU use sandboxed", "other processes (of all cores)", "context switches per msg in-process", "context switches per msg sandboxed")
	hosts := map[bool]*benchHost{}
	for _, unsafe := range []bool{true, false} {
		bh, err := b.startHostWith(ctx, 64, host.Config{UnsafeInProcessWorkers: unsafe, ObserveInterval: 100 * time.Millisecond})
		if err != nil {
			s.NotMeasured = "starting a host: " + err.Error()
			return
		}
		defer bh.close()
		hosts[unsafe] = bh
	}
	modeName := map[bool]string{true: "in-process", false: "sandboxed"}
	type point struct {
		name   string
		rounds int
		run    func(bh *benchHost, mode string) (prodPoint, error)
	}
	var points []point
	for _, m := range isolationPoints {
		path := "one?size=100"
		if m.PerCall == 100 {
			path = "batch?size=100"
		}
		points = append(points, point{"fetch → " + m.Name, isolationRounds * isolationSliced, func(bh *benchHost, mode string) (prodPoint, error) {
			call := func(ctx context.Context, _ [][]byte) error { return bh.fetch(ctx, path) }
			_ = call(ctx, nil)
			c := b.prog.phase(fmt.Sprintf("isolation %s %s", mode, m.Name), "msgs")
			c0 := childrenCPU()
			pt := runProducer(ctx, call, m, 100, b.pointDur/isolationSliced, c)
			b.prog.end()
			pt.CPU += childrenCPU() - c0 // the sandboxes'
			return pt, pt.Err
		}})
	}
	attached := map[*benchHost]bool{}
	points = append(points, point{"end-to-end: sendBatch(100) ×16 → consumer → acknowledgement", isolationRounds, func(bh *benchHost, mode string) (prodPoint, error) {
		if !attached[bh] {
			// The consumer comes last, so that the producer points above
			// measure producing alone; it first drains what they sent.
			if err := bh.attachConsumer(ctx); err != nil {
				return prodPoint{}, err
			}
			attached[bh] = true
		}
		return b.isolationE2E(ctx, bh, mode)
	}})
	for _, p := range points {
		rate := map[bool]float64{}
		total := map[bool]prodPoint{} // every run of a mode as one
		switches := map[bool]uint64{} // the machine's, over a mode's runs
		var rateRounds, cpuRounds []float64
		others := startOthers()
		for range p.rounds {
			round := map[bool]prodPoint{}
			for _, unsafe := range []bool{true, false, false, true} {
				sw0 := contextSwitches()
				r, err := p.run(hosts[unsafe], modeName[unsafe])
				switches[unsafe] += contextSwitches() - sw0
				if err != nil {
					s.note("%s, %s: error: %v", modeName[unsafe], p.name, err)
				}
				rate[unsafe] += r.rate() / float64(2*p.rounds)
				for _, acc := range []map[bool]prodPoint{total, round} {
					t := acc[unsafe]
					t.Msgs, t.Wall, t.CPU = t.Msgs+r.Msgs, t.Wall+r.Wall, t.CPU+r.CPU
					acc[unsafe] = t
				}
			}
			// A round's own ratios: its two sandboxed runs against its two
			// in-process runs, in throughput and in CPU per message.
			if round[true].rate() > 0 && round[false].Msgs > 0 {
				rateRounds = append(rateRounds, round[false].rate()/round[true].rate())
				cpuRounds = append(cpuRounds, round[false].cpuPerMsg()/round[true].cpuPerMsg())
			}
		}
		in, sb := rate[true], rate[false]
		cin, csb := total[true].cpuPerMsg(), total[false].cpuPerMsg()
		rs, cs := spreadOf(rateRounds), spreadOf(cpuRounds)
		busy := others.end()
		perMsg := func(unsafe bool) string {
			if total[unsafe].Msgs == 0 || switches[unsafe] == 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.2f", float64(switches[unsafe])/float64(total[unsafe].Msgs))
		}
		rangeOf := func(sp spread) string {
			if sp.N == 0 {
				return "n/a"
			}
			return pct(sp.Lo) + "–" + pct(sp.Hi)
		}
		s.row(p.name, num(in), num(sb), ratio(sb, in), rangeOf(rs), num(cin), num(csb), ratio(csb, cin), rangeOf(cs), pct(total[true].cores()), pct(total[false].cores()), pct(busy), perMsg(true), perMsg(false))
		b.spreads["isolation/rate/"+p.name] = rs
		b.spreads["isolation/cpu/"+p.name] = cs
		b.notes["isolation/"+p.name] = "other processes " + pct(busy) + " of the cores"
		b.results["isolation/cpu-in-process/"+p.name] = cin
		b.results["isolation/cpu-sandboxed/"+p.name] = csb
		b.isoPoints = append(b.isoPoints, p.name)
	}
	b.isolationLatency(ctx, s)
}

// attachConsumer gives the benchmark queue a consumer (the worker's queue
// handler reads every body and returns) and waits until it is empty.
func (bh *benchHost) attachConsumer(ctx context.Context) error {
	if _, err := bh.c.create(ctx, "c", formConsumer, map[string]any{"queue": ref{bh.queue}, "worker": ref{bh.worker},
		"maxBatchSize": 100, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 4, "maxRetries": 3, "retryDelaySeconds": 0}); err != nil {
		return err
	}
	return waitEmpty(ctx, bh, 10*time.Minute)
}

// isolationE2E produces for a point into the queue (whose consumer is
// attached) and returns the run from the first send until the queue is
// empty again: its messages, wall time and CPU (the sandboxes' too).
func (b *bench) isolationE2E(ctx context.Context, bh *benchHost, mode string) (prodPoint, error) {
	if err := waitEmpty(ctx, bh, 10*time.Minute); err != nil {
		return prodPoint{}, err
	}
	m := prodMode{"sendBatch(100) ×16 concurrent", 100, 16}
	call := func(ctx context.Context, _ [][]byte) error { return bh.fetch(ctx, "batch?size=100") }
	c := b.prog.phase(fmt.Sprintf("isolation %s end-to-end", mode), "msgs")
	sp, c0 := startSpan(), childrenCPU()
	pt := runProducer(ctx, call, m, 100, b.pointDur, c)
	err := waitEmpty(ctx, bh, 10*time.Minute)
	wall, cpu := sp.end()
	b.prog.end()
	if err != nil {
		return prodPoint{}, err
	}
	if pt.Err != nil {
		return prodPoint{}, pt.Err
	}
	return prodPoint{Msgs: pt.Msgs, Wall: wall, CPU: cpu + childrenCPU() - c0}, nil
}

func waitEmpty(ctx context.Context, bh *benchHost, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		n, err := bh.c.MessageCount(ctx, benchSpace, bh.queue)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the queue did not drain within %s", limit)
}
