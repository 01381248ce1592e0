package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// The pg phase: the store on PostgreSQL (runtime/store/pgstore) beside the
// file journal, the same producer points, and the database's own limit
// measured the same way (single-row durable INSERT commits from many
// connections, what pgbench's insert-only script measures), so that
// pgstore's figure reads as a ratio to both.

// pgServerURL is the server the phase creates its databases on.
func pgServerURL() string {
	if u := os.Getenv("TAKOHOST_BENCH_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// pgDatabase creates a fresh database and returns its URL and a function
// that drops it.
func pgDatabase(ctx context.Context) (string, func(), error) {
	u, drop, err := pgtest.Create(ctx, pgServerURL(), "takobench_")
	if err != nil {
		return "", nil, err
	}
	return u, func() { _ = drop() }, nil
}

func (b *bench) pgLayer(ctx context.Context) {
	s := b.rep.section("Store on PostgreSQL (runtime/store/pgstore) beside the file journal",
		fmt.Sprintf("The same producer points as the store section, %s each: one Apply of 1 or 100 AcceptMessage per call, closed loop; the journal on a fresh directory, "+
			"pgstore on a fresh database of the server at %s (default pool of 10, 4 committers). "+
			"DB commits/s is the database's own limit measured the same way: %d connections each committing single-row INSERTs of the same body "+
			"(synchronous_commit as the server has it, as pgstore runs). Applies per commit is pgstore's group commit at work.",
			b.pointDur, redactedURL(pgServerURL()), pgLimitConns),
		"mode", "body", "journal msgs/s", "pgstore msgs/s", "pgstore ÷ journal", "DB commits/s", "pgstore msgs per DB commit", "Applies per commit")
	probe, err := pgx.Connect(ctx, pgServerURL())
	if err != nil {
		s.note("skipped: PostgreSQL at %s unreachable: %v", redactedURL(pgServerURL()), err)
		return
	}
	var version, syncCommit string
	probe.QueryRow(ctx, "SHOW server_version").Scan(&version)
	probe.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit)
	probe.Close(ctx)
	s.note("PostgreSQL %s, synchronous_commit=%s, on this machine.", version, syncCommit)
	for _, m := range prodModes {
		for _, size := range bodySizes {
			journal, ok := b.results[pointKey("store", m, size)]
			if !ok {
				journal = b.journalPoint(ctx, s, m, size)
			}
			dbURL, drop, err := pgDatabase(ctx)
			if err != nil {
				s.note("creating a database: %v", err)
				return
			}
			limit := b.pgLimit(ctx, dbURL, size)
			st, err := pgstore.Open(ctx, pgstore.Config{URL: dbURL, Logger: quietLogger})
			if err != nil {
				drop()
				s.note("pgstore.Open: %v", err)
				return
			}
			send := acceptSender(st)
			c := b.prog.phase(fmt.Sprintf("pgstore %s %s", m.Name, bytesize(size)), "msgs")
			pt := runProducer(ctx, send, m, size, b.pointDur, c)
			b.prog.end()
			stats := st.Stats()
			st.Close()
			drop()
			if pt.Err != nil {
				s.note("%s, %s: error: %v", m.Name, bytesize(size), pt.Err)
				continue
			}
			rate := pt.rate()
			b.results[pointKey("pgstore", m, size)] = rate
			s.row(m.Name, bytesize(size), num(journal), num(rate), ratio(rate, journal), num(limit), ratio(rate, limit),
				num(float64(stats.Applies)/float64(max(stats.Commits, 1))))
		}
	}
}

// journalPoint measures the journaled store's point when the store phase
// did not run in this invocation.
func (b *bench) journalPoint(ctx context.Context, s *section, m prodMode, size int) float64 {
	dir, err := os.MkdirTemp(b.dir, "store-")
	if err != nil {
		return 0
	}
	defer os.RemoveAll(dir)
	st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
	if err != nil {
		s.note("store.Open: %v", err)
		return 0
	}
	defer st.Close()
	send := acceptSender(st)
	c := b.prog.phase(fmt.Sprintf("journal %s %s", m.Name, bytesize(size)), "msgs")
	pt := runProducer(ctx, send, m, size, b.pointDur, c)
	b.prog.end()
	if pt.Err != nil {
		s.note("journal %s, %s: error: %v", m.Name, bytesize(size), pt.Err)
		return 0
	}
	return pt.rate()
}

// pgLimitConns is the number of connections of the database limit probe.
const pgLimitConns = 16

// pgLimit measures single-row INSERT commits per second with a body of
// size bytes from pgLimitConns connections, for a quarter of a point.
func (b *bench) pgLimit(ctx context.Context, dbURL string, size int) float64 {
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0
	}
	pc.MaxConns = pgLimitConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return 0
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE TABLE limit_probe (id bigserial PRIMARY KEY, body bytea NOT NULL)"); err != nil {
		return 0
	}
	body := make([]byte, size)
	c := b.prog.phase(fmt.Sprintf("PostgreSQL INSERT commits %s", bytesize(size)), "commits")
	var n atomic.Int64
	deadline := time.Now().Add(max(b.pointDur/4, 500*time.Millisecond))
	start := time.Now()
	var wg sync.WaitGroup
	for range pgLimitConns {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if _, err := pool.Exec(ctx, "INSERT INTO limit_probe (body) VALUES ($1)", body); err != nil {
					return
				}
				n.Add(1)
				c.Add(1)
			}
		})
	}
	wg.Wait()
	b.prog.end()
	return float64(n.Load()) / time.Since(start).Seconds()
}

