package steps

// Steps of @fault scenarios: the fault-control contract (features/README.md
// §host-control) and the Operation checks that need it. Every fault a
// scenario arms is scoped to its own space or its own resources, so fault
// scenarios run alongside the others; the After hook clears what the
// scenario armed.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cucumber/godog"
)

// untilCleared is the count the kit arms for "every write": more than any
// scenario makes.
const untilCleared = 1000000

// fault runs one verb of the contract and remembers its scope for clearing.
func (w *world) fault(ctx context.Context, args ...string) error {
	if w.k.cfg.Fault == nil {
		return w.k.skip(ctx, "needs fault control: pass --fault-cmd")
	}
	for _, a := range args {
		if len(a) > 6 && a[:6] == "scope=" {
			if w.faults == nil {
				w.faults = map[string]bool{}
			}
			w.faults[a[6:]] = true
		}
	}
	if err := w.k.cfg.Fault(ctx, args); err != nil {
		return fmt.Errorf("fault control %q: %w", args, err)
	}
	return nil
}

func (w *world) clearFaults(ctx context.Context) error {
	if w.k.cfg.Fault == nil {
		return nil
	}
	for scope := range w.faults {
		if err := w.k.cfg.Fault(ctx, []string{"clear", "scope=" + scope}); err != nil {
			return err
		}
		delete(w.faults, scope)
	}
	return nil
}

// scopeOf is "this space" or a resource alias's UID.
func (w *world) scopeOf(target string) (string, error) {
	if target == "" {
		return w.space, nil
	}
	rs, err := w.resource(target)
	if err != nil {
		return "", err
	}
	return rs.uid, nil
}

// rememberedOp reads the remembered Operation once.
func (w *world) rememberedOp(ctx context.Context) (*Operation, error) {
	id := w.etags["op"]
	if id == "" {
		return nil, fmt.Errorf("no operation was remembered")
	}
	op, _, err := GetOperation(ctx, w.admin(), w.space, id, 0)
	return op, err
}

func registerFaultSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	// ---- arming ----
	// "every write" until cleared, "the next write", or "write N" (the
	// N-th matching write from now, counting only those that match).
	arm := func(ctx context.Context, verb, which, nth, kinds, a string) error {
		w := W(ctx)
		scope, err := w.scopeOf(a)
		if err != nil {
			return err
		}
		count, skip := 1, 0
		switch {
		case which == "every write":
			count = untilCleared
		case nth != "":
			n, _ := strconv.Atoi(nth)
			skip = n - 1
		}
		return w.fault(ctx, verb, strconv.Itoa(count), kinds, "scope="+scope, "skip="+strconv.Itoa(skip))
	}
	sc.Step(`^the host's store fails (every write|the next write|write (\d+)) of ([a-z,-]+) (?:for "([^"]*)"|in this space)$`, func(ctx context.Context, which, nth, kinds, a string) error {
		return arm(ctx, "fail-writes", which, nth, kinds, a)
	})
	sc.Step(`^the host's store loses the outcome of (the next write|write (\d+)) of ([a-z,-]+) (?:for "([^"]*)"|in this space)$`, func(ctx context.Context, which, nth, kinds, a string) error {
		return arm(ctx, "unknown-outcome", which, nth, kinds, a)
	})
	sc.Step(`^the request is accepted, or refused with 503 "backend_unavailable"$`, func(ctx context.Context) error {
		w := W(ctx)
		if w.last == nil {
			return fmt.Errorf("no request was made")
		}
		if w.last.Status == 503 {
			return CheckProblem(w.last, 503, "backend_unavailable")
		}
		if _, err := AcceptedOperation(w.last); err != nil {
			return err
		}
		if w.lastOp == nil || w.lastOp.State != "succeeded" || w.lastOp.Effect != "applied" {
			return fmt.Errorf("operation did not succeed with effect applied: %+v (answer %s)", w.lastOp, w.last)
		}
		return nil
	})
	sc.Step(`^the host's store works again$`, func(ctx context.Context) error {
		return W(ctx).clearFaults(ctx)
	})

	// ---- observation control (@observation-control) ----
	sc.Step(`^the host makes no observation in this space$`, func(ctx context.Context) error {
		w := W(ctx)
		return w.fault(ctx, "pause-observation", "scope="+w.space)
	})
	sc.Step(`^the host observes again in this space$`, func(ctx context.Context) error {
		w := W(ctx)
		if err := w.k.cfg.Fault(ctx, []string{"clear", "scope=" + w.space}); err != nil {
			return fmt.Errorf("fault control clear: %w", err)
		}
		delete(w.faults, w.space)
		return nil
	})
	// Every read in the window must show {}: a definite value there was
	// never observed (observation is paused in the space).
	sc.Step(`^the observed of "([^"]*)" stays \{\} for (\d+) seconds$`, func(ctx context.Context, a string, s int) error {
		w := W(ctx)
		return Consistently(time.Duration(s)*time.Second, func() error {
			m, r, err := w.get(ctx, a)
			if err != nil {
				return err
			}
			if m == nil {
				return fmt.Errorf("reading %q: %s", a, r)
			}
			if obs, _ := m["observed"].(map[string]any); len(obs) != 0 {
				return fmt.Errorf("observed of %q is %v while the host makes no observation in its space: a value never observed (the Forms: {} before the first observation)", a, obs)
			}
			return nil
		})
	})

	// ---- requests that do not wait ----
	sc.Step(`^I request the deletion of "([^"]*)"$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		rs, err := w.resource(a)
		if err != nil {
			return err
		}
		r, err := w.api(ctx, func(c *Client, h http.Header) (*Response, error) { return c.DeleteResource(ctx, rs.space, rs.uid, h) })
		if err != nil {
			return err
		}
		op, err := AcceptedOperation(r)
		if err != nil {
			return err
		}
		if op.Kind != "delete" {
			return fmt.Errorf("DELETE answered an Operation of kind %q", op.Kind)
		}
		w.etags["op"] = op.ID
		return nil
	})

	// ---- Operation outcomes under faults ----
	sc.Step(`^the remembered operation becomes reconciling with effect unknown$`, func(ctx context.Context) error {
		w := W(ctx)
		var last *Operation
		return Poll(opTimeout, func() error {
			op, err := w.rememberedOp(ctx)
			if err != nil {
				return godogStop{err}
			}
			last = op
			if op.Terminal() {
				return godogStop{fmt.Errorf("operation %s ended %s/%s while the store still failed; want reconciling/unknown", op.ID, op.State, op.Effect)}
			}
			if op.State != "reconciling" {
				return fmt.Errorf("operation %s is %s/%s, want reconciling/unknown", op.ID, last.State, last.Effect)
			}
			if op.Effect != "unknown" {
				return godogStop{fmt.Errorf("operation %s is reconciling with effect %q, want unknown", op.ID, op.Effect)}
			}
			return nil
		})
	})
	sc.Step(`^the remembered operation stays reconciling with effect unknown for (\d+) seconds$`, func(ctx context.Context, s int) error {
		w := W(ctx)
		return Consistently(time.Duration(s)*time.Second, func() error {
			op, err := w.rememberedOp(ctx)
			if err != nil {
				return err
			}
			if op.State != "reconciling" || op.Effect != "unknown" {
				return fmt.Errorf("operation %s is %s/%s, want it to stay reconciling/unknown while the outcome is unknown", op.ID, op.State, op.Effect)
			}
			return nil
		})
	})
	sc.Step(`^the remembered operation (?:converges to|ends) succeeded with effect applied, never read failed or none$`, func(ctx context.Context) error {
		w := W(ctx)
		return Poll(opTimeout, func() error {
			op, err := w.rememberedOp(ctx)
			if err != nil {
				return godogStop{err}
			}
			switch {
			case op.State == "failed", op.State == "succeeded" && op.Effect != "applied":
				return godogStop{fmt.Errorf("operation %s ended %s/%s; its effect was applied", op.ID, op.State, op.Effect)}
			case op.State == "reconciling", op.State == "running", op.State == "pending":
				return fmt.Errorf("operation %s still %s/%s", op.ID, op.State, op.Effect)
			}
			return nil
		})
	})
	sc.Step(`^"([^"]*)" reads state "([^"]*)"$`, func(ctx context.Context, a, state string) error {
		m, r, err := W(ctx).get(ctx, a)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("reading %q: %s", a, r)
		}
		if m["state"] != state {
			return fmt.Errorf("%q is in state %v, want %s", a, m["state"], state)
		}
		return nil
	})
	// After a settlement with an unknown outcome the host may deliver the
	// message again (at-least-once) or find, by its ID, that the
	// settlement was stored; what it must not do is keep the message for
	// ever without delivering it.
	sc.Step(`^message "([^"]*)" is delivered again, or "([^"]*)" observes messageCount 0$`, func(ctx context.Context, tag, a string) error {
		w := W(ctx)
		var last any
		err := Poll(30*time.Second, func() error {
			if len(w.deliveries(tag, "")) >= 2 {
				return nil
			}
			obs, err := w.pollObserved(ctx, a)
			if err != nil {
				return err
			}
			last = obs["messageCount"]
			if last != nil && fmt.Sprint(last) == "0" {
				return nil
			}
			return fmt.Errorf("message %q was not delivered again and %q observes messageCount %v", tag, a, last)
		})
		return err
	})
	sc.Step(`^the messageCount of "([^"]*)", when observed, becomes (\d+)$`, func(ctx context.Context, a string, n int) error {
		w := W(ctx)
		var last any
		return Poll(30*time.Second, func() error {
			obs, err := w.pollObserved(ctx, a)
			if err != nil {
				return err
			}
			c, ok := obs["messageCount"]
			if !ok {
				return nil // messageCount is optional (AtLeastOnceQueue §観測)
			}
			last = c
			if fmt.Sprint(c) != strconv.Itoa(n) {
				return fmt.Errorf("observed messageCount of %q is %v, want %d", a, last, n)
			}
			return nil
		})
	})
}
