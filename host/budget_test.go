package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/internal/loadprobe"
	"github.com/takoform/queuehost/schemas"
)

// fetchWorker creates a ModuleWorker with a fetch handler of code in
// space, selects its version and returns its UID.
func fetchWorker(t *testing.T, c *apiclient.Client, space, name, code string) string {
	t.Helper()
	ctx := t.Context()
	w, err := c.Create(ctx, space, name, schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Create(ctx, space, name+"-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": code}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Do(ctx, "PUT", "/v2/spaces/"+space+"/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch"}, "version": map[string]any{"resourceUid": v}}}, nil)
	if err != nil || r.Status != 202 {
		t.Fatalf("select: %v %v", r, err)
	}
	var op struct{ ID string }
	_ = json.Unmarshal(r.Body, &op)
	if _, err := c.Do(ctx, "GET", "/v2/spaces/"+space+"/operations/"+op.ID+"?wait=30", nil, nil); err != nil {
		t.Fatal(err)
	}
	return w
}

// One editor driving 96 concurrent 8 MiB requests at its own worker's
// fetch route (#36): the host holds at most its body budget of them at
// once (the rest are refused 503 memory_budget_in_use with Retry-After
// before a byte is buffered), the Go heap stays near that budget instead
// of growing by 50 MB a request, and a worker of another principal in
// another space answers every request meanwhile.
func TestBodyBudgetUnderAFloodOfLargeBodies(t *testing.T) {
	const maxMemory = 256 << 20 // a body budget of 128 MiB, 32 MiB a worker
	h, err := New(context.Background(), Config{DataDir: MemoryDataDir, Listen: "127.0.0.1:0", Logger: quietLogger(), HandlerTimeout: 30 * time.Second, MaxMemory: maxMemory})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	admin := apiclient.New(h.URL(), h.AdminToken())
	// The flooding editor and its worker; a bystander principal in its
	// own space.
	tokenOf := func(name, space string) string {
		r, err := admin.Do(t.Context(), "POST", "/v2/principals", map[string]any{"name": name, "grants": []any{map[string]any{"space": space, "role": "editor"}}}, nil)
		if err != nil || r.Status != 201 {
			t.Fatalf("principal %s: %v %v", name, r, err)
		}
		var out struct{ Token string }
		_ = json.Unmarshal(r.Body, &out)
		return out.Token
	}
	flooder, bystander := tokenOf("flooder", "demo"), tokenOf("bystander", "other")
	big := fetchWorker(t, apiclient.New(h.URL(), flooder), "demo", "big", `export default { async fetch(r) { const n = r.headers.get("x-read") ? (await r.arrayBuffer()).byteLength : 0; return new Response("read " + n); } };`)
	small := fetchWorker(t, apiclient.New(h.URL(), bystander), "other", "small", `export default { async fetch(r) { return new Response("ok"); } };`)

	// Both sandboxes started before the flood.
	for _, w := range []struct{ space, uid, tok string }{{"other", small, bystander}, {"demo", big, flooder}} {
		req, _ := http.NewRequest("GET", h.URL()+"/v2/spaces/"+w.space+"/resources/"+w.uid+"/fetch/", nil)
		req.Header.Set("Authorization", "Bearer "+w.tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("warming %s: %v %v", w.uid, res, err)
		}
		res.Body.Close()
	}
	heap := loadprobe.Heap(20 * time.Millisecond)

	// The bystander fetches its worker every 50 ms throughout.
	var bystanderErrs []string
	var bystanderN int
	var worst time.Duration
	var bmu sync.Mutex
	stopBystander := loadprobe.Every(50*time.Millisecond, func() {
		start := time.Now()
		req, _ := http.NewRequest("GET", h.URL()+"/v2/spaces/other/resources/"+small+"/fetch/", nil)
		req.Header.Set("Authorization", "Bearer "+bystander)
		res, err := http.DefaultClient.Do(req)
		d := time.Since(start)
		bmu.Lock()
		defer bmu.Unlock()
		bystanderN++
		worst = max(worst, d)
		if err != nil {
			bystanderErrs = append(bystanderErrs, err.Error())
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "ok" {
			bystanderErrs = append(bystanderErrs, fmt.Sprintf("%d %s", res.StatusCode, b))
		}
	})

	body := bytes.Repeat([]byte("x"), 8<<20)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for i := range 96 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", h.URL()+"/v2/spaces/demo/resources/"+big+"/fetch/", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+flooder)
			if i%2 == 0 {
				req.Header.Set("X-Read", "1") // half of them read the body
			}
			res, err := http.DefaultClient.Do(req)
			key := ""
			if err != nil {
				key = "error: " + err.Error()
			} else {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				var p struct{ Code string }
				_ = json.Unmarshal(b, &p)
				switch {
				case res.StatusCode == 200 && (string(b) == "read 0" || string(b) == fmt.Sprintf("read %d", len(body))):
					key = "200"
				case res.StatusCode == 503 && p.Code == "memory_budget_in_use" && res.Header.Get("Retry-After") != "":
					key = "503 memory_budget_in_use"
				default:
					key = fmt.Sprintf("%d %.200s", res.StatusCode, b)
				}
			}
			mu.Lock()
			codes[key]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	stopBystander()
	base, peakHeap := heap()

	lim := h.Budget().Limits()
	t.Logf("flood: %v; budget %d MiB (worker share %d MiB), peak reserved %d MiB, refused %d; Go heap in use %d MiB before, peak %d MiB; bystander %d requests, worst %v",
		codes, lim.Total>>20, lim.PerWorker>>20, h.Budget().Peak()>>20, h.Budget().Refused(), base>>20, peakHeap>>20, bystanderN, worst)
	if len(codes) != 2 || codes["200"] == 0 || codes["503 memory_budget_in_use"] == 0 {
		t.Fatalf("every flood request must be answered 200 or 503 memory_budget_in_use, some of each: %v", codes)
	}
	// The host's peak: the flooded worker's share, plus the bystander's
	// two-byte responses.
	if p := h.Budget().Peak(); p > lim.PerWorker+1024 {
		t.Fatalf("the bodies in flight peaked at %d bytes, over the flooded worker's share of %d", p, lim.PerWorker)
	}
	if h.Budget().Used() != 0 {
		t.Fatalf("%d bytes still reserved after the flood", h.Budget().Used())
	}
	// 96 requests at the old 50 MB each would be 4.8 GB; the budget's 32
	// MiB share, the garbage of refused and finished requests and the
	// client's own 8 MiB body stay well under 256 MiB.
	if grown := int64(peakHeap) - int64(base); grown > 256<<20 {
		t.Fatalf("the Go heap grew by %d MiB during the flood", grown>>20)
	}
	if len(bystanderErrs) > 0 || bystanderN < 5 || worst > 5*time.Second {
		t.Fatalf("the bystander: %d requests, errors %v, worst %v", bystanderN, bystanderErrs, worst)
	}
}

// A producer send's bodies are charged to the invoking principal's share
// until they are durable (#36): a sendBatch larger than the share rejects
// backend_unavailable saying so, and sends nothing; a smaller one passes.
func TestSendBodiesInTheBudget(t *testing.T) {
	// A body budget of 512 KiB: a principal's share is 256 KiB.
	h, err := New(context.Background(), Config{DataDir: MemoryDataDir, Listen: "127.0.0.1:0", Logger: quietLogger(), HandlerTimeout: 30 * time.Second, MaxMemory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}})
	v := c.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": `export default { async fetch(r, env) {
			const n = Number(new URL(r.url).searchParams.get("n"));
			const body = "x".repeat(100000);
			try {
				await env.TASKS.sendBatch(Array.from({length: n}, () => ({body})));
				return new Response("sent " + n);
			} catch (e) { return new Response(e.name + ": " + e.message); }
		} };`}},
		"queueProducerBindings": []any{map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": q}}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	if st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+w+"/fetch/?n=3", ""); st != 200 || !strings.Contains(string(raw), "backend_unavailable") || !strings.Contains(string(raw), "memory share") {
		t.Fatalf("a batch of 300 kB: %d %s", st, raw)
	}
	if st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+w+"/fetch/?n=2", ""); st != 200 || string(raw) != "sent 2" {
		t.Fatalf("a batch of 200 kB: %d %s", st, raw)
	}
	if n := h.Budget().Used(); n != 0 {
		t.Fatalf("%d bytes still reserved", n)
	}
	// The refused batch sent nothing.
	var stats struct{ Messages int }
	_, _, raw = c.do("GET", "/v2/spaces/demo/resources/"+q+"/stats", nil)
	if err := json.Unmarshal(raw, &stats); err != nil || stats.Messages != 2 {
		t.Fatalf("the queue holds %d messages, want 2: %s", stats.Messages, raw)
	}
}
