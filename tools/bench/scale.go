package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// The scale phases run in a child process (this binary with -child), so
// that resident memory is the host's alone and not what earlier phases of
// the run left in this process's heap.

type childResult struct {
	Err string `json:"err,omitempty"`
	// idle
	Queues       int     `json:"queues"`
	SetupSeconds float64 `json:"setupSeconds"`
	IdleSeconds  float64 `json:"idleSeconds"`
	IdleCPU      float64 `json:"idleCpuSeconds"`
	// both
	RSSBase  float64 `json:"rssBase"`
	RSS      float64 `json:"rss"`
	HeapBase float64 `json:"heapBase"`
	Heap     float64 `json:"heap"`
	// backlog
	Messages      int     `json:"messages"`
	OpenSeconds   float64 `json:"openSeconds"`
	StartSeconds  float64 `json:"startSeconds"`
	FirstDelivery float64 `json:"firstDeliverySeconds"`
	FirstBatch    int     `json:"firstBatch"`
	HeapStore     float64 `json:"heapStore"` // after store.Open, before the engine
	AttachSeconds float64 `json:"attachSeconds"`
	RestartCPU    float64 `json:"restartCpuSeconds"`
	// inspection of the backlog (ext-inspect): medians
	PageFirst float64 `json:"pageFirstSeconds"` // a listing page of 100 from the head
	PageMid   float64 `json:"pageMidSeconds"`   // a listing page of 100 from the middle
	Counts    float64 `json:"countsSeconds"`    // the counts by state (Engine.Inspect)
}

func heapInuse() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse)
}

// runChild is main for -child: it prints one childResult as JSON.
func runChild(kind, dir string, queues, backlog int, idle time.Duration, profile string) {
	var r childResult
	var err error
	switch kind {
	case "idle-host":
		r, err = childIdle(dir, "host", queues, idle, profile)
	case "idle-engine":
		r, err = childIdle(dir, "engine", queues, idle, profile)
	case "backlog":
		r, err = childBacklog(dir, backlog, profile)
	default:
		err = fmt.Errorf("unknown child %q", kind)
	}
	if err != nil {
		r.Err = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(r)
	os.Exit(0)
}

// populateIdle writes, into a journaled store in dir, the resource
// records of a host with n queues each with a consumer, all attached to
// one ModuleWorker with a selected version: what host.New rebuilds from.
func populateIdle(ctx context.Context, dir string, n int) error {
	st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	res := func(uid, name, form, spec, observed string) store.Mutation {
		return store.PutResource{Resource: store.Resource{UID: uid, Space: benchSpace, Name: name, FormURL: form, Offering: "embedded",
			Spec: json.RawMessage(spec), Observed: json.RawMessage(observed), State: store.StateActive, Generation: 1, ETag: `"1-bench"`,
			CreateTime: now, UpdateTime: now}}
	}
	mods, _ := json.Marshal([]map[string]string{{"name": "main.js", "content": benchWorker}})
	ver := res("uid-v1", "v1", formVersion, fmt.Sprintf(`{"worker":{"resourceUid":"uid-w1"},"mainModule":"main.js","modules":%s}`, mods), `{}`).(store.PutResource)
	ver.Resource.Exports = []string{"fetch", "queue"}
	muts := []store.Mutation{
		res("uid-w1", "w1", formWorker, `{"handlers":["fetch","queue"],"version":{"resourceUid":"uid-v1"}}`, `{}`),
		ver,
	}
	for i := 0; i < n; i++ {
		q, c := fmt.Sprintf("queue-%05d", i), fmt.Sprintf("consumer-%05d", i)
		muts = append(muts,
			res("uid-"+q, q, formQueue, `{"messageRetentionSeconds":345600}`, `{"queueExists":true,"messageCount":0}`),
			res("uid-"+c, c, formConsumer, fmt.Sprintf(`{"queue":{"resourceUid":"uid-%s"},"worker":{"resourceUid":"uid-w1"},"maxBatchSize":100,"maxBatchTimeoutSeconds":5,"maxConcurrency":4,"maxRetries":3,"retryDelaySeconds":30}`, q),
				`{"queueExists":true,"workerExists":true,"consumerAttached":true}`))
		if len(muts) >= 200 {
			if err := st.Apply(ctx, muts...); err != nil {
				st.Close()
				return err
			}
			muts = muts[:0]
		}
	}
	if len(muts) > 0 {
		if err := st.Apply(ctx, muts...); err != nil {
			st.Close()
			return err
		}
	}
	return st.Close()
}

// childIdle starts, on the store populateIdle wrote, either the full host
// (mode "host": host.New + Start, which rebuilds the engine from the
// records and runs the observation loop) or just the store and the engine
// with every queue added and consumer attached to the goja handler (mode
// "engine"); waits settle, then measures CPU over idle.
func childIdle(dir, mode string, n int, idle time.Duration, profile string) (childResult, error) {
	ctx := context.Background()
	r := childResult{Queues: n}
	r.HeapBase, r.RSSBase = heapInuse(), rssBytes()
	t0 := time.Now()
	switch mode {
	case "host":
		h, err := host.New(ctx, host.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger})
		if err != nil {
			return r, err
		}
		if err := h.Start(); err != nil {
			return r, err
		}
	default:
		st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
		if err != nil {
			return r, err
		}
		h, _, err := jsKind.New(ctx)
		if err != nil {
			return r, err
		}
		eng := delivery.New(st, resolverFunc(func(context.Context, string) (abi.Handler, error) { return h, nil }), delivery.Options{Logger: quietLogger})
		for i := 0; i < n; i++ {
			q := fmt.Sprintf("queue-%05d", i)
			if err := eng.AddQueue(ctx, delivery.QueueConfig{UID: "uid-" + q, Name: q, MessageRetentionSeconds: 345600}); err != nil {
				return r, err
			}
		}
		if err := eng.Start(ctx); err != nil {
			return r, err
		}
		for i := 0; i < n; i++ {
			q, c := fmt.Sprintf("queue-%05d", i), fmt.Sprintf("consumer-%05d", i)
			if err := eng.Attach(ctx, delivery.ConsumerConfig{UID: "uid-" + c, QueueUID: "uid-" + q, WorkerUID: "uid-w1", MaxBatchSize: 100,
				MaxBatchTimeoutSeconds: 5, MaxConcurrency: 4, MaxRetries: 3, RetryDelaySeconds: 30}); err != nil {
				return r, err
			}
		}
	}
	r.SetupSeconds = time.Since(t0).Seconds()
	time.Sleep(3 * time.Second) // let start-up work (the first observation) settle
	r.Heap = heapInuse()
	stop, err := startCPUProfile(profile)
	if err != nil {
		return r, err
	}
	sp := startSpan()
	time.Sleep(idle)
	wall, cpu := sp.end()
	stop()
	r.IdleSeconds, r.IdleCPU = wall.Seconds(), cpu.Seconds()
	r.RSS = rssBytes()
	return r, nil
}

