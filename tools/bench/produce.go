package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/journal"
	"github.com/takoform/queuehost/runtime/store"
)

// The producer grid: the same points at every layer, so that the ratio of
// one layer to the one below says what that layer costs.
var bodySizes = []int{100, 4096, 127000}

type prodMode struct {
	Name    string
	PerCall int // messages per call
	Conc    int // concurrent callers
}

var prodModes = []prodMode{
	{"sendBatch(100) ×16 concurrent", 100, 16},
	{"send ×64 concurrent", 1, 64},
}

func pointKey(layer string, m prodMode, size int) string {
	return fmt.Sprintf("%s/%d/%d", layer, m.PerCall, size)
}

// sendFunc sends len(bodies) messages in one call (one Apply, one Send,
// one sendBatch).
type sendFunc func(ctx context.Context, bodies [][]byte) error

type prodPoint struct {
	Msgs      int64
	Wall, CPU time.Duration
	Err       error
}

func (p prodPoint) rate() float64 {
	if p.Wall <= 0 {
		return 0
	}
	return float64(p.Msgs) / p.Wall.Seconds()
}

// cpuPerMsg is CPU microseconds per message (CPU seconds per million).
func (p prodPoint) cpuPerMsg() float64 { return p.CPU.Seconds() / float64(max(p.Msgs, 1)) * 1e6 }

// cores is the share of all the machine's cores the point kept busy.
func (p prodPoint) cores() float64 {
	if p.Wall <= 0 {
		return 0
	}
	return p.CPU.Seconds() / p.Wall.Seconds() / float64(numCPU())
}

// runProducer calls send from m.Conc goroutines, each waiting for its call
// to return before the next, for d.
func runProducer(ctx context.Context, send sendFunc, m prodMode, size int, d time.Duration, counter *atomic.Int64) prodPoint {
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	bodies := make([][]byte, m.PerCall)
	for i := range bodies {
		bodies[i] = body
	}
	var pt prodPoint
	var firstErr atomic.Value
	var total atomic.Int64
	sp := startSpan()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < m.Conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := send(ctx, bodies); err != nil {
					if errors.Is(err, errCallFailed) && ctx.Err() == nil {
						continue // counted by the caller's wrapper; nothing sent
					}
					firstErr.CompareAndSwap(nil, err)
					return
				}
				total.Add(int64(m.PerCall))
				counter.Add(int64(m.PerCall))
			}
		}()
	}
	wg.Wait()
	pt.Wall, pt.CPU = sp.end()
	pt.Msgs = total.Load()
	if e, ok := firstErr.Load().(error); ok {
		pt.Err = e
	}
	return pt
}

// prodSection is the table every producer layer shares.
func (b *bench) prodSection(title, intro, below string) *section {
	cols := []string{"mode", "body", "msgs/s", "msgs per raw fsync (ratio to fsync)", "MiB/s ÷ synced MiB/s", "CPU s per 1M msgs", "CPU use (of all cores)"}
	if below != "" {
		cols = append(cols, "ratio to "+below)
	}
	cols = append(cols, "records per sync")
	return b.rep.section(title, intro, cols...)
}

func (b *bench) prodRow(s *section, layer, below string, m prodMode, size int, pt prodPoint, perSync string) {
	if pt.Err != nil {
		s.note("%s, %s: error: %v", m.Name, bytesize(size), pt.Err)
		if pt.Msgs == 0 {
			return
		}
	}
	rate := pt.rate()
	b.results[pointKey(layer, m, size)] = rate
	b.results[pointKey(layer, m, size)+"/cpu"] = pt.cores()
	mbps := rate * float64(size) / (1 << 20)
	cells := []string{m.Name, bytesize(size), num(rate), ratio(rate, b.rep.Limits.FsyncPerSec), pct(mbps / b.rep.Limits.SyncWriteMBps),
		num(pt.cpuPerMsg()), pct(pt.cores())}
	if below != "" {
		cells = append(cells, ratio(rate, b.results[pointKey(below, m, size)]))
	}
	cells = append(cells, perSync)
	s.row(cells...)
}

// storeLayer: store.Apply of AcceptMessage mutations on a fresh journaled
// store per point.
func (b *bench) storeLayer(ctx context.Context) {
	s := b.prodSection("Store Apply of AcceptMessage (runtime/store)",
		fmt.Sprintf("store.Open on a fresh directory per point; each call is one Apply of 1 or 100 AcceptMessage mutations (what Engine.Send writes), closed loop, %s per point. "+
			"msgs per raw fsync is messages/s ÷ the raw fdatasync rate; records per sync is the store's own Appends ÷ Syncs.", b.pointDur), "")
	for _, m := range prodModes {
		for _, size := range bodySizes {
			dir, err := os.MkdirTemp(b.dir, "store-")
			if err != nil {
				s.note("error: %v", err)
				return
			}
			st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
			if err != nil {
				s.note("store.Open: %v", err)
				os.RemoveAll(dir)
				return
			}
			send := acceptSender(st)
			c := b.prog.phase(fmt.Sprintf("store %s %s", m.Name, bytesize(size)), "msgs")
			pt := runProducer(ctx, send, m, size, b.pointDur, c)
			b.prog.end()
			stats := st.Stats()
			st.Close()
			os.RemoveAll(dir)
			b.prodRow(s, "store", "", m, size, pt, num(float64(stats.Appends)/float64(max(stats.Syncs, 1))))
		}
	}
}

