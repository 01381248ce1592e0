package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/schemas"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// The real-binary point of the cluster section (issue #35): 1 against 3
// cmd/takohost processes with -cluster-active on one fresh database, the
// worker's code in sandbox processes (the default), the load over HTTP
// through the worker's fetch route. The in-process point above has Go
// handlers and calls the producer path directly, so it measures the hosts
// and the database alone; this one pays for everything a user's message
// goes through.

// clusterBinWorker sends 100 bodies of 100 bytes to queue Q<q> per fetch
// and, as a queue handler, reads every body and returns (the engine
// acknowledges the batch).
const clusterBinWorker = `
const body = "x".repeat(100);
export default {
  async queue(batch, env, ctx) {
    let n = 0;
    for (const m of batch.messages) n += m.body.byteLength;
  },
  async fetch(request, env, ctx) {
    const q = new URL(request.url).searchParams.get("q") || "0";
    const msgs = [];
    for (let i = 0; i < 100; i++) msgs.push({ body: body });
    const ids = await env["Q" + q].sendBatch(msgs);
    return new Response(String(ids.length));
  },
};
`

// clusterBinRun is one measured run of n real hosts.
type clusterBinRun struct {
	msgs     int64
	wall     time.Duration
	hosts    time.Duration // CPU of the host processes and their sandboxes
	postgres time.Duration // CPU of the PostgreSQL server's processes
	self     time.Duration // CPU of this process (the load generator)
	busy     float64       // the machine's busy cores over the run
	errs     int64
	firstErr string
}

func (r clusterBinRun) rate() float64 { return float64(r.msgs) / max(r.wall.Seconds(), 1e-9) }

// clusterBinLayer measures 1 against 3 real hosts, alternating (1, 3, 3,
// 1; one of each with -quick) so that drift on the shared machine falls
// on both.
func (b *bench) clusterBinLayer(ctx context.Context) {
	prod := max(5*b.pointDur, 10*time.Second)
	s := b.rep.section("Several active hosts, real binaries: 1 takohost process against 3",
		fmt.Sprintf("cmd/takohost processes with -store (a fresh database of the same server) -cluster-active -cluster-ttl 2s, on 127.0.0.1, worker code in sandbox processes (the default). "+
			"%d queues, one QueueConsumer each (maxBatchSize 100, maxConcurrency 4); a ModuleWorker whose fetch handler calls env.Q<n>.sendBatch of 100 bodies of 100 B and whose queue handler reads every body and returns. "+
			"16 closed-loop HTTP clients in this process POST the worker's fetch route of the hosts round-robin (host i, queue i/hosts mod %d), for %s; "+
			"messages/s is the messages whose send resolved ÷ the time from the first send until every queue's messageCount is 0 again (delivered and acknowledged). "+
			"CPU columns are CPU seconds over that time ÷ its wall time, in cores: the host processes with their sandboxes (/proc of each host's process tree), the PostgreSQL server's processes "+
			"(every child of its postmaster: other users of the server count too), this process (the load generator), and the whole machine (/proc/stat).",
			clusterQueues, clusterQueues, prod),
		"run", "hosts", "messages/s", "÷ 1 host (same round)", "hosts + sandboxes (cores)", "PostgreSQL (cores)", "load generator (cores)", "machine busy (cores of "+strconv.Itoa(numCPU())+")", "CPU ms per 1000 msgs (hosts / PostgreSQL)")
	bin, err := harness.BuildHost()
	if err != nil {
		s.NotMeasured = "building cmd/takohost: " + err.Error()
		return
	}
	defer harness.RemoveBuild()
	order := []int{1, 3, 3, 1}
	if b.quick {
		order = []int{1, 3}
	}
	var one []float64
	var rates = map[int][]float64{}
	for i, n := range order {
		c := b.prog.phase(fmt.Sprintf("cluster, %d real hosts", n), "msgs")
		r, err := b.clusterBinRun(ctx, bin, n, prod, c)
		b.prog.end()
		if err != nil {
			s.note("run %d (%d hosts): error: %v", i+1, n, err)
			continue
		}
		if r.errs > 0 {
			s.note("run %d (%d hosts): %d send calls failed (first: %s)", i+1, n, r.errs, r.firstErr)
		}
		rates[n] = append(rates[n], r.rate())
		vs := "—"
		if n == 1 {
			one = append(one, r.rate())
		} else if len(one) > 0 {
			vs = ratio(r.rate(), one[len(one)-1])
		}
		w := r.wall.Seconds()
		per := func(d time.Duration) string {
			return fmt.Sprintf("%.0f", d.Seconds()*1000/float64(max(r.msgs, 1))*1000)
		}
		s.row(fmt.Sprint(i+1), fmt.Sprint(n), num(r.rate()), vs,
			fmt.Sprintf("%.2f", r.hosts.Seconds()/w), fmt.Sprintf("%.2f", r.postgres.Seconds()/w), fmt.Sprintf("%.2f", r.self.Seconds()/w),
			fmt.Sprintf("%.2f", r.busy), per(r.hosts)+" / "+per(r.postgres))
	}
	if len(rates[1]) > 0 && len(rates[3]) > 0 {
		m1, m3 := mean(rates[1]), mean(rates[3])
		b.results["cluster/real-3-over-1"] = m3 / m1
		s.note("3 hosts ÷ 1 host over the runs' means: %s (%s against %s messages/s).", ratio(m3, m1), num(m3), num(m1))
	}
}

