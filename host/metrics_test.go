package host

import (
	"bufio"
	"context"
	"github.com/takoform/queuehost/server"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/schemas"
)

const metricsWorker = `export default {
  async fetch(request, env) {
    await env.TASKS.send(await request.text());
    return new Response("ok");
  },
  async queue(batch, env) {
    let bad = false;
    for (const m of batch.messages) {
      const body = new TextDecoder().decode(m.body);
      if (body === "bad") { bad = true; } else { await batch.acknowledge(m.id); }
    }
    if (bad) throw new Error("bad message");
  },
};
`

// scrape reads /metrics from the host's metrics listener.
func scrape(t *testing.T, h *Host) string {
	t.Helper()
	res, err := http.Get("http://" + h.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", res.StatusCode, b)
	}
	return string(b)
}

// metricValue is the value of the sample of name whose labels include
// every one of labels (`key="value"`), or -1 when there is none.
func metricValue(text, name string, labels ...string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err == nil {
			return v
		}
	}
	return -1
}

// After a known workload (three good messages and one the handler always
// throws on, with one retry and a dead-letter queue) the scrape's
// counters say exactly that: per queue by space and name, per consumer,
// journal, HTTP by route, and no ID anywhere in a label.
// deadLetterLine is the worker's log line of a message dead-lettered.
var deadLetterLine = regexp.MustCompile(`delivery: 1 message \([0-9a-z-]+\) of queue tasks dead-lettered to queue dead after the last retry`)

