package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/tools/jepsen/history"
)

//go:embed worker.js
var workerJS string

// Config is one run.
type Config struct {
	Hosts    int           // active hosts on one database; 3 when zero
	Duration time.Duration // load duration; the nemesis may extend it to finish its schedule
	Seed     int64
	Bin      string        // host binary; built from ./cmd/takohost when empty
	TTL      time.Duration // the hosts' -cluster-ttl; 2 s when zero
	// MaxRetries of the work queue's consumer; NoDLQ runs it without a
	// dead-letter queue (exhausted messages are discarded).
	MaxRetries int
	NoDLQ      bool
	FailFrac   float64 // fraction of messages failed (retry or throw) on their first attempts
	DeadFrac   float64 // fraction failed on every attempt (dead-lettered or discarded)
	Senders    int     // concurrent senders; 2 when zero
	// The nemesis's schedule: this many of each fault, in a seeded order
	// at seeded moments. Freezes alternate between the host process
	// alone and its process group; PostgreSQL restarts between -m fast
	// and -m immediate (they need the private server).
	Kills, Freezes, PGRestarts, Terminates int
	// PGServer, when set, runs the hosts on a fresh database of that
	// server instead of a private server the run starts (initdb); that
	// server is never restarted.
	PGServer string
	Drain    time.Duration // bound of the final drain; 120 s when zero
	Out      io.Writer
	Verbose  bool
	Keep     bool // keep the data directory, the host logs and the history
}

// Result is a run's outcome.
type Result struct {
	Report  *history.Report
	Events  []history.Event
	Drained bool
	// Setup lists what went wrong around the load (a host that did not
	// restart): not the checker's violations, but the run fails on them.
	Setup     []string
	Nemesis   map[string]int
	Deadlocks int            // "deadlock detected" lines in the private server's log
	HostLog   map[string]int // lines of the hosts' logs worth counting
	Skipped   string
	Elapsed   time.Duration
	Dir       string
}

// Failed reports whether the run found anything.
func (r *Result) Failed() bool {
	return len(r.Setup) > 0 || (r.Report != nil && r.Report.Violations() > 0)
}

// recorder is the out-of-host recorder: an HTTP server the workers report
// to (their outbound fetch, allowed to its address only), and the one
// sequence every event of the history is numbered in.
type recorder struct {
	mu      sync.Mutex
	evs     []history.Event
	deliver chan string // the host of a deliver event, for the nemesis (never blocks)
	last    string      // the host of the latest work-queue delivery
	queue   string
	ln      net.Listener
	srv     *http.Server
}

func startRecorder(queue string) (*recorder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &recorder{ln: ln, deliver: make(chan string, 1), queue: queue}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 10 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *recorder) url() string { return "http://" + r.ln.Addr().String() }

// add numbers e and appends it.
func (r *recorder) add(e history.Event) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Seq = len(r.evs) + 1
	r.evs = append(r.evs, e)
	return e.Seq
}

func (r *recorder) events() []history.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]history.Event(nil), r.evs...)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.evs)
}

func (r *recorder) lastHost() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *recorder) handle(w http.ResponseWriter, req *http.Request) {
	var kind history.Kind
	switch req.URL.Path {
	case "/deliver":
		kind = history.Deliver
	case "/settled":
		kind = history.Settled
	default:
		http.NotFound(w, req)
		return
	}
	var e history.Event
	if err := json.NewDecoder(io.LimitReader(req.Body, 4<<20)).Decode(&e); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	e.Kind, e.Seq = kind, 0
	r.add(e)
	if kind == history.Deliver && e.Queue == r.queue {
		r.mu.Lock()
		r.last = e.Host
		r.mu.Unlock()
		select {
		case r.deliver <- e.Host:
		default:
		}
	}
	w.WriteHeader(204)
}

type run struct {
	cfg                Config
	out                io.Writer
	rec                *recorder
	hosts              []*host
	cl                 []*apiclient.Client
	next               atomic.Uint64
	num                atomic.Int64
	pg                 *pgtest.PrivateServer
	db                 string
	space              string
	queue, dlq, worker string // UIDs

	mu      sync.Mutex
	setup   []string
	nemesis map[string]int
}

func (r *run) logf(format string, args ...any) { fmt.Fprintf(r.out, "jepsen: "+format+"\n", args...) }

