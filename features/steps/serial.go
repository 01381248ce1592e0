package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cucumber/godog"
)

// Steps of the serialized-queue extension (@ext-serialized,
// spec/peers.md §Serialized queues).

// OfferingSerialized is the AtLeastOnceQueue offering the extension names.
const OfferingSerialized = "serialized"

// delivered is one delivery of one message from a queue: its tag and the
// attempts the handler saw.
type delivered struct {
	tag      string
	attempts int64
}

func (d delivered) String() string { return fmt.Sprintf("%s#%d", d.tag, d.attempts) }

// queueDeliveries lists every delivery from queue alias q in the order the
// handlers reported their batches (a batch's messages in batch order).
func (w *world) queueDeliveries(q string) ([]delivered, error) {
	rs, err := w.resource(q)
	if err != nil {
		return nil, err
	}
	var out []delivered
	for _, e := range w.k.cfg.Recorder.Events(w.scope) {
		if e.Kind != "start" || e.QueueName() != rs.name {
			continue
		}
		for _, m := range e.Messages {
			a, _ := isInt(m.Attempts)
			out = append(out, delivered{m.Tag, a})
		}
	}
	return out, nil
}

var deliveredRE = regexp.MustCompile(`^([A-Za-z0-9_-]+)#(\d+)$`)

// parseDeliveries reads "a#1, a#2, b#1".
func parseDeliveries(list string) ([]delivered, error) {
	var out []delivered
	for _, part := range strings.Split(list, ",") {
		m := deliveredRE.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return nil, fmt.Errorf("%q is not TAG#ATTEMPTS", strings.TrimSpace(part))
		}
		n, _ := strconv.ParseInt(m[2], 10, 64)
		out = append(out, delivered{m[1], n})
	}
	return out, nil
}

func registerSerialSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }
	sc.Step(`^a serialized queue "([^"]*)"(?: with spec (\{.*\}))?$`, func(ctx context.Context, a, specText string) error {
		w := W(ctx)
		as := w.as
		w.as = PrincipalAdmin
		defer func() { w.as = as }()
		var spec any = map[string]any{"messageRetentionSeconds": json.Number("600")}
		if specText != "" {
			v, err := decodeJSON(specText)
			if err != nil {
				return err
			}
			spec = v
		}
		r, err := w.createIn(ctx, w.space, a, FormQueue, OfferingSerialized, spec, nil)
		if err != nil {
			return err
		}
		if r.Status != 202 || w.lastOp == nil || w.lastOp.State != "succeeded" {
			return fmt.Errorf("creating a serialized queue %q failed: %s (operation %+v)", a, r, w.lastOp)
		}
		return nil
	})
	sc.Step(`^I create a queue "([^"]*)" in offering "([^"]*)"$`, func(ctx context.Context, a, offering string) error {
		w := W(ctx)
		_, err := w.createIn(ctx, w.space, a, FormQueue, offering, map[string]any{"messageRetentionSeconds": json.Number("600")}, nil)
		return err
	})
	sc.Step(`^I create a consumer "([^"]*)" of "([^"]*)" by "([^"]*)" in offering "([^"]*)"$`, func(ctx context.Context, c, q, wk, offering string) error {
		w := W(ctx)
		spec, err := w.consumerSpec(q, wk, "")
		if err != nil {
			return err
		}
		_, err = w.createIn(ctx, w.space, c, FormConsumer, offering, spec, nil)
		return err
	})
	sc.Step(`^the offering of "([^"]*)" reads "([^"]*)"$`, func(ctx context.Context, a, want string) error {
		m, r, err := W(ctx).get(ctx, a)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("reading %q: %s", a, r)
		}
		if got, _ := m["offering"].(string); got != want {
			return fmt.Errorf("the offering of %q reads %v, want %q", a, m["offering"], want)
		}
		return nil
	})
	// Every delivery from the queue, in the order the handlers reported
	// them, is exactly the list (TAG#ATTEMPTS): a second batch at once, a
	// message overtaking a retried or delayed head, or a redelivery out of
	// place all show here. It waits for the list's length, then a quiet
	// second for deliveries beyond it.
	sc.Step(`^the deliveries from "([^"]*)" were exactly: (.+)$`, func(ctx context.Context, q, list string) error {
		w := W(ctx)
		want, err := parseDeliveries(list)
		if err != nil {
			return err
		}
		var got []delivered
		err = Poll(deliverTimeout+30*time.Second, func() error {
			if got, err = w.queueDeliveries(q); err != nil {
				return godogStop{err}
			}
			if len(got) < len(want) {
				return fmt.Errorf("%d deliveries from %q so far: %v, want %v", len(got), q, got, want)
			}
			return nil
		})
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		if got, err = w.queueDeliveries(q); err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("the deliveries from %q were %v, want exactly %v (accept order, one batch at a time, a retried head first)", q, got, want)
		}
		for _, d := range want {
			w.confirm(d.tag, int(d.attempts))
		}
		return nil
	})
	// Accept order where how often a message is delivered may vary (a
	// restart in the middle of a batch): each listed message is delivered,
	// and no delivery of a message comes after a delivery of a message
	// listed later.
	sc.Step(`^the deliveries from "([^"]*)" kept accept order: (.+)$`, func(ctx context.Context, q, list string) error {
		w := W(ctx)
		pos := map[string]int{}
		var tags []string
		for _, t := range strings.Split(list, ",") {
			t = strings.TrimSpace(t)
			pos[t] = len(tags)
			tags = append(tags, t)
		}
		var got []delivered
		err := Poll(deliverTimeout+30*time.Second, func() error {
			var err error
			if got, err = w.queueDeliveries(q); err != nil {
				return godogStop{err}
			}
			seen := map[string]bool{}
			for _, d := range got {
				seen[d.tag] = true
			}
			for _, t := range tags {
				if !seen[t] {
					return fmt.Errorf("message %q not yet delivered from %q: %v", t, q, got)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		last := -1
		for i, d := range got {
			p, ok := pos[d.tag]
			if !ok {
				return fmt.Errorf("delivery %d from %q is of %q, not a listed message: %v", i+1, q, d.tag, got)
			}
			if p < last {
				return fmt.Errorf("the deliveries from %q were %v: %s came after %s, against accept order %s", q, got, d, tags[last], list)
			}
			last = p
		}
		return nil
	})
}