func mean(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t / float64(max(len(xs), 1))
}

func (b *bench) clusterBinRun(ctx context.Context, bin string, n int, prod time.Duration, counter *atomic.Int64) (clusterBinRun, error) {
	var res clusterBinRun
	db, drop, err := pgDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer drop()
	dir, err := os.MkdirTemp(b.dir, "cluster-bin-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	args := []string{"-store", db, "-cluster-active", "-cluster-ttl", "2s", "-shutdown-grace", "2s"}
	var hosts []*harness.Host
	defer func() {
		for _, h := range hosts {
			h.Term(10 * time.Second)
		}
	}()
	var clients []*apiclient.Client
	for i := range n {
		h, err := harness.NewHost(bin, data, args...)
		if err != nil {
			return res, err
		}
		if err := h.Start(ctx); err != nil {
			return res, err
		}
		hosts = append(hosts, h)
		if i == 0 {
			// The first start writes the admin token the others share.
			tok, err := harness.AdminToken(data)
			if err != nil {
				return res, err
			}
			clients = append(clients, &apiclient.Client{Base: h.Base(), Token: tok, Timeout: 60 * time.Second})
		} else {
			clients = append(clients, &apiclient.Client{Base: h.Base(), Token: clients[0].Token, Timeout: 60 * time.Second})
		}
	}
	const space = "bench"
	c := clients[0]
	w, err := c.Create(ctx, space, "w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch", "queue"}}, nil)
	if err != nil {
		return res, err
	}
	var queues []string
	var binds []any
	for i := range clusterQueues {
		q, err := c.Create(ctx, space, fmt.Sprintf("q%d", i), schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600}, nil)
		if err != nil {
			return res, err
		}
		queues = append(queues, q)
		binds = append(binds, map[string]any{"name": fmt.Sprintf("Q%d", i), "resource": apiclient.Ref(q)})
	}
	v, err := c.Create(ctx, space, "w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": apiclient.Ref(w), "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": clusterBinWorker}},
		"queueProducerBindings": binds,
	}, nil)
	if err != nil {
		return res, err
	}
	if err := c.Put(ctx, space, w, map[string]any{"handlers": []string{"fetch", "queue"}, "version": apiclient.Ref(v)}); err != nil {
		return res, err
	}
	for i, q := range queues {
		if _, err := c.Create(ctx, space, fmt.Sprintf("c%d", i), schemas.FormQueueConsumer, map[string]any{
			"queue": apiclient.Ref(q), "worker": apiclient.Ref(w),
			"maxBatchSize": 100, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 4, "maxRetries": 3, "retryDelaySeconds": 0,
		}, nil); err != nil {
			return res, err
		}
	}
	path := func(q int) string { return fmt.Sprintf("/v2/spaces/%s/resources/%s/fetch/send?q=%d", space, w, q) }
	send := func(ctx context.Context, hi, q int) error {
		r, err := clients[hi].Do(ctx, "POST", path(q), nil, nil)
		if err != nil {
			return err
		}
		if r.Status != 200 || strings.TrimSpace(string(r.Body)) != "100" {
			return fmt.Errorf("%s: %d %s", path(q), r.Status, string(r.Body[:min(len(r.Body), 200)]))
		}
		return nil
	}
	// Warm up every host's sandbox and let placement settle (every host
	// has heartbeated and taken its queues: a few ticks of ttl/5).
	for hi := range hosts {
		if err := send(ctx, hi, hi%clusterQueues); err != nil {
			return res, fmt.Errorf("warm-up on host %d: %w", hi+1, err)
		}
	}
	time.Sleep(3 * time.Second)
	if err := waitQueuesEmpty(ctx, c, space, queues, 2*time.Minute); err != nil {
		return res, err
	}

	pgPid := postmasterPid(ctx)
	cpu0 := treeCPU(hostPids(hosts))
	pg0 := treeCPU(pgChildren(pgPid))
	probe := startContention()
	t0 := time.Now()
	lctx, stop := context.WithTimeout(ctx, prod)
	var wg sync.WaitGroup
	var next, sent, errs atomic.Int64
	var firstErr atomic.Value
	for range 16 {
		wg.Go(func() {
			for lctx.Err() == nil {
				i := int(next.Add(1))
				if err := send(lctx, i%n, (i/n)%clusterQueues); err != nil {
					if lctx.Err() == nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				sent.Add(100)
				counter.Add(100)
			}
		})
	}
	wg.Wait()
	stop()
	if err := waitQueuesEmpty(ctx, c, space, queues, 5*time.Minute); err != nil {
		return res, err
	}
	res.wall = time.Since(t0)
	con := probe.end()
	res.msgs, res.errs = sent.Load(), errs.Load()
	if e, ok := firstErr.Load().(string); ok {
		res.firstErr = e
	}
	res.hosts = treeCPU(hostPids(hosts)) - cpu0
	res.postgres = treeCPU(pgChildren(pgPid)) - pg0
	res.self = time.Duration(con.Ours * float64(res.wall))
	res.busy = con.MachineBusy
	if res.msgs == 0 {
		return res, fmt.Errorf("no send resolved (first error: %v)", res.firstErr)
	}
	return res, nil
}

