package main

import (
	"bufio"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestChildrenCPUBurner is the child of TestChildrenCPU: it uses burn of
// CPU, says so, and waits for its stdin to close.
func TestChildrenCPUBurner(t *testing.T) {
	if os.Getenv("BENCH_TEST_BURN") == "" {
		t.Skip("the child of TestChildrenCPU")
	}
	for x := 0; cpuTime() < burn; x++ {
		_ = x * x
	}
	os.Stdout.WriteString("burnt\n")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

const burn = 300 * time.Millisecond

// A child's CPU counts while it runs (from /proc) and after it was waited
// for (getrusage).
func TestChildrenCPU(t *testing.T) {
	c0 := childrenCPU()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenCPUBurner$")
	cmd.Env = append(os.Environ(), "BENCH_TEST_BURN=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "burnt\n" {
		cmd.Process.Kill()
		t.Fatalf("the child said %q, %v", line, err)
	}
	running := childrenCPU() - c0
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	waited := childrenCPU() - c0
	// /proc counts in 10 ms ticks.
	if running < burn-10*time.Millisecond {
		t.Errorf("while the child ran: %v of CPU, want at least the %v it burnt", running, burn)
	}
	if waited < burn || waited < running-10*time.Millisecond {
		t.Errorf("after the child was waited for: %v of CPU, want at least %v (and %v seen while it ran)", waited, burn, running)
	}
}

// The machine's context switches count at least the ones this test makes:
// two goroutines that hand a token back and forth through a pipe, each
// blocking in read until the other writes, switch at every hand-over.
func TestContextSwitches(t *testing.T) {
	before := contextSwitches()
	if before == 0 {
		t.Fatal("no ctxt line read from /proc/stat")
	}
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{r1, w1, r2, w2} {
		t.Cleanup(func() { f.Close() })
	}
	const rounds = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 1)
		for range rounds {
			r1.Read(b)
			w2.Write(b)
		}
	}()
	b := make([]byte, 1)
	for range rounds {
		w1.Write(b)
		r2.Read(b)
		time.Sleep(100 * time.Microsecond) // so that both sides go to sleep
	}
	<-done
	if d := contextSwitches() - before; d < rounds {
		t.Fatalf("%d context switches counted over %d sleeps and hand-overs", d, rounds)
	}
}

// The resident set grows by what this test touches: fresh anonymous
// pages, outside the Go heap (a heap allocation may reuse pages an
// earlier run of the test left resident).
func TestRSSBytes(t *testing.T) {
	before := rssBytes()
	if before <= 0 {
		t.Fatal("no VmRSS read from /proc/self/status")
	}
	b, err := unix.Mmap(-1, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	if grew := rssBytes() - before; grew < 32<<20 {
		t.Fatalf("touching 64 MiB grew the resident set by %.1f MiB", grew/(1<<20))
	}
}

// procStat reads the aggregate cpu line: eight or more tick counts, whose
// sum (all the cores' time since boot) grows while time passes.
func TestProcStat(t *testing.T) {
	a := procStat()
	if len(a) < 8 {
		t.Fatalf("procStat: %v", a)
	}
	time.Sleep(50 * time.Millisecond)
	b := procStat()
	sum := func(v []uint64) (s uint64) {
		for _, x := range v {
			s += x
		}
		return s
	}
	if sum(b) <= sum(a) {
		t.Fatalf("the cpu line did not move over 50 ms: %v then %v", a, b)
	}
}
