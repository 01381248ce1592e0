package main

import (
	"math"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// contention is what else happened on the machine and in the Go runtime
// during a measured point: it tells a tail caused by other tenants or by
// the scheduler from one caused by the code under test.
type contention struct {
	MachineBusy float64 // cores busy, all processes (/proc/stat)
	Ours        float64 // cores used by this process (getrusage)
	Steal       float64 // cores stolen by the hypervisor
	SchedP99    time.Duration
	SchedMax    time.Duration
	GCPauseMax  time.Duration
}

type contentionProbe struct {
	stat  []uint64
	cpu   time.Duration
	wall  time.Time
	hists []metrics.Sample
}

var histNames = []string{"/sched/latencies:seconds", "/sched/pauses/total/gc:seconds"}

// procStat is /proc/stat's aggregate cpu line (user nice system idle
// iowait irq softirq steal ...), nil where it cannot be read.
func procStat() []uint64 {
	v, _ := procLine("/proc/stat", "cpu ") // not "cpu0 ": the sum of all
	f := strings.Fields(v)
	if len(f) < 8 {
		return nil
	}
	out := make([]uint64, 0, len(f))
	for _, x := range f {
		n, _ := strconv.ParseUint(x, 10, 64)
		out = append(out, n)
	}
	return out
}

// contextSwitches is the machine's context switches since boot, from
// /proc/stat's ctxt line (0 where it cannot be read).
func contextSwitches() uint64 {
	v, _ := procLine("/proc/stat", "ctxt ")
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

func readHists() []metrics.Sample {
	s := make([]metrics.Sample, len(histNames))
	for i, n := range histNames {
		s[i].Name = n
	}
	metrics.Read(s)
	return s
}

func startContention() contentionProbe {
	return contentionProbe{stat: procStat(), cpu: cpuTime(), wall: time.Now(), hists: readHists()}
}

// othersProbe measures the CPU every other process on the machine uses
// over a span: the machine's busy time less this process's and its
// children's.
type othersProbe struct {
	c         contentionProbe
	children0 time.Duration
}

func startOthers() othersProbe {
	return othersProbe{children0: childrenCPU(), c: startContention()}
}

// end is the others' CPU as a share of all the machine's cores.
func (p othersProbe) end() float64 {
	children := childrenCPU() - p.children0
	c := p.c.end()
	wall := time.Since(p.c.wall).Seconds()
	return max(0, c.MachineBusy-c.Ours-children.Seconds()/wall) / float64(numCPU())
}

func (p contentionProbe) end() contention {
	var c contention
	wall := time.Since(p.wall).Seconds()
	c.Ours = (cpuTime() - p.cpu).Seconds() / wall
	if now := procStat(); len(now) >= 8 && len(p.stat) >= 8 {
		d := make([]float64, 8)
		var total float64
		for i := range d {
			d[i] = float64(now[i] - p.stat[i])
			total += d[i]
		}
		// user nice system idle iowait irq softirq steal; USER_HZ is 100.
		c.MachineBusy = (total - d[3] - d[4] - d[7]) / 100 / wall
		c.Steal = d[7] / 100 / wall
	}
	after := readHists()
	for i := range after {
		a, b := p.hists[i].Value, after[i].Value
		if a.Kind() != metrics.KindFloat64Histogram || b.Kind() != metrics.KindFloat64Histogram {
			continue
		}
		p99, mx := histDelta(a.Float64Histogram(), b.Float64Histogram())
		switch i {
		case 0:
			c.SchedP99, c.SchedMax = p99, mx
		case 1:
			c.GCPauseMax = mx
		}
	}
	return c
}

// histDelta returns the p99 and the largest bucket of what was added to a
// runtime/metrics histogram between two reads (bucket upper bounds).
func histDelta(a, b *metrics.Float64Histogram) (p99, mx time.Duration) {
	if len(a.Counts) != len(b.Counts) {
		return 0, 0
	}
	var total uint64
	d := make([]uint64, len(b.Counts))
	for i := range d {
		d[i] = b.Counts[i] - a.Counts[i]
		total += d[i]
	}
	if total == 0 {
		return 0, 0
	}
	bound := func(i int) time.Duration {
		v := b.Buckets[i+1]
		if math.IsInf(v, 1) {
			v = b.Buckets[i]
		}
		return time.Duration(v * float64(time.Second))
	}
	want := uint64(math.Ceil(float64(total) * 0.99))
	var cum uint64
	for i, n := range d {
		cum += n
		if p99 == 0 && cum >= want {
			p99 = bound(i)
		}
		if n > 0 {
			mx = bound(i)
		}
	}
	return p99, mx
}

func (c contention) String() string {
	return "machine " + num(c.MachineBusy) + " cores busy (this process " + num(c.Ours) + "), steal " + num(c.Steal) +
		"; Go run-queue wait p99 " + dur(c.SchedP99) + ", max " + dur(c.SchedMax) + "; GC stop-the-world max " + dur(c.GCPauseMax)
}
