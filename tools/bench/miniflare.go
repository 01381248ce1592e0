package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/host"
)

// miniflareVersion is the Miniflare release the comparison installs from
// the npm registry: the newest Miniflare 4 it served when this was written
// (it depends on workerd of the same date, whose binary ships in an npm
// package). Miniflare 4 needs Node 22 or newer, so the comparison also
// installs Node 22 from the registry (nodeVersionWanted, the platform's
// node-linux-* package) rather than depend on the machine's Node.
const (
	miniflareVersion  = "4.20260730.0"
	nodeVersionWanted = "22.23.5"
)

// nodePackage is the npm package that ships Node for this platform.
func nodePackage() (string, error) {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	if runtime.GOOS != "linux" || arch == "" {
		return "", fmt.Errorf("no Node package for %s/%s: run the comparison on linux/amd64 or linux/arm64", runtime.GOOS, runtime.GOARCH)
	}
	return "node-linux-" + arch, nil
}

// miniflareScript runs the benchmark's producer and consumer on Miniflare:
// the same fetch routes as benchWorker (/batch and /one), a queue consumer
// that reads every body and acknowledges the batch, and /count, the
// messages acknowledged so far.
const miniflareScript = `import { Miniflare } from "miniflare";
const script = ` + "`" + `
let acked = 0;
const bodies = {};
function body(n) { let b = bodies[n]; if (b === undefined) { b = "x".repeat(n); bodies[n] = b; } return b; }
export default {
  async fetch(req, env) {
    const u = new URL(req.url);
    if (u.pathname === "/count") return new Response(String(acked));
    const b = body(Number(u.searchParams.get("size") || 100));
    if (u.pathname === "/batch") await env.Q.sendBatch(Array.from({length: 100}, () => ({body: b})));
    else await env.Q.send(b);
    return new Response("ok");
  },
  async queue(batch) {
    let n = 0;
    for (const m of batch.messages) n += m.body.length;
    acked += batch.messages.length;
    batch.ackAll();
  },
};` + "`" + `;
const mf = new Miniflare({
  modules: true, script, host: "127.0.0.1", port: Number(process.argv[2]),
  queueProducers: { Q: "q" },
  queueConsumers: { q: { maxBatchSize: 100, maxBatchTimeout: 0 } },
});
const url = await mf.ready;
console.log("READY " + url);
process.stdin.resume();
process.stdin.on("end", async () => { await mf.dispose(); process.exit(0); });
`

// miniflareCacheDir is where Miniflare is installed: $TAKOBENCH_CACHE, or
// the user cache directory.
func miniflareCacheDir() (string, error) {
	if d := os.Getenv("TAKOBENCH_CACHE"); d != "" {
		return filepath.Join(d, "miniflare-"+miniflareVersion+"-node"+nodeVersionWanted), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "takohost-bench", "miniflare-"+miniflareVersion+"-node"+nodeVersionWanted), nil
}

// miniflare is a running Miniflare with the benchmark worker.
type miniflare struct {
	node  string // the Node binary it runs on
	cmd   *exec.Cmd
	stdin io.WriteCloser
	base  string
	http  *http.Client
}

// startMiniflare installs Miniflare into the cache directory (npm, once)
// and starts it on a free port.
func startMiniflare(ctx context.Context) (*miniflare, error) {
	dir, err := miniflareCacheDir()
	if err != nil {
		return nil, err
	}
	nodePkg, err := nodePackage()
	if err != nil {
		return nil, err
	}
	node := filepath.Join(dir, "node_modules", nodePkg, "bin", "node")
	_, errMF := os.Stat(filepath.Join(dir, "node_modules", "miniflare", "package.json"))
	if _, err := os.Stat(node); err != nil || errMF != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		logf("bench: installing miniflare@%s and %s@%s into %s (npm)", miniflareVersion, nodePkg, nodeVersionWanted, dir)
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir,
			"miniflare@"+miniflareVersion, nodePkg+"@"+nodeVersionWanted)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install miniflare@%s %s@%s: %w: %s", miniflareVersion, nodePkg, nodeVersionWanted, err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.mjs"), []byte(miniflareScript), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(node, "bench.mjs", strconv.Itoa(port))
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	mf := &miniflare{cmd: cmd, stdin: stdin, node: node, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- strings.TrimSuffix(u, "/")
			}
		}
	}()
	select {
	case mf.base = <-ready:
	case <-time.After(2 * time.Minute):
		mf.close()
		return nil, fmt.Errorf("miniflare did not start within 2 minutes")
	}
	return mf, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (mf *miniflare) close() {
	mf.stdin.Close()
	done := make(chan struct{})
	go func() { mf.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mf.cmd.Process.Kill()
		<-done
	}
}

func (mf *miniflare) get(ctx context.Context, method, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, mf.base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := mf.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		return "", fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, line)
	}
	return string(b), err
}

func (mf *miniflare) acked(ctx context.Context) (int64, error) {
	s, err := mf.get(ctx, "GET", "/count")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}