// childBacklog: the restart of a host whose store holds the backlog:
// store.Open (replay), engine New + AddQueue + Start (loading every
// message), Attach, until the first batch reaches the goja handler. Then
// the memory that the backlog holds.
func childBacklog(dir string, n int, profile string) (childResult, error) {
	ctx := context.Background()
	r := childResult{Messages: n}
	h, _, err := jsKind.New(ctx)
	if err != nil {
		return r, err
	}
	r.HeapBase, r.RSSBase = heapInuse(), rssBytes()
	first := make(chan int, 1)
	block := make(chan struct{})
	var once sync.Once
	wrapped := abi.HandlerFunc(func(ctx context.Context, b *abi.Batch) error {
		once.Do(func() { first <- len(b.Messages) })
		err := h.HandleBatch(ctx, b)
		<-block // hold the consumer so that the state stays as loaded
		return err
	})
	stop, err := startCPUProfile(profile)
	if err != nil {
		return r, err
	}
	defer stop()
	t0 := time.Now()
	cpu0 := cpuTime()
	st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
	if err != nil {
		return r, err
	}
	r.OpenSeconds = time.Since(t0).Seconds()
	r.HeapStore = heapInuse() // a GC: excluded from the restart time below
	gcTime := time.Since(t0).Seconds() - r.OpenSeconds
	t0 = t0.Add(time.Duration(gcTime * float64(time.Second)))
	eng := delivery.New(st, resolverFunc(func(context.Context, string) (abi.Handler, error) { return wrapped, nil }),
		delivery.Options{Logger: quietLogger, HandlerTimeout: 10 * time.Minute})
	if err := eng.AddQueue(ctx, delivery.QueueConfig{UID: "q1", Name: "backlog", MessageRetentionSeconds: 1209600}); err != nil {
		return r, err
	}
	if err := eng.Start(ctx); err != nil {
		return r, err
	}
	r.StartSeconds = time.Since(t0).Seconds()
	if err := eng.Attach(ctx, delivery.ConsumerConfig{UID: "c1", QueueUID: "q1", WorkerUID: "w1", MaxBatchSize: 100,
		MaxBatchTimeoutSeconds: 0, MaxConcurrency: 1, MaxRetries: 3, RetryDelaySeconds: 30}); err != nil {
		return r, err
	}
	r.AttachSeconds = time.Since(t0).Seconds()
	select {
	case r.FirstBatch = <-first:
		r.FirstDelivery = time.Since(t0).Seconds()
		r.RestartCPU = (cpuTime() - cpu0).Seconds()
		stop()
	case <-time.After(2 * time.Minute):
		return r, fmt.Errorf("no delivery within 2 minutes of the restart")
	}
	r.Heap, r.RSS = heapInuse(), rssBytes()
	if err := measureInspection(ctx, eng, "q1", &r); err != nil {
		return r, err
	}
	return r, nil
}

