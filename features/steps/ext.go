package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cucumber/godog"
)

// Steps of the host extensions (spec/peers.md), used only by features
// tagged @ext-NAME.

// deliveryPath is the inactive-delivery extension's route of resource a.
func (w *world) deliveryPath(a string) (string, error) {
	rs, err := w.resource(a)
	if err != nil {
		return "", err
	}
	return resPath(rs.space, rs.uid) + "/delivery", nil
}

func (w *world) setDelivery(ctx context.Context, a string, active bool) (*Response, error) {
	p, err := w.deliveryPath(a)
	if err != nil {
		return nil, err
	}
	return w.do(ctx, "PUT", p, map[string]any{"active": active})
}

func registerExtSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	// @ext-pause
	sc.Step(`^I (pause|resume) "([^"]*)"$`, func(ctx context.Context, verb, a string) error {
		_, err := W(ctx).setDelivery(ctx, a, verb == "resume")
		return err
	})
	sc.Step(`^"([^"]*)" has been (paused|resumed)$`, func(ctx context.Context, a, verb string) error {
		w := W(ctx)
		p, err := w.deliveryPath(a)
		if err != nil {
			return err
		}
		r, err := w.admin().Do(ctx, "PUT", p, map[string]any{"active": verb == "resumed"}, nil)
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("%s %q: %s", verb, a, r)
		}
		return nil
	})
	sc.Step(`^the delivery of "([^"]*)" reads (active|inactive)(?: for "([^"]*)")?$`, func(ctx context.Context, a, state, q string) error {
		w := W(ctx)
		p, err := w.deliveryPath(a)
		if err != nil {
			return err
		}
		r, err := w.do(ctx, "GET", p, nil)
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("GET %s: %s", p, r)
		}
		var got struct {
			QueueUID *string `json:"queueUid"`
			Active   *bool   `json:"active"`
		}
		if err := json.Unmarshal(r.Body, &got); err != nil || got.QueueUID == nil || got.Active == nil {
			return fmt.Errorf("GET %s: not a delivery state (queueUid, active): %s", p, r)
		}
		if *got.Active != (state == "active") {
			return fmt.Errorf("the delivery of %q reads active %v, want %s", a, *got.Active, state)
		}
		if q == "" {
			q = a
		}
		qr, err := w.resource(q)
		if err != nil {
			return err
		}
		if *got.QueueUID != qr.uid {
			return fmt.Errorf("the delivery of %q names queue %s, want %q (%s)", a, *got.QueueUID, q, qr.uid)
		}
		return nil
	})
}

// extPath is a queue extension route of resource a.
func (w *world) extPath(a, route string) (string, error) {
	rs, err := w.resource(a)
	if err != nil {
		return "", err
	}
	return resPath(rs.space, rs.uid) + "/" + route, nil
}

type queueStats struct {
	Messages *int `json:"messages"`
	Bytes    *int `json:"bytes"`
	ByState  struct {
		Available, Delayed, RetryWaiting, InFlight, Removing *int
	} `json:"byState"`
	OldestAgeSeconds *float64 `json:"oldestAgeSeconds"`
}

type messageItem struct {
	ID               string `json:"id"`
	AcceptTimeMillis int64  `json:"acceptTimeMillis"`
	Attempts         int    `json:"attempts"`
	Size             int    `json:"size"`
	State            string `json:"state"`
	BodyPreview      []byte `json:"bodyPreview"`
	BodyTruncated    bool   `json:"bodyTruncated"`
	DeadLetter       *struct {
		SourceQueueUid    string `json:"sourceQueueUid"`
		SourceQueueName   string `json:"sourceQueueName"`
		ConsumerUid       string `json:"consumerUid"`
		ConsumerName      string `json:"consumerName"`
		Reason            string `json:"reason"`
		Attempts          int    `json:"attempts"`
		OriginalMessageId string `json:"originalMessageId"`
	} `json:"deadLetter"`
}

