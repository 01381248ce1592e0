package steps

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cucumber/godog"
)

const (
	deliverTimeout = 20 * time.Second
	quietWindow    = 3 * time.Second
	slack          = 250 * time.Millisecond
)

// deliveries of tag, optionally only those from queue alias q.
func (w *world) deliveries(tag, q string) []Delivery {
	ds := w.k.cfg.Recorder.Deliveries(w.scope, tag)
	if q == "" {
		return ds
	}
	name := q
	if rs := w.res[q]; rs != nil {
		name = rs.name
	}
	var out []Delivery
	for _, d := range ds {
		if d.Start.QueueName() == name {
			out = append(out, d)
		}
	}
	return out
}

// waitDeliveries waits until tag has at least n deliveries (with their end
// events when the handler reported one) and returns them.
func (w *world) waitDeliveries(tag, q string, n int, timeout time.Duration) ([]Delivery, error) {
	var ds []Delivery
	err := Poll(timeout, func() error {
		ds = w.deliveries(tag, q)
		if len(ds) < n {
			return fmt.Errorf("message %q was delivered %d times, want at least %d", tag, len(ds), n)
		}
		return nil
	})
	if err == nil {
		w.confirm(tag, n)
	}
	return ds, err
}

// confirm records that a step established n deliveries of tag, the most a
// later "is not delivered again" allows.
func (w *world) confirm(tag string, n int) {
	if w.confirmed == nil {
		w.confirmed = map[string]int{}
	}
	w.confirmed[tag] = max(w.confirmed[tag], n)
}

// exactly waits for n deliveries, then shows that no further one comes
// within the quiet window.
func (w *world) exactly(tag, q string, n int) ([]Delivery, error) {
	if _, err := w.waitDeliveries(tag, q, n, deliverTimeout); err != nil {
		return nil, err
	}
	err := Consistently(quietWindow, func() error {
		if got := len(w.deliveries(tag, q)); got != n {
			return fmt.Errorf("message %q was delivered %d times, want exactly %d", tag, got, n)
		}
		return nil
	})
	return w.deliveries(tag, q), err
}

