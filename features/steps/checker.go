package steps

// The queue checker (checker.feature): many messages through the test
// worker, every send result and every delivery recorded, then each message
// classified as Jepsen's total-queue checker does — with the Forms'
// at-least-once contract as the model:
//
//   - ok: sent (its send resolved with an ID), delivered, acknowledged.
//   - lost: sent, and never delivered, or never acknowledged by the end.
//   - duplicated: delivered again after an acknowledgement of it had
//     resolved (on the host's clock), whatever its send's outcome.
//     Redelivery before that is the at-least-once contract (QC-CRUD-17)
//     and only counted.
//   - unexpected: a delivery of a message the kit never sent, or under an
//     ID other than the one its send returned.
//   - recovered: its send rejected or its outcome was unknown, and it was
//     delivered anyway (allowed: the host could not report the outcome).
//   - over-delivered: more than 1 + maxRetries deliveries (QC-DELIV-28).
//
// The run fails on any lost, duplicated, unexpected or over-delivered
// message.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cucumber/godog"
)

// CheckerReport is one checker scenario's classification, printed at the
// end of a run and written to the results bundle.
type CheckerReport struct {
	Scenario      string `json:"scenario"`
	Queues        int    `json:"queues"`
	Messages      int    `json:"messages"`
	SentOK        int    `json:"sentOk"`
	SendRejected  int    `json:"sendRejected"`
	SendUnknown   int    `json:"sendUnknown"`
	Deliveries    int    `json:"deliveries"`
	OK            int    `json:"ok"`
	Lost          int    `json:"lost"`
	Duplicated    int    `json:"duplicated"`
	Unexpected    int    `json:"unexpected"`
	Recovered     int    `json:"recovered"`
	OverDelivered int    `json:"overDelivered"`
	Redelivered   int    `json:"redelivered"` // before any acknowledgement resolved: allowed
	// Unreported: never explicitly acknowledged, its last handler
	// returned normally (acknowledging what it left unsettled) or never
	// reported, and the queue's observed messageCount confirmed that
	// nothing is left.
	Unreported int                 `json:"unreported"`
	Seconds    float64             `json:"seconds"`
	Examples   map[string][]string `json:"examples,omitempty"`
}

// Bad is the number of messages the contract does not allow.
func (r CheckerReport) Bad() int { return r.Lost + r.Duplicated + r.Unexpected + r.OverDelivered }

func (r CheckerReport) String() string {
	return fmt.Sprintf("%d queues, %d messages (%d sent, %d rejected, %d unknown), %d deliveries in %.0fs: ok %d (%d acknowledged by a handler's return or without a report, the queue drained), lost %d, duplicated %d, unexpected %d, recovered %d, over-delivered %d, redelivered before an acknowledgement %d",
		r.Queues, r.Messages, r.SentOK, r.SendRejected, r.SendUnknown, r.Deliveries, r.Seconds, r.OK, r.Unreported, r.Lost, r.Duplicated, r.Unexpected, r.Recovered, r.OverDelivered, r.Redelivered)
}

// CheckerReports lists the checker's reports of this run.
func (k *Kit) CheckerReports() []CheckerReport {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]CheckerReport(nil), k.checks...)
}

// checker is one checker scenario's state.
type checker struct {
	worker     string
	queues     []string // queue aliases
	bindings   []string
	maxRetries int
	started    time.Time

	mu   sync.Mutex
	msgs map[string]*checkedMsg // by tag
}

type checkedMsg struct {
	tag, queue, id string
	send           string // "ok", "rejected", "unknown"
	retried        bool
}

func (c *checker) add(m *checkedMsg) {
	c.mu.Lock()
	c.msgs[m.tag] = m
	c.mu.Unlock()
}

// checkerMsgs is the messages sent so far, by tag.
func (c *checker) snapshot() map[string]checkedMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]checkedMsg, len(c.msgs))
	for t, m := range c.msgs {
		out[t] = *m
	}
	return out
}

