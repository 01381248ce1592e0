package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/schemas"
)

// The cluster section: several ACTIVE hosts on one PostgreSQL database
// (spec/cluster.md), in process, each with a Go runtime whose queue
// handler records when it saw each message (no JavaScript, so that the
// figures are the hosts' and the database's). Producers call each host's
// producer path (the Sender a worker's binding calls) round-robin, so
// that two thirds of the sends of a three-host run land on a host that
// does not own the queue and wake its owner by NOTIFY.

const clusterQueues = 6

// benchRuntime is a host.Runtime whose every version has a Go queue
// handler; the host's Sender is kept for the producers.
type benchRuntime struct {
	sender abi.Sender
	h      abi.Handler
}

func (benchRuntime) Start(context.Context) error { return nil }
func (benchRuntime) Stop(context.Context) error  { return nil }
func (benchRuntime) Compile(context.Context, *abi.Version) ([]string, error) {
	return []string{"fetch", "queue"}, nil
}
func (r benchRuntime) QueueHandler(*abi.Version) (abi.Handler, error) { return r.h, nil }
func (benchRuntime) Fetch(context.Context, *abi.Version, *http.Request, string) (*http.Response, error) {
	return nil, fmt.Errorf("no fetch handler in the benchmark runtime")
}
func (benchRuntime) Logs(string, int64, int) []api.LogEntry { return nil }
func (benchRuntime) Evict(string)                           {}
func (benchRuntime) ForgetWorker(string)                    {}

// clusterSeen is what the handler records: messages handled, and the
// send-to-handler latency of tagged ones.
type clusterSeen struct {
	handled atomic.Int64
	mu      sync.Mutex
	lat     map[string][]time.Duration
	first   map[string]time.Time // tag -> first time seen
}

func (s *clusterSeen) HandleBatch(_ context.Context, b *abi.Batch) error {
	now := time.Now()
	for _, m := range b.Messages {
		// body: "<unix nanos>|<tag>|padding"
		parts := strings.SplitN(string(m.Body), "|", 3)
		if len(parts) == 3 && parts[1] != "load" {
			if ns, err := strconv.ParseInt(parts[0], 10, 64); err == nil {
				s.mu.Lock()
				s.lat[parts[1]] = append(s.lat[parts[1]], now.Sub(time.Unix(0, ns)))
				if _, ok := s.first[parts[1]]; !ok {
					s.first[parts[1]] = now
				}
				s.mu.Unlock()
			}
		}
	}
	s.handled.Add(int64(len(b.Messages)))
	return nil
}

func clusterBody(tag string, size int) []byte {
	b := []byte(fmt.Sprintf("%d|%s|", time.Now().UnixNano(), tag))
	for len(b) < size {
		b = append(b, 'x')
	}
	return b
}

type clusterHost struct {
	h      *host.Host
	id     string
	sender abi.Sender
}

type clusterRig struct {
	db      string
	dir     string
	hosts   []*clusterHost
	seen    *clusterSeen
	queues  []string
	space   string
	creator string
}

