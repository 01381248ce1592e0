package store_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/store"
)

// The crash test re-executes the test binary as a child that writes under
// concurrent load and reports on stdout what the store acknowledged; the
// parent kills it with SIGKILL at a random moment, reopens the journal and
// checks that everything acknowledged is there. TORTURE=1 makes it long.

const crashChildEnv = "STORE_CRASH_CHILD_DIR"

func TestCrash(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir, os.Getenv("STORE_CRASH_ROUND"))
		os.Exit(0)
	}
	kills := 4
	if os.Getenv("TORTURE") != "" {
		kills = 60
	}
	if testing.Short() {
		kills = 2
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	m := newCrashModel()
	for round := range kills {
		runCrashRound(t, dir, round, time.Duration(150+rng.IntN(350))*time.Millisecond, m)
		m.check(t, dir, round)
	}
}

// crashModel is what the parent knows from the child's acknowledgements.
type crashModel struct {
	present  map[string]bool // acknowledged accept, no removal started
	removing map[string]bool // removal started; either state is fine
	absent   map[string]bool // removal acknowledged
	acks     int
}

func newCrashModel() *crashModel {
	return &crashModel{present: map[string]bool{}, removing: map[string]bool{}, absent: map[string]bool{}}
}

func runCrashRound(t *testing.T, dir string, round int, after time.Duration, m *crashModel) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("STORE_CRASH_ROUND=%d", round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The kill lands under load: its delay counts from the child's
	// "ready", not from its start (on a loaded machine starting the test
	// binary and opening the store can take longer than the delay).
	var kill <-chan time.Time
	started := false
	startLimit := time.After(time.Minute)
	for {
		select {
		case <-startLimit:
			if !started {
				cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("round %d: child not ready after a minute", round)
			}
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			kill = nil
			continue
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				if !started {
					t.Fatalf("round %d: child never started", round)
				}
				return
			}
			op, id, _ := strings.Cut(line, " ")
			switch op {
			case "ready":
				started = true
				kill = time.After(after)
			case "ack":
				m.present[id] = true
				m.acks++
			case "rm":
				delete(m.present, id)
				m.removing[id] = true
			case "rmack":
				delete(m.removing, id)
				m.absent[id] = true
			case "fatal":
				t.Fatalf("round %d: child: %s", round, id)
			}
		}
	}
}

func (m *crashModel) check(t *testing.T, dir string, round int) {
	t.Helper()
	s, rep, err := store.Open(ctx, dir, store.Options{SegmentSize: 256 << 10, Logger: quiet, DisableCompaction: true})
	if err != nil {
		t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
	}
	defer s.Close()
	ms, err := s.Messages(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s.MessageCount(ctx, "q"); n != len(ms) {
		t.Fatalf("MessageCount %d, Messages %d", n, len(ms))
	}
	got := ids(ms)
	for id := range m.present {
		if !got[id] {
			t.Fatalf("round %d: acknowledged message %s lost (report %+v)", round, id, rep)
		}
		b, err := store.Body(ctx, s, "q", id)
		if err != nil || string(b) != string(bodyOf(id, bodyLen(id))) {
			t.Fatalf("round %d: body of %s: %q %v", round, id, b, err)
		}
	}
	for id := range m.absent {
		if got[id] {
			t.Fatalf("round %d: removal of %s acknowledged but it is back", round, id)
		}
	}
	for _, msg := range ms {
		if !m.present[msg.ID] && !m.removing[msg.ID] {
			// Accepted but killed before the ack was printed: fine, the
			// client would retry. The parent adopts it so the next round
			// checks it too.
			m.present[msg.ID] = true
		}
	}
	for id := range m.removing {
		if !got[id] {
			m.absent[id] = true
		} else {
			m.present[id] = true
		}
		delete(m.removing, id)
	}
	st := s.Stats()
	t.Logf("round %d: %d acks so far, %d messages, %d segments, %d bytes, torn tail %v %d bytes", round, m.acks, len(ms), st.Segments, st.Bytes, rep.Truncated, rep.Dropped)
}

func bodyLen(id string) int { return 200 + len(id)*37%900 }

func crashChild(dir, round string) {
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(w, format+"\n", args...)
		w.Flush()
		mu.Unlock()
	}
	// Compaction stays on, with small segments and a low bar, so that kills
	// also land in the middle of rewrites and segment removals.
	s, _, err := store.Open(ctx, dir, store.Options{SegmentSize: 256 << 10, Logger: quiet, CompactMinGarbage: 64 << 10})
	if err != nil {
		say("fatal %v", err)
		return
	}
	say("ready")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			var mine []string
			for i := 0; ; i++ {
				id := fmt.Sprintf("r%s-w%d-%d", round, w, i)
				if err := s.Apply(ctx, accept("q", id, bodyOf(id, bodyLen(id)))); err != nil {
					say("fatal %v", err)
					return
				}
				say("ack %s", id)
				mine = append(mine, id)
				if i%4 == 3 {
					s.Apply(ctx, store.DeliverMessages{Queue: "q", Batch: id, IDs: mine[len(mine)-2:]})
				}
				if len(mine) > 20 {
					old := mine[0]
					mine = mine[1:]
					say("rm %s", old)
					if err := s.Apply(ctx, store.RemoveMessages{Queue: "q", IDs: []string{old}}); err != nil {
						say("fatal %v", err)
						return
					}
					say("rmack %s", old)
				}
			}
		})
	}
	wg.Wait()
	io.WriteString(os.Stderr, "child exited\n")
}