func (r *run) vlogf(format string, args ...any) {
	if r.cfg.Verbose {
		r.logf(format, args...)
	}
}

func (r *run) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.setup) < 50 {
		r.setup = append(r.setup, fmt.Sprintf(format, args...))
	}
}

func (r *run) count(k string) {
	r.mu.Lock()
	r.nemesis[k]++
	r.mu.Unlock()
}

// Run runs one seeded run and checks its history. The error is a setup
// failure; the checker's verdict is in Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	t0 := time.Now()
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Hosts == 0 {
		cfg.Hosts = 3
	}
	if cfg.TTL == 0 {
		cfg.TTL = 2 * time.Second
	}
	if cfg.Senders == 0 {
		cfg.Senders = 2
	}
	if cfg.Drain == 0 {
		cfg.Drain = 120 * time.Second
	}
	if cfg.PGServer != "" && cfg.PGRestarts > 0 {
		return nil, errors.New("PostgreSQL restarts need the private server: drop -pg-server")
	}
	r := &run{cfg: cfg, out: cfg.Out, space: "jepsen", nemesis: map[string]int{}}
	res := &Result{Nemesis: r.nemesis, HostLog: map[string]int{}}

	dir, err := os.MkdirTemp("", "jepsen-")
	if err != nil {
		return nil, err
	}
	res.Dir = dir
	defer func() {
		if cfg.Keep {
			r.logf("data, host logs and history kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()

	// The database: a private server (restartable) or a fresh database.
	if cfg.PGServer == "" {
		pg, err := pgtest.StartPrivateServer(ctx, "jepsen")
		if errors.Is(err, pgtest.ErrNoPostgres) {
			res.Skipped = err.Error()
			return res, nil
		}
		if err != nil {
			return nil, fmt.Errorf("private PostgreSQL server: %w", err)
		}
		r.pg = pg
		defer func() {
			res.Deadlocks = strings.Count(readAll(filepath.Join(pg.Dir, "server.log")), "deadlock detected")
			if cfg.Keep {
				copyFile(filepath.Join(pg.Dir, "server.log"), filepath.Join(dir, "postgres.log"))
			}
			pg.Close(false)
		}()
		r.db = pg.URL
		r.logf("private PostgreSQL server on port %d (fsync on)", pg.Port)
	} else {
		db, drop, err := pgtest.CreateDB(ctx, cfg.PGServer, "jepsen_")
		if errors.Is(err, pgtest.ErrNoServer) {
			res.Skipped = err.Error()
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		defer drop()
		r.db = db
	}

	bin := cfg.Bin
	if bin == "" {
		r.logf("building cmd/takohost")
		if bin, err = buildHost(dir); err != nil {
			return nil, err
		}
	}
	rec, err := startRecorder("work")
	if err != nil {
		return nil, err
	}
	defer rec.srv.Close()
	r.rec = rec

	args := []string{"-allow-fetch", rec.ln.Addr().String(), "-handler-timeout", "10s", "-shutdown-grace", "2s",
		"-store", r.db, "-cluster-ttl", cfg.TTL.String()}
	if cfg.Hosts > 1 {
		args = append(args, "-cluster-active")
	}
	data := filepath.Join(dir, "data")
	for i := 0; i < cfg.Hosts; i++ {
		h, err := newHost(fmt.Sprintf("h%d", i+1), bin, data, dir, args)
		if err != nil {
			return nil, err
		}
		r.hosts = append(r.hosts, h)
	}
	defer func() {
		for _, h := range r.hosts {
			h.stop(10 * time.Second)
			log := readAll(h.logPath)
			for _, k := range []string{"fenced", "lost the lease", "deadlock detected", "panic"} {
				res.HostLog[k] += strings.Count(log, k)
			}
		}
	}()
	for i, h := range r.hosts {
		if err := h.start(ctx, 60*time.Second); err != nil {
			return nil, err
		}
		if i == 0 {
			// The first start writes host.json and the admin token the
			// others share.
			tok, err := os.ReadFile(filepath.Join(data, "admin-token"))
			if err != nil {
				return nil, err
			}
			r.cl = append(r.cl, &apiclient.Client{Base: h.base(), Token: strings.TrimSpace(string(tok)), Timeout: 20 * time.Second})
		} else {
			r.cl = append(r.cl, &apiclient.Client{Base: h.base(), Token: r.cl[0].Token, Timeout: 20 * time.Second})
		}
	}
	if err := r.topology(ctx); err != nil {
		return nil, fmt.Errorf("topology: %w\n%s", err, tailFile(r.hosts[0].logPath, 3000))
	}
	r.logf("seed %d: %d active hosts (%s), ttl %s, maxRetries %d, dead-letter queue %v, load %s; nemesis: %d kills, %d freezes, %d PostgreSQL restarts, %d backend terminations",
		cfg.Seed, cfg.Hosts, r.hostList(), cfg.TTL, cfg.MaxRetries, !cfg.NoDLQ, cfg.Duration, cfg.Kills, cfg.Freezes, cfg.PGRestarts, cfg.Terminates)
	for i := range r.hosts {
		r.tag(ctx, i)
	}

	// Load and nemesis.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < cfg.Senders; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r.sender(loadCtx, rand.New(rand.NewSource(cfg.Seed*7919+int64(i)+1)))
		}(i)
	}
	loadStart := time.Now()
	r.nemesisRun(ctx, rand.New(rand.NewSource(cfg.Seed)))
	if rest := cfg.Duration - time.Since(loadStart); rest > 0 {
		sleepCtx(ctx, rest)
	}
	stopLoad()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, h := range r.hosts {
		if !h.running() {
			if err := h.start(ctx, 60*time.Second); err != nil {
				r.fail("%s did not start after the load: %v", h.name, err)
			}
			r.tag(ctx, i)
		}
	}
	r.logf("load done after %s (%d numbers sent); draining", time.Since(loadStart).Round(time.Second), r.num.Load())
	res.Drained = r.drain(ctx)

	res.Events = rec.events()
	qn, dn := "work", "dead"
	if cfg.NoDLQ {
		dn = ""
	}
	res.Report = history.Check(res.Events, history.Config{Queue: qn, DLQ: dn, MaxRetries: cfg.MaxRetries, Drained: res.Drained})
	res.Setup = r.setup
	res.Elapsed = time.Since(t0)
	if cfg.Keep {
		if b, err := json.Marshal(res.Events); err == nil {
			os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
		}
	}
	return res, nil
}

func (r *run) hostList() string {
	var s []string
	for _, h := range r.hosts {
		s = append(s, h.name+"="+h.addr)
	}
	return strings.Join(s, " ")
}

// topology creates the work queue, the dead-letter queue, the worker and
// its version, and both consumers, over the Host API.
func (r *run) topology(ctx context.Context) error {
	c := r.cl[0]
	qspec := map[string]any{"deliveryDelaySeconds": 0, "messageRetentionSeconds": 86400}
	var err error
	if r.queue, err = c.Create(ctx, r.space, "work", apiclient.FormQueue, qspec, nil); err != nil {
		return err
	}
	if r.dlq, err = c.Create(ctx, r.space, "dead", apiclient.FormQueue, qspec, nil); err != nil {
		return err
	}
	if r.worker, err = c.Create(ctx, r.space, "w", apiclient.FormWorker, map[string]any{"handlers": []string{"fetch", "queue"}}, nil); err != nil {
		return err
	}
	version, err := c.Create(ctx, r.space, "w-v1", apiclient.FormVersion, map[string]any{
		"worker": apiclient.Ref(r.worker), "mainModule": "worker.js",
		"modules":               []any{map[string]any{"name": "worker.js", "content": workerJS}},
		"vars":                  map[string]any{"RECORDER": r.rec.url(), "DLQ": "dead"},
		"queueProducerBindings": []any{map[string]any{"name": "WORK", "resource": apiclient.Ref(r.queue)}},
	}, nil)
	if err != nil {
		return err
	}
	if err := c.Put(ctx, r.space, r.worker, map[string]any{"handlers": []string{"fetch", "queue"}, "version": apiclient.Ref(version)}); err != nil {
		return err
	}
	cspec := map[string]any{
		"queue": apiclient.Ref(r.queue), "worker": apiclient.Ref(r.worker),
		"maxBatchSize": 5, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 2,
		"maxRetries": r.cfg.MaxRetries, "retryDelaySeconds": 0,
	}
	if !r.cfg.NoDLQ {
		cspec["deadLetterQueue"] = apiclient.Ref(r.dlq)
	}
	if _, err := c.Create(ctx, r.space, "work-consumer", apiclient.FormConsumer, cspec, nil); err != nil {
		return err
	}
	if !r.cfg.NoDLQ {
		if _, err := c.Create(ctx, r.space, "dead-consumer", apiclient.FormConsumer, map[string]any{
			"queue": apiclient.Ref(r.dlq), "worker": apiclient.Ref(r.worker),
			"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1,
			"maxRetries": 100, "retryDelaySeconds": 0,
		}, nil); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) fetchPath(route string, i int) string {
	return fmt.Sprintf("/v2/spaces/%s/resources/%s/fetch/%s?host=%s", r.space, r.worker, route, r.hosts[i].name)
}

// tag tells host i's sandbox which host it runs on (a fetch; best effort).
func (r *run) tag(ctx context.Context, i int) {
	if r.hosts[i].running() {
		r.cl[i].Do(ctx, "GET", r.fetchPath("tag", i), nil, nil)
	}
}

// sender sends numbered messages through the hosts in turn until ctx ends.
func (r *run) sender(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		k := 1 + rng.Intn(5)
		nums := make([]int, k)
		bodies := make([]string, k)
		for j := range nums {
			nums[j] = int(r.num.Add(1))
			f := 0
			switch x := rng.Float64(); {
			case x < r.cfg.DeadFrac:
				f = 1000
			case x < r.cfg.DeadFrac+r.cfg.FailFrac:
				f = 1 + rng.Intn(max(1, r.cfg.MaxRetries-1))
			}
			bodies[j] = fmt.Sprintf(`{"n":%d,"f":%d}`, nums[j], f)
		}
		i := int(r.next.Add(1)-1) % len(r.hosts)
		r.rec.add(history.Event{Kind: history.Send, Numbers: nums, Host: r.hosts[i].name})
		resp, err := r.cl[i].Do(context.Background(), "POST", r.fetchPath("send", i), map[string]any{"bodies": bodies}, nil)
		var out struct {
			OK   bool     `json:"ok"`
			IDs  []string `json:"ids"`
			Name string   `json:"name"`
		}
		switch {
		case err != nil && errors.Is(err, syscall.ECONNREFUSED):
			r.rec.add(history.Event{Kind: history.SendFail, Numbers: nums, Note: "connection refused"})
		case err != nil:
			r.rec.add(history.Event{Kind: history.SendInfo, Numbers: nums, Note: err.Error()})
		case resp.Status != 200 || resp.JSON(&out) != nil:
			r.rec.add(history.Event{Kind: history.SendInfo, Numbers: nums, Note: fmt.Sprintf("fetch answered %d", resp.Status)})
		case !out.OK && out.Name == "backend_unavailable":
			r.rec.add(history.Event{Kind: history.SendInfo, Numbers: nums, Note: out.Name})
		case !out.OK:
			r.rec.add(history.Event{Kind: history.SendFail, Numbers: nums, Note: out.Name})
		case len(out.IDs) != k:
			r.rec.add(history.Event{Kind: history.SendInfo, Numbers: nums, Note: fmt.Sprintf("%d IDs for %d messages", len(out.IDs), k)})
			r.fail("a send of %d messages resolved with %d IDs", k, len(out.IDs))
		default:
			r.rec.add(history.Event{Kind: history.SendOK, Numbers: nums, IDs: out.IDs})
		}
		sleepCtx(ctx, time.Duration(20+rng.Intn(60))*time.Millisecond)
	}
}

// nemesisRun runs the seeded schedule: every fault in a seeded order, one
// at a time, each after a seeded pause. A fault's own timing (a freeze
// past the lease, PostgreSQL down) is measured on the monotonic clock; the
// pauses only spread the faults over the load.
func (r *run) nemesisRun(ctx context.Context, rng *rand.Rand) {
	var plan []string
	for i := 0; i < r.cfg.Kills; i++ {
		plan = append(plan, "kill")
	}
	for i := 0; i < r.cfg.Freezes; i++ {
		plan = append(plan, []string{"freeze-process", "freeze-group"}[i%2])
	}
	for i := 0; i < r.cfg.PGRestarts; i++ {
		plan = append(plan, []string{"pg-fast", "pg-immediate"}[i%2])
	}
	for i := 0; i < r.cfg.Terminates; i++ {
		plan = append(plan, "terminate")
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	if len(plan) == 0 {
		return
	}
	// The time the faults themselves take, so that the pauses spread
	// them over the load.
	busy := time.Duration(0)
	for _, p := range plan {
		switch {
		case strings.HasPrefix(p, "freeze"):
			busy += 2*r.cfg.TTL + time.Second
		case strings.HasPrefix(p, "pg"):
			busy += 4 * time.Second
		case p == "kill":
			busy += time.Second
		}
	}
	avg := (r.cfg.Duration - busy) / time.Duration(len(plan)+1)
	if avg < 500*time.Millisecond {
		avg = 500 * time.Millisecond
	}
	r.logf("nemesis schedule: %s", strings.Join(plan, " "))
	for _, p := range plan {
		sleepCtx(ctx, time.Duration(float64(avg)*(0.5+rng.Float64())))
		if ctx.Err() != nil {
			return
		}
		switch p {
		case "kill":
			r.kill(ctx, rng)
		case "freeze-process", "freeze-group":
			r.freeze(ctx, rng, p == "freeze-group")
		case "pg-fast", "pg-immediate":
			r.pgRestart(ctx, rng, strings.TrimPrefix(p, "pg-"))
		case "terminate":
			n, err := pgtest.TerminateBackends(ctx, r.db)
			if err != nil {
				r.logf("terminate: %v", err)
				continue
			}
			r.rec.add(history.Event{Kind: history.Fault, Fault: history.FaultTerminate, Note: fmt.Sprintf("%d connections", n)})
			r.count("terminate")
			r.vlogf("terminated %d connections of the hosts' database", n)
		}
	}
}

// pick is the index of the host named name, or a random one.
func (r *run) pick(rng *rand.Rand, name string) int {
	for i, h := range r.hosts {
		if h.name == name && h.running() {
			return i
		}
	}
	return rng.Intn(len(r.hosts))
}

// kill SIGKILLs a host: half the time the next one to announce a
// delivery (a handler mid-flight), else one at random; then starts it
// again.
func (r *run) kill(ctx context.Context, rng *rand.Rand) {
	target, mode := "", "random"
	if rng.Intn(2) == 0 {
		mode = "mid-handler"
		select {
		case <-r.rec.deliver:
		default:
		}
		select {
		case target = <-r.rec.deliver:
		case <-time.After(3 * time.Second):
			mode = "random"
		case <-ctx.Done():
			return
		}
	}
	h := r.hosts[r.pick(rng, target)]
	r.rec.add(history.Event{Kind: history.Fault, Fault: history.FaultKill, Host: h.name, Note: mode})
	h.kill()
	r.count("kill " + mode)
	sleepCtx(ctx, time.Duration(rng.Intn(300))*time.Millisecond)
	t0 := time.Now()
	if err := h.start(ctx, 60*time.Second); err != nil {
		r.fail("%s did not start again after a kill: %v", h.name, err)
		if err := h.start(ctx, 60*time.Second); err != nil {
			return
		}
	}
	for i := range r.hosts {
		if r.hosts[i] == h {
			r.tag(ctx, i)
		}
	}
	r.vlogf("killed %s (%s), started again in %s", h.name, mode, time.Since(t0).Round(time.Millisecond))
}

// freeze stops the host that last announced a work-queue delivery (its
// owner as far as a user can tell; one at random when none) for twice the
// lease plus a second, then resumes it. The freeze is recorded before the
// SIGSTOP and the resume before the SIGCONT, so that every report the
// frozen host relays comes after both in the history.
func (r *run) freeze(ctx context.Context, rng *rand.Rand, group bool) {
	h := r.hosts[r.pick(rng, r.rec.lastHost())]
	what := "process"
	if group {
		what = "process group"
	}
	r.rec.add(history.Event{Kind: history.Fault, Fault: history.FaultFreeze, Host: h.name, Note: what})
	if err := h.signal(syscall.SIGSTOP, group); err != nil {
		r.logf("freeze of %s: %v", h.name, err)
		return
	}
	time.Sleep(2*r.cfg.TTL + time.Second)
	r.rec.add(history.Event{Kind: history.Fault, Fault: history.FaultResume, Host: h.name, Note: what})
	if err := h.signal(syscall.SIGCONT, group); err != nil {
		r.fail("resume of %s: %v", h.name, err)
	}
	r.count("freeze " + what)
	r.vlogf("froze %s (%s) for %s", h.name, what, 2*r.cfg.TTL+time.Second)
}

// pgRestart stops the private server (-m fast or -m immediate), keeps it
// down 1 to 3 s and starts it again; the hosts ride it out.
func (r *run) pgRestart(ctx context.Context, rng *rand.Rand, mode string) {
	if r.pg == nil {
		return
	}
	down := time.Duration(1000+rng.Intn(2000)) * time.Millisecond
	r.rec.add(history.Event{Kind: history.Fault, Fault: history.FaultPGStop, Note: mode})
	if err := r.pg.Stop(mode); err != nil {
		r.fail("PostgreSQL stop -m %s: %v", mode, err)
		return
	}
	time.Sleep(down)
	sctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	err := r.pg.Start(sctx)
	cancel()
	r.rec.add(history.Event{Kind: history.Fault, Fault: history.FaultPGStart, Note: mode})
	if err != nil {
		r.fail("PostgreSQL start after -m %s: %v", mode, err)
		return
	}
	r.count("pg-restart " + mode)
	r.vlogf("PostgreSQL restarted (-m %s), down %s", mode, down)
}

// drain waits until the history has been quiet for 3 s and every host
// reads both queues empty (after a no-op update of each queue, so that
// the observed messageCount is fresh). It reports whether it got there
// within Config.Drain.
func (r *run) drain(ctx context.Context) bool {
	deadline := time.Now().Add(r.cfg.Drain)
	last, quiet := -1, time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for i := range r.hosts {
			r.tag(ctx, i)
		}
		if n := r.rec.len(); n != last {
			last, quiet = n, time.Now()
		}
		if time.Since(quiet) >= 3*time.Second && r.empty(ctx) && r.rec.len() == last {
			return true
		}
		sleepCtx(ctx, time.Second)
	}
	r.logf("the queues did not drain within %s", r.cfg.Drain)
	return false
}

// empty nudges both queues (a PUT of the same spec makes the host observe
// again) and reports whether every host reads messageCount 0 for both.
func (r *run) empty(ctx context.Context) bool {
	qspec := map[string]any{"deliveryDelaySeconds": 0, "messageRetentionSeconds": 86400}
	for _, uid := range []string{r.queue, r.dlq} {
		if err := r.cl[0].Put(ctx, r.space, uid, qspec); err != nil {
			return false
		}
		for _, c := range r.cl {
			if n, err := c.MessageCount(ctx, r.space, uid); err != nil || n != 0 {
				return false
			}
		}
	}
	return true
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func readAll(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func copyFile(from, to string) {
	if b, err := os.ReadFile(from); err == nil {
		os.WriteFile(to, b, 0o644)
	}
}

// Print writes the run's summary and the checker's table.
func (res *Result) Print(w io.Writer, cfg Config) {
	if res.Skipped != "" {
		fmt.Fprintf(w, "jepsen: SKIPPED: %s\n", res.Skipped)
		return
	}
	fmt.Fprintf(w, "jepsen: seed %d, %s, drained %v\n", cfg.Seed, res.Elapsed.Round(time.Second), res.Drained)
	ks := make([]string, 0, len(res.Nemesis))
	for k := range res.Nemesis {
		ks = append(ks, fmt.Sprintf("%s=%d", k, res.Nemesis[k]))
	}
	sort.Strings(ks)
	fmt.Fprintf(w, "  nemesis: %s\n", strings.Join(ks, ", "))
	ks = ks[:0]
	for k, v := range res.HostLog {
		ks = append(ks, fmt.Sprintf("%q=%d", k, v))
	}
	sort.Strings(ks)
	fmt.Fprintf(w, "  host logs: %s; PostgreSQL log: \"deadlock detected\"=%d\n", strings.Join(ks, ", "), res.Deadlocks)
	fmt.Fprint(w, res.Report.Table())
	for _, s := range res.Setup {
		fmt.Fprintf(w, "  setup: %s\n", s)
	}
	if res.Failed() {
		fmt.Fprintf(w, "jepsen: FAIL (%d violations, %d setup failures)\n", res.Report.Violations(), len(res.Setup))
	} else {
		fmt.Fprintf(w, "jepsen: OK\n")
	}
}