func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// pgE2E runs the host's end-to-end point (e2eProducers producers sending
// batches of 100 bodies of size bytes, a consumer of maxBatchSize 100 and
// maxConcurrency conc whose Go handler reads the bodies and returns, so
// the engine acknowledges durably) on st, and returns durable
// acknowledgements per second over a point after a warm-up.
func (b *bench) pgE2E(ctx context.Context, st store.Store, size, conc int, c *atomic.Int64) (float64, error) {
	obs := &obsStore{Store: st}
	h := goHandler()
	eng := delivery.New(obs, resolverFunc(func(context.Context, string) (abi.Handler, error) { return h, nil }), delivery.Options{Logger: quietLogger})
	if err := eng.AddQueue(ctx, delivery.QueueConfig{UID: "q1", Name: "bench", MessageRetentionSeconds: 1209600}); err != nil {
		return 0, err
	}
	if err := eng.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Stop(sctx)
	}()
	if err := eng.Attach(ctx, delivery.ConsumerConfig{UID: "c1", QueueUID: "q1", WorkerUID: "w1",
		MaxBatchSize: 100, MaxBatchTimeoutSeconds: 0, MaxConcurrency: conc, MaxRetries: 3, RetryDelaySeconds: 0}); err != nil {
		return 0, err
	}
	msgs := make([]abi.OutgoingMessage, 100)
	body := make([]byte, size)
	for i := range msgs {
		msgs[i].Body = body
	}
	pctx, stop := context.WithCancel(ctx)
	var sent atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range e2eProducers {
		wg.Go(func() {
			for pctx.Err() == nil {
				if sent.Load()-obs.acked.Load() > e2eBacklog {
					time.Sleep(time.Millisecond)
					continue
				}
				if _, err := eng.Send(pctx, "q1", msgs); err != nil {
					if pctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				sent.Add(int64(len(msgs)))
			}
		})
	}
	time.Sleep(b.pointDur / 5)
	a0, t0 := obs.acked.Load(), time.Now()
	time.Sleep(b.pointDur)
	a1, el := obs.acked.Load(), time.Since(t0)
	c.Add(a1 - a0)
	stop()
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return 0, e
	}
	return float64(a1-a0) / el.Seconds(), nil
}

