package main

import (
	"fmt"
	"strings"
)

// cpuBound is the share of all cores above which a run counts as limited
// by CPU rather than by the disk.
const cpuBound = 0.75

// checkTargets compares this run's figures with the targets.
func (b *bench) checkTargets() {
	// 1. End-to-end at maxBatchSize 100 against the journal alone.
	const e2eName = "durable end-to-end throughput at maxBatchSize 100 ≥ ½ of the journal alone for the same records"
	found := false
	for _, k := range []handlerKind{jsKind, goKind} {
		for _, conc := range []int{1, 4, 16} {
			r, ok := b.e2e[fmt.Sprintf("%s/%d", k.Name, conc)]
			if !ok || r.Journal <= 0 {
				continue
			}
			found = true
			q := r.MsgsPerSec / r.Journal
			b.rep.target(target{Name: fmt.Sprintf("%s (%s, maxConcurrency %d)", e2eName, k.Name, conc), Pass: q >= 0.5,
				Measured: fmt.Sprintf("%s msgs/s vs %s: %s", num(r.MsgsPerSec), num(r.Journal), pct(q)), Want: "≥ 50%"})
		}
	}
	if !found {
		b.rep.target(target{Name: e2eName, Want: "≥ 50%", Skipped: "not measured in this run (phase engine)"})
	}

	// 2. Producer with 100 B bodies: fsync batching, not per-message CPU.
	const prodName = "producer throughput with 100 B bodies (full host) limited by fsync batching, not per-message CPU"
	found = false
	for _, m := range prodModes {
		key := pointKey("host", m, 100)
		rate, ok := b.results[key]
		if !ok {
			continue
		}
		found = true
		cpu := b.results[key+"/cpu"]
		var why []string
		if cpu >= cpuBound {
			why = append(why, fmt.Sprintf("CPU use %s of all cores", pct(cpu)))
		}
		for _, p := range b.profiles {
			if !strings.HasPrefix(p.Name, "host producer, "+m.Name) {
				continue
			}
			for _, h := range p.Hot {
				how := "flat"
				if h.Attributed {
					how = "with what it calls"
				}
				why = append(why, fmt.Sprintf("hot function %s %.1f%% %s", h.Func, h.Flat, how))
			}
			for _, h := range p.HotPkgs {
				why = append(why, fmt.Sprintf("hot package %s %.1f%%", h.Package, h.Flat))
			}
		}
		measured := fmt.Sprintf("%s msgs/s = %s per raw fsync, %s of the Engine.Send point; CPU use %s of all cores", num(rate),
			ratio(rate, b.rep.Limits.FsyncPerSec), ratio(rate, b.results[pointKey("engine", m, 100)]), pct(cpu))
		if len(why) > 0 {
			measured += "; MISS because: " + strings.Join(why, "; ") + " (profiles in the host section)"
		}
		b.rep.target(target{Name: fmt.Sprintf("%s (%s)", prodName, m.Name), Pass: len(why) == 0, Measured: measured,
			Want: fmt.Sprintf("CPU use < %s of all cores and no hot spot > 10%% besides encoding, checksumming, syscalls", pct(cpuBound))})
	}
	if !found {
		b.rep.target(target{Name: prodName, Want: "no hot spot > 10% besides encoding, checksumming, syscalls", Skipped: "not measured in this run (phase host)"})
	}

	// 3. Idle cost.
	if v, ok := b.results["idle/cpu"]; ok {
		what := b.notes["idle/what"]
		b.rep.target(target{Name: fmt.Sprintf("%d idle queues with a consumer: CPU (%s)", b.queues, what), Pass: v < 0.01, Measured: pct(v) + " of one core (" + ratio(v, 0.01) + " of the limit)", Want: "< 1% of one core"})
		rss := b.results["idle/rss"]
		b.rep.target(target{Name: fmt.Sprintf("%d idle queues with a consumer: resident memory (%s)", b.queues, what), Pass: rss < 200<<20, Measured: mib(rss) + " (" + ratio(rss, 200<<20) + " of the limit)", Want: "< 200 MiB"})
	} else {
		b.rep.target(target{Name: "10 000 idle queues: CPU and resident memory", Want: "< 1% of one core, < 200 MiB", Skipped: "not measured in this run (phase idle)"})
	}

	// 4. Latency at 50% load.
	if v, ok := b.results["latency/50/p99"]; ok {
		b.rep.target(target{Name: "p99 send-to-handler-start at 50% of the maximum rate (goja handler, maxBatchSize 1)", Pass: v < 20e6,
			Measured: fmt.Sprintf("%s (%s of the limit)", dur(durNs(v)), pct(v/20e6)), Want: "< 20 ms"})
	} else {
		b.rep.target(target{Name: "p99 send-to-handler-start at 50% load", Want: "< 20 ms", Skipped: "not measured in this run (phase latency)"})
	}
}