// engineSendLayer: delivery.Engine.Send into a queue without a consumer.
func (b *bench) engineSendLayer(ctx context.Context) {
	s := b.prodSection("Engine.Send (runtime/delivery over runtime/store)",
		fmt.Sprintf("delivery.Engine over a fresh journaled store per point; each call is one Engine.Send of 1 or 100 messages into a queue with no consumer, closed loop, %s per point. "+
			"Ratio to store: this layer's messages/s ÷ the store Apply point above with the same mode and body.", b.pointDur), "store")
	for _, m := range prodModes {
		for _, size := range bodySizes {
			env, err := b.newEngineEnv(ctx, "send", nil)
			if err != nil {
				s.note("error: %v", err)
				return
			}
			send := func(ctx context.Context, bodies [][]byte) error {
				msgs := make([]abi.OutgoingMessage, len(bodies))
				for i, body := range bodies {
					msgs[i].Body = body
				}
				_, err := env.eng.Send(ctx, "q1", msgs)
				return err
			}
			c := b.prog.phase(fmt.Sprintf("engine.Send %s %s", m.Name, bytesize(size)), "msgs")
			pt := runProducer(ctx, send, m, size, b.pointDur, c)
			b.prog.end()
			stats := env.st.Stats()
			env.close()
			b.prodRow(s, "engine", "store", m, size, pt, num(float64(stats.Appends)/float64(max(stats.Syncs, 1))))
		}
	}
}

// engineEnv is a journaled store and an engine over it, in a fresh
// directory, with one queue "q1".
type engineEnv struct {
	dir string
	fs  *recFS
	st  *store.Journaled
	obs *obsStore
	eng *delivery.Engine
}

func (b *bench) newEngineEnv(ctx context.Context, name string, res abi.Resolver) (*engineEnv, error) {
	return b.newEngineEnvQueue(ctx, name, res, false)
}

// newEngineEnvQueue is newEngineEnv with queue q1 serialized or not.
func (b *bench) newEngineEnvQueue(ctx context.Context, name string, res abi.Resolver, serialized bool) (*engineEnv, error) {
	dir, err := os.MkdirTemp(b.dir, name+"-")
	if err != nil {
		return nil, err
	}
	env := &engineEnv{dir: dir, fs: &recFS{}}
	// The recording FS is the real disk underneath: zero ahead as the
	// host's store does there.
	env.st, _, err = store.Open(ctx, dir, store.Options{Logger: quietLogger, FS: env.fs, ZeroAhead: journal.DefaultZeroAhead})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	env.obs = &obsStore{Store: env.st}
	if res == nil {
		res = resolverFunc(func(context.Context, string) (abi.Handler, error) {
			return nil, fmt.Errorf("no handler")
		})
	}
	env.eng = delivery.New(env.obs, res, delivery.Options{Logger: quietLogger})
	if err := env.eng.AddQueue(ctx, delivery.QueueConfig{UID: "q1", Name: "bench", MessageRetentionSeconds: 1209600, Serialized: serialized}); err != nil {
		env.close()
		return nil, err
	}
	if err := env.eng.Start(ctx); err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}

func (env *engineEnv) close() {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if env.eng != nil {
		env.eng.Stop(sctx)
	}
	env.st.Close()
	os.RemoveAll(env.dir)
}

type resolverFunc func(ctx context.Context, workerUID string) (abi.Handler, error)

func (f resolverFunc) Resolve(ctx context.Context, workerUID string) (abi.Handler, error) {
	return f(ctx, workerUID)
}

// acceptSender is a producer's send on a bare store: one Apply of an
// AcceptMessage per body on queue "q" (what Engine.Send writes), with IDs
// unique within the sender.
func acceptSender(st interface {
	Apply(context.Context, ...store.Mutation) error
}) func(context.Context, [][]byte) error {
	var seq atomic.Int64
	return func(ctx context.Context, bodies [][]byte) error {
		now := time.Now().UnixMilli()
		muts := make([]store.Mutation, len(bodies))
		for i, body := range bodies {
			id := fmt.Sprintf("m%016x", seq.Add(1))
			muts[i] = store.AcceptMessage{Message: store.Message{Queue: "q", ID: id, AcceptedAt: now, VisibleAt: now, Size: len(body)}, Body: body}
		}
		return st.Apply(ctx, muts...)
	}
}
