package steps

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cucumber/godog"
)

// callResult is what the kit worker's /send answered.
type callResult struct {
	OK      bool   `json:"ok"`
	IDs     []any  `json:"ids"`
	Name    string `json:"name"`
	Message string `json:"message"`

	before, after time.Time
	tags          []string
}

// tagOf finds the tag inside a kit body spec (see features/workers/kit.js bodyFrom).
func tagOf(spec any) string {
	m, ok := spec.(map[string]any)
	if !ok {
		return ""
	}
	var text string
	switch {
	case m["string"] != nil:
		text, _ = m["string"].(string)
	case m["json"] != nil:
		if j, ok := m["json"].(map[string]any); ok {
			t, _ := j["tag"].(string)
			return t
		}
	case m["bytes"] != nil || m["view"] != nil:
		b64, _ := m["bytes"].(string)
		if b64 == "" {
			b64, _ = m["view"].(string)
		}
		b, _ := base64.StdEncoding.DecodeString(b64)
		text = string(b)
	case m["padded"] != nil:
		t, _ := m["tag"].(string)
		return t
	}
	var d struct {
		Tag string `json:"tag"`
	}
	json.Unmarshal([]byte(text), &d)
	return d.Tag
}

// invokeSend drives a producer Binding through the kit worker's fetch
// handler: POST .../fetch/send?binding=NAME with the call description.
func (w *world) invokeSend(ctx context.Context, worker, binding string, call map[string]any) (*callResult, error) {
	return w.invokeSendAs(ctx, w.admin(), worker, binding, call)
}

// invokeSendAs is invokeSend with the fetch request made by cl's principal.
func (w *world) invokeSendAs(ctx context.Context, cl *Client, worker, binding string, call map[string]any) (*callResult, error) {
	rs, err := w.resource(worker)
	if err != nil {
		return nil, err
	}
	var tags []string
	switch call["op"] {
	case "send":
		tags = []string{tagOf(call["body"])}
	case "sendBatch":
		ms, _ := call["messages"].([]any)
		for _, m := range ms {
			mm, _ := m.(map[string]any)
			tags = append(tags, tagOf(mm["body"]))
		}
	}
	before := time.Now()
	r, err := cl.Do(ctx, "POST", resPath(rs.space, rs.uid)+"/fetch/send?binding="+url.QueryEscape(binding), call, nil)
	if err != nil {
		return nil, err
	}
	after := time.Now()
	if r.Status != 200 {
		return nil, fmt.Errorf("the kit worker's fetch handler answered %s%s", r, w.workerLog(ctx, rs))
	}
	var cr callResult
	if err := r.JSON(&cr); err != nil {
		return nil, err
	}
	cr.before, cr.after, cr.tags = before, after, tags
	if cr.OK {
		if len(cr.IDs) != len(tags) {
			return &cr, fmt.Errorf("%v resolved with %d IDs for %d messages", call["op"], len(cr.IDs), len(tags))
		}
		w.sentMu.Lock() // the checker sends from several goroutines
		for i, t := range tags {
			id, _ := cr.IDs[i].(string)
			if t != "" {
				w.sent[t] = &sent{id: id, before: before, after: after}
			}
		}
		w.sentMu.Unlock()
	}
	return &cr, nil
}

// workerLog returns the tail of a worker's log stream, for error messages.
func (w *world) workerLog(ctx context.Context, rs *resource) string {
	r, err := w.admin().WorkerLogs(ctx, rs.space, rs.uid, 1000)
	if err != nil || r.Status != 200 {
		return ""
	}
	var l struct {
		Items []struct {
			Level   string `json:"level"`
			Message string `json:"message"`
		} `json:"items"`
	}
	if r.JSON(&l) != nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nworker log:")
	for _, it := range l.Items[max(0, len(l.Items)-10):] {
		fmt.Fprintf(&b, "\n  %s: %.500s", it.Level, it.Message)
	}
	return b.String()
}

func (w *world) mustSend(ctx context.Context, worker, binding string, call map[string]any) error {
	cr, err := w.invokeSend(ctx, worker, binding, call)
	if err != nil {
		return err
	}
	if !cr.OK {
		return fmt.Errorf("%v through %s rejected with %q (%s)", call["op"], binding, cr.Name, cr.Message)
	}
	return checkIDs(cr, len(cr.tags))
}

func checkIDs(cr *callResult, n int) error {
	if len(cr.IDs) != n {
		return fmt.Errorf("want %d message IDs, got %d: %v", n, len(cr.IDs), cr.IDs)
	}
	seen := map[string]bool{}
	for _, x := range cr.IDs {
		id, ok := x.(string)
		if !ok || len([]rune(id)) < 1 || len([]rune(id)) > 256 {
			return fmt.Errorf("message ID %v is not a string of 1..256 characters", x)
		}
		if seen[id] {
			return fmt.Errorf("message ID %q returned twice", id)
		}
		seen[id] = true
	}
	return nil
}

