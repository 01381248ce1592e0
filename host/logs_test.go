package host

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/schemas"
)

// GET …/logs?wait= follows the log: a request made before the line exists
// answers with it once it is logged, well before its wait ends; a wait
// outside 0..60 is invalid_request.
func TestLogsWaitFollows(t *testing.T) {
	h := startHost(t, t.TempDir())
	defer h.Shutdown(t.Context())
	c := newClient(t, h.URL(), h.AdminToken())
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}})
	v := c.create("w-v1", schemas.FormWorkerVersion, map[string]any{
		"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
		"modules": []any{map[string]any{"name": "main.js", "content": `export default { async fetch(req) { console.log("line " + await req.text()); return new Response("ok"); } };`}},
	})
	st, op, raw := c.do("PUT", "/v2/spaces/demo/resources/"+w, map[string]any{"spec": map[string]any{"handlers": []string{"fetch"}, "version": map[string]any{"resourceUid": v}}})
	if st != 202 {
		t.Fatalf("select: %d %s", st, raw)
	}
	c.do("GET", "/v2/spaces/demo/operations/"+op["id"].(string)+"?wait=10", nil)
	logs := "/v2/spaces/demo/resources/" + w + "/logs"
	c.do("POST", "/v2/spaces/demo/resources/"+w+"/fetch", "one")
	var first struct{ Items []struct{ Seq int64 } }
	_, _, raw = c.do("GET", logs, nil)
	if err := json.Unmarshal(raw, &first); err != nil || len(first.Items) != 1 {
		t.Fatalf("the first line: %s", raw)
	}
	cursor := first.Items[0].Seq

	type answer struct {
		status int
		body   string
		took   time.Duration
	}
	got := make(chan answer, 1)
	go func() {
		start := time.Now()
		st, _, raw := c.do("GET", fmt.Sprintf("%s?after=%d&wait=60", logs, cursor), nil)
		got <- answer{st, string(raw), time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond) // the request is waiting (nothing after the cursor)
	c.do("POST", "/v2/spaces/demo/resources/"+w+"/fetch", "two")
	select {
	case a := <-got:
		if a.status != 200 || !strings.Contains(a.body, "line two") || strings.Contains(a.body, "line one") || a.took > 30*time.Second {
			t.Fatalf("the long poll answered %d after %s: %s", a.status, a.took, a.body)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the long poll did not answer when the line was logged")
	}
	for _, bad := range []string{"wait=61", "wait=-1", "wait=x"} {
		if st, m, raw := c.do("GET", logs+"?"+bad, nil); st != 400 || m["code"] != "invalid_request" {
			t.Fatalf("%s: %d %s", bad, st, raw)
		}
	}
}
