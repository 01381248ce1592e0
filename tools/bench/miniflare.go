package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/host"
)

// miniflareVersion is the Miniflare release the comparison installs from
// the npm registry (the last one that runs on Node 20; it bundles workerd).
const miniflareVersion = "3.20250718.3"

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
		return filepath.Join(d, "miniflare-"+miniflareVersion), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "takohost-bench", "miniflare-"+miniflareVersion), nil
}

// miniflare is a running Miniflare with the benchmark worker.
type miniflare struct {
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
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "miniflare", "package.json")); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		logf("bench: installing miniflare@%s into %s (npm)", miniflareVersion, dir)
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "miniflare@"+miniflareVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install miniflare@%s: %w: %s", miniflareVersion, err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.mjs"), []byte(miniflareScript), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("node", "bench.mjs", strconv.Itoa(port))
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
	mf := &miniflare{cmd: cmd, stdin: stdin, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}}
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
// acknowledgement.
var miniflarePoints = []prodMode{
	{"sendBatch(100) ×4 concurrent", 100, 4},
	{"sendBatch(100) ×16 concurrent", 100, 16},
	{"send ×8 concurrent", 1, 8},
	{"send ×64 concurrent", 1, 64},
}

// miniflareLayer runs the same producer and consumer worker on this host
// (sandboxed, its default) and on Miniflare, end to end to the
// acknowledgement, interleaved, and reports each ratio.
func (b *bench) miniflareLayer(ctx context.Context) {
	s := b.rep.section("Side by side with Miniflare (Cloudflare's local runtime, workerd)",
		fmt.Sprintf("The same worker on this host (host.New, sandboxed workers, a QueueConsumer with maxBatchSize 100, maxConcurrency 4, retryDelaySeconds 0) and on Miniflare %s "+
			"(installed from the npm registry into a cache directory on first use; Node %s; queue consumer maxBatchSize 100, maxBatchTimeout 0): "+
			"a fetch handler that sends 100 messages of 100 B with sendBatch or one with send, and a queue handler that reads every body and acknowledges. "+
			"Closed-loop HTTP clients in this process call the fetch route for %s; a point's figure is the messages sent ÷ the time from the first send until every one of them is acknowledged "+
			"(this host: the queue's messageCount back to 0; Miniflare: the consumer's count of acknowledged messages). Each point runs on this host, Miniflare, Miniflare, this host; a figure is the mean of its two runs. "+
			"Not the same guarantees: this host's sends and acknowledgements are durable (fsync) before they resolve; Miniflare keeps its queue in memory.",
			miniflareVersion, nodeVersion(), b.pointDur),
		"point", "this host msgs/s", "Miniflare msgs/s", "this host ÷ Miniflare")
	mf, err := startMiniflare(ctx)
	if err != nil {
		s.NotMeasured = "Miniflare: " + err.Error()
		return
	}
	defer mf.close()
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
	worst, worstName := 0.0, ""
	for _, m := range miniflarePoints {
		path := "one?size=100"
		if m.PerCall == 100 {
			path = "batch?size=100"
		}
		var ours, theirs float64
		for _, onHost := range []bool{true, false, false, true} {
			var r float64
			var err error
			if onHost {
				c := b.prog.phase("miniflare: this host "+m.Name, "msgs")
				r, err = b.e2eRate(ctx, bh, m, path, c)
			} else {
				c := b.prog.phase("miniflare: Miniflare "+m.Name, "msgs")
				r, err = b.miniflareRate(ctx, mf, m, path, c)
			}
			b.prog.end()
			if err != nil {
				s.note("%s on %s: %v", m.Name, map[bool]string{true: "this host", false: "Miniflare"}[onHost], err)
			}
			if onHost {
				ours += r / 2
			} else {
				theirs += r / 2
			}
		}
		s.row(m.Name+" → consumer → acknowledgement", num(ours), num(theirs), ratio(ours, theirs))
		if q := ours / theirs; worstName == "" || q < worst {
			worst, worstName = q, m.Name
		}
	}
	b.results["miniflare/worst"] = worst
	b.notes["miniflare/worst"] = worstName
}

func nodeVersion() string {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// e2eRate produces with m on the host (its consumer attached) for a point
// and returns the messages per second from the first send until the queue
// is empty again.
func (b *bench) e2eRate(ctx context.Context, bh *benchHost, m prodMode, path string, c *atomic.Int64) (float64, error) {
	if err := waitEmpty(ctx, bh, 10*time.Minute); err != nil {
		return 0, err
	}
	call := func(ctx context.Context, _ [][]byte) error { return bh.fetch(ctx, path) }
	t0 := time.Now()
	pt := runProducer(ctx, call, m, 100, b.pointDur, c)
	if err := waitEmpty(ctx, bh, 10*time.Minute); err != nil {
		return 0, err
	}
	return float64(pt.Msgs) / time.Since(t0).Seconds(), pt.Err
}

// miniflareRate is e2eRate on Miniflare.
func (b *bench) miniflareRate(ctx context.Context, mf *miniflare, m prodMode, path string, c *atomic.Int64) (float64, error) {
	before, err := mf.acked(ctx)
	if err != nil {
		return 0, err
	}
	// Miniflare answers some sends 500 ("Queue sendBatch failed") under
	// load: the client counts them and goes on (a call that failed sent
	// nothing), so that a failure does not take a client out of the point.
	var failed atomic.Int64
	var firstErr atomic.Value
	call := func(ctx context.Context, _ [][]byte) error {
		if _, err := mf.get(ctx, "POST", "/"+path); err != nil {
			if ctx.Err() != nil {
				return err
			}
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}
		return nil
	}
	t0 := time.Now()
	pt := runProducer(ctx, call, m, 100, b.pointDur, c)
	sent := pt.Msgs - failed.Load()*int64(m.PerCall)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		n, err := mf.acked(ctx)
		if err != nil {
			return 0, err
		}
		if n-before >= sent {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d messages acknowledged after 10 minutes", n-before, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
	err = pt.Err
	if n := failed.Load(); n > 0 && err == nil {
		err = fmt.Errorf("%d calls failed and sent nothing (not counted), the first: %v", n, firstErr.Load())
	}
	return float64(sent) / time.Since(t0).Seconds(), err
}
