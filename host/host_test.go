package host

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/internal/apiclient"
	"github.com/takoform/queuehost/schemas"
)

// client is internal/apiclient with the test's failure on a transport
// error, answering (status, decoded object, body).
type client struct {
	t *testing.T
	c *apiclient.Client
}

func newClient(t *testing.T, base, token string) *client {
	return &client{t: t, c: apiclient.New(base, token)}
}

func (c *client) do(method, path string, body any) (int, map[string]any, []byte) {
	c.t.Helper()
	r, err := c.c.Do(c.t.Context(), method, path, body, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return r.Status, m, r.Body
}

func (c *client) create(name, form string, spec any) string {
	c.t.Helper()
	uid, err := c.c.Create(c.t.Context(), "demo", name, form, spec, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return uid
}

func quietLogger() *slog.Logger {
	if os.Getenv("HOST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func startHost(t *testing.T, dir string) *Host {
	t.Helper()
	h, err := New(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	// Registered after dir's own cleanup, so it runs first: a test that
	// forgets to shut its host down must not race the removal of its data
	// directory with the host's last writes (Shutdown is idempotent).
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

const workerModule = `export default {
  async fetch(request, env, ctx) {
    const id = await env.TASKS.send("hello " + new URL(request.url).pathname);
    return new Response("sent " + (id.length > 0));
  },
  async queue(batch, env, ctx) {
    for (const m of batch.messages) {
      console.log("got " + new TextDecoder().decode(m.body) + " attempts=" + m.attempts);
    }
  },
};
`

// TestEndToEnd runs the whole host in memory: a worker's fetch handler
// sends through its producer Binding, the consumer delivers to its queue
// handler, and the worker's log shows it.
func TestEndToEnd(t *testing.T) {
	h := startHost(t, MemoryDataDir)
	defer h.Shutdown(context.Background())
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}})
	v := c.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": workerModule}},
		"queueProducerBindings": []any{map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": q}}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch", "queue"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	c.create("c", schemas.FormQueueConsumer, map[string]any{
		"queue": map[string]any{"resourceUid": q}, "worker": map[string]any{"resourceUid": w},
		"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 0,
	})

	// GET without a body: see the report on the runtime prelude's body handling.
	req, _ := http.NewRequest("GET", h.URL()+"/v2/spaces/demo/resources/"+w+"/fetch/some/path?x=1", nil)
	req.Header.Set("Authorization", "Bearer "+h.AdminToken())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "sent true" {
		_, _, logs := c.do("GET", "/v2/spaces/demo/resources/"+w+"/logs", nil)
		t.Fatalf("fetch: %d %s; log: %s", res.StatusCode, body, logs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, logs, raw := c.do("GET", "/v2/spaces/demo/resources/"+w+"/logs", nil)
		if strings.Contains(string(raw), "got hello /some/path attempts=1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue handler never ran: %v", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A worker without a fetch declaration answers 404.
	w2 := c.create("w2", schemas.FormModuleWorker, map[string]any{"handlers": []string{"queue"}})
	if st, p, _ := c.do("GET", "/v2/spaces/demo/resources/"+w2+"/fetch", nil); st != 404 || p["code"] != "not_found" {
		t.Fatalf("fetch without handler: %d %v", st, p)
	}
}

func TestDataDirAndRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	h := startHost(t, dir)
	tok := h.AdminToken()
	raw, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil || strings.TrimSpace(string(raw)) != tok || tok == "" || h.AdminTokenPath() != filepath.Join(dir, "admin-token") {
		t.Fatalf("admin token file: %q %v", raw, err)
	}
	c := newClient(t, h.URL(), tok)
	q := c.create("q", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = startHost(t, dir)
	defer h.Shutdown(context.Background())
	if h.AdminToken() != tok {
		t.Fatal("the admin token changed across restarts")
	}
	c.c.Base = h.URL()
	st, r, raw2 := c.do("GET", "/v2/spaces/demo/resources/"+q, nil)
	if st != 200 || r["state"] != "active" {
		t.Fatalf("after restart: %d %s", st, raw2)
	}
	obs, _ := r["observed"].(map[string]any)
	if obs["queueExists"] != true {
		t.Fatalf("the queue was not rebuilt in the engine: %s", raw2)
	}
}

func TestNewNeedsDataDir(t *testing.T) {
	if _, err := New(context.Background(), Config{}); err == nil {
		t.Fatal("New accepted an empty DataDir")
	}
}
