package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// Config is one torture run.
type Config struct {
	Kills    int
	Duration time.Duration // load duration; 2 s per kill (at least 20 s) when zero
	Seed     int64
	Bin      string        // host binary; built from ./cmd/takohost when empty
	Drain    time.Duration // bound of the final drain; 120 s when zero
	Senders  int           // concurrent senders; 2 when zero
	Verbose  bool
	KeepData bool
	Out      io.Writer
	// StoreServer, when set, runs the host on a fresh PostgreSQL database
	// of that server (-store, dropped afterwards) instead of its journal,
	// with a short active lease (StoreTTL, 2 s when zero): each restart
	// after a SIGKILL waits for the dead process's lease to expire.
	StoreServer string
	StoreTTL    time.Duration
	// StoreDisconnects is how many times during the load every connection
	// to the database is terminated (what a restart of PostgreSQL does to
	// its clients), at seeded random moments.
	StoreDisconnects int
	// Cluster, with StoreServer, runs that many ACTIVE hosts on the one
	// database (-cluster-active); the load goes round-robin across them,
	// every kill SIGKILLs one of them at random, and Freezes times the
	// owner of the work queue is frozen (SIGSTOP) past its lease and
	// resumed (cluster.go).
	Cluster int
	Freezes int
	// PGPrivate runs the hosts on a PostgreSQL server the torture starts
	// itself (initdb into a temporary directory, a free port; pgprivate.go)
	// instead of StoreServer, and PGRestarts times during the load stops
	// that server (-m fast, then -m immediate, alternately) and starts it
	// again while the hosts run.
	PGPrivate  bool
	PGRestarts int
}

// Result holds the run's figures; Violations is empty on success.
type Result struct {
	Seed           int64
	Kills          int
	Starts         int
	KillModes      map[string]int
	Sends          int // fetch /send calls that answered with IDs
	Sent           int // messages those calls resolved (IDs returned)
	SentUnknown    int // messages of calls whose outcome is unknown (killed mid-call)
	SendRefused    int // calls refused while the host was down (never reached it)
	SendRejected   map[string]int
	Delivered      int // distinct messages (queue, id) delivered at least once
	Deliveries     int // message deliveries in total
	Redelivered    int // deliveries beyond the first of a message
	AckResolved    int // acknowledgements the worker saw resolve
	Acknowledged   int // resolved sends acknowledged (reported or by return)
	DeadLettered   int // resolved sends that reached the dead-letter queue
	DupAfterAck    int
	Lost           int
	Ops            map[string]int // Operations by final state
	OpsUnfinished  int
	Mutations      map[string]int // resource mutations by kind and answer
	ResourcesFinal map[string]int // resources at the end, by state
	Elapsed        time.Duration
	Violations     []string
	// DBDisconnects counts the rounds that terminated the database's
	// connections, DBConnsKilled the connections they terminated.
	DBDisconnects, DBConnsKilled int
	// Hosts is the number of active hosts (Config.Cluster); Freezes the
	// owners frozen past their lease, Fenced those that, resumed, logged
	// a delivery write refused by the fence.
	Hosts, Freezes, Fenced int
	// PGRestarts counts the restarts of the private PostgreSQL server by
	// stop mode; PGDown is the total time it was down.
	PGRestarts     int
	PGRestartModes map[string]int
	PGDown         time.Duration
	// Skipped is set when the run could not be made on this machine (no
	// PostgreSQL binaries for -pg-private); nothing was checked.
	Skipped string
}

type driver struct {
	cfg  Config
	db   string                // the host's database, with Config.StoreServer
	pg   *pgtest.PrivateServer // the private server, with Config.PGPrivate
	out  io.Writer
	host *harness.Host
	// hosts are every active host with Config.Cluster (host is the
	// first), clients their API clients, next the round-robin position;
	// hostMu keeps the killer and the freezer off one host at once.
	hosts   []*harness.Host
	clients []*harness.Client
	next    atomic.Uint64
	hostMu  sync.Mutex
	rec     *harness.Recorder
	c       *harness.Client
	topo    *harness.Topology

	mu       sync.Mutex
	res      Result
	sent     map[string]string // key -> message ID, for resolved sends
	sentStep map[string]string // key -> directive
	unknown  map[string]bool
	ops      map[string]string // Operation ID -> what it was
	nextKey  int

	ackCh, delivCh chan struct{}
}

func (d *driver) logf(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

func (d *driver) violate(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.res.Violations) < 200 {
		d.res.Violations = append(d.res.Violations, fmt.Sprintf(format, args...))
	}
}

