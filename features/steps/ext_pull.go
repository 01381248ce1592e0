package steps

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cucumber/godog"
)

// Steps of the pull consumer extension (@ext-pull; spec/peers.md §Pull
// consumers): a PullConsumer resource and its lease routes, POST
// …/resources/{pullConsumer}/leases, …/leases/{id}/settle and
// …/leases/{id}/extend.

// FormPullConsumer is the host's Form of a pull consumer.
const FormPullConsumer = "https://queuehost.takoform.com/forms/PullConsumer/0.1.0/"

// shortestVisibility is the shortest visibility timeout the extension
// allows (pull-request.json): the expiry scenarios wait for it, not for
// fixed seconds.
const shortestVisibility = time.Second

// kitLease is a lease a scenario took, by the name its steps give it.
type kitLease struct {
	consumer  string // alias of the pull consumer
	id        string
	expiresAt int64 // UTC epoch ms, as the host answered (extensions move it)
	firstExp  int64
	msgs      []pulled
}

type pulled struct {
	ID           string `json:"id"`
	Attempts     int    `json:"attempts"`
	Body         string `json:"body"`
	BodyEncoding string `json:"bodyEncoding"`
}

func (m pulled) bytes() string {
	if m.BodyEncoding == "base64" {
		b, _ := base64.StdEncoding.DecodeString(m.Body)
		return string(b)
	}
	return m.Body
}

type leaseAnswer struct {
	LeaseID   string   `json:"leaseId"`
	ExpiresAt int64    `json:"expiresAt"`
	Messages  []pulled `json:"messages"`
}

func (w *world) pullPath(alias string) (string, error) {
	rs, err := w.resource(alias)
	if err != nil {
		return "", err
	}
	return resPath(rs.space, rs.uid), nil
}

func pullSpec(w *world, q, dlq string, mods map[string]any) (map[string]any, error) {
	qr, err := w.resource(q)
	if err != nil {
		return nil, err
	}
	spec := map[string]any{"queue": ref(qr.uid), "maxBatchSize": 10, "maxRetries": 3, "retryDelaySeconds": 0, "visibilityTimeoutSeconds": 30}
	if dlq != "" {
		d, err := w.resource(dlq)
		if err != nil {
			return nil, err
		}
		spec["deadLetterQueue"] = ref(d.uid)
	}
	for k, v := range mods {
		spec[k] = v
	}
	return spec, nil
}

// lease POSTs a lease request as the current principal and records the
// lease under name when it answers 200.
func (w *world) lease(ctx context.Context, alias, name string, body map[string]any) error {
	p, err := w.pullPath(alias)
	if err != nil {
		return err
	}
	r, err := w.do(ctx, "POST", p+"/leases", body)
	if err != nil || r.Status != 200 {
		return err
	}
	var a leaseAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		return fmt.Errorf("the lease answered 200 with %s: %w", r, err)
	}
	if w.leases == nil {
		w.leases = map[string]*kitLease{}
	}
	w.leases[name] = &kitLease{consumer: alias, id: a.LeaseID, expiresAt: a.ExpiresAt, firstExp: a.ExpiresAt, msgs: a.Messages}
	return nil
}

func (w *world) leaseNamed(name string) (*kitLease, error) {
	l := w.leases[name]
	if l == nil {
		return nil, fmt.Errorf("no lease %q was taken in this scenario", name)
	}
	return l, nil
}

// tryLease leases as the admin without recording the answer: the checks'
// probes.
func (w *world) tryLease(ctx context.Context, alias string, max, wait int) (leaseAnswer, error) {
	var a leaseAnswer
	p, err := w.pullPath(alias)
	if err != nil {
		return a, err
	}
	r, err := w.admin().Do(ctx, "POST", p+"/leases", map[string]any{"maxMessages": max, "waitSeconds": wait}, nil)
	if err != nil {
		return a, err
	}
	if r.Status != 200 {
		return a, fmt.Errorf("a lease of %q answered %s", alias, r)
	}
	return a, json.Unmarshal(r.Body, &a)
}

