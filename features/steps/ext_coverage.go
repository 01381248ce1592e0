package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cucumber/godog"
)

// Steps that check extension and Host API sentences the other steps do not
// reach (features/sentences/ext-*.txt, hostapi.txt): what a redriven
// message looks like, what the inspection counters count, the Operation
// list, and the scope of an Idempotency-Key.

type sinceStart struct {
	Accepted, Delivered, Acknowledged, Retried, DeadLettered, Discarded, Expired *int64
}

type statsDoc struct {
	QueueUID         string      `json:"queueUid"`
	Messages         *int        `json:"messages"`
	OldestAgeSeconds *float64    `json:"oldestAgeSeconds"`
	BatchesInFlight  *int        `json:"batchesInFlight"`
	Active           *bool       `json:"active"`
	SinceStart       *sinceStart `json:"sinceStart"`
}

func (w *world) stats(ctx context.Context, a string) (*statsDoc, string, error) {
	p, err := w.extPath(a, "stats")
	if err != nil {
		return nil, "", err
	}
	r, err := w.do(ctx, "GET", p, nil)
	if err != nil {
		return nil, "", err
	}
	if r.Status != 200 {
		return nil, "", fmt.Errorf("GET %s: %s", p, r)
	}
	var st statsDoc
	if err := json.Unmarshal(r.Body, &st); err != nil {
		return nil, "", fmt.Errorf("GET %s: not queue stats: %v", p, err)
	}
	return &st, string(r.Body), nil
}

var countRE = regexp.MustCompile(`^(accepted|delivered|acknowledged|retried|deadLettered|discarded|expired) (\d+)$`)

// listedFull is the listed message of a whose preview names tag, with the
// members the listing's other steps do not read.
type listedFull struct {
	ID               string `json:"id"`
	AcceptTimeMillis int64  `json:"acceptTimeMillis"`
	VisibleAtMillis  int64  `json:"visibleAtMillis"`
	Attempts         int    `json:"attempts"`
	Size             int    `json:"size"`
	State            string `json:"state"`
	BodyPreview      []byte `json:"bodyPreview"`
	BodyTruncated    *bool  `json:"bodyTruncated"`
}