// miniflarePoints are the comparison points, end to end to the
// acknowledgement: single sends and sendBatch(100), from one client to 64.
var miniflarePoints = []prodMode{
	{"send ×1", 1, 1},
	{"send ×8 concurrent", 1, 8},
	{"send ×64 concurrent", 1, 64},
	{"sendBatch(100) ×1", 100, 1},
	{"sendBatch(100) ×16 concurrent", 100, 16},
	{"sendBatch(100) ×64 concurrent", 100, 64},
}

// miniflareRounds is how many rounds (this host, Miniflare, Miniflare,
// this host) each point runs; each round gives a ratio of its own.
const miniflareRounds = 3

// maxFailedShare is the share of failed calls above which a point is
// invalid for either side: it would measure failing, not serving.
const maxFailedShare = 0.01

// peerRun is one side's run of a point: what was sent and acknowledged,
// how fast, and how many calls failed.
type peerRun struct {
	Rate          float64
	Calls, Failed int64
	FirstErr      error
}

// miniflareLayer runs the same producer and consumer worker on this host
// (sandboxed, its default) and on Miniflare, end to end to the
// acknowledgement, interleaved, and reports each ratio on its rounds.
func (b *bench) miniflareLayer(ctx context.Context) {
	s := b.rep.section("Side by side with Miniflare (Cloudflare's local runtime, workerd)",
		fmt.Sprintf("The same worker on this host (host.New, sandboxed workers, a QueueConsumer with maxBatchSize 100, maxConcurrency 4, retryDelaySeconds 0) and on Miniflare %s "+
			"(installed from the npm registry into a cache directory on first use, with Node %s from the registry's node-linux package, since Miniflare 4 needs Node 22; queue consumer maxBatchSize 100, maxBatchTimeout 0): "+
			"a fetch handler that sends 100 messages of 100 B with sendBatch or one with send, and a queue handler that reads every body and acknowledges. "+
			"Closed-loop HTTP clients in this process call the fetch route for %s; a run's figure is the messages sent by calls that succeeded ÷ the time from the first send until every one of them is acknowledged "+
			"(this host: the queue's messageCount back to 0; Miniflare: the consumer's count of acknowledged messages). "+
			"Both sides are driven by the same client: a call that fails (a non-200 answer or a transport error) is counted in the failed column and the client goes on. "+
			"Each point runs %d rounds of this host, Miniflare, Miniflare, this host; each round gives a ratio of its own, and the verdict reads their median and spread. "+
			"A point where either side failed more than %s of its calls is INVALID: it would measure failing, not serving. "+
			"Not the same guarantees: this host's sends and acknowledgements are durable (fsync) before they resolve; Miniflare keeps its queue in memory.",
			miniflareVersion, nodeVersionWanted, b.pointDur, miniflareRounds, pct(maxFailedShare)),
		"point", "this host msgs/s", "Miniflare msgs/s", "this host ÷ Miniflare", "rounds' ratios (lowest–highest)", "this host: failed calls", "Miniflare: failed calls")
	mf, err := startMiniflare(ctx)
	if err != nil {
		s.NotMeasured = "Miniflare: " + err.Error()
		return
	}
	defer mf.close()
	s.Intro += " Node: " + nodeVersionOf(mf.node) + "."
	bh, err := b.startHostWith(ctx, 64, host.Config{ObserveInterval: 100 * time.Millisecond})
	if err != nil {
		s.NotMeasured = "starting the host: " + err.Error()
		return
	}
	defer bh.close()
	if err := bh.attachConsumer(ctx); err != nil {
		s.NotMeasured = "attaching the consumer: " + err.Error()
		return
	}
	side := map[bool]string{true: "this host", false: "Miniflare"}
	for _, m := range miniflarePoints {
		path := "one?size=100"
		if m.PerCall == 100 {
			path = "batch?size=100"
		}
		total := map[bool]peerRun{}
		var rounds []float64
		for range miniflareRounds {
			round := map[bool]float64{}
			for _, onHost := range []bool{true, false, false, true} {
				c := b.prog.phase("miniflare: "+side[onHost]+" "+m.Name, "msgs")
				var r peerRun
				if onHost {
					r = b.e2eRate(ctx, bh, m, path, c)
				} else {
					r = b.miniflareRate(ctx, mf, m, path, c)
				}
				b.prog.end()
				if r.FirstErr != nil && total[onHost].FirstErr == nil {
					s.note("%s on %s, the first error: %v", m.Name, side[onHost], r.FirstErr)
				}
				t := total[onHost]
				t.Rate += r.Rate / float64(2*miniflareRounds)
				t.Calls, t.Failed = t.Calls+r.Calls, t.Failed+r.Failed
				if t.FirstErr == nil {
					t.FirstErr = r.FirstErr
				}
				total[onHost] = t
				round[onHost] += r.Rate
			}
			if round[false] > 0 {
				rounds = append(rounds, round[true]/round[false])
			}
		}
		ours, theirs := total[true], total[false]
		sp := spreadOf(rounds)
		failed := func(r peerRun) string {
			return fmt.Sprintf("%d of %d (%s)", r.Failed, r.Calls, pct(float64(r.Failed)/float64(max(r.Calls, 1))))
		}
		rng := "n/a"
		if sp.N > 0 {
			rng = ratio(sp.Lo, 1) + "–" + ratio(sp.Hi, 1)
		}
		s.row(m.Name+" → consumer → acknowledgement", num(ours.Rate), num(theirs.Rate), ratio(ours.Rate, theirs.Rate), rng, failed(ours), failed(theirs))
		key := "miniflare/" + m.Name
		b.spreads[key] = sp
		var invalid []string
		for _, onHost := range []bool{true, false} {
			r := total[onHost]
			if r.Calls == 0 || float64(r.Failed) > maxFailedShare*float64(r.Calls) {
				invalid = append(invalid, fmt.Sprintf("%s failed %s of its calls", side[onHost], pct(float64(r.Failed)/float64(max(r.Calls, 1)))))
			}
		}
		b.notes[key] = strings.Join(invalid, "; ")
		b.mfPoints = append(b.mfPoints, m.Name)
	}
}

