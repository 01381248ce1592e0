package steps

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cucumber/godog"
)

// Steps of the purge and redrive extensions (@ext-purge, @ext-redrive;
// spec/peers.md §Purge, §Redrive).

var progressRE = regexp.MustCompile(`^(removed|moved|skipped|total|wouldMove) (\d+)$`)

// parseProgress reads "moved 2, skipped 1, total 3".
func parseProgress(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		m := progressRE.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return nil, fmt.Errorf("progress %q: want items like \"moved 2\", separated by commas", s)
		}
		n, _ := strconv.Atoi(m[2])
		out[m[1]] = n
	}
	return out, nil
}

// queueOp is the Operation the last purge or redrive request was answered
// with, remembered for later steps.
func (w *world) queueOp() (string, error) {
	id := w.etags["queue-op"]
	if id == "" {
		return "", fmt.Errorf("no purge or redrive was accepted in this scenario")
	}
	return id, nil
}

func (w *world) startQueueOp(ctx context.Context, a, route string, body any) error {
	p, err := w.extPath(a, route)
	if err != nil {
		return err
	}
	r, err := w.do(ctx, "POST", p, body)
	if err != nil {
		return err
	}
	if r.Status == 202 {
		op, err := AcceptedOperation(r)
		if err != nil {
			return err
		}
		if op.Kind != route {
			return fmt.Errorf("POST %s answered an Operation of kind %q", p, op.Kind)
		}
		w.etags["queue-op"] = op.ID
	}
	return nil
}

func registerQueueOpSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	sc.Step(`^I purge "([^"]*)"$`, func(ctx context.Context, a string) error {
		return W(ctx).startQueueOp(ctx, a, "purge", nil)
	})
	sc.Step(`^I redrive "([^"]*)"(?: to "([^"]*)")?(?: at (\d+) messages? per second)?$`, func(ctx context.Context, a, target, rate string) error {
		w := W(ctx)
		body := map[string]any{}
		if target != "" {
			rs, err := w.resource(target)
			if err != nil {
				return err
			}
			body["targetQueue"] = map[string]any{"resourceUid": rs.uid}
		}
		if rate != "" {
			n, _ := strconv.Atoi(rate)
			body["maxMessagesPerSecond"] = n
		}
		return w.startQueueOp(ctx, a, "redrive", body)
	})
	sc.Step(`^the (?:purge|redrive) ends (succeeded|failed)(?: with "([^"]*)")? with progress (.+)$`, func(ctx context.Context, state, code, progress string) error {
		w := W(ctx)
		id, err := w.queueOp()
		if err != nil {
			return err
		}
		want, err := parseProgress(progress)
		if err != nil {
			return err
		}
		op, err := WaitOperation(ctx, w.admin(), w.space, id, opTimeout)
		if err != nil {
			return err
		}
		if err := op.CheckPair(); err != nil {
			return err
		}
		if op.State != state {
			return fmt.Errorf("operation %s is %s/%s, want %s", op.ID, op.State, op.Effect, state)
		}
		if code != "" && (op.Error == nil || op.Error.Code != code) {
			return fmt.Errorf("operation %s failed with %+v, want %q", op.ID, op.Error, code)
		}
		for k, v := range want {
			if got, ok := op.Progress[k]; !ok || got != v {
				return fmt.Errorf("operation %s has progress %v, want %s %d", op.ID, op.Progress, k, v)
			}
		}
		// A redrive's effect says whether a message moved (spec/peers.md
		// §Redrive): applied or partial when some did, none when none did.
		if op.Kind == "redrive" {
			moved := op.Progress["moved"] > 0
			want := map[string]map[bool]string{"succeeded": {true: "applied", false: "none"}, "failed": {true: "partial", false: "none"}}[state][moved]
			if op.Effect != want {
				return fmt.Errorf("redrive %s ended %s with %d moved and effect %s, want %s", op.ID, op.State, op.Progress["moved"], op.Effect, want)
			}
		}
		return nil
	})
	sc.Step(`^the redrive is running with between (\d+) and (\d+) moved of (\d+)$`, func(ctx context.Context, lo, hi, total int) error {
		w := W(ctx)
		id, err := w.queueOp()
		if err != nil {
			return err
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			op, _, err := GetOperation(ctx, w.admin(), w.space, id, 0)
			if err != nil {
				return err
			}
			if err := op.CheckPair(); err != nil {
				return err
			}
			if op.State != "running" {
				return fmt.Errorf("operation %s is %s with progress %v, want running", op.ID, op.State, op.Progress)
			}
			if op.Progress["total"] != total {
				return fmt.Errorf("operation %s has progress %v, want total %d", op.ID, op.Progress, total)
			}
			if m := op.Progress["moved"]; m >= lo && m <= hi {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("operation %s has progress %v, want between %d and %d moved", op.ID, op.Progress, lo, hi)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	sc.Step(`^I cancel the redrive$`, func(ctx context.Context) error {
		w := W(ctx)
		id, err := w.queueOp()
		if err != nil {
			return err
		}
		_, err = w.do(ctx, "POST", "/v2/spaces/"+w.space+"/operations/"+id+"/cancel", nil)
		return err
	})
	sc.Step(`^"([^"]*)" holds (\d+) messages? tagged "([^"]*)"$`, func(ctx context.Context, a string, n int, tag string) error {
		w := W(ctx)
		deadline := time.Now().Add(15 * time.Second)
		for {
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
			if got == n {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%q holds %d messages tagged %q, want %d", a, got, tag, n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	sc.Step(`^"([^"]*)" and "([^"]*)" hold (\d+) messages tagged "([^"]*)" between them, each once$`, func(ctx context.Context, a, b string, n int, tag string) error {
		w := W(ctx)
		seen := map[string]string{}
		for _, q := range []string{a, b} {
			all, err := w.listMessages(ctx, q, 100)
			if err != nil {
				return err
			}
			for _, m := range all {
				body := string(m.BodyPreview)
				if !strings.Contains(body, `"tag":"`+tag) {
					continue
				}
				if prev, dup := seen[body]; dup {
					return fmt.Errorf("message %s is in %q and in %q", body, prev, q)
				}
				seen[body] = q
			}
		}
		if len(seen) != n {
			return fmt.Errorf("%q and %q hold %d messages tagged %q, want %d", a, b, len(seen), tag, n)
		}
		return nil
	})
	sc.Step(`^"([^"]*)" holds as many messages tagged "([^"]*)" as the redrive moved, (\d+) seconds? later$`, func(ctx context.Context, a, tag string, secs int) error {
		w := W(ctx)
		id, err := w.queueOp()
		if err != nil {
			return err
		}
		op, _, err := GetOperation(ctx, w.admin(), w.space, id, 0)
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(secs) * time.Second)
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
		if got != op.Progress["moved"] {
			return fmt.Errorf("%q holds %d messages tagged %q; the redrive (%s) reports %d moved", a, got, tag, op.State, op.Progress["moved"])
		}
		return nil
	})
}