// Run runs the torture and prints its figures to cfg.Out. The error is a
// setup failure; invariant violations are in Result.Violations.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Kills < 0 {
		cfg.Kills = 0
	}
	if cfg.Duration == 0 {
		cfg.Duration = time.Duration(cfg.Kills) * 2 * time.Second
		if cfg.Duration < 20*time.Second {
			cfg.Duration = 20 * time.Second
		}
	}
	if cfg.Drain == 0 {
		cfg.Drain = 120 * time.Second
	}
	if cfg.Senders == 0 {
		cfg.Senders = 2
	}
	d := &driver{cfg: cfg, out: cfg.Out, sent: map[string]string{}, sentStep: map[string]string{},
		unknown: map[string]bool{}, ops: map[string]string{},
		ackCh: make(chan struct{}, 1), delivCh: make(chan struct{}, 1)}
	d.res.Seed = cfg.Seed
	d.res.KillModes = map[string]int{}
	d.res.SendRejected = map[string]int{}
	d.res.Ops = map[string]int{}
	d.res.Mutations = map[string]int{}
	d.res.ResourcesFinal = map[string]int{}
	d.res.PGRestartModes = map[string]int{}
	if cfg.PGPrivate {
		if cfg.StoreServer != "" {
			return nil, fmt.Errorf("-pg-private and -store both given: the private server replaces -store")
		}
		pg, err := pgtest.StartPrivateServer(ctx, "torture")
		if errors.Is(err, pgtest.ErrNoPostgres) {
			d.res.Skipped = err.Error()
			d.logf("torture: SKIPPED: -pg-private: %v", err)
			return &d.res, nil
		}
		if err != nil {
			return nil, fmt.Errorf("private PostgreSQL server: %w", err)
		}
		defer func() { pg.Close(cfg.KeepData) }()
		if cfg.KeepData {
			d.logf("torture: private PostgreSQL server kept in %s", pg.Dir)
		}
		d.pg = pg
		cfg.StoreServer = pg.URL
		d.cfg.StoreServer = pg.URL
		d.logf("torture: private PostgreSQL server on port %d (%s, trust, fsync on)", pg.Port, pg.Dir)
	} else if cfg.PGRestarts > 0 {
		return nil, fmt.Errorf("-pg-restarts needs -pg-private: the torture restarts only a server it owns")
	}

	bin := cfg.Bin
	if bin == "" {
		var err error
		d.logf("torture: building cmd/takohost")
		if bin, err = harness.BuildHost(); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "torture-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if cfg.KeepData {
			d.logf("torture: data and host log kept in %s", tmp)
		} else {
			os.RemoveAll(tmp)
		}
	}()
	rec, err := harness.StartRecorder()
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	d.rec = rec
	rec.OnEvent = func(e *harness.Event) {
		if e.Kind == "settled" && len(e.Acked) > 0 {
			select {
			case d.ackCh <- struct{}{}:
			default:
			}
		}
		if e.Kind == "delivery" {
			select {
			case d.delivCh <- struct{}{}:
			default:
			}
		}
	}
	args := []string{"-allow-fetch", rec.Addr(), "-handler-timeout", "5s", "-shutdown-grace", "2s"}
	if cfg.StoreServer != "" {
		if cfg.StoreTTL == 0 {
			cfg.StoreTTL = 2 * time.Second
			d.cfg.StoreTTL = cfg.StoreTTL
		}
		db, drop, err := pgtest.Create(ctx, cfg.StoreServer, "takotorture_")
		if err != nil {
			return nil, fmt.Errorf("fresh database: %w", err)
		}
		defer drop()
		args = append(args, "-store", db, "-cluster-ttl", cfg.StoreTTL.String())
		if cfg.Cluster > 1 {
			args = append(args, "-cluster-active")
		}
		d.db = db
		d.logf("torture: store on PostgreSQL (fresh database, active lease %s)", cfg.StoreTTL)
	}
	h, err := harness.NewHost(bin, filepath.Join(tmp, "data"), args...)
	if err != nil {
		return nil, err
	}
	h.ReadyTimeout = 60 * time.Second
	d.host = h
	defer func() {
		if h.Running() {
			h.Term(10 * time.Second)
		}
		if cfg.KeepData {
			os.WriteFile(filepath.Join(tmp, "host.log"), []byte(h.Out.String()), 0o644)
		}
	}()
	d.logf("torture: seed %d, %d kills over %s, host %s, recorder %s", cfg.Seed, cfg.Kills, cfg.Duration, h.Addr, rec.Addr())
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("first start: %w", err)
	}
	tok, err := harness.AdminToken(h.DataDir)
	if err != nil {
		return nil, err
	}
	d.c = &harness.Client{Base: h.Base(), Token: tok, Timeout: 20 * time.Second}
	d.hosts, d.clients = []*harness.Host{h}, []*harness.Client{d.c}
	if cfg.Cluster > 1 && d.db != "" {
		if err := d.startCluster(ctx, bin, filepath.Join(tmp, "data"), args, tok); err != nil {
			return nil, err
		}
		defer func() {
			for _, o := range d.hosts[1:] {
				if o.Running() {
					o.Term(10 * time.Second)
				}
			}
		}()
	}
	d.topo, err = harness.CreateTopology(ctx, d.c, harness.TopologyOptions{
		Space: "torture", RecorderURL: rec.URL(), Scope: "torture", MaxRetries: 2, MaxBatchSize: 5, Concurrency: 2,
	})
	if err != nil {
		return nil, fmt.Errorf("topology: %w\n%s", err, harness.Tail(h.Out.String(), 3000))
	}

	// Load, with the killer running alongside.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < cfg.Senders; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d.sender(loadCtx, rand.New(rand.NewSource(cfg.Seed*31+int64(i)+1)))
		}(i)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.churn(loadCtx, rand.New(rand.NewSource(cfg.Seed*31+1000)))
	}()
	if len(d.hosts) > 1 && cfg.Freezes > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.freezer(loadCtx, rand.New(rand.NewSource(cfg.Seed*31+3000)))
		}()
	}
	if d.db != "" && cfg.StoreDisconnects > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.disconnector(loadCtx, rand.New(rand.NewSource(cfg.Seed*31+2000)))
		}()
	}
	if d.pg != nil && cfg.PGRestarts > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.pgRestarter(loadCtx, rand.New(rand.NewSource(cfg.Seed*31+4000)))
		}()
	}
	loadStart := time.Now()
	d.killer(ctx, rand.New(rand.NewSource(cfg.Seed)))
	if rest := cfg.Duration - time.Since(loadStart); rest > 0 {
		select {
		case <-time.After(rest):
		case <-ctx.Done():
		}
	}
	stopLoad()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for _, h := range d.hosts {
		if !h.Running() {
			if err := h.Start(ctx); err != nil {
				d.violate("restart after the load failed: %v", err)
				return d.finish(start), nil
			}
		}
	}

	d.logf("torture: load done after %s; draining", time.Since(loadStart).Round(time.Second))
	d.drain(ctx)
	d.finalChecks(ctx)
	return d.finish(start), nil
}