func registerProducerSteps(sc *godog.ScenarioContext) {
	sc.Step(`^"([^"]*)" sends (\{.*\}) through "([^"]*)"$`, func(ctx context.Context, wk, body, b string) error {
		return get(ctx).mustSend(ctx, wk, b, map[string]any{"op": "send", "body": map[string]any{"string": body}})
	})
	sc.Step(`^"([^"]*)" sends (\{.*\}) through "([^"]*)" with options (\{.*\})$`, func(ctx context.Context, wk, body, b, opts string) error {
		o, err := decodeJSON(opts)
		if err != nil {
			return err
		}
		return get(ctx).mustSend(ctx, wk, b, map[string]any{"op": "send", "body": map[string]any{"string": body}, "options": o})
	})
	sc.Step(`^"([^"]*)" sends a batch through "([^"]*)":$`, func(ctx context.Context, wk, b string, doc *godog.DocString) error {
		var msgs []any
		for _, line := range strings.Split(strings.TrimSpace(doc.Content), "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			msgs = append(msgs, map[string]any{"body": map[string]any{"string": line}})
		}
		return get(ctx).mustSend(ctx, wk, b, map[string]any{"op": "sendBatch", "messages": msgs})
	})
	sc.Step(`^"([^"]*)" sends (\d+) messages tagged "([^"]*)" through "([^"]*)" in one batch$`, func(ctx context.Context, wk string, n int, prefix, b string) error {
		var msgs []any
		for i := 1; i <= n; i++ {
			msgs = append(msgs, map[string]any{"body": map[string]any{"string": fmt.Sprintf(`{"tag":"%s%d","do":"ack"}`, prefix, i)}})
		}
		return get(ctx).mustSend(ctx, wk, b, map[string]any{"op": "sendBatch", "messages": msgs})
	})
	sc.Step(`^"([^"]*)" calls "([^"]*)" with:$`, func(ctx context.Context, wk, b string, doc *godog.DocString) error {
		w := get(ctx)
		v, err := w.expandJSON(doc.Content)
		if err != nil {
			return err
		}
		call, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("the call must be a JSON object")
		}
		cr, err := w.invokeSend(ctx, wk, b, call)
		if err != nil {
			return err
		}
		w.call = cr
		return nil
	})
	// The fetch request that makes the call is the current principal's:
	// the call then needs its rights as well as the version's creator's.
	sc.Step(`^I make "([^"]*)" call "([^"]*)" with:$`, func(ctx context.Context, wk, b string, doc *godog.DocString) error {
		w := get(ctx)
		v, err := w.expandJSON(doc.Content)
		if err != nil {
			return err
		}
		call, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("the call must be a JSON object")
		}
		cl, err := w.client(ctx)
		if err != nil {
			return err
		}
		cr, err := w.invokeSendAs(ctx, cl, wk, b, call)
		if err != nil {
			return err
		}
		w.call = cr
		return nil
	})
	sc.Step(`^"([^"]*)" calls "([^"]*)" with a batch of (\d+) messages$`, func(ctx context.Context, wk, b string, n int) error {
		w := get(ctx)
		msgs := []any{}
		for i := 1; i <= n; i++ {
			msgs = append(msgs, map[string]any{"body": map[string]any{"string": fmt.Sprintf(`{"tag":"n%d","do":"ack"}`, i)}})
		}
		cr, err := w.invokeSend(ctx, wk, b, map[string]any{"op": "sendBatch", "messages": msgs})
		if err != nil {
			return err
		}
		w.call = cr
		return nil
	})
	sc.Step(`^the call resolves with (\d+) message IDs?$`, func(ctx context.Context, n int) error {
		cr := get(ctx).call
		if cr == nil {
			return fmt.Errorf("no call was made")
		}
		if !cr.OK {
			return fmt.Errorf("the call rejected with %q (%s), want %d IDs", cr.Name, cr.Message, n)
		}
		return checkIDs(cr, n)
	})
	sc.Step(`^the call rejects with "([^"]*)"$`, func(ctx context.Context, name string) error {
		cr := get(ctx).call
		if cr == nil {
			return fmt.Errorf("no call was made")
		}
		if cr.OK {
			return fmt.Errorf("the call resolved with %v, want a rejection %q", cr.IDs, name)
		}
		if cr.Name != name {
			return fmt.Errorf("the call rejected with Error.name %q (%s), want %q", cr.Name, cr.Message, name)
		}
		return nil
	})
	sc.Step(`^the binding "([^"]*)" of "([^"]*)" offers exactly send and sendBatch$`, func(ctx context.Context, b, wk string) error {
		w := get(ctx)
		rs, err := w.resource(wk)
		if err != nil {
			return err
		}
		r, err := w.admin().Do(ctx, "GET", resPath(rs.space, rs.uid)+"/fetch/inspect?binding="+url.QueryEscape(b), nil, nil)
		if err != nil {
			return err
		}
		var out struct {
			Type    string            `json:"type"`
			Members map[string]string `json:"members"`
		}
		if err := r.JSON(&out); err != nil {
			return err
		}
		if out.Type != "object" {
			return fmt.Errorf("env.%s is a %s, want an object", b, out.Type)
		}
		for n, t := range out.Members {
			want := "undefined"
			if n == "send" || n == "sendBatch" {
				want = "function"
			}
			if t != want {
				return fmt.Errorf("env.%s.%s is %s, want %s", b, n, t, want)
			}
		}
		return nil
	})
}