// e2ePgLayer: the end-to-end point on the journal, on pgstore, and River's
// insert-and-work with no-op workers on the same server.
func (b *bench) e2ePgLayer(ctx context.Context) {
	const conc = 16
	s := b.rep.section("End-to-end on PostgreSQL, and River on the same server",
		fmt.Sprintf("The host's end-to-end point (as in the end-to-end section: %d producers sending batches of 100, consumer maxBatchSize 100, maxConcurrency %d, "+
			"a Go handler that reads the bodies and returns, counting durable acknowledgements over %s after a warm-up) on a fresh journal and on pgstore on a fresh database; "+
			"beside it River %s (tools/riverbench, its own module) on a fresh database of the same server: 16 producers of InsertManyFast(100) while a client with no-op workers "+
			"works the jobs, counting completed jobs (River's own benchmark settings: MaxWorkers 2000, fetch cooldown 2 ms, poll 20 ms). Both are durable work done per second on the same database; "+
			"the host hands its handler batches of up to 100 messages and records deliveries and acknowledgements per batch, River works and completes one job per call (completions recorded in batches). "+
			"The fenced row is how the active host writes (host/active.go): every Apply checked against its lease in the same transaction.",
			e2eProducers, conc, b.pointDur, riverVersion),
		"system", "body", "store", "msgs (jobs) done/s", "ratio to River")
	type row struct {
		sys, store string
		size       int
		rate       float64
		err        error
	}
	var rows []row
	river := map[int]float64{}
	for _, size := range []int{100, 4096} {
		c := b.prog.phase(fmt.Sprintf("e2e journal %s", bytesize(size)), "acks")
		dir, err := os.MkdirTemp(b.dir, "e2e-pg-")
		if err == nil {
			var st *store.Journaled
			if st, _, err = store.Open(ctx, dir, store.Options{Logger: quietLogger}); err == nil {
				var r float64
				r, err = b.pgE2E(ctx, st, size, conc, c)
				st.Close()
				rows = append(rows, row{"queuehost engine", "file journal", size, r, err})
			}
			os.RemoveAll(dir)
		}
		b.prog.end()
		if err != nil {
			rows = append(rows, row{"queuehost engine", "file journal", size, 0, err})
		}

		dbURL, drop, err := pgDatabase(ctx)
		if err != nil {
			s.note("creating a database: %v", err)
			return
		}
		c = b.prog.phase(fmt.Sprintf("e2e pgstore %s", bytesize(size)), "acks")
		st, err := pgstore.Open(ctx, pgstore.Config{URL: dbURL, Logger: quietLogger})
		var r float64
		if err == nil {
			r, err = b.pgE2E(ctx, st, size, conc, c)
			st.Close()
		}
		b.prog.end()
		rows = append(rows, row{"queuehost engine", "pgstore", size, r, err})

		// As the active host writes: every Apply fenced with its lease.
		c = b.prog.phase(fmt.Sprintf("e2e pgstore fenced %s", bytesize(size)), "acks")
		st, err = pgstore.Open(ctx, pgstore.Config{URL: dbURL, Logger: quietLogger})
		r = 0
		if err == nil {
			var l store.Lease
			if l, err = st.Acquire(ctx, "bench/active", "bench", time.Hour); err == nil {
				r, err = b.pgE2E(ctx, fencedStore{st, l}, size, conc, c)
			}
			st.Close()
		}
		b.prog.end()
		drop()
		rows = append(rows, row{"queuehost engine", "pgstore, every write fenced (as the active host)", size, r, err})
	}
	c := b.prog.phase("River insert-and-work", "runs")
	rv, err := b.runRiver(ctx, []int{100, 4096})
	b.prog.end()
	c.Add(1)
	if err != nil {
		s.note("River: %v", err)
	}
	for _, p := range rv.Work {
		if p.Err != "" {
			s.note("River, %s: error: %s", bytesize(p.Body), p.Err)
			continue
		}
		river[p.Body] = p.PerSec
		rows = append(rows, row{"River " + rv.River + " (no-op workers)", "PostgreSQL", p.Body, p.PerSec, nil})
	}
	for _, r := range rows {
		if r.err != nil {
			s.note("%s on %s, %s: error: %v", r.sys, r.store, bytesize(r.size), r.err)
			continue
		}
		s.row(r.sys, bytesize(r.size), r.store, num(r.rate), ratio(r.rate, river[r.size]))
	}
	if len(rv.Insert) > 0 {
		s.note("River's insert rate alone on the same points as the store section: %s.", riverInserts(rv.Insert))
	}
}

const riverVersion = "v0.51.2"

// riverResult is what tools/riverbench prints.
type riverResult struct {
	River  string `json:"river"`
	Insert []struct {
		Mode   string  `json:"mode"`
		Body   int     `json:"body"`
		PerSec float64 `json:"perSec"`
		Err    string  `json:"err"`
	} `json:"insert"`
	Work []struct {
		Mode   string  `json:"mode"`
		Body   int     `json:"body"`
		PerSec float64 `json:"perSec"`
		Err    string  `json:"err"`
	} `json:"insertAndWork"`
}

