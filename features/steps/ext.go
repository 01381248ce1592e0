package steps

import (
	"context"
	"encoding/json"
	"fmt"

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
