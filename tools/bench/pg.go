package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
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
	admin, err := pgx.Connect(ctx, pgServerURL())
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name := "takobench_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(pgServerURL())
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), pgServerURL())
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), drop, nil
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
			var seq atomic.Int64
			send := func(ctx context.Context, bodies [][]byte) error {
				now := time.Now().UnixMilli()
				muts := make([]store.Mutation, len(bodies))
				for i, body := range bodies {
					muts[i] = store.AcceptMessage{Message: store.Message{Queue: "q", ID: fmt.Sprintf("m%016x", seq.Add(1)), AcceptedAt: now, VisibleAt: now, Size: len(body)}, Body: body}
				}
				return st.Apply(ctx, muts...)
			}
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
	var seq atomic.Int64
	send := func(ctx context.Context, bodies [][]byte) error {
		now := time.Now().UnixMilli()
		muts := make([]store.Mutation, len(bodies))
		for i, body := range bodies {
			muts[i] = store.AcceptMessage{Message: store.Message{Queue: "q", ID: fmt.Sprintf("m%016x", seq.Add(1)), AcceptedAt: now, VisibleAt: now, Size: len(body)}, Body: body}
		}
		return st.Apply(ctx, muts...)
	}
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