// waitQueuesEmpty polls the queues' messageCount (the owners' observers
// write it) until every one is 0.
func waitQueuesEmpty(ctx context.Context, c *apiclient.Client, space string, queues []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, q := range queues {
		for {
			n, err := c.MessageCount(ctx, space, q)
			if err == nil && n == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("queue %s did not drain within %s (messageCount %d, %v)", q, limit, n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func hostPids(hosts []*harness.Host) []int {
	var out []int
	for _, h := range hosts {
		if p := h.Pid(); p > 0 {
			out = append(out, p)
		}
	}
	return out
}

// procStatFields is /proc/<pid>/stat after the command name: field 4
// (ppid) is [1], utime and stime (fields 14, 15) are [11] and [12].
func procStatFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	return strings.Fields(s)
}

// treeCPU is the CPU time (user + system, USER_HZ 100) the processes
// and all their living descendants have used, the children they waited
// for included.
func treeCPU(roots []int) time.Duration {
	kids := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStatFields(pid); len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				kids[pp] = append(kids[pp], pid)
			}
		}
	}
	var ticks int64
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if f := procStatFields(pid); len(f) > 14 {
			for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
				v, _ := strconv.ParseInt(f[i], 10, 64)
				ticks += v
			}
		}
		for _, k := range kids[pid] {
			walk(k)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// postmasterPid is the PID of the PostgreSQL server the benchmark uses
// (0 when it cannot be read: the server's CPU is then not measured).
func postmasterPid(ctx context.Context) int {
	conn, err := pgx.Connect(ctx, pgServerURL())
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// pgChildren: the postmaster itself (its children are walked by treeCPU).
func pgChildren(pid int) []int {
	if pid == 0 {
		return nil
	}
	return []int{pid}
}
