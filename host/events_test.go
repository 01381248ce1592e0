package host

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/schemas"
)

const eventsWorker = `export default {
  async fetch(request, env) {
    await env.TASKS.send(await request.text());
    return new Response("ok");
  },
  async queue(batch, env) {
    for (const m of batch.messages) {
      const body = new TextDecoder().decode(m.body);
      console.log("handling " + body);
      if (body === "bad") throw new Error("bad message");
      if (body === "hold") await new Promise(r => setTimeout(r, 120000));
      await batch.acknowledge(m.id);
    }
  },
};
`

// Delivery events reach the consuming worker's log by name: a failed
// batch and the message discarded after its last retry, and, after a
// restart that cut a batch short, the messages delivered again.
func TestDeliveryEventsInTheWorkersLog(t *testing.T) {
	dir := t.TempDir()
	start := func() *Host {
		t.Helper()
		h, err := New(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := start()
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("jobs", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch", "queue"}})
	v := c.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules":               []any{map[string]any{"name": "main.js", "content": eventsWorker}},
		"queueProducerBindings": []any{map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": q}}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch", "queue"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	cons := c.create("jobs-consumer", schemas.FormQueueConsumer, map[string]any{
		"queue": map[string]any{"resourceUid": q}, "worker": map[string]any{"resourceUid": w},
		"maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 2, "maxRetries": 0, "retryDelaySeconds": 0,
	})
	send := func(body string) {
		t.Helper()
		if st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+w+"/fetch", body); st != 200 {
			t.Fatalf("fetch: %d %s", st, raw)
		}
	}
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, _, logs := c.do("GET", "/v2/spaces/demo/resources/"+w+"/logs?limit=1000", nil)
			if strings.Contains(string(logs), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q is not in the worker's log: %s", want, logs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitLogRE := func(want *regexp.Regexp) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, _, logs := c.do("GET", "/v2/spaces/demo/resources/"+w+"/logs?limit=1000", nil)
			if want.Match(logs) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is not in the worker's log: %s", want, logs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	send("bad")
	waitLog("delivery: a batch of 1 message of queue jobs failed (the queue handler threw or rejected)")
	waitLogRE(regexp.MustCompile(`delivery: 1 message \([^ ,)]+\) of queue jobs discarded after the last retry`))

	// Each batch is an invocation of the worker, newest first, with its
	// consumer, queue, size, duration and outcome (GET …/invocations).
	send("good")
	waitLog("handling good")
	var inv struct {
		Items []struct {
			ConsumerUid, QueueUid, Outcome string
			Messages                       int
			DurationMillis                 float64
			FinishTimeMillis               int64
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, _, raw := c.do("GET", "/v2/spaces/demo/resources/"+w+"/invocations", nil)
		if st != 200 {
			t.Fatalf("invocations: %d %s", st, raw)
		}
		if err := json.Unmarshal(raw, &inv); err != nil {
			t.Fatal(err)
		}
		if len(inv.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("invocations: %s", raw)
		}
	}
	for i, want := range []string{"succeeded", "failed"} {
		it := inv.Items[i]
		if it.Outcome != want || it.ConsumerUid != cons || it.QueueUid != q || it.Messages != 1 || it.DurationMillis <= 0 || it.FinishTimeMillis <= 0 {
			t.Errorf("invocation %d: %+v, want %s", i, it, want)
		}
	}
	if st, _, raw := c.do("GET", "/v2/spaces/demo/resources/"+w+"/invocations?limit=51", nil); st != 400 || !strings.Contains(string(raw), "limit") {
		t.Errorf("limit 51: %d %s", st, raw)
	}
	if st, _, raw := c.do("GET", "/v2/spaces/demo/resources/"+q+"/invocations", nil); st != 404 {
		t.Errorf("a queue's invocations: %d %s", st, raw)
	}

	send("hold")
	waitLog("handling hold")
	if err := h.Shutdown(context.Background()); err != nil {
		t.Logf("shutdown: %v", err) // the held batch outlives the grace
	}
	h = start()
	defer h.Shutdown(context.Background())
	c = newClient(t, h.URL(), h.AdminToken())
	waitLog("delivery: 1 message of queue jobs left unsettled by a batch when the host stopped, delivered again")
}

func TestEventIDList(t *testing.T) {
	for _, c := range []struct {
		ids   []string
		count int
		want  string
	}{
		{nil, 3, ""},
		{[]string{"m1"}, 1, "m1"},
		{[]string{"m1", "m2"}, 12, "m1, m2 and 10 more"},
	} {
		if got := idList(c.ids, c.count); got != c.want {
			t.Errorf("idList(%v, %d) = %q, want %q", c.ids, c.count, got, c.want)
		}
	}
}