func riverInserts(ps []struct {
	Mode   string  `json:"mode"`
	Body   int     `json:"body"`
	PerSec float64 `json:"perSec"`
	Err    string  `json:"err"`
}) string {
	var parts []string
	for _, p := range ps {
		if p.Err != "" {
			parts = append(parts, fmt.Sprintf("%s %s: error %s", p.Mode, bytesize(p.Body), p.Err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s jobs/s", p.Mode, bytesize(p.Body), num(p.PerSec)))
	}
	return strings.Join(parts, "; ")
}

// runRiver runs tools/riverbench (its own module) on a fresh database.
func (b *bench) runRiver(ctx context.Context, bodies []int) (riverResult, error) {
	var res riverResult
	root, err := moduleRoot()
	if err != nil {
		return res, err
	}
	dbURL, drop, err := pgDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer drop()
	var sizes []string
	for _, n := range bodies {
		sizes = append(sizes, fmt.Sprint(n))
	}
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-db", dbURL, "-dur", b.pointDur.String(), "-bodies", strings.Join(sizes, ","))
	cmd.Dir = filepath.Join(root, "tools", "riverbench")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("tools/riverbench: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("tools/riverbench output: %w", err)
	}
	return res, nil
}

// moduleRoot is the directory of the host's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// failoverLayer: how long after the active host ends a standby on the same
// database serves (host/active.go): the real binary, SIGKILL (the lease
// must expire) and SIGTERM (a clean shutdown releases it).
func (b *bench) failoverLayer(ctx context.Context) {
	s := b.rep.section("Failover on PostgreSQL: a standby host takes over",
		"Two cmd/takohost processes on one fresh database (-store), the second a standby. The active one is ended, and the time from the signal until the standby answers "+
			"GET /v2/openapi.json is measured; the standby then stays active and a new standby is started for the next run. After SIGKILL the standby must wait for the dead "+
			"host's lease to expire (at most the lease ttl, polling every tenth of it); after SIGTERM the host releases its lease as it shuts down (its shutdown grace included).",
		"the active host ends by", "lease ttl (-cluster-ttl)", "runs", "standby served after: median", "min", "max")
	bin, err := harness.BuildHost()
	if err != nil {
		s.note("skipped: building cmd/takohost: %v", err)
		return
	}
	defer harness.RemoveBuild() // no later phase runs the binary
	runs := 3
	if b.quick {
		runs = 2
	}
	for _, tc := range []struct {
		how string
		ttl time.Duration
		n   int
	}{{"SIGKILL", 2 * time.Second, runs}, {"SIGKILL", 10 * time.Second, 1}, {"SIGTERM", 10 * time.Second, runs}} {
		c := b.prog.phase(fmt.Sprintf("failover after %s, lease %s", tc.how, tc.ttl), "runs")
		ds, err := b.failover(ctx, bin, tc.how, tc.ttl, tc.n, c)
		b.prog.end()
		if err != nil {
			s.note("%s, lease %s: error: %v", tc.how, tc.ttl, err)
			continue
		}
		slices.Sort(ds)
		s.row(tc.how, tc.ttl.String(), fmt.Sprint(len(ds)), ds[len(ds)/2].Round(time.Millisecond).String(),
			ds[0].Round(time.Millisecond).String(), ds[len(ds)-1].Round(time.Millisecond).String())
	}
}

func (b *bench) failover(ctx context.Context, bin, how string, ttl time.Duration, n int, c *atomic.Int64) ([]time.Duration, error) {
	db, drop, err := pgDatabase(ctx)
	if err != nil {
		return nil, err
	}
	defer drop()
	dir, err := os.MkdirTemp(b.dir, "failover-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	args := []string{"-store", db, "-cluster-ttl", ttl.String(), "-shutdown-grace", "1s"}
	active, err := harness.NewHost(bin, dir, args...)
	if err != nil {
		return nil, err
	}
	defer func() { active.Kill() }()
	if err := active.Start(ctx); err != nil {
		return nil, err
	}
	var out []time.Duration
	for range n {
		standby, err := harness.NewHost(bin, dir, args...)
		if err != nil {
			return out, err
		}
		standby.ReadyTimeout = ttl + 60*time.Second
		served := make(chan error, 1)
		go func() { served <- standby.Start(ctx) }()
		for !strings.Contains(standby.Out.String(), "standby") {
			select {
			case err := <-served:
				return out, fmt.Errorf("the standby served while the active host was alive (%v)", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		t0 := time.Now()
		if how == "SIGKILL" {
			active.Kill()
		} else if _, _, err := active.Term(30 * time.Second); err != nil {
			standby.Kill()
			return out, err
		}
		if err := <-served; err != nil {
			return out, err
		}
		out = append(out, time.Since(t0))
		c.Add(1)
		active.Kill()
		active = standby
	}
	return out, nil
}

// fencedStore writes as the active host does (host/active.go): every
// Apply fenced with its lease.
type fencedStore struct {
	*pgstore.Store
	l store.Lease
}

func (f fencedStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	return f.Store.ApplyFenced(ctx, f.l, muts...)
}