func TestMetricsAfterAKnownWorkload(t *testing.T) {
	// A 2 s handler time limit: the spinning worker below is killed 1 s
	// (the kill grace) after it.
	h, err := New(context.Background(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: 2 * time.Second, HandlerTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	dlq := c.create("dead", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch", "queue"}})
	v := c.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": metricsWorker}},
		"queueProducerBindings": []any{map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": q}}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch", "queue"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	c.create("tasks-consumer", schemas.FormQueueConsumer, map[string]any{
		"queue": map[string]any{"resourceUid": q}, "worker": map[string]any{"resourceUid": w}, "deadLetterQueue": map[string]any{"resourceUid": dlq},
		"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 0,
	})
	// One sandbox killed for time: a backtracking regular expression the
	// runtime cannot interrupt.
	spin := c.create("spin", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}})
	spinV := c.create("spin-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": spin}, "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": "export default { async fetch() { /(?=a)(a+)+$/.test('a'.repeat(40) + 'b'); return new Response('survived'); } };"}},
	})
	if st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+spin, map[string]any{"spec": map[string]any{"handlers": []string{"fetch"}, "version": map[string]any{"resourceUid": spinV}}}); st != 202 {
		t.Fatalf("select spin: %d %s", st, raw)
	} else {
		c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	}
	if st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+spin+"/fetch", "x"); st != 500 || !strings.Contains(string(raw), "worker_") {
		t.Fatalf("the spinning worker answered %d %s", st, raw)
	}
	for _, body := range []string{"a", "b", "bad", "c"} {
		if st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+w+"/fetch", body); st != 200 {
			t.Fatalf("fetch: %d %s", st, raw)
		}
	}
	tasks, dead := []string{`space="demo"`, `queue="tasks"`}, []string{`space="demo"`, `queue="dead"`}
	var text string
	deadline := time.Now().Add(20 * time.Second)
	for {
		text = scrape(t, h)
		if metricValue(text, "takohost_queue_messages_dead_lettered_total", tasks...) == 1 && metricValue(text, "takohost_queue_backlog_messages", tasks...) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload never finished:\n%s", text)
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := []struct {
		name   string
		labels []string
		v      float64
	}{
		{"takohost_queue_messages_accepted_total", tasks, 4},
		{"takohost_queue_messages_delivered_total", tasks, 5}, // three good once, the bad one twice
		{"takohost_queue_messages_acknowledged_total", tasks, 3},
		{"takohost_queue_messages_retried_total", tasks, 1},
		{"takohost_queue_messages_dead_lettered_total", tasks, 1},
		{"takohost_queue_messages_expired_total", tasks, 0},
		{"takohost_queue_backlog_messages", tasks, 0},
		{"takohost_queue_backlog_bytes", tasks, 0},
		{"takohost_queue_inflight_batches", tasks, 0},
		{"takohost_queue_messages_accepted_total", dead, 0}, // moves are not sends
		{"takohost_queue_backlog_messages", dead, 1},
		{"takohost_queue_backlog_bytes", dead, 3},
		{"takohost_consumer_handler_failures_total", []string{`space="demo"`, `consumer="tasks-consumer"`}, 2},
		{"takohost_http_requests_total", []string{`route="/v2/spaces/{space}/resources/{uid}/fetch"`, `code="200"`}, 4},
		{"takohost_http_requests_total", []string{`route="POST /v2/spaces/{space}/resources"`, `code="202"`}, 7}, // five of the workload, two of the spinning worker
	}
	for _, w := range want {
		if got := metricValue(text, w.name, w.labels...); got != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.v)
		}
	}
	if n := metricValue(text, "takohost_consumer_batch_duration_seconds_count", `consumer="tasks-consumer"`); n < 2 {
		t.Errorf("batch duration count %v, want at least 2", n)
	}
	if metricValue(text, "takohost_queue_oldest_message_age_seconds", dead...) < 0 {
		t.Error("no oldest age for the dead-letter queue")
	}
	if metricValue(text, "takohost_journal_group_commits_total") <= 0 || metricValue(text, "takohost_journal_frames_total") <= 0 {
		t.Errorf("journal counters missing or zero:\n%s", text)
	}
	if metricValue(text, "takohost_sandboxes") < 1 {
		t.Error("no live sandbox counted")
	}
	// The containment layers this machine allows (root: all of them when
	// the kernel has seccomp and a writable memory cgroup).
	for _, layer := range []string{"seccomp", "cgroup_memory", "cgroup_pids", "netns", "jail", "unprivileged_uid"} {
		if got := metricValue(text, "takohost_sandbox_containment", `layer="`+layer+`"`); got != 0 && got != 1 {
			t.Errorf("containment layer %s = %v, want 0 or 1", layer, got)
		}
	}
	if got := metricValue(text, "takohost_sandbox_cgroup_failures_total"); got != 0 {
		t.Errorf("sandboxes without their cgroup: %v", got)
	}
	if got := metricValue(text, "takohost_worker_log_write_errors_total"); got != 0 {
		t.Errorf("worker log write errors %v, want 0", got)
	}
	for reason, want := range map[string]float64{"time": 1, "memory": 0, "crash": 0, "init": 0, "shutdown": 0} {
		if got := metricValue(text, "takohost_sandbox_kills_total", `reason="`+reason+`"`); got != want {
			t.Errorf("sandbox kills for %s = %v, want %v", reason, got, want)
		}
	}
	// Every group commit's fsync is in the latency histogram: once the
	// journal is quiet (two scrapes agree), its count is the commits'.
	for prev := -1.0; ; {
		text = scrape(t, h)
		commits := metricValue(text, "takohost_journal_group_commits_total")
		if commits == prev {
			if n := metricValue(text, "takohost_journal_fsync_duration_seconds_count"); n != commits || n < 1 {
				t.Errorf("fsync histogram count %v, group commits %v", n, commits)
			}
			if metricValue(text, "takohost_journal_fsync_duration_seconds_sum") <= 0 {
				t.Error("fsync histogram sum is 0")
			}
			break
		}
		prev = commits
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range []string{q, dlq, w, v, spin, spinV} {
		if strings.Contains(text, id) {
			t.Fatalf("a resource UID (%s) is in a label", id)
		}
	}
	// The dead-letter move is in the worker's log, by queue names and the
	// message's ID.
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, _, logs := c.do("GET", "/v2/spaces/demo/resources/"+w+"/logs", nil)
		if deadLetterLine.Match(logs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead-letter event is not in the worker's log: %s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Not on the Host API's listener.
	if st, _, _ := c.do("GET", "/metrics", nil); st != 404 {
		t.Fatalf("/metrics on the Host API listener: %d", st)
	}
}

// The unauthenticated metrics listener has connection caps of its own
// (#36): one address holding half-open connections is refused past
// server.MetricsMaxConnsPerClient with a 503 problem, and another address
// still scrapes.
func TestMetricsListenerConnectionCaps(t *testing.T) {
	h, err := New(context.Background(), Config{DataDir: MemoryDataDir, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Logger: quietLogger(), HeaderTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	addr := h.MetricsAddr()
	dial := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Skipf("cannot dial from %s: %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for i := 0; i < server.MetricsMaxConnsPerClient+40; i++ {
		c := dial("127.0.0.1")
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	// One more from the same address is answered 503 at once.
	c := dial("127.0.0.1")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("over the cap: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 503 || !strings.Contains(string(b), "too_many_connections") || res.Header.Get("Retry-After") == "" {
		t.Fatalf("over the cap: %d %s", res.StatusCode, b)
	}
	// Another address scrapes.
	c2 := dial("127.0.0.2")
	c2.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c2, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	res, err = http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("another address: %v %v", res, err)
	}
}
