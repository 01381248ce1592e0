package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// HostileConfig configures the hostile-worker soak: several hostile
// workers (each in its own space) invoked in a loop beside a bystander
// worker whose deliveries are timed, for Duration.
type HostileConfig struct {
	Duration time.Duration
	Bin      string // host binary (default: go build ./cmd/takohost)
	Out      io.Writer
}

// HostileResult is what the soak measured.
type HostileResult struct {
	HostCrashes      int
	HostRSSMaxMiB    int64
	HostRSSEndMiB    int64
	HostCPUPercent   float64 // host process CPU over the run, % of one core
	Invocations      map[string]int
	BystanderSent    int
	BystanderLost    int
	BystanderP50     time.Duration
	BystanderP99     time.Duration
	BystanderMax     time.Duration
	PoisonDeliveries int
	Violations       []string
}

// hostileWorkers are fetch handlers that each used to end the host
// (issue 13); %HOSTPORT% and %SINK% are filled in.
var hostileWorkers = map[string]string{
	"flat":        "let a=[];for(let i=0;i<3e5;i++)a=[a];a.flat(Infinity);",
	"flat2e6":     "let a=[];for(let i=0;i<2e6;i++)a=[a];a.flat(Infinity);",
	"arraybuffer": "new (Object.getPrototypeOf(ArrayBuffer))(2**40);",
	"doubling":    "let s='x'; for(;;) s = s + s;",
	"regexp":      "/(?=a)(a+)+$/.test('a'.repeat(40) + 'b');",
	"spin":        "for(;;){}",
	"loopback":    "await fetch('http://localhost:%HOSTPORT%/v2/spaces');",
	"connections": "await Promise.all(Array.from({length: 1000}, () => fetch('%SINK%').then(r => r.text())));",
}

const poisonWorker = `export default {
  async fetch(req, env) { await env.Q.send("poison"); return new Response("sent"); },
  async queue(batch) { let a=[];for(let i=0;i<3e5;i++)a=[a];a.flat(Infinity); },
};`

