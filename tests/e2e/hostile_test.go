package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestHostileWorkersOnTheRealBinary runs, against the host binary, each
// worker of issue #13 that used to end the whole host: each now fails its
// own invocation with a specific reason in its worker's log, hostile
// modules are refused at admission, and a bystander worker in another
// space keeps delivering with its normal latency; the host process is
// still running at the end.
func TestHostileWorkersOnTheRealBinary(t *testing.T) {
	e := startEnv(t, hostOpts{noStart: true, args: []string{"-handler-timeout", "3s", "-shutdown-grace", "1s"}})
	e.host.Args = []string{"-allow-fetch", e.rec.Addr() + ",localhost", "-handler-timeout", "3s", "-shutdown-grace", "1s"}
	e.start()
	ctx := ctxT(t, 300*time.Second)
	c := e.admin
	_, hostPort, _ := net.SplitHostPort(e.host.Addr)

	// The bystander: another space, a message every 200 ms, each timed
	// from send to delivery.
	by := e.topology(harness.TopologyOptions{Space: "s-bystander", MaxBatchSize: 1})
	var mu sync.Mutex
	sentAt := map[string]time.Time{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			k := fmt.Sprintf("by-%d", i)
			mu.Lock()
			sentAt[k] = time.Now()
			mu.Unlock()
			if sr, _, err := harness.Send(ctx, c, by.Space, by.Worker, "WORK", []string{body(k, "ack")}); err != nil || !sr.OK {
				t.Errorf("bystander send %s: %v %+v", k, err, sr)
				return
			}
		}
	}()

	const sp = "s-hostile"
	worker, err := c.Create(ctx, sp, "h", harness.FormWorker, map[string]any{"handlers": []string{"fetch"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	version := func(name, code string) (string, error) {
		return c.Create(ctx, sp, name, harness.FormVersion, map[string]any{
			"worker": harness.Ref(worker), "mainModule": "main.js",
			"modules": []any{map[string]any{"name": "main.js", "content": code}},
		}, nil)
	}
	logs := func() string {
		r, err := c.Do(ctx, "GET", "/v2/spaces/"+sp+"/resources/"+worker+"/logs?limit=1000", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Body)
	}

	// Admission: nothing of these runs in the host.
	for name, src := range map[string]string{
		"brackets": "export default " + strings.Repeat("[", 400000) + strings.Repeat("]", 400000) + ";",
		"proxy":    "export default new Proxy({}, { getOwnPropertyDescriptor() { for (;;) {} } });",
		"regexp":   "export default new Proxy({}, { getOwnPropertyDescriptor() { return {value: /(?=a)(a+)+$/.test('a'.repeat(40) + 'b'), configurable: true}; } });",
	} {
		_, err := version("adm-"+name, src)
		if err == nil || !strings.Contains(err.Error(), "invalid_spec") {
			t.Errorf("admission of %s: %v, want an invalid_spec refusal", name, err)
		}
		t.Logf("admission of %s: %.300v", name, err)
	}

	for _, hc := range []struct{ name, code, reason string }{
		{"flat", "let a=[];for(let i=0;i<3e5;i++)a=[a];a.flat(Infinity);", "stack overflow"},
		{"arraybuffer", "new (Object.getPrototypeOf(ArrayBuffer))(2**40);", "memory"},
		{"doubling", "let s='x'; for(;;) s = s + s;", "memory cap"},
		{"regexp", "/(?=a)(a+)+$/.test('a'.repeat(40) + 'b');", "time limit"},
		{"loopback", "const r = await fetch('http://localhost:" + hostPort + "/v2/spaces'); return new Response(String(r.status));", "loopback and private addresses"},
		{"connections", "const rs = await Promise.all(Array.from({length: 2000}, (_, i) => fetch('" + e.rec.URL() + "/sink-conn').then(r => r.status))); return new Response(String(rs.length));", ""},
	} {
		v, err := version("v-"+hc.name, "export default { async fetch(req) { "+hc.code+" return new Response('survived'); } };")
		if err != nil {
			t.Fatalf("%s: %v", hc.name, err)
		}
		if err := c.Put(ctx, sp, worker, map[string]any{"handlers": []string{"fetch"}, "version": harness.Ref(v)}); err != nil {
			t.Fatalf("%s: select: %v", hc.name, err)
		}
		t0 := time.Now()
		r, err := c.Do(ctx, "GET", "/v2/spaces/"+sp+"/resources/"+worker+"/fetch/x", nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", hc.name, err)
		}
		t.Logf("%s: %d %.200s after %s", hc.name, r.Status, r.Body, time.Since(t0).Round(time.Millisecond))
		if hc.name == "connections" {
			if r.Status != 200 || string(r.Body) != "2000" {
				t.Errorf("2000 outbound fetches: %s", r)
			}
			continue
		}
		if r.Status != 500 {
			t.Errorf("%s: %s, want 500 worker_error", hc.name, r)
		} else {
			checkProblem(t, r, "worker_error")
		}
		if l := logs(); !strings.Contains(l, hc.reason) {
			t.Errorf("%s: the worker's log does not say %q: %.2000s", hc.name, hc.reason, l)
		}
		if !e.host.Running() {
			t.Fatalf("the host process ended after %s:\n%s", hc.name, harness.Tail(e.host.Out.String(), 3000))
		}
	}
	close(stop)
	wg.Wait()

	// Every bystander message was delivered, each within 3 s of its send.
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	if err := harness.Poll(10*time.Second, func() error {
		for k := range sentAt {
			if len(e.rec.Deliveries(k)) == 0 {
				return fmt.Errorf("bystander %s not delivered", k)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for k, at := range sentAt {
		d := e.rec.Deliveries(k)[0].Recv.Sub(at)
		worst = max(worst, d)
	}
	t.Logf("bystander: %d messages, worst send-to-delivery %s", len(sentAt), worst.Round(time.Millisecond))
	if worst > 3*time.Second {
		t.Errorf("a bystander message took %s from send to delivery while the hostile workers ran", worst)
	}
	if !e.host.Running() {
		t.Fatal("the host process ended")
	}
}
