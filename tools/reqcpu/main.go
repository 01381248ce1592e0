// Command reqcpu measures the CPU one fetch-that-sends costs the host, apart
// from the load generator: one HTTP request to a worker's fetch handler that
// sends one message through its producer Binding (durable before the
// response), the request issue #41 asks to be cheap.
//
// tools/bench measures the same point with the hosts in its own process, so
// its CPU per request includes the closed-loop HTTP clients (about half of
// it). Here each host (one with worker code in the host process, one
// sandboxed) is a child process of its own, started from this binary, and
// its CPU is read from /proc (in USER_HZ ticks of 10 ms: -n 1000 resolves
// 10 µs per request): utime+stime of the host and of every process
// below it (the sandboxes), live or reaped, before and after N requests.
// The load generator's CPU is this process's getrusage over the same
// requests, reported beside it.
//
// The machine is shared, so the rounds interleave the modes (in-process,
// sandboxed, sandboxed, in-process) and the figures are the medians of the
// rounds with their range. With -profile DIR it also writes a CPU profile of
// each host (net/http/pprof in the child) under the same load.
//
//	go run ./tools/reqcpu -rounds 5 -n 4000 -clients 8 -profile bin/prof
//	make bench-cpu BASE=main   # this tree against main, interleaved
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // the child's profile endpoint
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/runtime/sandbox"
)

// worker's fetch handler sends one message of ?size= bytes and answers "1"
// once the send is durable.
const worker = `
const cache = new Map();
export default {
  async fetch(request, env) {
    const n = Number(new URL(request.url).searchParams.get("size") || "100");
    let b = cache.get(n);
    if (b === undefined) cache.set(n, b = "x".repeat(n));
    await env.Q.send(b);
    return new Response("1");
  },
};
`

const space = "bench"