// measureInspection times what a viewer of the backlog's queue asks for
// (ext-inspect): a listing page of 100 from the head and from the middle
// (reached by following the pages' cursors, not timed), and the counts by
// state; each the median of several calls.
func measureInspection(ctx context.Context, eng *delivery.Engine, uid string, r *childResult) error {
	median := func(k int, f func() error) (float64, error) {
		ts := make([]float64, 0, k)
		for range k {
			t := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			ts = append(ts, time.Since(t).Seconds())
		}
		sort.Float64s(ts)
		return ts[len(ts)/2], nil
	}
	page := func(c delivery.Cursor) func() error {
		return func() error {
			p, _, _, err := eng.MessagePage(ctx, uid, c, 100)
			if err == nil && len(p) != 100 {
				err = fmt.Errorf("a listing page held %d messages, not 100", len(p))
			}
			return err
		}
	}
	var err error
	if r.PageFirst, err = median(21, page(delivery.Cursor{})); err != nil {
		return err
	}
	mid := delivery.Cursor{}
	for i := 0; i < r.Messages/200; i++ {
		_, next, more, err := eng.MessagePage(ctx, uid, mid, 100)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		mid = next
	}
	if r.PageMid, err = median(21, page(mid)); err != nil {
		return err
	}
	r.Counts, err = median(5, func() error { _, err := eng.Inspect(ctx, uid); return err })
	return err
}

// child runs this binary with -child and decodes its result.
func (b *bench) child(kind, dir string, extra ...string) (childResult, error) {
	var r childResult
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	args := append([]string{"-child", kind, "-child-dir", dir}, extra...)
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("child %s: %w", kind, err)
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("child %s: %w: %q", kind, err, out)
	}
	if r.Err != "" {
		return r, fmt.Errorf("child %s: %s", kind, r.Err)
	}
	return r, nil
}

func (b *bench) idleLayer(ctx context.Context, queues int) {
	// The host observes every resource every 10 s: the window must hold at
	// least one observation (3 s settle + idle > 10 s).
	idle := 25 * time.Second
	if b.quick {
		idle = 10 * time.Second
	}
	s := b.rep.section(fmt.Sprintf("Idle cost of %s queues each with a consumer (host; runtime/store + runtime/delivery alone)", group(strconv.Itoa(queues))),
		fmt.Sprintf("A journaled store is written with the resource records of %d queues and %d consumers (maxBatchSize 100, maxBatchTimeoutSeconds 5, maxConcurrency 4), "+
			"all on one ModuleWorker with a selected version, as the host keeps them. Then, each in a fresh child process (so that resident memory is the host's alone): "+
			"the full host (host.New + Start on that directory: it rebuilds the engine from the records, attaches every consumer and runs its observation loop every 10 s), "+
			"and, as the layer below, just the store and the delivery engine with every queue added and consumer attached to the goja handler. "+
			"After a 3 s settle, %s with nothing to deliver; CPU from the child's getrusage over that time, RSS from /proc/self/status at its end. "+
			"Limits: the issue's targets (1%% of one core, 200 MiB).", queues, queues, idle),
		"process", "idle CPU (of one core)", "ratio to 1%", "resident memory", "ratio to 200 MiB", "RSS before start", "Go heap in use", "heap per queue+consumer", "start-up time")
	dir, err := os.MkdirTemp(b.dir, "idle-")
	if err != nil {
		s.NotMeasured = err.Error()
		return
	}
	defer os.RemoveAll(dir)
	b.prog.phase(fmt.Sprintf("idle: writing the records of %d queues and consumers", queues), "")
	err = populateIdle(ctx, dir, queues)
	b.prog.end()
	if err != nil {
		s.NotMeasured = "writing the resource records: " + err.Error()
		return
	}
	for _, mode := range []string{"host", "engine"} {
		b.prog.phase(fmt.Sprintf("idle: %s with %d queues and consumers (child process, %s idle)", mode, queues, idle), "")
		prof := filepath.Join(b.dir, "idle-"+mode+".pprof")
		r, err := b.child("idle-"+mode, dir, "-queues", strconv.Itoa(queues), "-point", idle.String(), "-child-profile", prof)
		b.prog.end()
		if err != nil {
			s.note("%s: %v", mode, err)
			continue
		}
		cpu := r.IdleCPU / r.IdleSeconds
		name := "full host (host.New)"
		if mode == "engine" {
			name = "store + delivery engine + goja runtime"
		}
		if mode == "host" {
			b.profiles = append(b.profiles, profileRun{Name: "the idle full host (child process, over the idle time)", Path: prof, Section: s})
		}
		s.row(name, pct(cpu), ratio(cpu, 0.01), mib(r.RSS), ratio(r.RSS, 200<<20), mib(r.RSSBase), mib(r.Heap),
			num((r.Heap-r.HeapBase)/float64(queues))+" B", num(r.SetupSeconds)+" s")
		if mode == "host" || b.results["idle/rss"] == 0 {
			b.results["idle/cpu"] = cpu
			b.results["idle/rss"] = r.RSS
			b.notes["idle/what"] = name
		}
	}
}