func (b *bench) startClusterRig(ctx context.Context, n int) (*clusterRig, func(), error) {
	db, drop, err := pgDatabase(ctx)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(b.dir, "cluster-")
	if err != nil {
		drop()
		return nil, nil, err
	}
	rig := &clusterRig{db: db, dir: dir, space: "bench", seen: &clusterSeen{lat: map[string][]time.Duration{}, first: map[string]time.Time{}}}
	cleanup := func() {
		for _, ch := range rig.hosts {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ch.h.Shutdown(sctx)
			cancel()
		}
		os.RemoveAll(dir)
		drop()
	}
	for i := range n {
		ch := &clusterHost{id: fmt.Sprintf("bench-host-%d", i)}
		h, err := host.New(ctx, host.Config{
			DataDir: dir, StoreURL: db, ClusterActive: true, ClusterTTL: 2 * time.Second, HostID: ch.id,
			Listen: "127.0.0.1:0", Logger: quietLogger, ShutdownGrace: 2 * time.Second,
			Runtime: func(o host.RuntimeOptions) (host.Runtime, error) {
				ch.sender = o.Sender
				return benchRuntime{sender: o.Sender, h: rig.seen}, nil
			},
		})
		if err == nil {
			err = h.Start()
		}
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		ch.h = h
		rig.hosts = append(rig.hosts, ch)
	}
	c := apiclient.New(rig.hosts[0].h.URL(), rig.hosts[0].h.AdminToken())
	w, err := c.Create(ctx, rig.space, "w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch", "queue"}}, nil)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	var binds []any
	for i := range clusterQueues {
		q, err := c.Create(ctx, rig.space, fmt.Sprintf("q%d", i), schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600}, nil)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		rig.queues = append(rig.queues, q)
		binds = append(binds, map[string]any{"name": fmt.Sprintf("Q%d", i), "resource": map[string]any{"resourceUid": q}})
	}
	v, err := c.Create(ctx, rig.space, "w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": "export default {}"}},
		"queueProducerBindings": binds,
	}, nil)
	if err == nil {
		err = c.Put(ctx, rig.space, w, map[string]any{"handlers": []string{"fetch", "queue"}, "version": map[string]any{"resourceUid": v}})
	}
	for i := 0; err == nil && i < clusterQueues; i++ {
		_, err = c.Create(ctx, rig.space, fmt.Sprintf("c%d", i), schemas.FormQueueConsumer, map[string]any{
			"queue": map[string]any{"resourceUid": rig.queues[i]}, "worker": map[string]any{"resourceUid": w},
			"maxBatchSize": 100, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 4, "maxRetries": 3, "retryDelaySeconds": 0,
		}, nil)
	}
	if err == nil {
		err = rig.readCreator(ctx)
	}
	if err == nil {
		err = rig.waitOwned(ctx)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return rig, cleanup, nil
}

func (rig *clusterRig) readCreator(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, rig.db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, `SELECT creator FROM store_resources WHERE name = 'w-v1'`).Scan(&rig.creator)
}