func (w *world) settle(ctx context.Context, l *kitLease, via string, body map[string]any) error {
	if via == "" {
		via = l.consumer
	}
	p, err := w.pullPath(via)
	if err != nil {
		return err
	}
	_, err = w.do(ctx, "POST", p+"/leases/"+l.id+"/settle", body)
	return err
}

func (l *kitLease) msg(n int) (pulled, error) {
	if n < 1 || n > len(l.msgs) {
		return pulled{}, fmt.Errorf("the lease holds %d messages, not a message %d", len(l.msgs), n)
	}
	return l.msgs[n-1], nil
}

func registerPullSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	pullConsumer := func(ctx context.Context, must bool, a, q, mods, dlq string) error {
		w := W(ctx)
		m := map[string]any{}
		if mods != "" {
			if err := json.Unmarshal([]byte(mods), &m); err != nil {
				return err
			}
		}
		spec, err := pullSpec(w, q, dlq, m)
		if err != nil {
			return err
		}
		if must {
			_, err = w.mustCreate(ctx, w.space, a, FormPullConsumer, spec)
			return err
		}
		_, err = w.create(ctx, w.space, a, FormPullConsumer, spec, nil)
		return err
	}
	sc.Step(`^a pull consumer "([^"]*)" of "([^"]*)"(?: with (\{.*\}))?(?: dead-lettering into "([^"]*)")?$`, func(ctx context.Context, a, q, mods, dlq string) error {
		return pullConsumer(ctx, true, a, q, mods, dlq)
	})
	sc.Step(`^I create a pull consumer "([^"]*)" of "([^"]*)"$`, func(ctx context.Context, a, q string) error {
		return pullConsumer(ctx, false, a, q, "", "")
	})
	sc.Step(`^I lease up to (\d+) messages? from "([^"]*)"(?: for (the shortest visibility timeout|\d+ seconds))?(?: waiting (\d+) seconds?| waiting until lease "([^"]*)" expired)? as "([^"]*)"$`,
		func(ctx context.Context, n int, a, vis, wait, after, name string) error {
			w := W(ctx)
			body := map[string]any{"maxMessages": n}
			switch {
			case vis == "the shortest visibility timeout":
				body["visibilityTimeoutSeconds"] = int(shortestVisibility / time.Second)
			case vis != "":
				s, _ := strconv.Atoi(vis[:len(vis)-len(" seconds")])
				body["visibilityTimeoutSeconds"] = s
			}
			// A short long poll unless the step says otherwise: a message
			// published through another host of a cluster is leasable
			// once the queue's owner adopted it (spec/cluster.md §Sends);
			// with messages visible the lease answers at once.
			body["waitSeconds"] = 2
			if wait != "" {
				s, _ := strconv.Atoi(wait)
				body["waitSeconds"] = s
			}
			if after == "" {
				return w.lease(ctx, a, name, body)
			}
			// Dead-lettering happens when the lease expires: lease with
			// the long poll until every message came, or the kit's
			// delivery bound.
			l, err := w.leaseNamed(after)
			if err != nil {
				return err
			}
			deadline := time.UnixMilli(l.expiresAt).Add(deliverTimeout)
			got := &kitLease{consumer: a}
			for len(got.msgs) < len(l.msgs) && time.Now().Before(deadline) {
				more, err := w.tryLease(ctx, a, n, 1)
				if err != nil {
					return err
				}
				if got.id == "" {
					got.id, got.expiresAt, got.firstExp = more.LeaseID, more.ExpiresAt, more.ExpiresAt
				}
				got.msgs = append(got.msgs, more.Messages...)
			}
			if w.leases == nil {
				w.leases = map[string]*kitLease{}
			}
			w.leases[name] = got
			return nil
		})
	sc.Step(`^lease "([^"]*)" holds (\d+) messages? with attempts (\d+)$`, func(ctx context.Context, name string, n, att int) error {
		l, err := W(ctx).leaseNamed(name)
		if err != nil {
			return err
		}
		if len(l.msgs) != n {
			return fmt.Errorf("lease %q holds %d messages, want %d: %+v", name, len(l.msgs), n, l.msgs)
		}
		for _, m := range l.msgs {
			if m.Attempts != att {
				return fmt.Errorf("message %s of lease %q has attempts %d, want %d", m.ID, name, m.Attempts, att)
			}
		}
		if n > 0 && l.id == "" {
			return fmt.Errorf("lease %q holds messages but has no ID", name)
		}
		return nil
	})
	sc.Step(`^lease "([^"]*)" holds message (\d+) of lease "([^"]*)" with attempts (\d+)$`, func(ctx context.Context, name string, k int, of string, att int) error {
		w := W(ctx)
		l, err := w.leaseNamed(name)
		if err != nil {
			return err
		}
		o, err := w.leaseNamed(of)
		if err != nil {
			return err
		}
		want, err := o.msg(k)
		if err != nil {
			return err
		}
		if len(l.msgs) != 1 || l.msgs[0].ID != want.ID || l.msgs[0].Attempts != att {
			return fmt.Errorf("lease %q holds %+v, want only %s with attempts %d", name, l.msgs, want.ID, att)
		}
		return nil
	})
	sc.Step(`^lease "([^"]*)" holds the bodies of lease "([^"]*)" under new IDs, with attempts (\d+)$`, func(ctx context.Context, name, of string, att int) error {
		w := W(ctx)
		l, err := w.leaseNamed(name)
		if err != nil {
			return err
		}
		o, err := w.leaseNamed(of)
		if err != nil {
			return err
		}
		var got, want []string
		for _, m := range l.msgs {
			if m.Attempts != att {
				return fmt.Errorf("dead-lettered message %s has attempts %d, want %d", m.ID, m.Attempts, att)
			}
			for _, om := range o.msgs {
				if om.ID == m.ID {
					return fmt.Errorf("message %s was dead-lettered under its own ID", m.ID)
				}
			}
			got = append(got, m.bytes())
		}
		for _, m := range o.msgs {
			want = append(want, m.bytes())
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("lease %q holds bodies %q, want %q", name, got, want)
		}
		return nil
	})
	sc.Step(`^no message of "([^"]*)" can be leased(?: until lease "([^"]*)" expires| until lease "([^"]*)"'s first expiry has passed)?$`, func(ctx context.Context, a, name, first string) error {
		w := W(ctx)
		until := time.Now()
		if name != "" {
			l, err := w.leaseNamed(name)
			if err != nil {
				return err
			}
			until = time.UnixMilli(l.expiresAt).Add(-slack)
		}
		if first != "" {
			// Past the expiry the lease had before it was extended; the
			// extended one is far later, so nothing may be leased at all.
			l, err := w.leaseNamed(first)
			if err != nil {
				return err
			}
			if l.expiresAt < l.firstExp+int64(2*slack/time.Millisecond) {
				return fmt.Errorf("lease %q was not extended past its first expiry", first)
			}
			until, name = time.UnixMilli(l.firstExp).Add(2*slack), ""
		}
		for {
			got, err := w.tryLease(ctx, a, 10, 0)
			if err != nil {
				return err
			}
			if len(got.Messages) > 0 {
				if time.Now().After(until) && name != "" {
					return nil // the lease ran out meanwhile; nothing to check after it
				}
				return fmt.Errorf("leased %d messages of %q while they should be hidden: %+v", len(got.Messages), a, got.Messages)
			}
			if !time.Now().Before(until) {
				return nil
			}
			time.Sleep(min(100*time.Millisecond, time.Until(until)))
		}
	})
	sc.Step(`^the messages of lease "([^"]*)" are leased again from "([^"]*)" as "([^"]*)" once it expired$`, func(ctx context.Context, of, a, name string) error {
		w := W(ctx)
		o, err := w.leaseNamed(of)
		if err != nil {
			return err
		}
		var want []string
		for _, m := range o.msgs {
			want = append(want, m.ID)
		}
		deadline := time.UnixMilli(o.expiresAt).Add(deliverTimeout)
		got := &kitLease{consumer: a}
		for time.Now().Before(deadline) {
			l, err := w.tryLease(ctx, a, 10, 1)
			if err != nil {
				return err
			}
			if len(l.Messages) == 0 {
				continue
			}
			if at := time.Now(); at.Before(time.UnixMilli(o.expiresAt).Add(-slack)) {
				return fmt.Errorf("leased again %s before lease %q expired", time.UnixMilli(o.expiresAt).Sub(at), of)
			}
			if got.id == "" {
				got.id, got.expiresAt, got.firstExp = l.LeaseID, l.ExpiresAt, l.ExpiresAt
			}
			got.msgs = append(got.msgs, l.Messages...)
			var ids []string
			for _, m := range got.msgs {
				ids = append(ids, m.ID)
			}
			if len(ids) >= len(want) {
				break
			}
		}
		if w.leases == nil {
			w.leases = map[string]*kitLease{}
		}
		w.leases[name] = got
		return nil
	})
	settleStep := func(kind string) func(ctx context.Context, what, name, via string) error {
		return func(ctx context.Context, what, name, via string) error {
			w := W(ctx)
			l, err := w.leaseNamed(name)
			if err != nil {
				return err
			}
			var ids []string
			switch {
			case what == "every message":
				for _, m := range l.msgs {
					ids = append(ids, m.ID)
				}
			case what[0] == '"':
				ids = []string{what[1 : len(what)-1]}
			default:
				k, _ := strconv.Atoi(what[len("message "):])
				m, err := l.msg(k)
				if err != nil {
					return err
				}
				ids = []string{m.ID}
			}
			if kind == "acknowledge" {
				return w.settle(ctx, l, via, map[string]any{"acknowledge": ids})
			}
			return nil
		}
	}
	sc.Step(`^I acknowledge (every message|message \d+|message "[^"]*") of lease "([^"]*)"(?: through "([^"]*)")?$`, func(ctx context.Context, what, name, via string) error {
		if len(what) > 8 && what[:8] == "message " && what[8] == '"' {
			what = what[8:]
		}
		return settleStep("acknowledge")(ctx, what, name, via)
	})
	sc.Step(`^I acknowledge message (\d+) of lease "([^"]*)" and retry it too$`, func(ctx context.Context, k int, name string) error {
		w := W(ctx)
		l, err := w.leaseNamed(name)
		if err != nil {
			return err
		}
		m, err := l.msg(k)
		if err != nil {
			return err
		}
		return w.settle(ctx, l, "", map[string]any{"acknowledge": []string{m.ID}, "retry": []any{map[string]any{"id": m.ID}}})
	})
	sc.Step(`^I retry message (\d+) of lease "([^"]*)" with delay (\d+)$`, func(ctx context.Context, k int, name string, d int) error {
		w := W(ctx)
		l, err := w.leaseNamed(name)
		if err != nil {
			return err
		}
		m, err := l.msg(k)
		if err != nil {
			return err
		}
		return w.settle(ctx, l, "", map[string]any{"retry": []any{map[string]any{"id": m.ID, "delaySeconds": d}}})
	})
	sc.Step(`^I settle lease "([^"]*)" of "([^"]*)"$`, func(ctx context.Context, id, a string) error {
		w := W(ctx)
		return w.settle(ctx, &kitLease{consumer: a, id: id}, "", map[string]any{"acknowledge": []string{"m"}})
	})
	sc.Step(`^the settlement answers (\d+) acknowledged and (\d+) retried$`, func(ctx context.Context, a, r int) error {
		w := W(ctx)
		var out struct{ Acknowledged, Retried int }
		if w.last == nil || w.last.Status != 200 || json.Unmarshal(w.last.Body, &out) != nil || out.Acknowledged != a || out.Retried != r {
			return fmt.Errorf("want a settlement of %d acknowledged and %d retried, got %v", a, r, w.last)
		}
		return nil
	})
	sc.Step(`^I extend lease "([^"]*)" by (?:(\d+) times )?the shortest visibility timeout$`, func(ctx context.Context, name, times string) error {
		w := W(ctx)
		l, err := w.leaseNamed(name)
		if err != nil {
			return err
		}
		k := 1
		if times != "" {
			k, _ = strconv.Atoi(times)
		}
		p, err := w.pullPath(l.consumer)
		if err != nil {
			return err
		}
		r, err := w.do(ctx, "POST", p+"/leases/"+l.id+"/extend", map[string]any{"visibilityTimeoutSeconds": k * int(shortestVisibility/time.Second)})
		if err != nil || r.Status != 200 {
			return err
		}
		var out struct {
			ExpiresAt int64 `json:"expiresAt"`
		}
		if err := json.Unmarshal(r.Body, &out); err != nil {
			return err
		}
		l.expiresAt = out.ExpiresAt
		return nil
	})
	sc.Step(`^the extension answers an expiry later than the lease's first$`, func(ctx context.Context) error {
		w := W(ctx)
		for _, l := range w.leases {
			if l.expiresAt > l.firstExp {
				return nil
			}
		}
		return fmt.Errorf("no lease's expiry moved: %v", w.last)
	})
	sc.Step(`^lease "([^"]*)" still holds (\d+) unsettled messages$`, func(ctx context.Context, name string, n int) error {
		// Extending answers only for a lease with unsettled messages; a
		// settlement that changed nothing leaves all of them so.
		w := W(ctx)
		l, err := w.leaseNamed(name)
		if err != nil {
			return err
		}
		if len(l.msgs) != n {
			return fmt.Errorf("lease %q holds %d messages", name, len(l.msgs))
		}
		p, err := w.pullPath(l.consumer)
		if err != nil {
			return err
		}
		for _, m := range l.msgs {
			// Retrying with the longest delay would change it; an
			// acknowledgement of each, one at a time, answers 200 only
			// if it was unsettled.
			r, err := w.admin().Do(ctx, "POST", p+"/leases/"+l.id+"/settle", map[string]any{"acknowledge": []string{m.ID}}, nil)
			if err != nil {
				return err
			}
			if r.Status != 200 {
				return fmt.Errorf("message %s of lease %q was not unsettled: %s", m.ID, name, r)
			}
		}
		return nil
	})
	sc.Step(`^(\d+) pullers lease up to (\d+) messages at a time from "([^"]*)" concurrently until it is empty, acknowledging each lease$`, func(ctx context.Context, n, max int, a string) error {
		w := W(ctx)
		p, err := w.pullPath(a)
		if err != nil {
			return err
		}
		var mu sync.Mutex
		w.pullHeld = map[string]int{}
		var errs []error
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for empty := 0; empty < 2; {
					l, err := w.tryLease(ctx, a, max, 0)
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					if len(l.Messages) == 0 {
						empty++
						continue
					}
					ids := make([]string, len(l.Messages))
					mu.Lock()
					for i, m := range l.Messages {
						ids[i] = m.ID
						w.pullHeld[m.ID]++
					}
					mu.Unlock()
					r, err := w.admin().Do(ctx, "POST", p+"/leases/"+l.LeaseID+"/settle", map[string]any{"acknowledge": ids}, nil)
					if err == nil && r.Status != 200 {
						err = fmt.Errorf("acknowledging lease %s: %s", l.LeaseID, r)
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			return errs[0]
		}
		return nil
	})
	sc.Step(`^no message was in two leases, and all (\d+) were leased once$`, func(ctx context.Context, n int) error {
		w := W(ctx)
		for id, k := range w.pullHeld {
			if k != 1 {
				return fmt.Errorf("message %s was leased %d times (acknowledged in its first lease)", id, k)
			}
		}
		if len(w.pullHeld) != n {
			return fmt.Errorf("%d distinct messages were leased, want %d", len(w.pullHeld), n)
		}
		return nil
	})
}