func (b *bench) backlogLayer(ctx context.Context, n int) {
	s := b.rep.section(fmt.Sprintf("Backlog of %s messages of 1 KiB: memory and restart-to-first-delivery", group(strconv.Itoa(n))),
		fmt.Sprintf("Size actually used this run: %d messages of 1 KiB (the issue's figure is 1 000 000; -backlog scales it). The store is filled by 16 goroutines "+
			"each applying 100 AcceptMessage at a time, accepted now (store.FillForBenchmark dates its messages at the epoch, so a restarted engine expires them all), then a restart is timed in a fresh child process: store.Open (replay) → delivery.New, AddQueue, Start (loads every message) → "+
			"Attach → the first batch reaches the goja handler. Memory is the child's after that first delivery (RSS from /proc/self/status, Go heap in use after GC), "+
			"minus the process before the store opened. The page cache is warm (the fill just wrote the journal; caches were not dropped on a shared machine). "+
			"Limits: the bare journal.Open replay and a raw read of the same files, in the same run.", n),
		"figure", "value", "limit", "ratio")
	dir, err := os.MkdirTemp(b.dir, "backlog-")
	if err != nil {
		s.NotMeasured = err.Error()
		return
	}
	defer os.RemoveAll(dir)
	b.prog.phase(fmt.Sprintf("backlog: filling the store with %d messages of 1 KiB", n), "msgs")
	t0 := time.Now()
	err = fillBacklog(ctx, dir, n, 1024, b.prog.counter())
	fill := time.Since(t0)
	b.prog.end()
	if err != nil {
		s.NotMeasured = "filling the store: " + err.Error()
		return
	}
	b.prog.phase("backlog: raw read and bare journal replay of the same files", "")
	raw, rawBytes := rawRead(dir)
	jt, frames, err := bareReplay(ctx, dir)
	b.prog.end()
	if err != nil {
		s.NotMeasured = "journal replay: " + err.Error()
		return
	}
	b.prog.phase("backlog: store-only recovery (store.MeasureRecovery)", "")
	rs, err := store.MeasureRecovery(ctx, dir, store.Options{Logger: quietLogger})
	b.prog.end()
	if err != nil {
		s.NotMeasured = "store.MeasureRecovery: " + err.Error()
		return
	}
	b.prog.phase("backlog: restart to first delivery (child process)", "")
	prof := filepath.Join(b.dir, "restart.pprof")
	r, err := b.child("backlog", dir, "-backlog", strconv.Itoa(n), "-child-profile", prof)
	b.prog.end()
	if err != nil {
		s.NotMeasured = err.Error()
		return
	}
	perMsgRSS := (r.RSS - r.RSSBase) / float64(n)
	perMsgHeap := (r.Heap - r.HeapBase) / float64(n)
	s.row("filling the store", dur(fill)+fmt.Sprintf(" (%s msgs/s)", num(float64(n)/fill.Seconds())), "", "")
	s.row("journal on disk", mib(float64(rawBytes))+fmt.Sprintf(", %d frames", frames), "", "")
	s.row("resident memory per message (RSS after − before)", num(perMsgRSS)+" B", "1 KiB body", ratio(perMsgRSS, 1024))
	s.row("Go heap per message (in use after GC)", num(perMsgHeap)+" B", "1 KiB body", ratio(perMsgHeap, 1024))
	s.row("  of which the store's index (after store.Open, before the engine)", num((r.HeapStore-r.HeapBase)/float64(n))+" B", "", "")
	s.row("  of which the delivery engine's (after Start and the first delivery)", num((r.Heap-r.HeapStore)/float64(n))+" B", "", "")
	s.row("resident memory of the child with the backlog", mib(r.RSS), "", "")
	s.row("raw read of the journal files", dur(raw), "", "")
	s.row("bare journal.Open replay", dur(jt), "raw read", ratio(raw.Seconds(), jt.Seconds()))
	s.row("store-only recovery (store.MeasureRecovery)", dur(rs.Duration), "bare journal replay", ratio(jt.Seconds(), rs.Duration.Seconds()))
	s.row("restart: store.Open in the child", num(r.OpenSeconds)+" s", "store-only recovery", ratio(rs.Duration.Seconds(), r.OpenSeconds))
	s.row("restart: + engine Start (messages loaded)", num(r.StartSeconds)+" s", "", "")
	s.row("restart: + Attach returned", num(r.AttachSeconds)+" s", "", "")
	s.row("restart-to-first-delivery", num(r.FirstDelivery)+" s", "bare journal replay", ratio(jt.Seconds(), r.FirstDelivery))
	s.row("CPU time of the child during the restart (getrusage; includes one GC for the heap figure)", num(r.RestartCPU)+" s", "restart wall time", ratio(r.RestartCPU, r.FirstDelivery))
	s.row("inspection: counts by state (Engine.Inspect, the stats route; kept as messages change)", fmt.Sprintf("%.3f ms", r.Counts*1e3), "", "")
	s.row("inspection: a listing page of 100 from the head", fmt.Sprintf("%.1f µs", r.PageFirst*1e6), "counts by state", ratio(r.PageFirst, r.Counts))
	s.row("inspection: a listing page of 100 from the middle", fmt.Sprintf("%.1f µs", r.PageMid*1e6), "a page from the head", ratio(r.PageMid, r.PageFirst))
	b.profiles = append(b.profiles, profileRun{Name: "the restart with the backlog (child process, store.Open to the first delivery)", Path: prof, Section: s})
	s.note("When the restart's CPU time is well below its wall time, the restart waited (for I/O or locks) rather than computed; the profile below then covers only the computing part.")
	s.note("Ratios of times are limit time ÷ measured time (100%% would mean no cost above the limit). First batch: %d messages.", r.FirstBatch)
	b.results["backlog/first"] = r.FirstDelivery
}