// RunHostile runs the soak against the real host binary.
func RunHostile(ctx context.Context, cfg HostileConfig) (*HostileResult, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 60 * time.Second
	}
	res := &HostileResult{Invocations: map[string]int{}}
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = harness.BuildHost(); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "torture-hostile-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	rec, err := harness.StartRecorder()
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	h, err := harness.NewHost(bin, filepath.Join(tmp, "data"), "-allow-fetch", rec.Addr()+",localhost", "-handler-timeout", "3s", "-shutdown-grace", "2s")
	if err != nil {
		return nil, err
	}
	h.ReadyTimeout = 60 * time.Second
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if h.Running() {
			h.Term(10 * time.Second)
		}
	}()
	tok, err := harness.AdminToken(h.DataDir)
	if err != nil {
		return nil, err
	}
	c := &harness.Client{Base: h.Base(), Token: tok, Timeout: 30 * time.Second}
	_, hostPort, _ := net.SplitHostPort(h.Addr)

	by, err := harness.CreateTopology(ctx, c, harness.TopologyOptions{Space: "bystander", RecorderURL: rec.URL(), Scope: "bystander", MaxBatchSize: 1, Concurrency: 2})
	if err != nil {
		return nil, fmt.Errorf("bystander: %w", err)
	}
	type hw struct{ name, space, worker string }
	var hws []hw
	for name, code := range hostileWorkers {
		code = strings.ReplaceAll(strings.ReplaceAll(code, "%HOSTPORT%", hostPort), "%SINK%", rec.URL()+"/sink-hostile")
		sp := "hostile-" + name
		w, err := c.Create(ctx, sp, "w", harness.FormWorker, map[string]any{"handlers": []string{"fetch"}}, nil)
		if err != nil {
			return nil, err
		}
		v, err := c.Create(ctx, sp, "v", harness.FormVersion, map[string]any{"worker": harness.Ref(w), "mainModule": "main.js",
			"modules": []any{map[string]any{"name": "main.js", "content": "export default { async fetch() { " + code + " return new Response('survived'); } };"}}}, nil)
		if err != nil {
			return nil, err
		}
		if err := c.Put(ctx, sp, w, map[string]any{"handlers": []string{"fetch"}, "version": harness.Ref(v)}); err != nil {
			return nil, err
		}
		hws = append(hws, hw{name, sp, w})
	}
	// The poison worker: every message it sends crashes its queue handler.
	const psp = "hostile-poison"
	pq, err := c.Create(ctx, psp, "q", harness.FormQueue, harness.QueueSpec(0), nil)
	if err != nil {
		return nil, err
	}
	pw, err := c.Create(ctx, psp, "w", harness.FormWorker, map[string]any{"handlers": []string{"fetch", "queue"}}, nil)
	if err != nil {
		return nil, err
	}
	pv, err := c.Create(ctx, psp, "v", harness.FormVersion, map[string]any{"worker": harness.Ref(pw), "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": poisonWorker}},
		"queueProducerBindings": []any{map[string]any{"name": "Q", "resource": harness.Ref(pq)}}}, nil)
	if err != nil {
		return nil, err
	}
	if err := c.Put(ctx, psp, pw, map[string]any{"handlers": []string{"fetch", "queue"}, "version": harness.Ref(pv)}); err != nil {
		return nil, err
	}
	if _, err := c.Create(ctx, psp, "c", harness.FormConsumer, map[string]any{"queue": harness.Ref(pq), "worker": harness.Ref(pw),
		"maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 0}, nil); err != nil {
		return nil, err
	}
	hws = append(hws, hw{"poison-send", psp, pw})

	fmt.Fprintf(cfg.Out, "hostile: %d hostile workers and a bystander for %s on %s\n", len(hws), cfg.Duration, h.Addr)
	pid := h.Pid()
	cpu0, t0 := procCPU(pid), time.Now()
	loadCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range hws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				r, err := c.Do(loadCtx, "GET", "/v2/spaces/"+w.space+"/resources/"+w.worker+"/fetch/x", nil, nil)
				k := w.name + " "
				switch {
				case err != nil && loadCtx.Err() != nil:
					return
				case err != nil:
					k += "error"
				default:
					k += strconv.Itoa(r.Status)
				}
				mu.Lock()
				res.Invocations[k]++
				mu.Unlock()
			}
		}()
	}
	sentAt := map[string]time.Time{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			k := fmt.Sprintf("by-%d", i)
			at := time.Now()
			if sr, _, err := harness.Send(loadCtx, c, by.Space, by.Worker, "WORK", []string{fmt.Sprintf(`{"k":%q,"do":"ack"}`, k)}); err == nil && sr.OK {
				mu.Lock()
				sentAt[k] = at
				mu.Unlock()
			}
			select {
			case <-loadCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			if rss := procRSS(pid); rss > res.HostRSSMaxMiB {
				res.HostRSSMaxMiB = rss
			}
			if !h.Running() {
				res.HostCrashes++
				return
			}
		}
	}()
	wg.Wait()
	res.HostCPUPercent = 100 * (procCPU(pid) - cpu0) / time.Since(t0).Seconds()
	res.HostRSSEndMiB = procRSS(pid)
	if !h.Running() && res.HostCrashes == 0 {
		res.HostCrashes = 1
	}

	// Every bystander message delivered; latency from send to delivery.
	_ = harness.Poll(15*time.Second, func() error {
		for k := range sentAt {
			if len(rec.Deliveries(k)) == 0 {
				return fmt.Errorf("%s not delivered", k)
			}
		}
		return nil
	})
	var lat []time.Duration
	for k, at := range sentAt {
		ds := rec.Deliveries(k)
		if len(ds) == 0 {
			res.BystanderLost++
			continue
		}
		lat = append(lat, ds[0].Recv.Sub(at))
	}
	res.BystanderSent = len(sentAt)
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		res.BystanderP50, res.BystanderP99, res.BystanderMax = lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
	}
	if r, err := c.Do(ctx, "GET", "/v2/spaces/"+psp+"/resources/"+pw+"/logs?limit=1000", nil, nil); err == nil {
		res.PoisonDeliveries = strings.Count(string(r.Body), "stack overflow")
		if res.PoisonDeliveries == 0 {
			fmt.Fprintf(cfg.Out, "hostile: the poison worker's log: %s\n", harness.Tail(string(r.Body), 1500))
			fmt.Fprintf(cfg.Out, "hostile: host output: %s\n", harness.Tail(h.Out.String(), 3000))
		}
	}

	if res.HostCrashes > 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("the host process ended %d times:\n%s", res.HostCrashes, harness.Tail(h.Out.String(), 3000)))
	}
	if res.BystanderLost > 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("%d of %d bystander messages were not delivered", res.BystanderLost, res.BystanderSent))
	}
	if res.BystanderSent == 0 {
		res.Violations = append(res.Violations, "the bystander sent nothing")
	}
	keys := make([]string, 0, len(res.Invocations))
	for k := range res.Invocations {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var inv []string
	for _, k := range keys {
		inv = append(inv, fmt.Sprintf("%s:%d", k, res.Invocations[k]))
	}
	fmt.Fprintf(cfg.Out, "hostile: host crashes %d; host RSS max %d MiB, at the end %d MiB; host CPU %.0f%% of a core\n", res.HostCrashes, res.HostRSSMaxMiB, res.HostRSSEndMiB, res.HostCPUPercent)
	fmt.Fprintf(cfg.Out, "hostile: bystander %d sent, %d lost; send-to-delivery p50 %s p99 %s max %s\n", res.BystanderSent, res.BystanderLost,
		res.BystanderP50.Round(time.Millisecond), res.BystanderP99.Round(time.Millisecond), res.BystanderMax.Round(time.Millisecond))
	fmt.Fprintf(cfg.Out, "hostile: invocations %s; poison queue handler crashes logged %d\n", strings.Join(inv, " "), res.PoisonDeliveries)
	for _, v := range res.Violations {
		fmt.Fprintln(cfg.Out, "VIOLATION:", v)
	}
	return res, nil
}

// procRSS is a process's resident set in MiB (0 when unknown).
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize()) >> 20
}

// procCPU is a process's user+system CPU time in seconds (clock ticks of
// 1/100 s, Linux's USER_HZ).
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}
