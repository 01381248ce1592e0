package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cpuTime is the CPU time (user + system) this process has used so far,
// from getrusage(RUSAGE_SELF).
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU is the CPU time (user + system) this process's children have
// used so far: those already waited for (getrusage(RUSAGE_CHILDREN)) and
// those still running (utime and stime in /proc/PID/stat of every process
// whose parent is this one, in the kernel's USER_HZ ticks, 100 a second on
// Linux). A host's worker sandboxes are such children.
func childrenCPU() time.Duration {
	var sum time.Duration
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err == nil {
		sum = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return sum
	}
	me := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// After "PID (comm) ": state, ppid, ... utime is field 14 and
		// stime field 15 of the line, 12th and 13th after the comm.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 || f[1] != me {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		sum += time.Duration(ut+st) * (time.Second / 100)
	}
	return sum
}

// rssBytes is the resident set size from /proc/self/status (VmRSS).
func rssBytes() float64 {
	v, ok := procLine("/proc/self/status", "VmRSS:")
	if f := strings.Fields(v); ok && len(f) >= 1 {
		kb, _ := strconv.ParseFloat(f[0], 64)
		return kb * 1024
	}
	return 0
}

// procLine is the rest of the first line of the /proc file path that
// starts with prefix, trimmed; ok is false when there is none or the file
// cannot be read.
func procLine(path, prefix string) (rest string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, prefix); found {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// span measures wall and CPU time of one run.
type span struct {
	wall0 time.Time
	cpu0  time.Duration
}

func startSpan() span { return span{time.Now(), cpuTime()} }

func (s span) end() (wall, cpu time.Duration) {
	return time.Since(s.wall0), cpuTime() - s.cpu0
}

// machine describes where the run happened.
func machine(dir string) []kv {
	var out []kv
	add := func(k, v string) { out = append(out, kv{k, v}) }
	add("date", time.Now().UTC().Format(time.RFC3339))
	add("nproc", fmt.Sprintf("%d (GOMAXPROCS %d)", runtime.NumCPU(), runtime.GOMAXPROCS(0)))
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				f := strings.Fields(rest)
				kb, _ := strconv.ParseFloat(f[0], 64)
				add("memory", fmt.Sprintf("%.1f GiB (MemTotal)", kb/(1<<20)))
			}
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "model name"); ok {
				add("cpu", strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":")))
				break
			}
		}
	}
	if b, err := exec.Command("df", "-hT", dir).Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) >= 2 {
			add("data dir disk (df -hT)", strings.Join(strings.Fields(lines[len(lines)-1]), " "))
		}
	}
	add("data dir", dir)
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		add("kernel", strings.TrimSpace(string(b)))
	}
	add("go", runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		add("load average at start", strings.Join(strings.Fields(string(b))[:3], " "))
	}
	return out
}

// progress shows the running phase on stderr: its name, elapsed time and
// current rate. On a terminal it redraws one line; otherwise it prints a
// line a second.
type progress struct {
	mu    sync.Mutex
	name  string
	unit  string
	start time.Time
	count atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	tty   bool
	quiet bool
}

func newProgress(quiet bool) *progress {
	fi, err := os.Stderr.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progress{tty: tty, quiet: quiet}
}

// phase starts showing a new phase; the returned counter is what the rate
// is computed from.
func (p *progress) phase(name, unit string) *atomic.Int64 {
	p.end()
	p.mu.Lock()
	p.name, p.unit, p.start = name, unit, time.Now()
	p.count.Store(0)
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	stop, done := p.stop, p.done
	p.mu.Unlock()
	go p.loop(stop, done)
	return &p.count
}

func (p *progress) loop(stop, done chan struct{}) {
	defer close(done)
	every := time.Second
	if p.tty {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last int64
	lastT := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := p.count.Load()
			rate := float64(n-last) / now.Sub(lastT).Seconds()
			last, lastT = n, now
			p.mu.Lock()
			line := fmt.Sprintf("[%s] %5.1fs  %s %s/s (total %d)", p.name, time.Since(p.start).Seconds(), num(rate), p.unit, n)
			if p.unit == "" {
				line = fmt.Sprintf("[%s] %5.1fs", p.name, time.Since(p.start).Seconds())
			}
			p.mu.Unlock()
			if p.quiet {
				continue
			}
			if p.tty {
				fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(os.Stderr, line)
			}
		}
	}
}

// end stops the running phase's display and prints its last line.
func (p *progress) end() {
	p.mu.Lock()
	stop, done, name := p.stop, p.done, p.name
	p.stop = nil
	p.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-done
	if !p.quiet {
		if p.tty {
			fmt.Fprint(os.Stderr, "\r\033[K")
		}
		if p.unit == "" {
			fmt.Fprintf(os.Stderr, "[%s] done in %.1fs\n", name, time.Since(p.start).Seconds())
		} else {
			fmt.Fprintf(os.Stderr, "[%s] done in %.1fs (total %d %s)\n", name, time.Since(p.start).Seconds(), p.count.Load(), p.unit)
		}
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func numCPU() int { return runtime.NumCPU() }

// counter is the running phase's counter.
func (p *progress) counter() *atomic.Int64 { return &p.count }
