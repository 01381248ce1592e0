// Command riverbench measures River (riverqueue/river) on a PostgreSQL
// database, as the peer that tools/bench's pg phase sets beside the host's
// PostgreSQL store. It lives in its own Go module so that the host never
// depends on River.
//
// It prints one JSON object: River's insert rate for the same producer
// points as the host's store (InsertManyFast of 100 from 16 goroutines,
// Insert of 1 from 64), and its insert-and-work rate: the same 16
// producers while a client with no-op workers works the jobs, counting
// completed jobs (River records completions durably, in batches) per
// second, with River's own benchmark settings (MaxWorkers 2000, fetch
// cooldown 2 ms, poll interval 20 ms).
//
//	go run . -db postgres://postgres@127.0.0.1:5432/fresh_db -dur 4s -bodies 100,4096
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// NoopArgs is a job carrying a body, like a queue message.
type NoopArgs struct {
	Body string `json:"body"`
}

func (NoopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error {
	w.done.Add(1)
	return nil
}

// Point is one measurement.
type Point struct {
	Mode   string  `json:"mode"`
	Body   int     `json:"body"`
	PerSec float64 `json:"perSec"`
	Err    string  `json:"err,omitempty"`
}

// Result is what the command prints.
type Result struct {
	River   string  `json:"river"`
	Insert  []Point `json:"insert"`
	Work    []Point `json:"insertAndWork"`
	Workers int     `json:"workers"`
}

const riverVersion = "v0.51.2"

func main() {
	db := flag.String("db", "", "connection string of a database River may migrate and fill")
	dur := flag.Duration("dur", 4*time.Second, "length of each point")
	bodiesFlag := flag.String("bodies", "100,4096", "body sizes in bytes")
	workers := flag.Int("workers", 2000, "River's MaxWorkers in the insert-and-work points")
	flag.Parse()
	if *db == "" {
		fmt.Fprintln(os.Stderr, "riverbench: -db is required")
		os.Exit(2)
	}
	var bodies []int
	for _, f := range strings.Split(*bodiesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "riverbench: bad body size %q\n", f)
			os.Exit(2)
		}
		bodies = append(bodies, n)
	}
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(*db)
	if err != nil {
		fail(err)
	}
	pc.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		fail(err)
	}
	defer pool.Close()
	mig, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		fail(err)
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		fail(fmt.Errorf("migrating: %w", err))
	}
	res := Result{River: riverVersion, Workers: *workers}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, size := range bodies {
		args := NoopArgs{Body: strings.Repeat("x", size)}
		// Insert only: a client without queues does not work jobs.
		ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet})
		if err != nil {
			fail(err)
		}
		for _, m := range []struct {
			name      string
			per, conc int
		}{{"sendBatch(100) ×16 concurrent", 100, 16}, {"send ×64 concurrent", 1, 64}} {
			n, err := produce(ctx, ins, args, m.per, m.conc, *dur, nil)
			res.Insert = append(res.Insert, point(m.name, size, n, *dur, err))
		}
		truncate(ctx, pool)

		// Insert and work.
		var done atomic.Int64
		ws := river.NewWorkers()
		river.AddWorker(ws, &noopWorker{done: &done})
		// River's own benchmark settings (cmd/river/riverbench): they
		// decide its throughput far more than anything else.
		cl, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			FetchCooldown:     2 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Logger:            quiet,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}},
			Workers:           ws,
		})
		if err != nil {
			fail(err)
		}
		if err := cl.Start(ctx); err != nil {
			fail(err)
		}
		warm := *dur / 5
		stop := make(chan struct{})
		var measured int64
		var werr error
		var wg sync.WaitGroup
		wg.Go(func() {
			// Producers pause while more than 20 000 jobs wait, as the
			// host's end-to-end producers do.
			_, werr = produce(ctx, cl, args, 100, 16, warm+*dur, func() bool {
				var waiting int64
				pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'available'").Scan(&waiting)
				return waiting > 20000
			})
			close(stop)
		})
		time.Sleep(warm)
		d0 := done.Load()
		t0 := time.Now()
		time.Sleep(*dur)
		measured = done.Load() - d0
		elapsed := time.Since(t0)
		<-stop
		wg.Wait()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cl.Stop(sctx)
		cancel()
		p := Point{Mode: "insert-and-work, InsertManyFast(100) ×16, no-op workers", Body: size, PerSec: float64(measured) / elapsed.Seconds()}
		if werr != nil {
			p.Err = werr.Error()
		}
		res.Work = append(res.Work, p)
		truncate(ctx, pool)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

func point(mode string, size int, n int64, d time.Duration, err error) Point {
	p := Point{Mode: mode, Body: size, PerSec: float64(n) / d.Seconds()}
	if err != nil {
		p.Err = err.Error()
	}
	return p
}

// produce inserts per jobs a call from conc goroutines for d (pausing
// while hold says so) and returns how many it inserted.
func produce(ctx context.Context, cl *river.Client[pgxTx], args NoopArgs, per, conc int, d time.Duration, hold func() bool) (int64, error) {
	params := make([]river.InsertManyParams, per)
	for i := range params {
		params[i] = river.InsertManyParams{Args: args}
	}
	deadline := time.Now().Add(d)
	var n atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if hold != nil && hold() {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				var err error
				if per == 1 {
					_, err = cl.Insert(ctx, args, nil)
				} else {
					_, err = cl.InsertManyFast(ctx, params)
				}
				if err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
				n.Add(int64(per))
			}
		})
	}
	wg.Wait()
	if e, ok := first.Load().(error); ok {
		return n.Load(), e
	}
	return n.Load(), nil
}

func truncate(ctx context.Context, pool *pgxpool.Pool) {
	pool.Exec(ctx, "TRUNCATE river_job")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "riverbench:", err)
	os.Exit(1)
}

type pgxTx = pgx.Tx