// sendChunk sends n messages to queue i in sendBatch calls of up to 100.
func (w *world) sendChunk(ctx context.Context, c *checker, i, from, n, retryEvery int) error {
	for start := from; start < from+n; start += 100 {
		end := min(start+100, from+n)
		var msgs []any
		var ms []*checkedMsg
		for j := start; j < end; j++ {
			m := &checkedMsg{tag: fmt.Sprintf("chk%d-%d", i+1, j), queue: c.queues[i]}
			var do any = "ack"
			if retryEvery > 0 && j%retryEvery == retryEvery-1 {
				do, m.retried = []any{"retry", "ack"}, true
			}
			body, _ := json.Marshal(map[string]any{"tag": m.tag, "do": do})
			msgs = append(msgs, map[string]any{"body": map[string]any{"string": string(body)}})
			ms = append(ms, m)
		}
		cr, err := w.invokeSend(ctx, c.worker, c.bindings[i], map[string]any{"op": "sendBatch", "messages": msgs})
		switch {
		case err != nil:
			for _, m := range ms {
				m.send = "unknown"
			}
		case !cr.OK:
			for _, m := range ms {
				m.send = "rejected"
				if cr.Name == "backend_unavailable" {
					m.send = "unknown" // the host may not know whether it accepted them
				}
			}
		default:
			for k, m := range ms {
				m.send = "ok"
				m.id, _ = cr.IDs[k].(string)
			}
		}
		for _, m := range ms {
			c.add(m)
		}
	}
	return nil
}