// rawRead reads every file of dir sequentially.
func rawRead(dir string) (time.Duration, int64) {
	start := time.Now()
	var n int64
	entries, _ := os.ReadDir(dir)
	buf := make([]byte, 1<<20)
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for {
			k, err := f.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		f.Close()
	}
	return time.Since(start), n
}

// fillBacklog stores n messages of size bytes in queue q1 of a journaled
// store in dir, 100 per Apply from 16 goroutines, accepted now, with IDs
// of 32 hex digits like the engine's.
func fillBacklog(ctx context.Context, dir string, n, size int, counter *atomic.Int64) error {
	st, _, err := store.Open(ctx, dir, store.Options{Logger: quietLogger})
	if err != nil {
		return err
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			muts := make([]store.Mutation, 0, 100)
			for {
				lo := next.Add(100) - 100
				if lo >= int64(n) {
					return
				}
				hi := min(lo+100, int64(n))
				now := time.Now().UnixMilli()
				muts = muts[:0]
				for i := lo; i < hi; i++ {
					muts = append(muts, store.AcceptMessage{Message: store.Message{Queue: "q1", ID: fmt.Sprintf("%032x", i), AcceptedAt: now, VisibleAt: now, Size: size}, Body: body})
				}
				if err := st.Apply(ctx, muts...); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				counter.Add(hi - lo)
			}
		}()
	}
	wg.Wait()
	cerr := st.Close()
	if e, ok := firstErr.Load().(error); ok {
		return e
	}
	return cerr
}
