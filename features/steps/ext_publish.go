package steps

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cucumber/godog"
)

// Steps of the publish extension (@ext-publish; spec/peers.md §Publish):
// messages sent to a queue over the Host API, POST
// /v2/spaces/{space}/resources/{uid}/messages, by an editor or by a
// principal with a publisher grant, which the scenario creates through the
// principal routes and revokes when it ends.

// publishPath is the publish route of a queue of the scenario.
func (w *world) publishPath(a string) (string, error) {
	rs, err := w.resource(a)
	if err != nil {
		return "", err
	}
	return resPath(rs.space, rs.uid) + "/messages", nil
}

// publish POSTs req to a's publish route as the current principal; on 200
// it records each message's tag (the tag of its body's JSON) with its ID,
// as a Binding send does, so that the delivery steps know it.
func (w *world) publish(ctx context.Context, a string, req map[string]any) error {
	p, err := w.publishPath(a)
	if err != nil {
		return err
	}
	before := time.Now()
	r, err := w.do(ctx, "POST", p, req)
	if err != nil || r.Status != 200 {
		return err
	}
	after := time.Now()
	var out struct {
		MessageIDs []string `json:"messageIds"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		return fmt.Errorf("the publish answered 200 with %s: %w", r, err)
	}
	ms, _ := req["messages"].([]any)
	if len(out.MessageIDs) != len(ms) {
		return fmt.Errorf("the publish of %d messages answered %d IDs: %s", len(ms), len(out.MessageIDs), r)
	}
	w.sentMu.Lock()
	defer w.sentMu.Unlock()
	for i, m := range ms {
		mm, _ := m.(map[string]any)
		body, _ := mm["body"].(string)
		b := []byte(body)
		if mm["bodyEncoding"] == "base64" {
			b, _ = base64.StdEncoding.DecodeString(body)
		}
		var d struct {
			Tag string `json:"tag"`
		}
		_ = json.Unmarshal([]byte(strings.ToValidUTF8(string(b), "\uFFFD")), &d)
		if d.Tag != "" {
			w.sent[d.Tag] = &sent{id: out.MessageIDs[i], before: before, after: after}
		}
	}
	return nil
}

// paddedText is the kit worker's padded body (features/workers/kit.js
// bodyFrom): {"tag":T,"pad":"..."} of exactly n UTF-8 bytes, padded with c.
func paddedText(tag string, n int, c string) string {
	prefix, suffix := `{"tag":"`+tag+`","pad":"`, `"}`
	base := len(prefix) + len(suffix)
	k := (n - base) / len(c)
	rem := n - base - k*len(c)
	return prefix + strings.Repeat(c, k) + strings.Repeat("a", rem) + suffix
}

func publishedIDs(r *Response) ([]string, error) {
	if r == nil || r.Status != 200 {
		return nil, fmt.Errorf("the publish was not accepted: %v", r)
	}
	var out struct {
		MessageIDs []string `json:"messageIds"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		return nil, err
	}
	return out.MessageIDs, nil
}

func registerPublishSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	sc.After(func(ctx context.Context, s *godog.Scenario, err error) (context.Context, error) {
		w := get(ctx)
		if w == nil {
			return ctx, nil
		}
		for _, id := range w.created {
			if r, err := w.admin().Do(context.WithoutCancel(ctx), "DELETE", "/v2/principals/"+id, nil, nil); err != nil || r.Status != 200 {
				w.k.cfg.Log("%s: revoking the principal %s it created failed: %v %v", s.Name, id, r, err)
			}
		}
		return ctx, nil
	})
	sc.Step(`^a (publisher|consumer) principal "([^"]*)" of (?:"([^"]*)"|every queue)$`, func(ctx context.Context, role, name, q string) error {
		w := W(ctx)
		grant := map[string]any{"space": w.space, "role": role}
		if q != "" {
			rs, err := w.resource(q)
			if err != nil {
				return err
			}
			grant["queues"] = []string{rs.uid}
		}
		pname := fmt.Sprintf("kit-%s-%d-%s", w.k.run, w.k.n.Add(1), name)
		if len(pname) > 63 {
			pname = pname[len(pname)-63:]
		}
		pname = strings.Trim(strings.ToLower(pname), "-._")
		r, err := w.admin().Do(ctx, "POST", "/v2/principals", map[string]any{"name": pname, "grants": []any{grant}}, nil)
		if err != nil {
			return err
		}
		if r.Status != 201 {
			return w.k.skip(ctx, fmt.Sprintf("needs an admin token that may create principals (POST /v2/principals answered %d)", r.Status))
		}
		var out struct {
			Principal struct {
				ID string `json:"id"`
			} `json:"principal"`
			Token string `json:"token"`
		}
		if err := json.Unmarshal(r.Body, &out); err != nil || out.Token == "" {
			return fmt.Errorf("POST /v2/principals answered %s", r)
		}
		w.created = append(w.created, out.Principal.ID)
		if w.tokens == nil {
			w.tokens = map[string]string{}
		}
		w.tokens[name] = out.Token
		// Hosts that share host.json reload it within a second
		// (spec/cluster.md §Principals): wait until the token
		// authenticates wherever the requests go, ten answers in a row.
		pc := &Client{Base: w.k.cfg.Base, Token: out.Token, HTTP: w.k.httpc}
		deadline := time.Now().Add(15 * time.Second)
		for ok := 0; ok < 10; {
			r, err := pc.Do(ctx, "GET", "/v2/spaces/"+w.space+"/resources", nil, nil)
			if err != nil {
				return err
			}
			if r.Status == 401 {
				ok = 0
				if time.Now().After(deadline) {
					return fmt.Errorf("the new principal's token is still refused 15 s after it was created: %s", r)
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			ok++
		}
		return nil
	})
	sc.Step(`^I publish (\{.*\}) to "([^"]*)"$`, func(ctx context.Context, body, q string) error {
		return W(ctx).publish(ctx, q, map[string]any{"messages": []any{map[string]any{"body": body}}})
	})
	sc.Step(`^I publish (\{.*\}) to "([^"]*)" with (\{.*\})$`, func(ctx context.Context, body, q, opts string) error {
		w := W(ctx)
		var m map[string]any
		if err := json.Unmarshal([]byte(opts), &m); err != nil {
			return err
		}
		m["body"] = body
		return w.publish(ctx, q, map[string]any{"messages": []any{m}})
	})
	sc.Step(`^I publish to "([^"]*)":$`, func(ctx context.Context, q string, doc *godog.DocString) error {
		w := W(ctx)
		v, err := w.expandJSON(doc.Content)
		if err != nil {
			return err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("the publish request must be a JSON object")
		}
		return w.publish(ctx, q, m)
	})
	sc.Step(`^I publish (\d+) messages tagged "([^"]*)" to "([^"]*)"(?: in one request)?$`, func(ctx context.Context, n int, tag, q string) error {
		ms := make([]any, n)
		for i := range ms {
			ms[i] = map[string]any{"body": fmt.Sprintf(`{"tag":"%s-%d","do":"ack"}`, tag, i+1)}
		}
		return W(ctx).publish(ctx, q, map[string]any{"messages": ms})
	})
	sc.Step(`^I publish to "([^"]*)" a (\d+)-byte message tagged "([^"]*)" padded with "([^"]*)"(?: after (\d+) messages tagged "([^"]*)")?$`, func(ctx context.Context, q string, n int, tag, c, nbefore, btag string) error {
		before, _ := strconv.Atoi(nbefore)
		ms := []any{}
		for i := range before {
			ms = append(ms, map[string]any{"body": fmt.Sprintf(`{"tag":"%s-%d","do":"ack"}`, btag, i+1)})
		}
		ms = append(ms, map[string]any{"body": paddedText(tag, n, c)})
		return W(ctx).publish(ctx, q, map[string]any{"messages": ms})
	})
	sc.Step(`^I publish to "([^"]*)" the base64 bytes "([^"]*)" tagged "([^"]*)"$`, func(ctx context.Context, q, b64, tag string) error {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return err
		}
		if utf8.Valid(b) {
			return fmt.Errorf("the bytes are valid UTF-8; the step is for bytes that are not")
		}
		w := W(ctx)
		if w.published == nil {
			w.published = map[string]string{}
		}
		w.published[tag] = b64
		return w.publish(ctx, q, map[string]any{"messages": []any{map[string]any{"body": b64, "bodyEncoding": "base64"}}})
	})
	sc.Step(`^the delivered body of "([^"]*)" is exactly the published bytes$`, func(ctx context.Context, tag string) error {
		w := W(ctx)
		want, ok := w.published[tag]
		if !ok {
			return fmt.Errorf("no bytes of %q were published in this scenario", tag)
		}
		ds, err := w.waitDeliveries(tag, "", 1, deliverTimeout)
		if err != nil {
			return err
		}
		if ds[0].Msg.Body != want {
			return fmt.Errorf("delivered body of %q is base64 %s, published %s", tag, ds[0].Msg.Body, want)
		}
		return nil
	})
	sc.Step(`^the publish answers (\d+) message IDs?$`, func(ctx context.Context, n int) error {
		w := W(ctx)
		got, err := publishedIDs(w.last)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, id := range got {
			if id == "" || len(id) > 256 || seen[id] {
				return fmt.Errorf("the publish answered IDs %q: each must be 1..256 characters and distinct", got)
			}
			seen[id] = true
		}
		if len(got) != n {
			return fmt.Errorf("the publish answered %d IDs, want %d: %s", len(got), n, w.last)
		}
		return nil
	})
	sc.Step(`^the publish answers the IDs of the previous publish, replayed$`, func(ctx context.Context) error {
		w := W(ctx)
		a, err := publishedIDs(w.prev)
		if err != nil {
			return fmt.Errorf("first publish: %w", err)
		}
		b, err := publishedIDs(w.last)
		if err != nil {
			return fmt.Errorf("second publish: %w", err)
		}
		if strings.Join(a, ",") != strings.Join(b, ",") {
			return fmt.Errorf("the retry answered IDs %q, the first publish %q", b, a)
		}
		if got := w.last.Header.Get("Idempotent-Replayed"); got != "true" {
			return fmt.Errorf("the retry's Idempotent-Replayed is %q, want true", got)
		}
		return nil
	})
}