// classify reads every recorded event of the scenario and classifies each
// message. done reports whether every sent message has an acknowledgement
// that resolved.
func (w *world) classify(c *checker, drained map[string]bool) (rep CheckerReport, done bool) {
	msgs := c.snapshot()
	byID := map[string]string{}
	for t, m := range msgs {
		if m.id != "" {
			byID[m.id] = t
		}
	}
	type seen struct {
		starts  []float64
		batches []string
		acks    []float64
	}
	ended := map[string]*Event{} // batches whose handler reported its end
	obs := map[string]*seen{}
	at := func(t string) *seen {
		if obs[t] == nil {
			obs[t] = &seen{}
		}
		return obs[t]
	}
	rep = CheckerReport{Queues: len(c.queues), Messages: len(msgs), Examples: map[string][]string{}}
	example := func(class, what string) {
		if len(rep.Examples[class]) < 5 {
			rep.Examples[class] = append(rep.Examples[class], what)
		}
	}
	for _, e := range w.k.cfg.Recorder.Events(w.scope) {
		switch e.Kind {
		case "start":
			for _, m := range e.Messages {
				rep.Deliveries++
				sm, ok := msgs[m.Tag]
				if !ok || !strings.HasPrefix(m.Tag, "chk") {
					rep.Unexpected++
					example("unexpected", fmt.Sprintf("a delivery of %q (ID %v) the kit never sent", m.Tag, m.ID))
					continue
				}
				if sm.id != "" && m.IDString() != sm.id {
					rep.Unexpected++
					example("unexpected", fmt.Sprintf("%s delivered as ID %v, its send returned %s", m.Tag, m.ID, sm.id))
					continue
				}
				if sm.id == "" {
					// Its send's outcome was unknown: the delivery names
					// its ID, so that its acknowledgements count.
					byID[m.IDString()] = m.Tag
				}
				at(m.Tag).starts = append(at(m.Tag).starts, e.WorkerMillis)
				at(m.Tag).batches = append(at(m.Tag).batches, e.BatchIDString())
			}
		case "end":
			ended[e.BatchIDString()] = e
			for _, r := range e.Results {
				if r.Op == "acknowledge" && r.OK {
					if t, ok := byID[r.ID]; ok {
						at(t).acks = append(at(t).acks, r.At)
					}
				}
			}
		}
	}
	done = true
	tags := make([]string, 0, len(msgs))
	for t := range msgs {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	for _, t := range tags {
		m, s := msgs[t], obs[t]
		if s == nil {
			s = &seen{}
		}
		switch m.send {
		case "ok":
			rep.SentOK++
		case "rejected":
			rep.SendRejected++
		default:
			rep.SendUnknown++
		}
		if m.send != "ok" {
			if len(s.starts) > 0 {
				rep.Recovered++
			}
			// Delivered though its send did not resolve: at least once
			// still ends at its resolved acknowledgement.
			if dup, _ := afterAck(s.starts, s.acks); dup > 0 {
				rep.Duplicated++
				example("duplicated", fmt.Sprintf("%s (send %s) delivered %d times after its acknowledgement resolved", t, m.send, dup))
			}
			continue
		}
		// Without an explicit acknowledgement the message may still have
		// been acknowledged: by its last handler's normal return (which
		// acknowledges what it left unsettled, QC-DELIV-25), or by a
		// handler that was ended before it could report. The queue's
		// drained messageCount confirms it.
		implicit := false
		if n := len(s.batches); n > 0 {
			end := ended[s.batches[n-1]]
			implicit = end == nil || !end.Threw
		}
		if len(s.acks) == 0 && implicit && drained[m.queue] {
			rep.OK++
			rep.Unreported++
			continue
		}
		if len(s.acks) == 0 {
			done = done && implicit
			rep.Lost++
			if len(s.starts) == 0 {
				example("lost", t+" was never delivered")
			} else {
				ends := 0
				for _, b := range s.batches {
					if ended[b] != nil {
						ends++
					}
				}
				example("lost", fmt.Sprintf("%s was delivered %d times (%d of those batches reported their end) and never acknowledged", t, len(s.starts), ends))
			}
			continue
		}
		dup, early := afterAck(s.starts, s.acks)
		want := 1
		if m.retried {
			want = 2
		}
		switch {
		case dup > 0:
			rep.Duplicated++
			example("duplicated", fmt.Sprintf("%s delivered %d times after its acknowledgement resolved", t, dup))
		case len(s.starts) > 1+c.maxRetries:
			rep.OverDelivered++
			example("over-delivered", fmt.Sprintf("%s delivered %d times, maxRetries is %d", t, len(s.starts), c.maxRetries))
		default:
			rep.OK++
			if early > want {
				rep.Redelivered++
			}
		}
	}
	rep.Seconds = time.Since(c.started).Seconds()
	return rep, done
}

// afterAck splits a message's delivery starts into those after its first
// resolved acknowledgement (dup: not allowed) and the others (early),
// both on the clock of the host that ran the handlers.
func afterAck(starts, acks []float64) (dup, early int) {
	if len(acks) == 0 {
		return 0, len(starts)
	}
	first := acks[0]
	for _, a := range acks {
		first = min(first, a)
	}
	for _, st := range starts {
		if st > first {
			dup++
		} else {
			early++
		}
	}
	return dup, early
}

// deliveredCount is the number of deliveries recorded so far.
func (w *world) deliveredCount() int {
	n := 0
	for _, e := range w.k.cfg.Recorder.Events(w.scope) {
		if e.Kind == "start" {
			n += len(e.Messages)
		}
	}
	return n
}

func registerCheckerSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	sc.Step(`^(\d+) checked queues consumed by "([^"]*)" with (.+)$`, func(ctx context.Context, n int, wk, mods string) error {
		w := W(ctx)
		c := &checker{worker: wk, msgs: map[string]*checkedMsg{}, started: time.Now()}
		var pairs [][2]string
		for i := 1; i <= n; i++ {
			a := fmt.Sprintf("chk%d", i)
			if _, err := w.mustCreate(ctx, w.space, a, FormQueue, map[string]any{"messageRetentionSeconds": json.Number("3600")}); err != nil {
				return err
			}
			c.queues = append(c.queues, a)
			c.bindings = append(c.bindings, fmt.Sprintf("CHK%d", i))
			pairs = append(pairs, [2]string{c.bindings[i-1], a})
		}
		if err := w.makeWorker(ctx, wk, "kit.js", []string{"fetch", "queue"}, pairs); err != nil {
			return err
		}
		for _, q := range c.queues {
			spec, err := w.consumerSpec(q, wk, mods)
			if err != nil {
				return err
			}
			if r, _ := spec["maxRetries"].(json.Number); r != "" {
				c.maxRetries, _ = strconv.Atoi(string(r))
			}
			if _, err := w.mustCreate(ctx, w.space, q+"-consumer", FormConsumer, spec); err != nil {
				return err
			}
		}
		w.checker = c
		return nil
	})
	sc.Step(`^the host's store fails every write of (settlements|deliveries|sends) for the checked queues$`, func(ctx context.Context, target string) error {
		w := W(ctx)
		if w.checker == nil {
			return fmt.Errorf("no checked queues in this scenario")
		}
		for _, q := range w.checker.queues {
			rs, err := w.resource(q)
			if err != nil {
				return err
			}
			if err := w.fault(ctx, "fail-writes", strconv.Itoa(untilCleared), target, "scope="+rs.uid, "skip=0"); err != nil {
				return err
			}
		}
		return nil
	})
	sc.Step(`^(\d+) messages are sent to each checked queue(?:, every (\d+)th retried once)?(?:, while the host restarts (\d+) times?)?$`, func(ctx context.Context, n int, every string, restarts string) error {
		w := W(ctx)
		c := w.checker
		if c == nil {
			return fmt.Errorf("no checked queues in this scenario")
		}
		retryEvery, _ := strconv.Atoi(every)
		r, _ := strconv.Atoi(restarts)
		if r > 0 && w.k.cfg.Restart == nil {
			return w.k.skip(ctx, "needs host control: pass --restart-cmd")
		}
		chunk := (n + r) / (r + 1)
		for part, from := 0, 0; from < n; part, from = part+1, from+chunk {
			if part > 0 {
				// Restart while deliveries are under way: once half of
				// what was sent so far has been delivered.
				sentSoFar := len(c.queues) * from
				Poll(30*time.Second, func() error {
					if n := w.deliveredCount(); n < sentSoFar/2 {
						return fmt.Errorf("%d of %d delivered", n, sentSoFar)
					}
					return nil
				})
				if err := w.k.cfg.Restart(ctx); err != nil {
					return err
				}
			}
			var wg sync.WaitGroup
			for i := range c.queues {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.sendChunk(ctx, c, i, from, min(chunk, n-from), retryEvery)
				}()
			}
			wg.Wait()
		}
		return nil
	})
	sc.Step(`^the checker accounts for every message$`, func(ctx context.Context) error {
		w := W(ctx)
		c := w.checker
		if c == nil {
			return fmt.Errorf("no checked queues in this scenario")
		}
		deadline := time.Now().Add(3 * time.Minute)
		var rep CheckerReport
		for {
			var done bool
			rep, done = w.classify(c, nil)
			if done || time.Now().After(deadline) || rep.Bad()-rep.Lost > 0 {
				break
			}
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Then a quiet window: nothing may come back after an
		// acknowledgement resolved.
		time.Sleep(quietWindow)
		rep, _ = w.classify(c, nil)
		if rep.Lost > 0 {
			// A handler's return acknowledges what its explicit
			// acknowledgements left (they failed while the store
			// failed), and a handler ended before it reported leaves
			// acknowledgements the kit never saw. The queue itself then
			// says whether anything is left: a messageCount the host
			// observes as 0 means those were acknowledged.
			drained := map[string]bool{}
			for _, q := range c.queues {
				err := Poll(30*time.Second, func() error {
					obs, err := w.pollObserved(ctx, q)
					if err != nil {
						return err
					}
					if n, ok := obs["messageCount"]; !ok || fmt.Sprint(n) != "0" {
						return fmt.Errorf("messageCount of %s is %v", q, n)
					}
					return nil
				})
				drained[q] = err == nil
				if err != nil {
					w.k.cfg.Log("checker: %s: queue %s is not drained: %v", w.scenario, q, err)
				}
			}
			rep, _ = w.classify(c, drained)
		}
		rep.Scenario = w.scenario
		w.k.mu.Lock()
		w.k.checks = append(w.k.checks, rep)
		w.k.mu.Unlock()
		w.k.cfg.Log("checker: %s: %s", w.scenario, rep)
		if rep.SentOK == 0 {
			return fmt.Errorf("checker: no send resolved: %s", rep)
		}
		if rep.Bad() > 0 {
			var ex []string
			for class, list := range rep.Examples {
				ex = append(ex, class+": "+strings.Join(list, "; "))
			}
			sort.Strings(ex)
			return fmt.Errorf("checker: %s\n  %s", rep, strings.Join(ex, "\n  "))
		}
		return nil
	})
}