// owners maps each queue to the ID of the host holding its lease.
func (rig *clusterRig) owners(ctx context.Context) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, rig.db)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT name, holder FROM store_leases WHERE holder <> '' AND expires > now()`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var name, holder string
	_, err = pgx.ForEachRow(rows, []any{&name, &holder}, func() error {
		out[strings.TrimPrefix(name, "queue/")] = holder
		return nil
	})
	return out, err
}

func (rig *clusterRig) waitOwned(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := rig.owners(ctx)
		if err == nil && len(o) >= len(rig.queues) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the queues were not all owned after 30 s (%d of %d, %v)", len(o), len(rig.queues), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (rig *clusterRig) send(ctx context.Context, h *clusterHost, q string, msgs []abi.OutgoingMessage) error {
	_, err := h.sender.Send(ctx, rig.creator, rig.space, q, msgs)
	return err
}

func (b *bench) clusterLayer(ctx context.Context) {
	s := b.rep.section("Several active hosts on one PostgreSQL database: 1 host against 3",
		fmt.Sprintf("In-process hosts with -cluster-active semantics (host.Config.ClusterActive, lease ttl 2 s) on a fresh database of the same server, each with a Go queue handler "+
			"(a runtime without JavaScript: the hosts' and the database's cost only). %d queues, one consumer each (maxBatchSize 100, maxConcurrency 4); their leases spread over the hosts by rendezvous hashing. "+
			"Throughput: 16 producers call the hosts' producer path (what a worker's binding calls) round-robin over hosts and queues, batches of 100 messages of 100 bytes, for %s after a 1 s warm-up; "+
			"messages handled per second (each batch acknowledged by its handler's return, durably). Latency: then single sends at about 100/s, round-robin, from send to the handler, "+
			"split by whether the sending host owns the queue (same host) or not (across hosts: the send is committed, NOTIFYed, and adopted by the owner). "+
			"Handover: the owner of one queue shuts down (releasing its leases) while messages go to that queue through another host; the time from the shutdown's start (its own "+
			"time included) until the first message sent after the shutdown returned is handled on the new owner. After a SIGKILL the handover waits for the lease to expire instead (at most the ttl plus a placement tick: "+
			"2.15 s with ttl 2 s in TestPostgresClusterActive). All hosts share the machine's cores with the database.", clusterQueues, b.pointDur),
		"hosts", "messages handled/s", "p50 same host", "p99 same host", "p50 across hosts", "p99 across hosts", "handover after a clean shutdown")
	var base float64
	for _, n := range []int{1, 3} {
		c := b.prog.phase(fmt.Sprintf("cluster of %d", n), "msgs")
		r, err := b.clusterRun(ctx, n, c)
		b.prog.end()
		if err != nil {
			s.note("%d hosts: error: %v", n, err)
			continue
		}
		if n == 1 {
			base = r.rate
		}
		hand := "—"
		if r.handover > 0 {
			hand = dur(r.handover)
		}
		cross50, cross99 := "—", "—"
		if len(r.cross) > 0 {
			cross50, cross99 = dur(r.cross[len(r.cross)/2]), dur(r.cross[len(r.cross)*99/100])
		}
		s.row(fmt.Sprint(n), num(r.rate)+" ("+ratio(r.rate, base)+" of 1 host)", dur(r.same[len(r.same)/2]), dur(r.same[len(r.same)*99/100]), cross50, cross99, hand)
	}
}

type clusterResult struct {
	rate        float64
	same, cross []time.Duration
	handover    time.Duration
}

func (b *bench) clusterRun(ctx context.Context, n int, c *atomic.Int64) (clusterResult, error) {
	var res clusterResult
	rig, cleanup, err := b.startClusterRig(ctx, n)
	if err != nil {
		return res, err
	}
	defer cleanup()

	// Throughput.
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sent, next atomic.Int64
	var sendErr atomic.Value
	for range 16 {
		wg.Go(func() {
			msgs := make([]abi.OutgoingMessage, 100)
			for lctx.Err() == nil {
				i := next.Add(1)
				for j := range msgs {
					msgs[j] = abi.OutgoingMessage{Body: clusterBody("load", 100)}
				}
				h := rig.hosts[int(i)%len(rig.hosts)]
				q := rig.queues[int(i/int64(len(rig.hosts)))%len(rig.queues)]
				if err := rig.send(lctx, h, q, msgs); err != nil {
					if lctx.Err() == nil {
						sendErr.Store(err)
					}
					continue
				}
				sent.Add(100)
			}
		})
	}
	time.Sleep(time.Second)
	h0, t0 := rig.seen.handled.Load(), time.Now()
	deadline := t0.Add(b.pointDur)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		c.Store(rig.seen.handled.Load() - h0)
	}
	res.rate = float64(rig.seen.handled.Load()-h0) / time.Since(t0).Seconds()
	stop()
	wg.Wait()
	if e, ok := sendErr.Load().(error); ok && res.rate == 0 {
		return res, e
	}
	// Drain what the producers left.
	for end := time.Now().Add(60 * time.Second); rig.seen.handled.Load() < sent.Load() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}

	// Latency.
	owners, err := rig.owners(ctx)
	if err != nil {
		return res, err
	}
	for i := range 400 {
		h := rig.hosts[i%len(rig.hosts)]
		q := rig.queues[(i/len(rig.hosts))%len(rig.queues)]
		tag := "same"
		if owners[q] != h.id {
			tag = "cross"
		}
		if err := rig.send(ctx, h, q, []abi.OutgoingMessage{{Body: clusterBody(tag, 100)}}); err != nil {
			return res, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	rig.seen.mu.Lock()
	res.same = slices.Clone(rig.seen.lat["same"])
	res.cross = slices.Clone(rig.seen.lat["cross"])
	rig.seen.mu.Unlock()
	slices.Sort(res.same)
	slices.Sort(res.cross)
	if len(res.same) == 0 {
		return res, fmt.Errorf("no latency sample was handled")
	}

	// Handover after a clean shutdown of one queue's owner.
	if n > 1 {
		q := rig.queues[0]
		var victim, other *clusterHost
		for _, h := range rig.hosts {
			if h.id == owners[q] {
				victim = h
			} else if other == nil {
				other = h
			}
		}
		if victim != nil && other != nil {
			hctx, hstop := context.WithCancel(ctx)
			var hw sync.WaitGroup
			hw.Go(func() {
				for hctx.Err() == nil {
					_ = rig.send(hctx, other, q, []abi.OutgoingMessage{{Body: clusterBody("handover", 100)}})
					time.Sleep(20 * time.Millisecond)
				}
			})
			t := time.Now()
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			victim.h.Shutdown(sctx)
			cancel()
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				rig.seen.mu.Lock()
				got := rig.seen.first["after-"+victim.id]
				rig.seen.mu.Unlock()
				if !got.IsZero() {
					res.handover = got.Sub(t)
					break
				}
				// Messages sent from now on are after the shutdown began.
				_ = rig.send(ctx, other, q, []abi.OutgoingMessage{{Body: clusterBody("after-"+victim.id, 100)}})
			}
			hstop()
			hw.Wait()
		}
	}
	return res, nil
}