func (w *world) listedFull(ctx context.Context, a, tag string) (*listedFull, error) {
	p, err := w.extPath(a, "messages")
	if err != nil {
		return nil, err
	}
	var last string
	err = Poll(15*time.Second, func() error {
		tok := ""
		for pages := 0; pages < 1000; pages++ {
			u := p + "?limit=100"
			if tok != "" {
				u += "&pageToken=" + url.QueryEscape(tok)
			}
			r, err := w.do(ctx, "GET", u, nil)
			if err != nil {
				return err
			}
			if r.Status != 200 {
				return fmt.Errorf("GET %s: %s", u, r)
			}
			var pg struct {
				Items         []json.RawMessage `json:"items"`
				NextPageToken string            `json:"nextPageToken"`
			}
			if err := json.Unmarshal(r.Body, &pg); err != nil {
				return fmt.Errorf("GET %s: not a message list: %v", u, err)
			}
			for _, raw := range pg.Items {
				var m listedFull
				if err := json.Unmarshal(raw, &m); err != nil {
					return fmt.Errorf("GET %s: item %s: %v", u, raw, err)
				}
				if strings.Contains(string(m.BodyPreview), `"tag":"`+tag+`"`) {
					last = ""
					w.etags["kit-listed"] = string(raw)
					return nil
				}
			}
			if pg.NextPageToken == "" {
				break
			}
			tok = pg.NextPageToken
		}
		last = fmt.Sprintf("no listed message of %q has a preview naming tag %q", a, tag)
		return fmt.Errorf("%s", last)
	})
	if err != nil {
		return nil, err
	}
	var m listedFull
	if err := json.Unmarshal([]byte(w.etags["kit-listed"]), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// listOps walks every page of the space's Operations with query q (without
// limit and pageToken), n a page, as the current principal.
func (w *world) listOps(ctx context.Context, q string, n int) ([]Operation, error) {
	return allPages[Operation](ctx, w, fmt.Sprintf("/v2/spaces/%s/operations", w.space), q, n, "operation list")
}

func registerCoverageSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }

	// ---- @ext-inspect ----
	sc.Step(`^the counts of "([^"]*)" since the engine started become: (.+)$`, func(ctx context.Context, a, list string) error {
		w := W(ctx)
		want := map[string]int64{}
		for _, part := range strings.Split(list, ",") {
			m := countRE.FindStringSubmatch(strings.TrimSpace(part))
			if m == nil {
				return fmt.Errorf("count %q: want items like \"accepted 2\"", part)
			}
			n, _ := strconv.ParseInt(m[2], 10, 64)
			want[m[1]] = n
		}
		var body string
		return Poll(15*time.Second, func() error {
			st, b, err := w.stats(ctx, a)
			if err != nil {
				return err
			}
			body = b
			s := st.SinceStart
			if s == nil || s.Accepted == nil || s.Delivered == nil || s.Acknowledged == nil || s.Retried == nil ||
				s.DeadLettered == nil || s.Discarded == nil || s.Expired == nil {
				return fmt.Errorf("the stats of %q have no complete sinceStart: %s", a, body)
			}
			got := map[string]int64{"accepted": *s.Accepted, "delivered": *s.Delivered, "acknowledged": *s.Acknowledged,
				"retried": *s.Retried, "deadLettered": *s.DeadLettered, "discarded": *s.Discarded, "expired": *s.Expired}
			for k, v := range want {
				if got[k] != v {
					return fmt.Errorf("the counts of %q since the engine started are %v, want %s %d", a, got, k, v)
				}
			}
			return nil
		})
	})
	sc.Step(`^the stats of "([^"]*)" show (\d+) batch(?:es)? in flight, delivery (active|inactive), and the oldest message at least (\d+) seconds? old$`,
		func(ctx context.Context, a string, batches int, state string, age int) error {
			w := W(ctx)
			return Poll(15*time.Second, func() error {
				st, body, err := w.stats(ctx, a)
				if err != nil {
					return err
				}
				if st.BatchesInFlight == nil || st.Active == nil || st.OldestAgeSeconds == nil {
					return fmt.Errorf("the stats of %q lack batchesInFlight, active or oldestAgeSeconds: %s", a, body)
				}
				if *st.BatchesInFlight != batches || *st.Active != (state == "active") || *st.OldestAgeSeconds < float64(age) {
					return fmt.Errorf("the stats of %q read %s, want %d batches in flight, active %v, oldest at least %d s old", a, body, batches, state == "active", age)
				}
				return nil
			})
		})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" has its whole (\d+)-byte body as preview, not truncated$`, func(ctx context.Context, a, tag string, size int) error {
		m, err := W(ctx).listedFull(ctx, a, tag)
		if err != nil {
			return err
		}
		if m.BodyTruncated == nil || *m.BodyTruncated || m.Size != size || len(m.BodyPreview) != size {
			return fmt.Errorf("message %s: size %d, preview of %d bytes, bodyTruncated %v; want the whole %d bytes, not truncated", m.ID, m.Size, len(m.BodyPreview), m.BodyTruncated, size)
		}
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" carries the ID and accept time its delivery carried$`, func(ctx context.Context, a, tag string) error {
		w := W(ctx)
		m, err := w.listedFull(ctx, a, tag)
		if err != nil {
			return err
		}
		ds := w.deliveries(tag, a)
		if len(ds) == 0 {
			return fmt.Errorf("message %q was not delivered from %q", tag, a)
		}
		d := ds[len(ds)-1].Msg
		ts, _ := isInt(d.TimestampMillis)
		if m.ID != d.IDString() || m.AcceptTimeMillis != ts {
			return fmt.Errorf("listed message: ID %s accepted %d; its delivery carried ID %v, timestampMillis %v", m.ID, m.AcceptTimeMillis, d.ID, d.TimestampMillis)
		}
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" becomes visible (\d+) seconds? after its accept time$`, func(ctx context.Context, a, tag string, s int) error {
		m, err := W(ctx).listedFull(ctx, a, tag)
		if err != nil {
			return err
		}
		if m.VisibleAtMillis != m.AcceptTimeMillis+int64(s)*1000 {
			return fmt.Errorf("message %s: accepted %d, visible at %d, want %d s later", m.ID, m.AcceptTimeMillis, m.VisibleAtMillis, s)
		}
		return nil
	})

	sc.Step(`^I read the first page of (\d+) messages of "([^"]*)"$`, func(ctx context.Context, n int, a string) error {
		w := W(ctx)
		p, err := w.extPath(a, "messages")
		if err != nil {
			return err
		}
		u := fmt.Sprintf("%s?limit=%d", p, n)
		r, err := w.do(ctx, "GET", u, nil)
		if err != nil {
			return err
		}
		var pg messagePage
		if r.Status != 200 || json.Unmarshal(r.Body, &pg) != nil {
			return fmt.Errorf("GET %s: %s", u, r)
		}
		if len(pg.Items) != n || pg.NextPageToken == "" {
			return fmt.Errorf("GET %s: %d items, nextPageToken %q; want %d and a token", u, len(pg.Items), pg.NextPageToken, n)
		}
		var ids []string
		for _, m := range pg.Items {
			ids = append(ids, m.ID)
		}
		w.etags["kit-page-token"] = pg.NextPageToken
		w.etags["kit-page-ids"] = strings.Join(ids, " ")
		w.etags["kit-page-queue"] = a
		w.etags["kit-page-last"] = strconv.FormatInt(pg.Items[len(pg.Items)-1].AcceptTimeMillis, 10)
		return nil
	})
	sc.Step(`^reading on from that page's token yields the (\d+) messages? not listed yet, none older$`, func(ctx context.Context, want int) error {
		w := W(ctx)
		a := w.etags["kit-page-queue"]
		p, err := w.extPath(a, "messages")
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, id := range strings.Fields(w.etags["kit-page-ids"]) {
			seen[id] = true
		}
		last, _ := strconv.ParseInt(w.etags["kit-page-last"], 10, 64)
		first := last
		tok, got := w.etags["kit-page-token"], 0
		for pages := 0; tok != ""; pages++ {
			if pages > 1000 {
				return fmt.Errorf("the pages of %q do not end", a)
			}
			u := fmt.Sprintf("%s?limit=100&pageToken=%s", p, url.QueryEscape(tok))
			r, err := w.do(ctx, "GET", u, nil)
			if err != nil {
				return err
			}
			var pg messagePage
			if r.Status != 200 || json.Unmarshal(r.Body, &pg) != nil {
				return fmt.Errorf("GET %s: %s", u, r)
			}
			for _, m := range pg.Items {
				if seen[m.ID] {
					// After a restart the token resumes at its accept
					// millisecond, which may list that millisecond again.
					if m.AcceptTimeMillis != first {
						return fmt.Errorf("message %s listed again after the first page", m.ID)
					}
					continue
				}
				if m.AcceptTimeMillis < last {
					return fmt.Errorf("message %s (accepted %d) listed after one accepted at %d", m.ID, m.AcceptTimeMillis, last)
				}
				seen[m.ID], last = true, m.AcceptTimeMillis
				got++
			}
			tok = pg.NextPageToken
		}
		if got != want {
			return fmt.Errorf("read on %d messages after the first page, want %d", got, want)
		}
		return nil
	})

	// ---- @ext-redrive ----
	sc.Step(`^I remember the listed message of "([^"]*)" tagged "([^"]*)"$`, func(ctx context.Context, a, tag string) error {
		w := W(ctx)
		m, err := w.listedFull(ctx, a, tag)
		if err != nil {
			return err
		}
		w.etags["kit-remembered-id:"+tag] = m.ID
		w.etags["kit-remembered-accept:"+tag] = strconv.FormatInt(m.AcceptTimeMillis, 10)
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" is a new message, accepted no sooner than (\d+) seconds? after the remembered one and visible (\d+) seconds? after that$`,
		func(ctx context.Context, a, tag string, after, delay int) error {
			w := W(ctx)
			id, acc := w.etags["kit-remembered-id:"+tag], w.etags["kit-remembered-accept:"+tag]
			if id == "" {
				return fmt.Errorf("no remembered listed message tagged %q", tag)
			}
			before, _ := strconv.ParseInt(acc, 10, 64)
			m, err := w.listedFull(ctx, a, tag)
			if err != nil {
				return err
			}
			if m.ID == id {
				return fmt.Errorf("message %q kept its ID %s in %q, want a new message", tag, id, a)
			}
			if m.AcceptTimeMillis < before+int64(after)*1000 {
				return fmt.Errorf("message %q in %q was accepted at %d, the remembered one at %d: want the accept time of the move, at least %d s later", tag, a, m.AcceptTimeMillis, before, after)
			}
			if m.Attempts != 0 {
				return fmt.Errorf("message %q in %q has attempts %d, want 0", tag, a, m.Attempts)
			}
			if m.VisibleAtMillis != m.AcceptTimeMillis+int64(delay)*1000 {
				return fmt.Errorf("message %q in %q: accepted %d, visible at %d, want %d s after its accept time", tag, a, m.AcceptTimeMillis, m.VisibleAtMillis, delay)
			}
			return nil
		})

	sc.Step(`^"([^"]*)" holds as many messages tagged "([^"]*)" as the redrive left unmoved$`, func(ctx context.Context, a, tag string) error {
		w := W(ctx)
		op, err := w.finishedQueueOp(ctx)
		if err != nil {
			return err
		}
		all, err := w.listMessages(ctx, a, 100)
		if err != nil {
			return err
		}
		got := 0
		for _, m := range all {
			if strings.Contains(string(m.BodyPreview), `"tag":"`+tag) {
				got++
			}
		}
		if want := op.Progress["total"] - op.Progress["moved"]; got != want {
			return fmt.Errorf("%q holds %d messages tagged %q; the redrive (%s) reports %d moved of %d", a, got, tag, op.State, op.Progress["moved"], op.Progress["total"])
		}
		return nil
	})

	sc.Step(`^a redrive of "([^"]*)" to "([^"]*)" while a batch holds a message "([^"]*)" sent through "([^"]*)" skips that message without waiting for the batch$`,
		func(ctx context.Context, a, target, wk, b string) error {
			w := W(ctx)
			tr, err := w.resource(target)
			if err != nil {
				return err
			}
			// The batch runs until the host's time limit ends it; a redrive
			// that finished only after the batch ended proves nothing (or is a
			// host that waited), so the step tries again with the next message.
			var tries []string
			for i := 1; i <= 5; i++ {
				tag := fmt.Sprintf("kit-held-%d", i)
				body := fmt.Sprintf(`{"tag":%q,"do":"sleep:600000"}`, tag)
				if err := w.mustSend(ctx, wk, b, map[string]any{"op": "send", "body": map[string]any{"string": body}}); err != nil {
					return err
				}
				ds, err := w.waitDeliveries(tag, a, 1, deliverTimeout)
				if err != nil {
					return err
				}
				if err := w.startQueueOp(ctx, a, "redrive", map[string]any{"targetQueue": map[string]any{"resourceUid": tr.uid}}); err != nil {
					return err
				}
				if w.last.Status != 202 {
					return fmt.Errorf("redrive: %s", w.last)
				}
				id, _ := w.queueOp()
				op, err := WaitOperation(ctx, w.admin(), w.space, id, opTimeout)
				if err != nil {
					return err
				}
				done := time.Now()
				ended := false
				for _, e := range w.k.cfg.Recorder.Events(w.scope) {
					if e.Kind == "end" && e.BatchIDString() == ds[0].Start.BatchIDString() && e.Recv.Before(done) {
						ended = true
					}
				}
				if ended {
					tries = append(tries, fmt.Sprintf("the redrive with %s ended %s after its batch", tag, op.State))
					continue
				}
				if op.State != "succeeded" || op.Progress["skipped"] < 1 {
					return fmt.Errorf("a redrive while %s was held ended %s/%s with progress %v, want succeeded with it skipped", tag, op.State, op.Effect, op.Progress)
				}
				moved, err := w.listMessages(ctx, target, 100)
				if err != nil {
					return err
				}
				for _, m := range moved {
					if strings.Contains(string(m.BodyPreview), `"tag":"`+tag+`"`) {
						return fmt.Errorf("message %s, held by a running batch, was moved to %q", tag, target)
					}
				}
				return nil
			}
			return fmt.Errorf("no redrive finished while its batch ran (a host that waits for held messages?): %s", strings.Join(tries, "; "))
		})

	sc.Step(`^I cancel the (remembered operation|redrive) through the path of (?:this|another) space "([^"]*)"$`, func(ctx context.Context, which, space string) error {
		w := W(ctx)
		sp, err := w.expand(space)
		if err != nil {
			return err
		}
		id := w.etags["op"]
		if which == "redrive" {
			if id, err = w.queueOp(); err != nil {
				return err
			}
		}
		_, err = w.do(ctx, "POST", "/v2/spaces/"+sp+"/operations/"+url.PathEscape(id)+"/cancel", nil)
		return err
	})

	// ---- resources ----
	sc.Step(`^listing the "([^"]*)" resources (\d+) at a time yields (\d+) resources?, oldest first, each once$`, func(ctx context.Context, form string, n, want int) error {
		w := W(ctx)
		fu := formsByShortName[form]
		if fu == "" {
			return fmt.Errorf("unknown Form %q", form)
		}
		type item struct {
			UID        string `json:"uid"`
			CreateTime string `json:"createTime"`
		}
		var all []item
		tok := ""
		for pages := 0; ; pages++ {
			if pages > 10000 {
				return fmt.Errorf("the pages of the resource list do not end")
			}
			u := fmt.Sprintf("/v2/spaces/%s/resources?formUrl=%s&limit=%d", w.space, url.QueryEscape(fu), n)
			if tok != "" {
				u += "&pageToken=" + url.QueryEscape(tok)
			}
			r, err := w.do(ctx, "GET", u, nil)
			if err != nil {
				return err
			}
			var pg struct {
				Items         []item `json:"items"`
				NextPageToken string `json:"nextPageToken"`
			}
			if r.Status != 200 || json.Unmarshal(r.Body, &pg) != nil {
				return fmt.Errorf("GET %s: %s", u, r)
			}
			if len(pg.Items) > n {
				return fmt.Errorf("GET %s: %d items, more than limit %d", u, len(pg.Items), n)
			}
			all = append(all, pg.Items...)
			if pg.NextPageToken == "" {
				break
			}
			tok = pg.NextPageToken
		}
		seen := map[string]bool{}
		for i, it := range all {
			if seen[it.UID] {
				return fmt.Errorf("resource %s listed twice", it.UID)
			}
			seen[it.UID] = true
			if i > 0 && it.CreateTime < all[i-1].CreateTime {
				return fmt.Errorf("resource %s (created %s) listed after %s (created %s): want oldest first", it.UID, it.CreateTime, all[i-1].UID, all[i-1].CreateTime)
			}
		}
		if len(all) != want {
			return fmt.Errorf("listed %d %s resources, want %d", len(all), form, want)
		}
		return nil
	})

	sc.Step(`^the space lists no operations$`, func(ctx context.Context) error {
		w := W(ctx)
		all, err := w.listOps(ctx, "", 50)
		if err != nil {
			return err
		}
		if len(all) != 0 {
			return fmt.Errorf("the space lists %d operations, want none: %+v", len(all), all)
		}
		return nil
	})
	sc.Step(`^the response carries header "([^"]*)"(?: with value "([^"]*)")?$`, func(ctx context.Context, k, v string) error {
		w := W(ctx)
		if w.last == nil {
			return fmt.Errorf("no response yet")
		}
		got := w.last.Header.Get(k)
		if got == "" || v != "" && got != v {
			return fmt.Errorf("the response has %s %q, want %q: %s", k, got, v, w.last)
		}
		return nil
	})

	// ---- Operations ----
	sc.Step(`^listing the operations on "([^"]*)" (\d+) at a time yields (\d+) operations?, newest first(?:, the last a (create|update|delete|purge|redrive))?$`,
		func(ctx context.Context, a string, n, want int, kind string) error {
			w := W(ctx)
			rs, err := w.resource(a)
			if err != nil {
				return err
			}
			all, err := w.listOps(ctx, "resourceUid="+url.QueryEscape(rs.uid), n)
			if err != nil {
				return err
			}
			if len(all) != want {
				return fmt.Errorf("listed %d operations on %q, want %d: %+v", len(all), a, want, all)
			}
			seen := map[string]bool{}
			for i, op := range all {
				if op.ResourceUID != rs.uid {
					return fmt.Errorf("filtered by resourceUid %s, the list holds operation %s on %s", rs.uid, op.ID, op.ResourceUID)
				}
				if seen[op.ID] {
					return fmt.Errorf("operation %s listed twice", op.ID)
				}
				seen[op.ID] = true
				if err := op.CheckPair(); err != nil {
					return err
				}
				if i > 0 && op.CreateTime > all[i-1].CreateTime {
					return fmt.Errorf("operation %s (created %s) listed after %s (created %s): want newest first", op.ID, op.CreateTime, all[i-1].ID, all[i-1].CreateTime)
				}
			}
			if kind != "" && len(all) > 0 && all[len(all)-1].Kind != kind {
				return fmt.Errorf("the oldest operation on %q is a %s, want a %s", a, all[len(all)-1].Kind, kind)
			}
			return nil
		})
	sc.Step(`^listing the operations of the space with state "([^"]*)" yields only (\w+) operations, (\d+) or more$`, func(ctx context.Context, state, same string, least int) error {
		w := W(ctx)
		all, err := w.listOps(ctx, "state="+url.QueryEscape(state), 200)
		if err != nil {
			return err
		}
		for _, op := range all {
			if op.State != same {
				return fmt.Errorf("filtered by state %s, the list holds operation %s in state %s", state, op.ID, op.State)
			}
		}
		if len(all) < least {
			return fmt.Errorf("listed %d %s operations, want at least %d", len(all), state, least)
		}
		return nil
	})
	sc.Step(`^listing the operations of the space shows none on "([^"]*)" and some on "([^"]*)"$`, func(ctx context.Context, hidden, shown string) error {
		w := W(ctx)
		h, err := w.resource(hidden)
		if err != nil {
			return err
		}
		s, err := w.resource(shown)
		if err != nil {
			return err
		}
		all, err := w.listOps(ctx, "", 50)
		if err != nil {
			return err
		}
		found := false
		for _, op := range all {
			if op.ResourceUID == h.uid {
				return fmt.Errorf("the list shows operation %s on %q, whose Form the principal may not read", op.ID, hidden)
			}
			found = found || op.ResourceUID == s.uid
		}
		if !found {
			return fmt.Errorf("the list shows no operation on %q", shown)
		}
		return nil
	})
	sc.Step(`^I read the remembered operation through the path of (?:this|another) space "([^"]*)"$`, func(ctx context.Context, space string) error {
		w := W(ctx)
		sp, err := w.expand(space)
		if err != nil {
			return err
		}
		_, err = w.do(ctx, "GET", "/v2/spaces/"+sp+"/operations/"+url.PathEscape(w.etags["op"]), nil)
		return err
	})
	sc.Step(`^the response replays the remembered operation$`, func(ctx context.Context) error {
		w := W(ctx)
		op, err := AcceptedOperation(w.last)
		if err != nil {
			return err
		}
		if op.ID != w.etags["op"] {
			return fmt.Errorf("the replay answered operation %s, want the remembered %s", op.ID, w.etags["op"])
		}
		if v := w.last.Header.Get("Idempotent-Replayed"); v != "true" {
			return fmt.Errorf("replay has Idempotent-Replayed %q, want true", v)
		}
		return nil
	})
	sc.Step(`^the response is a new operation, not a replay of the previous one$`, func(ctx context.Context) error {
		w := W(ctx)
		if w.prev == nil || w.last == nil {
			return fmt.Errorf("need two requests")
		}
		b, err := AcceptedOperation(w.last)
		if err != nil {
			return err
		}
		if a, err := AcceptedOperation(w.prev); err == nil && a.ID == b.ID {
			return fmt.Errorf("the request was answered with the previous request's operation %s", a.ID)
		}
		if v := w.last.Header.Get("Idempotent-Replayed"); v == "true" {
			return fmt.Errorf("the answer says Idempotent-Replayed: true")
		}
		return nil
	})

	// ---- @ext-delete-if-idle ----
	sc.Step(`^"([^"]*)" sends through "([^"]*)" messages its handler acknowledges and then keeps the batch running; a delete of "([^"]*)" with ifIdle while it runs is refused with 409 "queue_not_idle"$`,
		func(ctx context.Context, wk, b, a string) error {
			w := W(ctx)
			rs, err := w.resource(a)
			if err != nil {
				return err
			}
			// The batch runs until its handler returns or the host's time
			// limit ends it; a delete that lands after its end proves
			// nothing, so the step tries again with the next message.
			var tries []string
			for i := 1; i <= 5; i++ {
				tag := fmt.Sprintf("kit-idle-%d", i)
				body := fmt.Sprintf(`{"tag":%q,"do":"ack-then-sleep:5000"}`, tag)
				if err := w.mustSend(ctx, wk, b, map[string]any{"op": "send", "body": map[string]any{"string": body}}); err != nil {
					return err
				}
				var d Delivery
				if err := Poll(deliverTimeout, func() error {
					for _, e := range w.k.cfg.Recorder.Events(w.scope) {
						if e.Kind == "acked" && len(e.Messages) == 1 && e.Messages[0].Tag == tag {
							d = Delivery{Start: e, Msg: e.Messages[0]}
							return nil
						}
					}
					return fmt.Errorf("the handler of %q did not report its acknowledgement", tag)
				}); err != nil {
					return err
				}
				if len(d.Start.Results) != 1 || !d.Start.Results[0].OK {
					return fmt.Errorf("the acknowledgement of %q failed: %+v", tag, d.Start.Results)
				}
				r, err := w.do(ctx, "DELETE", resPath(rs.space, rs.uid)+"?ifIdle=true", nil)
				if err != nil {
					return err
				}
				answered := time.Now()
				ended := false
				for _, e := range w.k.cfg.Recorder.Events(w.scope) {
					if e.Kind == "end" && e.BatchIDString() == d.Start.BatchIDString() && e.Recv.Before(answered) {
						ended = true
					}
				}
				if CheckProblem(r, 409, "queue_not_idle") == nil {
					return nil
				}
				if !ended {
					return fmt.Errorf("while a batch with no unsettled message ran: %w", CheckProblem(r, 409, "queue_not_idle"))
				}
				tries = append(tries, fmt.Sprintf("%s answered %d after the batch had ended", tag, r.Status))
			}
			return fmt.Errorf("no delete landed while the batch ran: %s", strings.Join(tries, "; "))
		})
}
