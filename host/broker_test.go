package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/broker/rabbitmq"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// rabbitVhost creates a fresh vhost on the machine's RabbitMQ for one test
// (deleted afterwards) and returns its URL; the test skips, saying why,
// without RabbitMQ or rabbitmqctl.
func rabbitVhost(t *testing.T) (url, vhost string) {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("rabbitmqctl is not installed: no RabbitMQ to test the broker Offering on")
	}
	d, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"})
	if err != nil {
		t.Skipf("no RabbitMQ at 127.0.0.1:5672: %v", err)
	}
	d.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	vhost = "takohost-test-" + hex.EncodeToString(b[:])
	for _, args := range [][]string{{"add_vhost", vhost}, {"set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"}} {
		if out, err := exec.Command("rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "-q", "delete_vhost", vhost).Run() })
	return "amqp://guest:guest@127.0.0.1:5672/" + vhost, vhost
}

// rabbitCount is the messages RabbitMQ's own tool lists for a queue
// (ready and unacknowledged), -1 when it does not list the queue.
func rabbitCount(t *testing.T, vhost, name string) int {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_queues", "-p", vhost, "--no-table-headers", "name", "messages").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return -1
}

func startBrokerHost(t *testing.T, dir, url string) *Host {
	t.Helper()
	h, err := New(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger(), ShutdownGrace: 2 * time.Second,
		ObserveInterval: 200 * time.Millisecond, Brokers: []BrokerConfig{{Name: "rabbitmq", URL: url}}, UnsafeInProcessWorkers: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	return h
}

const brokerWorker = `export default {
  async queue(batch, env, ctx) {
    for (const m of batch.messages) {
      const body = new TextDecoder().decode(m.body);
      console.log("got " + body + " attempts=" + m.attempts);
      if (body.startsWith("fail")) { await batch.retry(m.id); } else { await batch.acknowledge(m.id); }
    }
  },
};
`

func waitLog(t *testing.T, c *client, worker, line string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, raw := c.do("GET", "/v2/spaces/demo/resources/"+worker+"/logs", nil)
		if strings.Contains(string(raw), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never logged %q: %s", line, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRabbitMQOffering: a queue created with the RabbitMQ Offering keeps
// its messages in RabbitMQ (rabbitmqctl lists them), a JavaScript worker
// gets them with the Forms' attempts, an exhausted one is dead-lettered
// into another broker queue, and attempts survive a restart of the host
// (they live in the broker's copy of the message).
func TestRabbitMQOffering(t *testing.T) {
	url, vhost := rabbitVhost(t)
	dir := filepath.Join(t.TempDir(), "data")
	h := startBrokerHost(t, dir, url)
	defer func() { h.Shutdown(context.Background()) }()
	c := newClient(t, h.URL(), h.AdminToken())
	create := func(name, form string, spec any) string {
		uid, err := c.c.CreateIn(t.Context(), "demo", name, form, "rabbitmq", spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		return uid
	}
	q := create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	dead := create("dead", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	qName := broker.QueueName(store.Resource{UID: q, Space: "demo", Name: "tasks"})
	deadName := broker.QueueName(store.Resource{UID: dead, Space: "demo", Name: "dead"})
	if n := rabbitCount(t, vhost, qName); n != 0 {
		t.Fatalf("rabbitmqctl lists %s with %d messages, want an empty queue", qName, n)
	}
	st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+q+"/messages", map[string]any{"messages": []any{
		map[string]any{"body": "one"}, map[string]any{"body": "two"}, map[string]any{"body": "fail-1"}}})
	if st != 200 {
		t.Fatalf("publish: %d %s", st, raw)
	}
	waitFor(t, "rabbitmqctl to list 3 messages", func() bool { return rabbitCount(t, vhost, qName) == 3 })
	waitFor(t, "observed.messageCount 3", func() bool {
		_, r, _ := c.do("GET", "/v2/spaces/demo/resources/"+q, nil)
		obs, _ := r["observed"].(map[string]any)
		return obs["queueExists"] == true && obs["messageCount"] == float64(3)
	})

	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"queue"}})
	v := c.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": brokerWorker}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"queue"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	c.create("c", schemas.FormQueueConsumer, map[string]any{
		"queue": map[string]any{"resourceUid": q}, "worker": map[string]any{"resourceUid": w},
		"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 1, "retryDelaySeconds": 15,
		"deadLetterQueue": map[string]any{"resourceUid": dead},
	})
	waitLog(t, c, w, "got one attempts=1")
	waitLog(t, c, w, "got two attempts=1")
	waitLog(t, c, w, "got fail-1 attempts=1")
	// fail-1 waits out its 15 s retry delay: restart the host meanwhile.
	// Its second delivery must say attempts=2: the count lives in the
	// broker's copy of the message, not in the host's journal.
	waitFor(t, "RabbitMQ to hold only fail-1", func() bool { return rabbitCount(t, vhost, qName) == 1 })
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = startBrokerHost(t, dir, url)
	c.c.Base = h.URL()
	waitLog(t, c, w, "got fail-1 attempts=2")
	// 1 + maxRetries deliveries: dead-lettered as a new message.
	waitFor(t, "the dead-letter queue on RabbitMQ to hold fail-1", func() bool {
		return rabbitCount(t, vhost, qName) == 0 && rabbitCount(t, vhost, deadName) == 1
	})
	_, list, raw := c.do("GET", "/v2/spaces/demo/resources/"+dead+"/messages?limit=10", nil)
	items, _ := list["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("the dead-letter queue lists %s", raw)
	}
	m := items[0].(map[string]any)
	dl, _ := m["deadLetter"].(map[string]any)
	if m["attempts"] != float64(0) || dl["reason"] != "retries_exhausted" || dl["sourceQueueUid"] != q || dl["attempts"] != float64(2) {
		t.Fatalf("the dead-lettered message: %s", raw)
	}
	if logs := func() string { _, _, r := c.do("GET", "/v2/spaces/demo/resources/"+w+"/logs", nil); return string(r) }(); strings.Count(logs, "got one ") != 1 {
		t.Fatalf("an acknowledged message was delivered again after the restart: %s", logs)
	}

	// Deleted on the broker's side (an operator): observed says so.
	if out, err := exec.Command("rabbitmqctl", "-q", "delete_queue", "-p", vhost, deadName).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl delete_queue: %v: %s", err, out)
	}
	waitFor(t, "observed.queueExists false after a delete on the broker", func() bool {
		_, r, _ := c.do("GET", "/v2/spaces/demo/resources/"+dead, nil)
		obs, _ := r["observed"].(map[string]any)
		return obs["queueExists"] == false
	})
}