func (d *driver) finish(start time.Time) *Result {
	d.res.Elapsed = time.Since(start)
	d.res.Starts = 0
	for _, h := range d.hosts {
		d.res.Starts += h.Starts
	}
	d.print()
	r := d.res
	return &r
}

// --- load ---------------------------------------------------------------

var directives = []struct {
	weight int
	do     any
	name   string
}{
	{50, "ack", "ack"},
	{10, "none", "none"},
	{10, []string{"retry", "ack"}, "retry-ack"},
	{10, []string{"throw", "ack"}, "throw-ack"},
	{10, "dead", "dead"},
	{10, "sleep:300", "sleep"},
}

func pick(rng *rand.Rand) (any, string) {
	n := rng.Intn(100)
	for _, dv := range directives {
		if n < dv.weight {
			return dv.do, dv.name
		}
		n -= dv.weight
	}
	return "ack", "ack"
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

func (d *driver) sender(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		n := 1 + rng.Intn(4)
		keys := make([]string, n)
		bodies := make([]string, n)
		steps := make([]string, n)
		d.mu.Lock()
		for i := range keys {
			d.nextKey++
			keys[i] = fmt.Sprintf("m%d", d.nextKey)
		}
		d.mu.Unlock()
		for i := range keys {
			do, name := pick(rng)
			b, _ := json.Marshal(map[string]any{"k": keys[i], "do": do})
			bodies[i], steps[i] = string(b), name
		}
		sr, r, err := harness.Send(context.Background(), d.api(), d.topo.Space, d.topo.Worker, "WORK", bodies)
		d.mu.Lock()
		switch {
		case err != nil && r == nil && isRefused(err):
			d.res.SendRefused++
		case err != nil:
			if r != nil && r.Status >= 500 && r.Status != 503 {
				d.mu.Unlock()
				d.violate("fetch /send answered %s", r)
				d.mu.Lock()
			}
			d.res.SentUnknown += n
			for _, k := range keys {
				d.unknown[k] = true
			}
		case !sr.OK:
			d.res.SendRejected[sr.Name]++
			if sr.Name == "backend_unavailable" {
				// The store may have failed mid-call: unknown, not refused.
				for _, k := range keys {
					d.unknown[k] = true
				}
			}
		case len(sr.IDs) != n:
			d.mu.Unlock()
			d.violate("send of %d messages resolved with %d IDs", n, len(sr.IDs))
			d.mu.Lock()
		default:
			d.res.Sends++
			d.res.Sent += n
			for i, k := range keys {
				d.sent[k] = sr.IDs[i]
				d.sentStep[k] = steps[i]
			}
		}
		d.mu.Unlock()
		sleepCtx(ctx, time.Duration(40+rng.Intn(160))*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, dur time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(dur):
	}
}

// mutate sends one Host API mutation with an Idempotency-Key and retries it
// with the same key while the outcome is unknown (transport error, 503) or
// another Operation holds the resource, for up to budget.
func (d *driver) mutate(ctx context.Context, what, method, path string, body any, key string, budget time.Duration) (*harness.Operation, *harness.Response) {
	deadline := time.Now().Add(budget)
	hdr := map[string][]string{"Idempotency-Key": {key}}
	for {
		r, err := d.api().Do(context.Background(), method, path, body, hdr)
		if err == nil {
			d.count(what, r)
			if r.Status >= 500 && r.Status != 503 {
				d.violate("%s %s answered %s", method, path, r)
			}
			if r.Status >= 400 && !r.IsProblem() {
				d.violate("%s %s answered %d without a problem+json body: %s", method, path, r.Status, r)
			}
			if r.Status == 202 {
				var op harness.Operation
				if err := r.JSON(&op); err != nil || op.ID == "" {
					d.violate("%s %s: 202 without an Operation: %s", method, path, r)
					return nil, r
				}
				d.mu.Lock()
				d.ops[op.ID] = what
				d.mu.Unlock()
				return &op, r
			}
			retryable := r.Status == 503 || r.Code() == "operation_in_progress"
			if !retryable {
				return nil, r
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, nil
		}
		sleepCtx(ctx, 300*time.Millisecond)
	}
}

func (d *driver) count(what string, r *harness.Response) {
	k := fmt.Sprintf("%s %d", what, r.Status)
	if c := r.Code(); c != "" {
		k += " " + c
	}
	d.mu.Lock()
	d.res.Mutations[k]++
	d.mu.Unlock()
}

func (d *driver) waitOp(ctx context.Context, op *harness.Operation, timeout time.Duration) *harness.Operation {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		fin, err := d.api().WaitOp(context.Background(), d.topo.Space, op.ID, 5*time.Second)
		if err == nil && fin != nil {
			if !fin.PairOK() {
				d.violate("operation %s reads %s/%s (pairing not allowed)", fin.ID, fin.State, fin.Effect)
			}
			if fin.State == "succeeded" || fin.State == "failed" {
				return fin
			}
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return nil
}

// churn creates, updates and deletes scratch queues (names reused), adds
// and removes an unselected WorkerVersion, and tunes the work consumer.
func (d *driver) churn(ctx context.Context, rng *rand.Rand) {
	sp := d.topo.Space
	base := "/v2/spaces/" + sp + "/resources"
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("scratch-%d", i%3)
		key := fmt.Sprintf("churn-%d-%d", d.cfg.Seed, i)
		op, r := d.mutate(ctx, "create", "POST", base, map[string]any{
			"name": name, "formUrl": harness.FormQueue, "spec": harness.QueueSpec(rng.Intn(3)),
		}, key+"-c", 20*time.Second)
		var uid string
		switch {
		case op != nil:
			if fin := d.waitOp(ctx, op, 15*time.Second); fin != nil && fin.State == "succeeded" {
				uid = op.ResourceUID
			}
		case r != nil && r.Code() == "name_conflict":
			// An earlier iteration's delete never got an answer: find the
			// holder and delete it.
			list, err := d.api().List(context.Background(), sp)
			if err == nil {
				for _, res := range list {
					if res.Name == name {
						uid = res.UID
					}
				}
			}
		}
		if uid != "" && ctx.Err() == nil {
			op, _ := d.mutate(ctx, "update", "PUT", base+"/"+uid, map[string]any{"spec": harness.QueueSpec(rng.Intn(5))}, key+"-u", 20*time.Second)
			if op != nil {
				d.waitOp(ctx, op, 15*time.Second)
			}
			op, _ = d.mutate(ctx, "delete", "DELETE", base+"/"+uid, nil, key+"-d", 20*time.Second)
			if op != nil {
				d.waitOp(ctx, op, 15*time.Second)
			}
		}
		if i%3 == 0 && ctx.Err() == nil {
			spec := map[string]any{}
			for k, v := range d.topo.ConsumerSpec {
				spec[k] = v
			}
			spec["maxBatchSize"] = 1 + rng.Intn(5)
			spec["maxConcurrency"] = 1 + rng.Intn(3)
			op, _ := d.mutate(ctx, "update-consumer", "PUT", base+"/"+d.topo.Consumer, map[string]any{"spec": spec}, key+"-cu", 20*time.Second)
			if op != nil {
				d.waitOp(ctx, op, 15*time.Second)
			}
		}
		if i%4 == 1 && ctx.Err() == nil {
			vspec := map[string]any{
				"worker": harness.Ref(d.topo.Worker), "mainModule": "worker.js",
				"modules": []any{map[string]any{"name": "worker.js", "content": harness.WorkerJS}},
				"vars":    map[string]any{"RECORDER": d.rec.URL(), "SCOPE": "torture-extra", "DLQ": d.topo.DLQName},
			}
			op, _ := d.mutate(ctx, "create-version", "POST", base, map[string]any{
				"name": "extra-version", "formUrl": harness.FormVersion, "spec": vspec,
			}, key+"-vc", 20*time.Second)
			if op != nil {
				if fin := d.waitOp(ctx, op, 15*time.Second); fin != nil && fin.State == "succeeded" {
					op2, _ := d.mutate(ctx, "delete-version", "DELETE", base+"/"+op.ResourceUID, nil, key+"-vd", 20*time.Second)
					if op2 != nil {
						d.waitOp(ctx, op2, 15*time.Second)
					}
				}
			}
		}
		sleepCtx(ctx, time.Duration(50+rng.Intn(200))*time.Millisecond)
	}
}

// killer SIGKILLs the host cfg.Kills times at seeded moments: at a random
// time, right after a worker reported resolved acknowledgements, or right
// after a worker reported a delivery (handler mid-flight), then restarts it.
func (d *driver) killer(ctx context.Context, rng *rand.Rand) {
	if d.cfg.Kills == 0 {
		return
	}
	avg := d.cfg.Duration / time.Duration(d.cfg.Kills+1)
	for i := 0; i < d.cfg.Kills && ctx.Err() == nil; i++ {
		wait := time.Duration(float64(avg) * (0.2 + 1.6*rng.Float64()))
		sleepCtx(ctx, wait)
		mode := "random"
		switch n := rng.Intn(10); {
		case n < 2:
			mode = "after-ack"
			drain(d.ackCh)
			select {
			case <-d.ackCh:
			case <-time.After(3 * time.Second):
				mode = "after-ack-timeout"
			case <-ctx.Done():
			}
		case n < 4:
			mode = "mid-handler"
			drain(d.delivCh)
			select {
			case <-d.delivCh:
			case <-time.After(3 * time.Second):
				mode = "mid-handler-timeout"
			case <-ctx.Done():
			}
		}
		d.hostMu.Lock()
		victim := d.hosts[rng.Intn(len(d.hosts))]
		if err := victim.Kill(); err != nil {
			d.violate("kill %d: %v", i+1, err)
		}
		d.mu.Lock()
		d.res.Kills++
		d.res.KillModes[mode]++
		d.mu.Unlock()
		// Let clients see the host down for a moment.
		sleepCtx(ctx, time.Duration(rng.Intn(300))*time.Millisecond)
		t0 := time.Now()
		if err := victim.Start(ctx); err != nil {
			d.violate("restart after kill %d failed (no manual repair allowed): %v", i+1, harness.Tail(err.Error(), 2000))
			// Try once more so that the run can report the rest.
			if err := victim.Start(ctx); err != nil {
				d.hostMu.Unlock()
				d.violate("second restart attempt after kill %d failed: %v", i+1, harness.Tail(err.Error(), 500))
				return
			}
		}
		d.hostMu.Unlock()
		if d.cfg.Verbose {
			d.logf("torture: kill %d (%s), restarted in %s", i+1, mode, time.Since(t0).Round(time.Millisecond))
		}
	}
}

// disconnector terminates every connection to the host's database
// StoreDisconnects times during the load.
func (d *driver) disconnector(ctx context.Context, rng *rand.Rand) {
	u, err := url.Parse(d.db)
	if err != nil {
		d.violate("database URL: %v", err)
		return
	}
	name := strings.TrimPrefix(u.Path, "/")
	avg := d.cfg.Duration / time.Duration(d.cfg.StoreDisconnects+1)
	for i := 0; i < d.cfg.StoreDisconnects && ctx.Err() == nil; i++ {
		sleepCtx(ctx, time.Duration(float64(avg)*(0.5+rng.Float64())))
		if ctx.Err() != nil {
			return
		}
		c, err := pgx.Connect(ctx, d.cfg.StoreServer)
		// With -pg-restarts the server may be down right now: retry.
		for try := 0; err != nil && d.pg != nil && try < 20 && ctx.Err() == nil; try++ {
			sleepCtx(ctx, 500*time.Millisecond)
			c, err = pgx.Connect(ctx, d.cfg.StoreServer)
		}
		if err != nil {
			d.logf("torture: disconnect %d: %v", i+1, err)
			continue
		}
		var n int
		err = c.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()) k`, name).Scan(&n)
		c.Close(context.Background())
		if err != nil {
			d.logf("torture: disconnect %d: %v", i+1, err)
			continue
		}
		d.mu.Lock()
		d.res.DBDisconnects++
		d.res.DBConnsKilled += n
		d.mu.Unlock()
		if d.cfg.Verbose {
			d.logf("torture: terminated %d connections of the database", n)
		}
	}
}

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// --- checks -------------------------------------------------------------

type keyState int

const (
	ksNeverDelivered    keyState = iota
	ksPending                    // last delivery retried or threw: must come back or be dead-lettered
	ksAcked                      // an acknowledgement resolved
	ksSettledUnreported          // last delivery acknowledged by return, or its ack report was cut by a kill
	ksDeadLettered
)

type analysis struct {
	state       map[string]keyState // resolved keys
	delivered   int
	deliveries  int
	redelivered int
	ackResolved int
	dupAfterAck []string
	attemptsBad []string
	idMismatch  []string
	overLimit   []string
}

func (d *driver) analyse() *analysis {
	evs := d.rec.Events()
	a := &analysis{state: map[string]keyState{}}
	ackedAt := map[string]int{} // queue/id -> seq of the first report of a resolved ack
	for _, e := range evs {
		if e.Kind == "settled" {
			for _, id := range e.Acked {
				qk := e.Queue + "/" + id
				if _, ok := ackedAt[qk]; !ok {
					ackedAt[qk] = e.Seq
					a.ackResolved++
				}
			}
		}
	}
	perMsg := map[string][]harness.Seen{} // queue/id -> deliveries
	perKey := map[string][]harness.Seen{}
	for _, e := range evs {
		if e.Kind != "delivery" {
			continue
		}
		for _, m := range e.Messages {
			s := harness.Seen{Seq: e.Seq, Queue: e.Queue, BatchID: e.BatchID, Msg: m}
			qk := e.Queue + "/" + m.ID
			a.deliveries++
			if at, ok := ackedAt[qk]; ok && e.Seq > at {
				a.dupAfterAck = append(a.dupAfterAck, fmt.Sprintf("%s (key %s) delivered again (attempts %d, batch %s) after its acknowledgement resolved", qk, m.K, m.Attempts, e.BatchID))
			}
			if prev := perMsg[qk]; len(prev) > 0 && m.Attempts <= prev[len(prev)-1].Msg.Attempts {
				a.attemptsBad = append(a.attemptsBad, fmt.Sprintf("%s (key %s): attempts %d after %d", qk, m.K, m.Attempts, prev[len(prev)-1].Msg.Attempts))
			}
			perMsg[qk] = append(perMsg[qk], s)
			if m.K != "" {
				perKey[m.K] = append(perKey[m.K], s)
			}
		}
	}
	a.delivered = len(perMsg)
	a.redelivered = a.deliveries - a.delivered
	for qk, ss := range perMsg {
		if strings.HasPrefix(qk, d.topo.QueueName+"/") {
			if max := ss[len(ss)-1].Msg.Attempts; max > 3 {
				a.overLimit = append(a.overLimit, fmt.Sprintf("%s delivered with attempts %d > 1+maxRetries (3)", qk, max))
			}
		}
	}
	d.mu.Lock()
	sent := make(map[string]string, len(d.sent))
	for k, v := range d.sent {
		sent[k] = v
	}
	d.mu.Unlock()
	for k, id := range sent {
		ss := perKey[k]
		var main, dead []harness.Seen
		for _, s := range ss {
			if s.Queue == d.topo.DLQName {
				dead = append(dead, s)
			} else {
				main = append(main, s)
				if s.Msg.ID != id {
					a.idMismatch = append(a.idMismatch, fmt.Sprintf("key %s sent as %s delivered as %s", k, id, s.Msg.ID))
				}
			}
		}
		switch {
		case len(ss) == 0:
			a.state[k] = ksNeverDelivered
		case len(dead) > 0:
			a.state[k] = ksDeadLettered
		default:
			if _, ok := ackedAt[d.topo.QueueName+"/"+id]; ok {
				a.state[k] = ksAcked
				break
			}
			last := main[len(main)-1].Msg.Step
			if last == "ack" || last == "none" || strings.HasPrefix(last, "sleep") {
				a.state[k] = ksSettledUnreported
			} else {
				a.state[k] = ksPending
			}
		}
	}
	return a
}

func (a *analysis) open() (never, pending int) {
	for _, s := range a.state {
		switch s {
		case ksNeverDelivered:
			never++
		case ksPending:
			pending++
		}
	}
	return
}

// drain waits until every resolved send is settled and both queues report
// no messages, nudging observation with no-op PUTs of the queues.
func (d *driver) drain(ctx context.Context) {
	deadline := time.Now().Add(d.cfg.Drain)
	lastLen, quietSince := -1, time.Now()
	lastNudge := time.Time{}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		a := d.analyse()
		never, pending := a.open()
		if n := d.rec.Len(); n != lastLen {
			lastLen, quietSince = n, time.Now()
		}
		if never == 0 && pending == 0 && time.Since(quietSince) > 2*time.Second {
			if time.Since(lastNudge) > 4*time.Second {
				d.nudge(ctx)
				lastNudge = time.Now()
			}
			w, err1 := d.c.MessageCount(ctx, d.topo.Space, d.topo.Queue)
			q, err2 := d.c.MessageCount(ctx, d.topo.Space, d.topo.DLQ)
			if err1 == nil && err2 == nil && w == 0 && q == 0 {
				return
			}
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	w, _ := d.c.MessageCount(ctx, d.topo.Space, d.topo.Queue)
	q, _ := d.c.MessageCount(ctx, d.topo.Space, d.topo.DLQ)
	a := d.analyse()
	never, pending := a.open()
	d.violate("drain did not finish within %s: work messageCount %d, dead messageCount %d, %d resolved sends never delivered, %d retried and not seen again", d.cfg.Drain, w, q, never, pending)
}

// nudge PUTs both queues' unchanged specs: the host observes after every
// Operation, so observed.messageCount is fresh without waiting 10 s.
func (d *driver) nudge(ctx context.Context) {
	for _, uid := range []string{d.topo.Queue, d.topo.DLQ} {
		op, _ := d.mutate(ctx, "nudge", "PUT", "/v2/spaces/"+d.topo.Space+"/resources/"+uid,
			map[string]any{"spec": harness.QueueSpec(0)}, fmt.Sprintf("nudge-%s-%d", uid, time.Now().UnixNano()), 10*time.Second)
		if op != nil {
			d.waitOp(ctx, op, 10*time.Second)
		}
	}
}

func (d *driver) finalChecks(ctx context.Context) {
	// One more kill and restart after the drain: the recovered state must
	// hold the same resources and deliver nothing acknowledged again.
	before, err := d.c.List(ctx, d.topo.Space)
	if err != nil {
		d.violate("list before the final restart: %v", err)
	}
	d.host.Kill()
	if err := d.host.Start(ctx); err != nil {
		d.violate("final restart failed: %v", err)
		return
	}
	after, err := d.c.List(ctx, d.topo.Space)
	if err != nil {
		d.violate("list after the final restart: %v", err)
	}
	if err == nil && before != nil {
		if b, a := uidsOf(before), uidsOf(after); b != a {
			d.violate("resources differ across the final restart:\n before %s\n after  %s", b, a)
		}
	}
	sleepCtx(ctx, 3*time.Second)

	a := d.analyse()
	d.res.Delivered, d.res.Deliveries, d.res.Redelivered = a.delivered, a.deliveries, a.redelivered
	d.res.AckResolved = a.ackResolved
	d.res.DupAfterAck = len(a.dupAfterAck)
	for _, s := range a.dupAfterAck {
		d.violate("duplicate after ack: %s", s)
	}
	for _, s := range a.attemptsBad {
		d.violate("attempts did not grow: %s", s)
	}
	for _, s := range a.idMismatch {
		d.violate("message ID not stable: %s", s)
	}
	for _, s := range a.overLimit {
		d.violate("over the delivery limit: %s", s)
	}
	var lost []string
	for k, s := range a.state {
		switch s {
		case ksAcked, ksSettledUnreported:
			d.res.Acknowledged++
		case ksDeadLettered:
			d.res.DeadLettered++
		case ksNeverDelivered:
			lost = append(lost, k+" (never delivered)")
		case ksPending:
			lost = append(lost, k+" (retried, never seen again nor dead-lettered)")
		}
	}
	sort.Strings(lost)
	d.res.Lost = len(lost)
	for _, s := range lost {
		d.violate("lost: %s", s)
	}

	// Every Operation the driver saw must end succeeded, failed or
	// reconciling, with an allowed pairing.
	d.mu.Lock()
	ids := make([]string, 0, len(d.ops))
	for id := range d.ops {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	sort.Strings(ids)
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		wait := time.Until(deadline)
		if wait < time.Second {
			wait = time.Second
		}
		op, err := d.c.WaitOp(ctx, d.topo.Space, id, min(wait, 10*time.Second))
		if err != nil {
			d.violate("operation %s (%s): %v", id, d.ops[id], err)
			continue
		}
		d.res.Ops[op.State]++
		// Ended, or reconciling (unresolved, but the end state a lost
		// effect is allowed to stay in).
		if !op.Terminal() && op.State != "reconciling" {
			d.res.OpsUnfinished++
			d.violate("operation %s (%s) is still %s/%s after the drain", id, d.ops[id], op.State, op.Effect)
		}
		if !op.PairOK() {
			d.violate("operation %s reads %s/%s (pairing not allowed)", id, op.State, op.Effect)
		}
	}

	// Names unique per space among resources not yet deleted.
	names := map[string][]string{}
	for _, r := range after {
		names[r.Name] = append(names[r.Name], r.UID+"("+r.State+")")
		d.res.ResourcesFinal[r.State]++
	}
	for n, us := range names {
		if len(us) > 1 {
			d.violate("name %q held by %d resources: %v", n, len(us), us)
		}
	}
	for _, r := range []string{d.topo.Queue, d.topo.DLQ, d.topo.Worker, d.topo.Version, d.topo.Consumer, d.topo.DLQConsumer} {
		if _, _, err := d.c.Get(ctx, d.topo.Space, r); err != nil {
			d.violate("topology resource gone: %v", err)
		}
	}
}

func uidsOf(rs []harness.Resource) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Name+"="+r.UID)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func (d *driver) print() {
	r := &d.res
	w := d.out
	fmt.Fprintf(w, "torture: seed %d, %s\n", r.Seed, r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "  kills                %d (%s), host starts %d\n", r.Kills, fmtMap(r.KillModes), r.Starts)
	if r.Hosts > 1 {
		fmt.Fprintf(w, "  cluster              %d active hosts on one database, load round-robin; %d owners frozen past their lease, %d of them fenced on resuming\n", r.Hosts, r.Freezes, r.Fenced)
	}
	if r.PGRestarts > 0 || d.cfg.PGRestarts > 0 {
		fmt.Fprintf(w, "  postgres restarts    %d of %d (%s), private server down %s in all\n", r.PGRestarts, d.cfg.PGRestarts, fmtMap(r.PGRestartModes), r.PGDown.Round(time.Millisecond))
	}
	if r.DBDisconnects > 0 {
		fmt.Fprintf(w, "  database disconnects %d rounds, %d connections terminated\n", r.DBDisconnects, r.DBConnsKilled)
	}
	fmt.Fprintf(w, "  messages sent        %d resolved in %d calls; %d unknown (killed mid-call); %d calls refused while down; rejected %s\n",
		r.Sent, r.Sends, r.SentUnknown, r.SendRefused, fmtMap(r.SendRejected))
	fmt.Fprintf(w, "  delivered            %d messages, %d deliveries, %d redelivered\n", r.Delivered, r.Deliveries, r.Redelivered)
	fmt.Fprintf(w, "  acknowledged         %d resolved sends (%d acks seen resolving), dead-lettered %d\n", r.Acknowledged, r.AckResolved, r.DeadLettered)
	fmt.Fprintf(w, "  duplicates-after-ack %d (must be 0)\n", r.DupAfterAck)
	fmt.Fprintf(w, "  lost                 %d (must be 0)\n", r.Lost)
	fmt.Fprintf(w, "  operations           %s; unfinished %d\n", fmtMap(r.Ops), r.OpsUnfinished)
	fmt.Fprintf(w, "  mutations            %s\n", fmtMap(r.Mutations))
	fmt.Fprintf(w, "  resources at the end %s\n", fmtMap(r.ResourcesFinal))
	if len(r.Violations) == 0 {
		fmt.Fprintf(w, "torture: OK\n")
		return
	}
	fmt.Fprintf(w, "torture: %d VIOLATIONS\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  - %s\n", v)
	}
}

func fmtMap(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
