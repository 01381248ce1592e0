package steps

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cucumber/godog"
)

// Steps of the forensics extension (@ext-forensics; spec/peers.md
// §Attempt history, §Dead-letter groups).

type attemptItem struct {
	Attempt         int    `json:"attempt"`
	StartedAtMillis int64  `json:"startedAtMillis"`
	DurationMillis  *int64 `json:"durationMillis"`
	Outcome         string `json:"outcome"`
	DelaySeconds    *int   `json:"delaySeconds"`
	ErrorName       string `json:"errorName"`
	ErrorMessage    string `json:"errorMessage"`
	ErrorStack      string `json:"errorStack"`
}

type historyItem struct {
	ID              string        `json:"id"`
	BodyPreview     []byte        `json:"bodyPreview"`
	AttemptHistory  []attemptItem `json:"attemptHistory"`
	DeadLetterGroup string        `json:"deadLetterGroup"`
}

type groupItem struct {
	Fingerprint      string `json:"fingerprint"`
	Title            string `json:"title"`
	Count            int    `json:"count"`
	FirstSeenMillis  int64  `json:"firstSeenMillis"`
	LastSeenMillis   int64  `json:"lastSeenMillis"`
	ExampleMessageID string `json:"exampleMessageId"`
	Histogram        []int  `json:"histogram"`
}

// listedHistory is the listed message of a tagged tag, with its history.
func (w *world) listedHistory(ctx context.Context, a, tag string) (historyItem, error) {
	m, err := w.listedTagged(ctx, a, tag)
	if err != nil {
		return historyItem{}, err
	}
	p, err := w.extPath(a, "messages")
	if err != nil {
		return historyItem{}, err
	}
	all, err := allPages[historyItem](ctx, w, p, "", 100, "message list")
	if err != nil {
		return historyItem{}, err
	}
	for _, h := range all {
		if h.ID == m.ID {
			return h, nil
		}
	}
	return historyItem{}, fmt.Errorf("message %s of %q left the listing", m.ID, a)
}

// attemptSpecRE is one expected attempt: retried, time_limit, or thrown
// "Name" "message".
var attemptSpecRE = regexp.MustCompile(`^(retried|thrown|time_limit|sandbox_ended)(?: "([^"]*)" "([^"]*)")?$`)

func (w *world) groups(ctx context.Context, a string) ([]groupItem, int, error) {
	p, err := w.extPath(a, "deadletters/groups")
	if err != nil {
		return nil, 0, err
	}
	r, err := w.do(ctx, "GET", p+"?buckets=6&bucketSeconds=600", nil)
	if err != nil {
		return nil, 0, err
	}
	if r.Status != 200 {
		return nil, 0, fmt.Errorf("GET %s: %s", p, r)
	}
	var doc struct {
		Groups      []groupItem `json:"groups"`
		DeadLetters *int        `json:"deadLetters"`
	}
	if err := r.JSON(&doc); err != nil {
		return nil, 0, err
	}
	if doc.DeadLetters == nil {
		return nil, 0, fmt.Errorf("GET %s: no deadLetters", p)
	}
	return doc.Groups, *doc.DeadLetters, nil
}

// finishedQueueOp waits for the scenario's purge or redrive to finish.
func (w *world) finishedQueueOp(ctx context.Context) (*Operation, error) {
	id, err := w.queueOp()
	if err != nil {
		return nil, err
	}
	return WaitOperation(ctx, w.admin(), w.space, id, opTimeout)
}

func registerForensicsSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" has (\d+) attempts?: (.+)$`, func(ctx context.Context, a, tag string, n int, specs string) error {
		w := W(ctx)
		m, err := w.listedHistory(ctx, a, tag)
		if err != nil {
			return err
		}
		want := strings.Split(specs, ", ")
		if len(want) != n || len(m.AttemptHistory) != n {
			return fmt.Errorf("message %s of %q has %d attempts in its history, want %d: %+v", m.ID, a, len(m.AttemptHistory), n, m.AttemptHistory)
		}
		for i, s := range want {
			sm := attemptSpecRE.FindStringSubmatch(s)
			if sm == nil {
				return fmt.Errorf("attempt spec %q: want retried, time_limit, sandbox_ended or thrown \"Name\" \"message\"", s)
			}
			got := m.AttemptHistory[i]
			if got.Outcome != sm[1] || got.StartedAtMillis <= 0 || got.DurationMillis == nil || *got.DurationMillis < 0 {
				return fmt.Errorf("message %s of %q, attempt %d: %+v, want outcome %s with a start and a duration", m.ID, a, i+1, got, sm[1])
			}
			if i > 0 && got.Attempt <= m.AttemptHistory[i-1].Attempt {
				return fmt.Errorf("message %s of %q: attempts %d then %d, want the oldest first", m.ID, a, m.AttemptHistory[i-1].Attempt, got.Attempt)
			}
			if sm[1] == "thrown" && (got.ErrorName != sm[2] || got.ErrorMessage != sm[3]) {
				return fmt.Errorf("message %s of %q, attempt %d threw %q %q, want %q %q", m.ID, a, i+1, got.ErrorName, got.ErrorMessage, sm[2], sm[3])
			}
		}
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" has no attempt history$`, func(ctx context.Context, a, tag string) error {
		m, err := W(ctx).listedHistory(ctx, a, tag)
		if err != nil {
			return err
		}
		if len(m.AttemptHistory) != 0 {
			return fmt.Errorf("message %s of %q has an attempt history %+v, want none", m.ID, a, m.AttemptHistory)
		}
		return nil
	})
	sc.Step(`^the dead letters of "([^"]*)" are in (\d+) groups?: (.+)$`, func(ctx context.Context, a string, n int, specs string) error {
		w := W(ctx)
		gs, dead, err := w.groups(ctx, a)
		if err != nil {
			return err
		}
		want := strings.Split(specs, ", ")
		if len(gs) != n || len(want) != n {
			return fmt.Errorf("%q has %d groups, want %d: %+v", a, len(gs), n, gs)
		}
		total := 0
		for i, s := range want {
			cnt, title, ok := strings.Cut(s, " of ")
			c, err := strconv.Atoi(cnt)
			if !ok || err != nil {
				return fmt.Errorf("group spec %q: want N of \"title\"", s)
			}
			title = strings.Trim(title, `"`)
			g := gs[i]
			if g.Count != c || g.Title != title || len(g.Fingerprint) != 16 || g.FirstSeenMillis <= 0 || g.FirstSeenMillis > g.LastSeenMillis ||
				g.ExampleMessageID == "" || len(g.Histogram) != 6 {
				return fmt.Errorf("%q group %d: %+v, want %d of %q (largest first) with its times, an example and 6 buckets", a, i+1, g, c, title)
			}
			sum := 0
			for _, b := range g.Histogram {
				sum += b
			}
			if sum != g.Count {
				return fmt.Errorf("%q group %s: histogram %v sums to %d, want its count %d", a, g.Fingerprint, g.Histogram, sum, g.Count)
			}
			total += c
		}
		if dead != total {
			return fmt.Errorf("%q counts %d dead letters, its groups %d", a, dead, total)
		}
		return nil
	})
	sc.Step(`^the listed message of "([^"]*)" tagged "([^"]*)" is in the group "([^"]*)"$`, func(ctx context.Context, a, tag, title string) error {
		w := W(ctx)
		m, err := w.listedHistory(ctx, a, tag)
		if err != nil {
			return err
		}
		gs, _, err := w.groups(ctx, a)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.Fingerprint == m.DeadLetterGroup {
				if g.Title != title {
					return fmt.Errorf("message %s of %q is in group %s %q, want %q", m.ID, a, g.Fingerprint, g.Title, title)
				}
				return nil
			}
		}
		return fmt.Errorf("message %s of %q names group %q, which %q does not list", m.ID, a, m.DeadLetterGroup, a)
	})
	sc.Step(`^I redrive the group of the listed message of "([^"]*)" tagged "([^"]*)"( as a dry run)?$`, func(ctx context.Context, a, tag, dry string) error {
		w := W(ctx)
		m, err := w.listedHistory(ctx, a, tag)
		if err != nil {
			return err
		}
		if m.DeadLetterGroup == "" {
			return fmt.Errorf("message %s of %q has no deadLetterGroup", m.ID, a)
		}
		w.etags["kit-group"] = m.DeadLetterGroup
		body := map[string]any{"group": m.DeadLetterGroup}
		if dry != "" {
			body["dryRun"] = true
		}
		return w.startQueueOp(ctx, a, "redrive", body)
	})
	sc.Step(`^I redrive "([^"]*)" with group "([^"]*)"$`, func(ctx context.Context, a, group string) error {
		return W(ctx).startQueueOp(ctx, a, "redrive", map[string]any{"group": group})
	})
	sc.Step(`^the redrive records the group(, as a dry run)?$`, func(ctx context.Context, dry string) error {
		w := W(ctx)
		op, err := w.finishedQueueOp(ctx)
		if err != nil {
			return err
		}
		if op.ProgressGroup != w.etags["kit-group"] {
			return fmt.Errorf("redrive %s records group %q, want %q", op.ID, op.ProgressGroup, w.etags["kit-group"])
		}
		if isDry := op.Progress["dryRun"] == 1; isDry != (dry != "") {
			return fmt.Errorf("redrive %s has progress %v: dryRun %v, want %v", op.ID, op.Progress, isDry, dry != "")
		}
		return nil
	})
}