// miniflareTargets decides "this host ≥ 4× Miniflare" per point on the
// rounds; a point with too many failures on either side is INVALID.
func (b *bench) miniflareTargets() {
	const want = "≥ 4×, failed calls ≤ 1% on both sides"
	if len(b.mfPoints) == 0 {
		b.rep.target(target{Name: "this host ÷ Miniflare end to end, at every point (send and sendBatch(100), ×1 to ×64)", Want: want,
			Skipped: "not measured in this run (phase miniflare)"})
		return
	}
	for _, p := range b.mfPoints {
		key := "miniflare/" + p
		sp := b.spreads[key]
		v, extra := sp.atLeast(4), ""
		if why := b.notes[key]; why != "" {
			v, extra = verdictInvalid, why
		}
		b.rep.target(roundsTarget("this host ÷ Miniflare end to end ("+p+")", want, sp, v, func(x float64) string { return ratio(x, 1) }, extra))
	}
}

func nodeVersionOf(node string) string {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// countingCall wraps a call so that a failure is counted and the client
// goes on (a call that failed sent nothing), for both sides alike.
func countingCall(ctx context.Context, do func(ctx context.Context) error, calls, failed *atomic.Int64, firstErr *atomic.Value) sendFunc {
	return func(ctx context.Context, _ [][]byte) error {
		calls.Add(1)
		if err := do(ctx); err != nil {
			if ctx.Err() != nil {
				return err
			}
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
			return errCallFailed
		}
		return nil
	}
}

// errCallFailed tells runProducer that a call failed and was counted: the
// client goes on, and the call's messages are not counted as sent.
var errCallFailed = errors.New("call failed (counted)")

// e2eRate produces with m on the host (its consumer attached) for a point
// and returns the run: messages per second from the first send until the
// queue is empty again, and the calls that failed.
func (b *bench) e2eRate(ctx context.Context, bh *benchHost, m prodMode, path string, c *atomic.Int64) peerRun {
	if err := waitEmpty(ctx, bh, 10*time.Minute); err != nil {
		return peerRun{FirstErr: err}
	}
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	call := countingCall(ctx, func(ctx context.Context) error { return bh.fetch(ctx, path) }, &calls, &failed, &firstErr)
	t0 := time.Now()
	pt := runProducer(ctx, call, m, 100, b.pointDur, c)
	run := peerRun{Calls: calls.Load(), Failed: failed.Load()}
	if e, ok := firstErr.Load().(error); ok {
		run.FirstErr = e
	} else if pt.Err != nil {
		run.FirstErr = pt.Err
	}
	if err := waitEmpty(ctx, bh, 10*time.Minute); err != nil {
		run.FirstErr = err
		return run
	}
	run.Rate = float64(pt.Msgs) / time.Since(t0).Seconds()
	return run
}

// miniflareRate is e2eRate on Miniflare.
func (b *bench) miniflareRate(ctx context.Context, mf *miniflare, m prodMode, path string, c *atomic.Int64) peerRun {
	before, err := mf.acked(ctx)
	if err != nil {
		return peerRun{FirstErr: err}
	}
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	call := countingCall(ctx, func(ctx context.Context) error { _, err := mf.get(ctx, "POST", "/"+path); return err }, &calls, &failed, &firstErr)
	t0 := time.Now()
	pt := runProducer(ctx, call, m, 100, b.pointDur, c)
	run := peerRun{Calls: calls.Load(), Failed: failed.Load()}
	if e, ok := firstErr.Load().(error); ok {
		run.FirstErr = e
	} else if pt.Err != nil {
		run.FirstErr = pt.Err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		n, err := mf.acked(ctx)
		if err != nil {
			run.FirstErr = err
			return run
		}
		if n-before >= pt.Msgs {
			break
		}
		if time.Now().After(deadline) {
			run.FirstErr = fmt.Errorf("%d of %d messages acknowledged after 10 minutes", n-before, pt.Msgs)
			return run
		}
		time.Sleep(20 * time.Millisecond)
	}
	run.Rate = float64(pt.Msgs) / time.Since(t0).Seconds()
	return run
}