// listedTagged waits until a's listing holds a message whose preview names
// tag, and returns it.
func (w *world) listedTagged(ctx context.Context, a, tag string) (messageItem, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		all, err := w.listMessages(ctx, a, 100)
		if err != nil {
			return messageItem{}, err
		}
		for _, m := range all {
			if strings.Contains(string(m.BodyPreview), `"tag":"`+tag+`"`) {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			return messageItem{}, fmt.Errorf("no listed message of %q has a preview naming tag %q", a, tag)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type messagePage = page[messageItem]

// listMessages reads every page of a's messages, n at a time.
func (w *world) listMessages(ctx context.Context, a string, n int) ([]messageItem, error) {
	p, err := w.extPath(a, "messages")
	if err != nil {
		return nil, err
	}
	return allPages[messageItem](ctx, w, p, "", n, "message list")
}

// page is one page of a Host API list: its items and the token of the
// next page ("" on the last).
type page[T any] struct {
	Items         []T    `json:"items"`
	NextPageToken string `json:"nextPageToken"`
}

// allPages GETs path (with query, if any) n items a page, following
// nextPageToken to the end, as the current principal, and checks that no
// page holds more than n.
func allPages[T any](ctx context.Context, w *world, path, query string, n int, what string) ([]T, error) {
	var all []T
	tok := ""
	for pages := 0; pages < 10000; pages++ {
		u := fmt.Sprintf("%s?limit=%d", path, n)
		if query != "" {
			u += "&" + query
		}
		if tok != "" {
			u += "&pageToken=" + url.QueryEscape(tok)
		}
		r, err := w.do(ctx, "GET", u, nil)
		if err != nil {
			return nil, err
		}
		if r.Status != 200 {
			return nil, fmt.Errorf("GET %s: %s", u, r)
		}
		var pg page[T]
		if err := json.Unmarshal(r.Body, &pg); err != nil {
			return nil, fmt.Errorf("GET %s: not a %s: %v", u, what, err)
		}
		if len(pg.Items) > n {
			return nil, fmt.Errorf("GET %s: %d items, more than limit %d", u, len(pg.Items), n)
		}
		all = append(all, pg.Items...)
		if pg.NextPageToken == "" {
			return all, nil
		}
		tok = pg.NextPageToken
	}
	return nil, fmt.Errorf("the pages of the %s at %s do not end", what, path)
}

func registerInspectSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	// @ext-inspect
	sc.Step(`^the stats of "([^"]*)" become (\d+) messages?: (\d+) available, (\d+) delayed, (\d+) retry-waiting, (\d+) in flight$`,
		func(ctx context.Context, a string, total, avail, delayed, retry, inflight int) error {
			w := W(ctx)
			p, err := w.extPath(a, "stats")
			if err != nil {
				return err
			}
			want := []int{total, avail, delayed, retry, inflight}
			var last string
			deadline := time.Now().Add(15 * time.Second)
			for {
				r, err := w.do(ctx, "GET", p, nil)
				if err != nil {
					return err
				}
				if r.Status != 200 {
					return fmt.Errorf("GET %s: %s", p, r)
				}
				var st queueStats
				if err := json.Unmarshal(r.Body, &st); err != nil || st.Messages == nil || st.Bytes == nil || st.OldestAgeSeconds == nil ||
					st.ByState.Available == nil || st.ByState.Delayed == nil || st.ByState.RetryWaiting == nil || st.ByState.InFlight == nil || st.ByState.Removing == nil {
					return fmt.Errorf("GET %s: not queue stats: %s", p, r)
				}
				got := []int{*st.Messages, *st.ByState.Available, *st.ByState.Delayed, *st.ByState.RetryWaiting, *st.ByState.InFlight}
				if fmt.Sprint(got) == fmt.Sprint(want) {
					if *st.Messages > 0 && *st.Bytes <= 0 {
						return fmt.Errorf("%d messages of %d bytes", *st.Messages, *st.Bytes)
					}
					return nil
				}
				last = string(r.Body)
				if time.Now().After(deadline) {
					return fmt.Errorf("the stats of %q read %s, want messages, available, delayed, retry-waiting, in flight = %v", a, last, want)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	sc.Step(`^listing the messages of "([^"]*)" (\d+) at a time yields (\d+) messages?, oldest first$`, func(ctx context.Context, a string, n, want int) error {
		all, err := W(ctx).listMessages(ctx, a, n)
		if err != nil {
			return err
		}
		if len(all) != want {
			return fmt.Errorf("listed %d messages, want %d", len(all), want)
		}
		seen := map[string]bool{}
		for i, m := range all {
			if seen[m.ID] {
				return fmt.Errorf("message %s listed twice", m.ID)
			}
			seen[m.ID] = true
			if i > 0 && m.AcceptTimeMillis < all[i-1].AcceptTimeMillis {
				return fmt.Errorf("message %s (accepted %d) listed after %s (accepted %d)", m.ID, m.AcceptTimeMillis, all[i-1].ID, all[i-1].AcceptTimeMillis)
			}
			if m.Size < len(m.BodyPreview) || len(m.BodyPreview) == 0 || len(m.BodyPreview) > 256 {
				return fmt.Errorf("message %s: size %d, preview of %d bytes", m.ID, m.Size, len(m.BodyPreview))
			}
		}
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" has a (\d+)-byte preview of its (\d+)-byte body, truncated$`, func(ctx context.Context, a, tag string, n, size int) error {
		all, err := W(ctx).listMessages(ctx, a, 100)
		if err != nil {
			return err
		}
		for _, m := range all {
			if !strings.Contains(string(m.BodyPreview), `"tag":"`+tag+`"`) {
				continue
			}
			if len(m.BodyPreview) != n || !m.BodyTruncated || m.Size != size {
				return fmt.Errorf("message %s: preview of %d bytes, truncated %v, size %d", m.ID, len(m.BodyPreview), m.BodyTruncated, m.Size)
			}
			return nil
		}
		return fmt.Errorf("no listed message of %q has a preview naming tag %q", a, tag)
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" was dead-lettered from "([^"]*)" by "([^"]*)" after (\d+) attempts, reason "([^"]*)"$`,
		func(ctx context.Context, a, tag, src, cons string, attempts int, reason string) error {
			w := W(ctx)
			m, err := w.listedTagged(ctx, a, tag)
			if err != nil {
				return err
			}
			qs, err := w.resource(src)
			if err != nil {
				return err
			}
			cs, err := w.resource(cons)
			if err != nil {
				return err
			}
			dl := m.DeadLetter
			if dl == nil {
				return fmt.Errorf("message %s of %q has no deadLetter", m.ID, a)
			}
			if dl.SourceQueueUid != qs.uid || dl.ConsumerUid != cs.uid || dl.Attempts != attempts || dl.Reason != reason || dl.OriginalMessageId == "" || dl.OriginalMessageId == m.ID {
				return fmt.Errorf("message %s of %q: deadLetter %+v, want source %s, consumer %s, %d attempts, reason %s and its ID in the source", m.ID, a, *dl, qs.uid, cs.uid, attempts, reason)
			}
			if m.Attempts != 0 && m.State != "in_flight" {
				return fmt.Errorf("message %s of %q: a dead-lettered message starts with attempts 0, has %d", m.ID, a, m.Attempts)
			}
			return nil
		})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" has no dead-letter metadata$`, func(ctx context.Context, a, tag string) error {
		m, err := W(ctx).listedTagged(ctx, a, tag)
		if err != nil {
			return err
		}
		if m.DeadLetter != nil {
			return fmt.Errorf("message %s of %q, sent directly, has deadLetter %+v", m.ID, a, *m.DeadLetter)
		}
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" is in state "([^"]*)" with attempts (\d+)$`, func(ctx context.Context, a, tag, state string, attempts int) error {
		all, err := W(ctx).listMessages(ctx, a, 100)
		if err != nil {
			return err
		}
		for _, m := range all {
			if strings.Contains(string(m.BodyPreview), `"tag":"`+tag+`"`) {
				if m.State != state || m.Attempts != attempts {
					return fmt.Errorf("message %s: state %s attempts %d, want %s %d", m.ID, m.State, m.Attempts, state, attempts)
				}
				return nil
			}
		}
		return fmt.Errorf("no listed message of %q has a preview naming tag %q", a, tag)
	})
}