func isInt(v any) (int64, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

func registerDeliverySteps(sc *godog.ScenarioContext) {
	sc.Step(`^message "([^"]*)" is delivered(?: from "([^"]*)")?$`, func(ctx context.Context, tag, q string) error {
		_, err := get(ctx).waitDeliveries(tag, q, 1, deliverTimeout)
		return err
	})
	sc.Step(`^messages ((?:"[^"]*"(?:, | and )?)+) are delivered$`, func(ctx context.Context, list string) error {
		w := get(ctx)
		for _, t := range strings.Split(strings.NewReplacer(" and ", ", ").Replace(list), ", ") {
			if _, err := w.waitDeliveries(strings.Trim(t, `"`), "", 1, deliverTimeout); err != nil {
				return err
			}
		}
		return nil
	})
	sc.Step(`^message "([^"]*)" is delivered(?: from "([^"]*)")? exactly (\d+) times?$`, func(ctx context.Context, tag, q string, n int) error {
		_, err := get(ctx).exactly(tag, q, n)
		return err
	})
	sc.Step(`^message "([^"]*)" is delivered(?: from "([^"]*)")? with attempts ([0-9, ]+)$`, func(ctx context.Context, tag, q, list string) error {
		var want []int64
		for _, s := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return err
			}
			want = append(want, int64(n))
		}
		ds, err := get(ctx).exactly(tag, q, len(want))
		if err != nil {
			return err
		}
		var got []int64
		for _, d := range ds {
			a, ok := isInt(d.Msg.Attempts)
			if !ok {
				return fmt.Errorf("attempts %v of %q is not an integer", d.Msg.Attempts, tag)
			}
			got = append(got, a)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("message %q was delivered with attempts %v, want %v", tag, got, want)
		}
		return nil
	})
	// Absence checks count every delivery the recorder holds, including
	// those from before the step started: "not delivered within N seconds"
	// means no delivery at all, before or during the window, and "not
	// delivered again" means no delivery beyond those earlier steps of the
	// scenario confirmed. A delivery that already happened before the step
	// cannot slip through.
	sc.Step(`^message "([^"]*)" is not delivered( again)?(?: from "([^"]*)")? within (\d+) seconds?$`, func(ctx context.Context, tag, again, q string, s int) error {
		w := get(ctx)
		allowed, what := 0, "no delivery at all"
		if again != "" {
			allowed = w.confirmed[tag]
			if allowed == 0 {
				return fmt.Errorf("no earlier step confirmed a delivery of %q; say \"is not delivered within\" instead", tag)
			}
			what = fmt.Sprintf("only the %d deliveries earlier steps confirmed", allowed)
		}
		return Consistently(time.Duration(s)*time.Second, func() error {
			if got := len(w.deliveries(tag, q)); got > allowed {
				return fmt.Errorf("message %q was delivered %d times by the end of a %ds window, want %s (deliveries before the step count too)", tag, got, s, what)
			}
			return nil
		})
	})
	sc.Step(`^every delivery of "([^"]*)" carries its send ID and accept time$`, func(ctx context.Context, tag string) error {
		w := get(ctx)
		s := w.sent[tag]
		if s == nil {
			return fmt.Errorf("message %q was not sent by this scenario", tag)
		}
		ds, err := w.waitDeliveries(tag, "", 1, deliverTimeout)
		if err != nil {
			return err
		}
		var ts0 int64
		for i, d := range ds {
			if d.Msg.IDString() != s.id {
				return fmt.Errorf("delivery %d of %q has ID %v, send resolved with %q", i+1, tag, d.Msg.ID, s.id)
			}
			ts, ok := isInt(d.Msg.TimestampMillis)
			if !ok {
				return fmt.Errorf("timestampMillis %v is not an integer", d.Msg.TimestampMillis)
			}
			if i == 0 {
				ts0 = ts
				lo, hi := s.before.Add(-5*time.Second).UnixMilli(), s.after.Add(5*time.Second).UnixMilli()
				if ts < lo || ts > hi {
					return fmt.Errorf("timestampMillis %d of %q is not the accept time (the send ran %d..%d, ±5 s)", ts, tag, s.before.UnixMilli(), s.after.UnixMilli())
				}
			} else if ts != ts0 {
				return fmt.Errorf("timestampMillis of %q changed on redelivery: %d then %d", tag, ts0, ts)
			}
		}
		return nil
	})
	sc.Step(`^the first delivery of "([^"]*)" came in a well-formed batch of "([^"]*)" holding at most (\d+) messages?$`, func(ctx context.Context, tag, q string, max int) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 1, deliverTimeout)
		if err != nil {
			return err
		}
		e := ds[0].Start
		bid, ok := e.BatchID.(string)
		if !ok || utf8.RuneCountInString(bid) < 1 || utf8.RuneCountInString(bid) > 256 {
			return fmt.Errorf("batch.id %v is not a string of 1..256 characters", e.BatchID)
		}
		qr, err := w.resource(q)
		if err != nil {
			return err
		}
		if e.QueueName() != qr.name {
			return fmt.Errorf("batch.queue is %v, want the Queue resource name %q", e.Queue, qr.name)
		}
		if len(e.Messages) < 1 || len(e.Messages) > max {
			return fmt.Errorf("batch holds %d messages, want 1..%d", len(e.Messages), max)
		}
		for _, m := range e.Messages {
			id, ok := m.ID.(string)
			if !ok || utf8.RuneCountInString(id) < 1 || utf8.RuneCountInString(id) > 256 {
				return fmt.Errorf("message id %v is not a string of 1..256 characters", m.ID)
			}
			if a, ok := isInt(m.Attempts); !ok || a < 1 {
				return fmt.Errorf("attempts %v is not an integer >= 1", m.Attempts)
			}
			if ts, ok := isInt(m.TimestampMillis); !ok || ts <= 0 {
				return fmt.Errorf("timestampMillis %v is not a positive integer of epoch milliseconds", m.TimestampMillis)
			}
			if !m.BodyIsArrayBuffer {
				return fmt.Errorf("message body is not an ArrayBuffer")
			}
		}
		return nil
	})
	sc.Step(`^every batch from "([^"]*)" held between 1 and (\d+) messages$`, func(ctx context.Context, q string, max int) error {
		w := get(ctx)
		qr, err := w.resource(q)
		if err != nil {
			return err
		}
		n := 0
		for _, e := range w.k.cfg.Recorder.Events(w.scope) {
			if e.Kind == "start" && e.QueueName() == qr.name {
				n++
				if len(e.Messages) < 1 || len(e.Messages) > max {
					return fmt.Errorf("a batch from %q held %d messages, want 1..%d", q, len(e.Messages), max)
				}
			}
		}
		if n == 0 {
			return fmt.Errorf("no batch from %q was seen", q)
		}
		return nil
	})
	sc.Step(`^some batch from "([^"]*)" held (\d+) messages$`, func(ctx context.Context, q string, want int) error {
		w := get(ctx)
		qr, err := w.resource(q)
		if err != nil {
			return err
		}
		var sizes []int
		for _, e := range w.k.cfg.Recorder.Events(w.scope) {
			if e.Kind == "start" && e.QueueName() == qr.name {
				sizes = append(sizes, len(e.Messages))
				if len(e.Messages) == want {
					return nil
				}
			}
		}
		return fmt.Errorf("batches from %q held %v messages, none %d", q, sizes, want)
	})
	sc.Step(`^at most (\d+) handlers? for "([^"]*)" ran at once$`, func(ctx context.Context, max int, q string) error {
		w := get(ctx)
		qr, err := w.resource(q)
		if err != nil {
			return err
		}
		type iv struct{ s, e time.Time }
		starts := map[string]time.Time{}
		var ivs []iv
		for _, e := range w.k.cfg.Recorder.Events(w.scope) {
			if e.QueueName() != qr.name {
				continue
			}
			switch e.Kind {
			case "start":
				starts[e.BatchIDString()] = e.Recv
			case "end":
				if s, ok := starts[e.BatchIDString()]; ok {
					ivs = append(ivs, iv{s, e.Recv})
				}
			}
		}
		if len(ivs) == 0 {
			return fmt.Errorf("no handler for %q was seen", q)
		}
		type pt struct {
			t time.Time
			d int
		}
		var pts []pt
		for _, x := range ivs {
			pts = append(pts, pt{x.s, 1}, pt{x.e, -1})
		}
		sort.Slice(pts, func(i, j int) bool {
			if pts[i].t.Equal(pts[j].t) {
				return pts[i].d < pts[j].d
			}
			return pts[i].t.Before(pts[j].t)
		})
		cur, peak := 0, 0
		for _, p := range pts {
			cur += p.d
			if cur > peak {
				peak = cur
			}
		}
		if peak > max {
			return fmt.Errorf("%d handlers for %q ran at once, maxConcurrency is %d", peak, q, max)
		}
		return nil
	})
	sc.Step(`^the settlement results (?:of delivery (\d+) )?for "([^"]*)" were:$`, func(ctx context.Context, nth, tag string, table *godog.Table) error {
		w := get(ctx)
		k := 1
		if nth != "" {
			k, _ = strconv.Atoi(nth)
		}
		var ds []Delivery
		err := Poll(deliverTimeout, func() error {
			ds = w.deliveries(tag, "")
			if len(ds) < k || ds[k-1].End == nil {
				ds = w.deliveries(tag, "")
				// the end event arrives after the start event
				if len(ds) >= k {
					ends := w.k.cfg.Recorder.Events(w.scope)
					for _, e := range ends {
						if e.Kind == "end" && e.BatchIDString() == ds[k-1].Start.BatchIDString() {
							ds[k-1].End = e
						}
					}
				}
				if len(ds) < k || ds[k-1].End == nil {
					return fmt.Errorf("delivery %d of %q has not reported its settlements", k, tag)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		w.confirm(tag, k)
		d := ds[k-1]
		inBatch := map[string]bool{}
		for _, m := range d.Start.Messages {
			inBatch[m.IDString()] = true
		}
		var got []string
		for _, r := range d.End.Results {
			if r.ID != "" && r.ID != d.Msg.IDString() && inBatch[r.ID] {
				continue // another message of the same batch
			}
			out := r.Name
			if r.OK {
				out = "ok"
				if r.Value != "undefined" {
					out = "ok but resolved with a " + r.Value
				}
			}
			got = append(got, r.Op+" "+out)
		}
		var want []string
		for i, row := range table.Rows {
			if i == 0 && row.Cells[0].Value == "call" {
				continue
			}
			want = append(want, row.Cells[0].Value+" "+row.Cells[1].Value)
		}
		match := len(got) == len(want)
		for i := 0; match && i < len(got); i++ {
			wop, wout, _ := strings.Cut(want[i], " ")
			gop, gout, _ := strings.Cut(got[i], " ")
			match = wop == gop && (wout == gout || (wout == "rejected" && !strings.HasPrefix(gout, "ok")))
		}
		if !match {
			return fmt.Errorf("settlement results of %q:\n  got  %q\n  want %q", tag, got, want)
		}
		return nil
	})
	sc.Step(`^the first settlement call for "([^"]*)" was rejected$`, func(ctx context.Context, tag string) error {
		w := get(ctx)
		var res []Result
		err := Poll(deliverTimeout, func() error {
			ds := w.deliveries(tag, "")
			if len(ds) == 0 || ds[0].End == nil {
				return fmt.Errorf("the first delivery of %q has not reported its settlements", tag)
			}
			res = ds[0].End.Results
			return nil
		})
		if err != nil {
			return err
		}
		if len(res) == 0 || res[0].OK {
			return fmt.Errorf("the first settlement call for %q was not rejected: %+v", tag, res)
		}
		return nil
	})
	sc.Step(`^message "([^"]*)" arrives in "([^"]*)" as a new message$`, func(ctx context.Context, tag, dlq string) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, dlq, 1, deliverTimeout)
		if err != nil {
			return err
		}
		var orig *Delivery
		for _, d := range w.deliveries(tag, "") {
			if d.Start.QueueName() != w.res[dlq].name {
				d := d
				orig = &d
				break
			}
		}
		if orig == nil {
			return fmt.Errorf("message %q was never delivered from its original queue", tag)
		}
		m := ds[0].Msg
		if m.IDString() == orig.Msg.IDString() {
			return fmt.Errorf("the dead-lettered message kept its ID %q; the Form says the ID is new", m.IDString())
		}
		if a, _ := isInt(m.Attempts); a != 1 {
			return fmt.Errorf("the dead-lettered message has attempts %v, want 1", m.Attempts)
		}
		t0, _ := isInt(orig.Msg.TimestampMillis)
		t1, ok := isInt(m.TimestampMillis)
		if !ok || t1 <= t0 {
			return fmt.Errorf("the dead-lettered message has timestampMillis %v, not newer than the original's %d", m.TimestampMillis, t0)
		}
		if m.Body != orig.Msg.Body {
			return fmt.Errorf("the dead-lettered message's body differs from the original")
		}
		for _, k := range m.Keys {
			switch k {
			case "id", "timestampMillis", "body", "attempts":
			default:
				return fmt.Errorf("the dead-lettered message has member %q beyond the ABI's id, timestampMillis, body, attempts", k)
			}
		}
		return nil
	})
	// A window with the measured slack (slack.go), on the host's clock:
	// the handler's start (the worker's Date.now()) against the message's
	// accept time (timestampMillis). The kit's own clock would count the
	// send's answer and the recorder's report, both slow on a loaded
	// machine and neither the host's delay.
	sc.Step(`^message "([^"]*)" is first delivered within (\d+) seconds? and the measured slack of its accept time, on the host's clock$`, func(ctx context.Context, tag string, s int) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 1, time.Duration(s)*time.Second+deliverTimeout)
		if err != nil {
			return err
		}
		ts, ok := ds[0].Msg.TimestampMillis.(float64)
		if !ok {
			return fmt.Errorf("timestampMillis %v of %q is not a number", ds[0].Msg.TimestampMillis, tag)
		}
		sl := w.k.Slack()
		if lag := time.Duration((ds[0].Start.WorkerMillis - ts) * float64(time.Millisecond)); lag > time.Duration(s)*time.Second+sl {
			return fmt.Errorf("message %q was first delivered %s after its accept time (host clock), want within %ds and the measured slack %s", tag, lag.Round(time.Millisecond), s, sl.Round(time.Millisecond))
		}
		return nil
	})
	// The batch timer is measured on the host's clock: the worker's
	// Date.now() when its handler started against the message's
	// timestampMillis (its accept time), so a slow recorder cannot make a
	// host that delivers at once look as if it waited.
	sc.Step(`^message "([^"]*)" is first delivered no sooner than (\d+) seconds? after its accept time, on the host's clock$`, func(ctx context.Context, tag string, s int) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 1, time.Duration(s)*time.Second+deliverTimeout)
		if err != nil {
			return err
		}
		ts, ok := ds[0].Msg.TimestampMillis.(float64)
		if !ok {
			return fmt.Errorf("timestampMillis %v of %q is not a number", ds[0].Msg.TimestampMillis, tag)
		}
		if lag := time.Duration((ds[0].Start.WorkerMillis - ts) * float64(time.Millisecond)); lag < time.Duration(s)*time.Second-slack {
			return fmt.Errorf("message %q was first delivered %s after its accept time (host clock), want no sooner than %ds", tag, lag.Round(time.Millisecond), s)
		}
		return nil
	})
	sc.Step(`^messages ((?:"[^"]*"(?:, | and )?)+) came in one batch$`, func(ctx context.Context, list string) error {
		w := get(ctx)
		var batches []string
		for _, t := range strings.Split(strings.NewReplacer(" and ", ", ").Replace(list), ", ") {
			t = strings.Trim(t, `"`)
			ds, err := w.waitDeliveries(t, "", 1, deliverTimeout)
			if err != nil {
				return err
			}
			batches = append(batches, t+" in "+ds[0].Start.BatchIDString())
			if ds[0].Start.BatchIDString() != strings.SplitN(batches[0], " in ", 2)[1] {
				return fmt.Errorf("the messages came in different batches (first deliveries: %s)", strings.Join(batches, ", "))
			}
		}
		return nil
	})
	sc.Step(`^(\d+) seconds? pass(?:es)?$`, func(ctx context.Context, s int) error {
		select {
		case <-time.After(time.Duration(s) * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	sc.Step(`^message "([^"]*)" is first delivered no sooner than (\d+) seconds? after it was sent$`, func(ctx context.Context, tag string, s int) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 1, time.Duration(s)*time.Second+deliverTimeout)
		if err != nil {
			return err
		}
		// On the host's clock: the handler's start against the accept
		// time the message carries. The kit's own clock would let a slow
		// recorder hide an early delivery, and a slow send answer fail an
		// on-time one.
		ts, ok := ds[0].Msg.TimestampMillis.(float64)
		if !ok {
			return fmt.Errorf("timestampMillis %v of %q is not a number", ds[0].Msg.TimestampMillis, tag)
		}
		if lag := time.Duration((ds[0].Start.WorkerMillis - ts) * float64(time.Millisecond)); lag < time.Duration(s)*time.Second-slack {
			return fmt.Errorf("message %q was first delivered %s after it was accepted (host clock), want no sooner than %ds", tag, lag.Round(time.Millisecond), s)
		}
		return nil
	})
	// Gaps between deliveries are measured on the host's clock (the
	// worker's own Date.now() in each report), never on when the kit's
	// recorder happened to receive a report: under load a report can
	// arrive late, and that must not fail a correct host. The retry
	// happened after the first delivery started and before it ended, so
	// the redelivery's start minus the first start bounds the delay from
	// above (a sound "no sooner than"), and minus the first end from below
	// (a sound "within").
	gaps := func(w *world, tag string) (sinceStart, sinceEnd time.Duration, err error) {
		ds, err := w.waitDeliveries(tag, "", 2, deliverTimeout+30*time.Second)
		if err != nil {
			return 0, 0, err
		}
		end := ds[0].End
		if end == nil {
			for _, e := range w.k.cfg.Recorder.Events(w.scope) {
				if e.Kind == "end" && e.BatchIDString() == ds[0].Start.BatchIDString() {
					end = e
				}
			}
		}
		if end == nil {
			return 0, 0, fmt.Errorf("the first delivery of %q reported no end", tag)
		}
		ms := func(a, b float64) time.Duration { return time.Duration((a - b) * float64(time.Millisecond)) }
		return ms(ds[1].Start.WorkerMillis, ds[0].Start.WorkerMillis), ms(ds[1].Start.WorkerMillis, end.WorkerMillis), nil
	}
	sc.Step(`^message "([^"]*)" is redelivered no sooner than (\d+) seconds? after its first delivery$`, func(ctx context.Context, tag string, s int) error {
		g, _, err := gaps(get(ctx), tag)
		if err != nil {
			return err
		}
		if g < time.Duration(s)*time.Second-slack {
			return fmt.Errorf("message %q was redelivered %s after its first delivery started, want no sooner than %ds", tag, g.Round(time.Millisecond), s)
		}
		return nil
	})
	sc.Step(`^message "([^"]*)" is redelivered within (\d+) seconds? and the measured slack after its first delivery$`, func(ctx context.Context, tag string, s int) error {
		w := get(ctx)
		_, g, err := gaps(w, tag)
		if err != nil {
			return err
		}
		if sl := w.k.Slack(); g > time.Duration(s)*time.Second+sl {
			return fmt.Errorf("message %q was redelivered %s after its first delivery ended, want within %ds and the measured slack %s", tag, g.Round(time.Millisecond), s, sl.Round(time.Millisecond))
		}
		return nil
	})
	sc.Step(`^message "([^"]*)" is redelivered no sooner than the handler time limit after its first delivery started$`, func(ctx context.Context, tag string) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 2, deliverTimeout+w.k.cfg.HandlerTimeout)
		if err != nil {
			return err
		}
		g := time.Duration((ds[1].Start.WorkerMillis - ds[0].Start.WorkerMillis) * float64(time.Millisecond))
		if g < w.k.cfg.HandlerTimeout-slack {
			return fmt.Errorf("message %q was redelivered %s after its first delivery started; the handler time limit is %s", tag, g.Round(time.Millisecond), w.k.cfg.HandlerTimeout)
		}
		return nil
	})
	sc.Step(`^message "([^"]*)" is first delivered before message "([^"]*)"$`, func(ctx context.Context, a, b string) error {
		w := get(ctx)
		da, err := w.waitDeliveries(a, "", 1, deliverTimeout)
		if err != nil {
			return err
		}
		db, err := w.waitDeliveries(b, "", 1, deliverTimeout+30*time.Second)
		if err != nil {
			return err
		}
		if !da[0].Start.Recv.Before(db[0].Start.Recv) {
			return fmt.Errorf("message %q was first delivered at %s, after %q at %s", a, da[0].Start.Recv.Format(time.StampMilli), b, db[0].Start.Recv.Format(time.StampMilli))
		}
		return nil
	})
	sc.Step(`^the delivered body of "([^"]*)" is exactly the bytes of (.+)$`, func(ctx context.Context, tag, text string) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 1, deliverTimeout)
		if err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(ds[0].Msg.Body)
		if err != nil {
			return err
		}
		if string(b) != text {
			return fmt.Errorf("delivered body of %q is %q, want %q", tag, b, text)
		}
		return nil
	})
	sc.Step(`^the delivered body of "([^"]*)" is (\d+) bytes of UTF-8 padded with "([^"]*)"$`, func(ctx context.Context, tag string, n int, char string) error {
		w := get(ctx)
		ds, err := w.waitDeliveries(tag, "", 1, deliverTimeout)
		if err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(ds[0].Msg.Body)
		if err != nil {
			return err
		}
		if len(b) != n || int(ds[0].Msg.BodyLength) != n {
			return fmt.Errorf("delivered body of %q is %d bytes (byteLength %v), want %d", tag, len(b), ds[0].Msg.BodyLength, n)
		}
		var d struct {
			Tag string `json:"tag"`
			Pad string `json:"pad"`
		}
		if err := json.Unmarshal(b, &d); err != nil || !utf8.Valid(b) {
			return fmt.Errorf("delivered body of %q is not the UTF-8 JSON that was sent: %v", tag, err)
		}
		if strings.Trim(d.Pad, char+"a") != "" || !strings.Contains(d.Pad, char) {
			return fmt.Errorf("delivered body of %q does not hold the %q padding", tag, char)
		}
		return nil
	})
}