func main() {
	sandbox.Main() // the sandboxed host's worker sandboxes are this binary
	serve := flag.String("serve", "", "run as a host child: in-process or sandboxed (internal)")
	rounds := flag.Int("rounds", 5, "rounds, each in-process, sandboxed, sandboxed, in-process")
	n := flag.Int("n", 3000, "requests per run")
	clients := flag.Int("clients", 8, "concurrent closed-loop clients")
	size := flag.Int("size", 100, "message body bytes")
	profile := flag.String("profile", "", "directory for a CPU profile of each host under the same load")
	profSecs := flag.Int("profile-seconds", 10, "length of each profile")
	only := flag.String("only", "", "measure one mode only: in-process or sandboxed")
	base := flag.String("base", "", "a reqcpu binary built from the code to compare with: its hosts run interleaved with this one's, and each round gives this ÷ base")
	flag.Parse()
	if *serve != "" {
		if err := child(*serve == "in-process"); err != nil {
			fmt.Fprintln(os.Stderr, "reqcpu child:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*rounds, *n, *clients, *size, *profile, *profSecs, *only, *base); err != nil {
		fmt.Fprintln(os.Stderr, "reqcpu:", err)
		os.Exit(1)
	}
}

// hello is what a child prints once it serves.
type hello struct {
	URL, Token, Pprof string
	PID               int
}

// child runs a host until its standard input closes.
func child(unsafe bool) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "reqcpu-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h, err := host.New(ctx, host.Config{DataDir: dir, Listen: "127.0.0.1:0", UnsafeInProcessWorkers: unsafe,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	if err := h.Start(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, http.DefaultServeMux) //nolint:errcheck // ends with the process
	if err := json.NewEncoder(os.Stdout).Encode(hello{URL: h.URL(), Token: h.AdminToken(), Pprof: "http://" + ln.Addr().String(), PID: os.Getpid()}); err != nil {
		return err
	}
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // EOF or error: stop either way
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return h.Shutdown(sctx)
}

// hostProc is a host child with a queue and a worker whose fetch sends.
type hostProc struct {
	mode  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	hello
	url string // the fetch route
}

func startHost(ctx context.Context, exe, mode string) (*hostProc, error) {
	cmd := exec.Command(exe, "-serve", mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	hp := &hostProc{mode: mode, cmd: cmd, stdin: in}
	if err := json.NewDecoder(bufio.NewReader(out)).Decode(&hp.hello); err != nil {
		hp.close()
		return nil, fmt.Errorf("%s host: %w", mode, err)
	}
	c := apiclient.New(hp.URL, hp.Token)
	q, err := c.Create(ctx, space, "q", apiclient.FormQueue, map[string]any{"messageRetentionSeconds": 1209600}, nil)
	if err == nil {
		var w, v string
		if w, err = c.Create(ctx, space, "w", apiclient.FormWorker, map[string]any{"handlers": []string{"fetch"}}, nil); err == nil {
			if v, err = c.Create(ctx, space, "v1", apiclient.FormVersion, map[string]any{"worker": apiclient.Ref(w), "mainModule": "main.js",
				"modules":               []map[string]string{{"name": "main.js", "content": worker}},
				"queueProducerBindings": []map[string]any{{"name": "Q", "resource": apiclient.Ref(q)}}}, nil); err == nil {
				err = c.Put(ctx, space, w, map[string]any{"handlers": []string{"fetch"}, "version": apiclient.Ref(v)})
			}
			hp.url = fmt.Sprintf("%s/v2/spaces/%s/resources/%s/fetch/one", hp.URL, space, w)
		}
	}
	if err != nil {
		hp.close()
		return nil, fmt.Errorf("%s host: %w", mode, err)
	}
	return hp, nil
}

func (hp *hostProc) close() {
	hp.stdin.Close()
	done := make(chan struct{})
	go func() { hp.cmd.Wait(); close(done) }() //nolint:errcheck // stopping
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		hp.cmd.Process.Kill() //nolint:errcheck // stopping
		<-done
	}
}

// treeCPU is the CPU the process pid and every process below it used so
// far: utime+stime of each live one, plus cutime+cstime (the reaped ones).
func treeCPU(pid int) time.Duration {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	stats := map[int][]string{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := statFields(p)
		if f == nil {
			continue
		}
		stats[p] = f
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var ticks int64
	var walk func(p int)
	walk = func(p int) {
		f := stats[p]
		if f == nil {
			return
		}
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14–17)
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// statFields is /proc/pid/stat from the state on (field 3 is [0]).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru) //nolint:errcheck // zero on error
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// load sends n requests from clients closed-loop clients (or, with n 0,
// until stop closes) and returns how many it sent.
func load(cl *http.Client, hp *hostProc, n, clients, size int, stop <-chan struct{}) (int64, error) {
	var sent atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	url := fmt.Sprintf("%s?size=%d", hp.url, size)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if n > 0 && sent.Add(1) > int64(n) {
					return
				}
				if n == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
				req, _ := http.NewRequest("POST", url, nil)
				req.Header.Set("Authorization", "Bearer "+hp.Token)
				res, err := cl.Do(req)
				if err == nil {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != 200 || string(b) != "1" {
						err = fmt.Errorf("status %d: %s", res.StatusCode, b)
					}
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if n == 0 {
					sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return 0, e
	}
	if n > 0 {
		return int64(n), nil
	}
	return sent.Load(), nil
}

type sample struct{ host, gen, wall float64 } // µs per request; requests/s

func measure(cl *http.Client, hp *hostProc, n, clients, size int) (sample, error) {
	h0, g0, t0 := treeCPU(hp.PID), selfCPU(), time.Now()
	if _, err := load(cl, hp, n, clients, size, nil); err != nil {
		return sample{}, err
	}
	wall := time.Since(t0)
	h1, g1 := treeCPU(hp.PID), selfCPU()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	return sample{host: per(h1 - h0), gen: per(g1 - g0), wall: float64(n) / wall.Seconds()}, nil
}

// arm is one host measured: a mode of this binary's host or of the base's.
type arm struct{ name, exe, mode string }

func run(rounds, n, clients, size int, profDir string, profSecs int, only, base string) error {
	ctx := context.Background()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	modes := []string{"in-process", "sandboxed"}
	if only != "" {
		modes = []string{only}
	}
	var arms []arm
	for _, m := range modes {
		if base != "" {
			arms = append(arms, arm{"base " + m, base, m})
		}
		arms = append(arms, arm{m, self, m})
	}
	hosts := map[string]*hostProc{}
	for _, a := range arms {
		hp, err := startHost(ctx, a.exe, a.mode)
		if err != nil {
			return err
		}
		defer hp.close()
		hosts[a.name] = hp
	}
	tr := &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients}
	cl := &http.Client{Transport: tr}
	for _, a := range arms { // warm the runtimes and connections
		if _, err := load(cl, hosts[a.name], 500, clients, size, nil); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	order := append(append([]arm{}, arms...), reverse(arms)...)
	res := map[string][]sample{}
	for r := range rounds {
		for _, a := range order {
			s, err := measure(cl, hosts[a.name], n, clients, size)
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
			res[a.name] = append(res[a.name], s)
			fmt.Fprintf(os.Stderr, "round %d %-20s host %6.1f µs/req  load generator %6.1f µs/req  %6.0f req/s\n", r+1, a.name, s.host, s.gen, s.wall)
		}
	}
	load1, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("CPU per fetch-that-sends (%d B body, %d clients, %d rounds of %d requests per host, hosts interleaved; load average %s)\n\n",
		size, clients, rounds, n, strings.Join(strings.Fields(string(load1))[:3], " "))
	fmt.Printf("| host | host CPU µs/req (median) | range | load generator µs/req | req/s |\n|---|---|---|---|---|\n")
	for _, a := range arms {
		hs, gs, ws := pick(res[a.name], func(s sample) float64 { return s.host }), pick(res[a.name], func(s sample) float64 { return s.gen }), pick(res[a.name], func(s sample) float64 { return s.wall })
		fmt.Printf("| %s | %.0f | %.0f–%.0f | %.0f | %.0f |\n", a.name, median(hs), hs[0], hs[len(hs)-1], median(gs), median(ws))
	}
	fmt.Println()
	// Each round's own ratio: its two runs of one host over its two of the other.
	ratio := func(what, num, den string) {
		if res[num] == nil || res[den] == nil {
			return
		}
		var ratios []float64
		for r := range rounds {
			a := res[num][2*r].host + res[num][2*r+1].host
			b := res[den][2*r].host + res[den][2*r+1].host
			ratios = append(ratios, a/b)
		}
		sort.Float64s(ratios)
		fmt.Printf("%s: median %.2f× (rounds %.2f–%.2f×)\n", what, median(ratios), ratios[0], ratios[len(ratios)-1])
	}
	ratio("sandboxed ÷ in-process host CPU", "sandboxed", "in-process")
	for _, m := range modes {
		ratio(m+" host CPU, this ÷ base", m, "base "+m)
	}
	if profDir == "" {
		return nil
	}
	if err := os.MkdirAll(profDir, 0o755); err != nil {
		return err
	}
	for _, m := range modes {
		hp := hosts[m]
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() { _, err := load(cl, hp, 0, clients, size, stop); done <- err }()
		path := filepath.Join(profDir, m+".pprof")
		err := fetchProfile(hp.Pprof, profSecs, path)
		close(stop)
		if lerr := <-done; lerr != nil && err == nil {
			err = lerr
		}
		if err != nil {
			return fmt.Errorf("profile %s: %w", m, err)
		}
		fmt.Printf("profile of the %s host: %s\n", m, path)
	}
	return nil
}

func fetchProfile(base string, secs int, path string) error {
	res, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func reverse[T any](s []T) []T {
	r := make([]T, len(s))
	for i, v := range s {
		r[len(s)-1-i] = v
	}
	return r
}

func pick(ss []sample, f func(sample) float64) []float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	sort.Float64s(v)
	return v
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
