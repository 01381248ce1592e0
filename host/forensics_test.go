package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/schemas"
)

// poisonWorker throws a TypeError from a named function for bodies that
// start with "bad", and acknowledges the others.
const poisonWorker = `function charge(body) {
  if (body.startsWith("bad")) throw new TypeError("order " + body + " has no customer");
}
export default {
  async queue(batch, env, ctx) {
    for (const m of batch.messages) charge(new TextDecoder().decode(m.body));
  },
};
`

// startWith starts a host on cfg (listening on a free loopback port,
// quiet), shut down when the test ends.
func startWith(t *testing.T, cfg Config) *Host {
	t.Helper()
	cfg.Listen, cfg.Logger, cfg.ShutdownGrace = "127.0.0.1:0", quietLogger(), 2*time.Second
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	return h
}

// queueWorker creates a ModuleWorker with a queue handler and its version
// (module main.js, source src) and selects it; it returns both UIDs.
func (c *client) queueWorker(name, src string) (worker, version string) {
	c.t.Helper()
	w := c.create(name, schemas.FormModuleWorker, map[string]any{"handlers": []string{"queue"}})
	v := c.create(name+"-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": src}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"queue"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		c.t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	return w, v
}

// A poison message, end to end through a sandboxed JavaScript worker (spec/
// peers.md §Attempt history, §Dead-letter groups): its attempts appear in
// the dead-letter queue's listing with the thrown error's name, message and
// stack, the host and the worker version; its group is listed with its
// count; a dry run of the group's redrive moves nothing and says how many
// it would, and is in the Operations list with its group; /metrics counts
// the attempts by outcome and the dead letters by cause.
func TestPoisonMessageForensics(t *testing.T) {
	h := startWith(t, Config{DataDir: t.TempDir(), MetricsListen: "127.0.0.1:0"})
	c := newClient(t, h.URL(), h.AdminToken())
	q := c.create("tasks", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	dlq := c.create("tasks-dead", schemas.FormAtLeastOnceQueue, map[string]any{"messageRetentionSeconds": 3600})
	w, v := c.queueWorker("w", poisonWorker)
	var st int
	var op map[string]any
	var raw []byte
	c.create("tasks-consumer", schemas.FormQueueConsumer, map[string]any{
		"queue": map[string]any{"resourceUid": q}, "worker": map[string]any{"resourceUid": w}, "deadLetterQueue": map[string]any{"resourceUid": dlq},
		"maxBatchSize": 1, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1, "maxRetries": 2, "retryDelaySeconds": 0,
	})
	for _, body := range []string{"bad-1", "good", "bad-22"} {
		if st, _, raw := c.do("POST", "/v2/spaces/demo/resources/"+q+"/messages", map[string]any{"messages": []any{map[string]any{"body": body}}}); st != 200 {
			t.Fatalf("publish: %d %s", st, raw)
		}
	}
	var list struct {
		Items []struct {
			ID         string `json:"id"`
			DeadLetter *struct {
				Attempts int `json:"attempts"`
			} `json:"deadLetter"`
			AttemptHistory []struct {
				Attempt          int    `json:"attempt"`
				Outcome          string `json:"outcome"`
				ErrorName        string `json:"errorName"`
				ErrorMessage     string `json:"errorMessage"`
				ErrorStack       string `json:"errorStack"`
				Host             string `json:"host"`
				WorkerVersionUID string `json:"workerVersionUid"`
				StartedAtMillis  int64  `json:"startedAtMillis"`
			} `json:"attemptHistory"`
			DeadLetterGroup string `json:"deadLetterGroup"`
		} `json:"items"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, raw = c.do("GET", "/v2/spaces/demo/resources/"+dlq+"/messages", nil)
		list.Items = nil
		if err := json.Unmarshal(raw, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the poison messages were never dead-lettered: %s", raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range list.Items {
		if len(m.AttemptHistory) != 3 {
			t.Fatalf("message %s: %d attempts in its history, want 3: %s", m.ID, len(m.AttemptHistory), raw)
		}
		for i, a := range m.AttemptHistory {
			if a.Attempt != i+1 || a.Outcome != "thrown" || a.ErrorName != "TypeError" || !strings.HasPrefix(a.ErrorMessage, "order bad-") ||
				!strings.Contains(a.ErrorStack, "charge") || a.WorkerVersionUID != v || a.Host == "" || a.StartedAtMillis <= 0 {
				t.Errorf("message %s attempt %d: %+v", m.ID, i, a)
			}
		}
		if m.DeadLetterGroup == "" || m.DeadLetterGroup != list.Items[0].DeadLetterGroup {
			t.Errorf("message %s: group %q, want the same group as the other", m.ID, m.DeadLetterGroup)
		}
	}
	group := list.Items[0].DeadLetterGroup

	var groups struct {
		Groups []struct {
			Fingerprint      string `json:"fingerprint"`
			Title            string `json:"title"`
			Count            int    `json:"count"`
			FirstSeenMillis  int64  `json:"firstSeenMillis"`
			LastSeenMillis   int64  `json:"lastSeenMillis"`
			ExampleMessageID string `json:"exampleMessageId"`
			Histogram        []int  `json:"histogram"`
		} `json:"groups"`
		DeadLetters int `json:"deadLetters"`
	}
	st, _, raw = c.do("GET", "/v2/spaces/demo/resources/"+dlq+"/deadletters/groups?buckets=4&bucketSeconds=60", nil)
	if st != 200 || json.Unmarshal(raw, &groups) != nil || len(groups.Groups) != 1 || groups.DeadLetters != 2 {
		t.Fatalf("groups: %d %s", st, raw)
	}
	g := groups.Groups[0]
	if g.Fingerprint != group || g.Count != 2 || g.Title != "TypeError: order bad-<n> has no customer" || g.FirstSeenMillis > g.LastSeenMillis ||
		g.ExampleMessageID == "" || len(g.Histogram) != 4 || g.Histogram[3] != 2 {
		t.Fatalf("group %+v", g)
	}
	if st, p, _ := c.do("GET", "/v2/spaces/demo/resources/"+dlq+"/deadletters/groups?buckets=500", nil); st != 400 || p["code"] != "invalid_request" {
		t.Fatalf("buckets=500: %d %v", st, p)
	}

	// The group's dry run moves nothing and says how many it would.
	st, op, raw = c.do("POST", "/v2/spaces/demo/resources/"+dlq+"/redrive", map[string]any{"group": group, "dryRun": true})
	if st != 202 || op["state"] != "succeeded" {
		t.Fatalf("dry run: %d %s", st, raw)
	}
	prog, _ := op["progress"].(map[string]any)
	if prog["dryRun"] != true || prog["wouldMove"] != float64(2) || prog["moved"] != float64(0) || prog["group"] != group {
		t.Fatalf("dry run progress %v", prog)
	}
	if n := len(bodiesOf(t, h, dlq)); n != 2 {
		t.Fatalf("a dry run moved messages: the dead-letter queue holds %d", n)
	}
	// It is in the Operations list, with its group.
	_, _, raw = c.do("GET", "/v2/spaces/demo/operations?resource="+dlq, nil)
	if !strings.Contains(string(raw), `"group":"`+group+`"`) || !strings.Contains(string(raw), `"dryRun":true`) {
		t.Fatalf("the Operations list does not show the dry run's group: %s", raw)
	}
	// A malformed group is refused and changes nothing.
	if st, p, _ := c.do("POST", "/v2/spaces/demo/resources/"+dlq+"/redrive", map[string]any{"group": "not-a-group"}); st != 400 || p["code"] != "invalid_request" {
		t.Fatalf("bad group: %d %v", st, p)
	}
	// Another group's redrive moves none of these.
	st, op, raw = c.do("POST", "/v2/spaces/demo/resources/"+dlq+"/redrive", map[string]any{"group": "0123456789abcdef"})
	if st != 202 {
		t.Fatalf("other group: %d %s", st, raw)
	}
	_, op, _ = c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	if prog, _ := op["progress"].(map[string]any); op["state"] != "succeeded" || prog["moved"] != float64(0) || prog["total"] != float64(0) {
		t.Fatalf("other group's redrive: %v", op)
	}
	if n := len(bodiesOf(t, h, dlq)); n != 2 {
		t.Fatalf("another group's redrive moved messages: the dead-letter queue holds %d", n)
	}

	text := scrape(t, h)
	tasks := []string{`space="demo"`, `queue="tasks"`}
	for outcome, want := range map[string]float64{"thrown": 6, "acknowledged": 1, "retried": 0} {
		if got := metricValue(text, "takohost_queue_attempts_total", append(tasks, fmt.Sprintf("outcome=%q", outcome))...); got != want {
			t.Errorf("attempts %s = %v, want %v", outcome, got, want)
		}
	}
	if got := metricValue(text, "takohost_queue_dead_lettered_by_cause_total", append(tasks, `group="`+group+`"`, `error_name="TypeError"`)...); got != 2 {
		t.Errorf("dead letters of the group = %v, want 2:\n%s", got, text)
	}
}
