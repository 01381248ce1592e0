package host

import (
	"context"
	"fmt"

	"github.com/takoform/queuehost/runtime/delivery"
)

// deliveryEvents puts the engine's delivery events (messages
// dead-lettered, discarded after their last retry, expired) into the log
// of the worker that consumes the queue, by queue name, so that `tako
// tail` and GET .../logs show them, not only the host's stdout. The
// engine calls in with a queue's lock held, so events go through a
// bounded channel to one goroutine that resolves names; when it is full
// an event is dropped (the engine's own log line remains).
type deliveryEvents struct {
	h    *Host
	ch   chan delivery.Event
	stop chan struct{}
	done chan struct{}
}

func newDeliveryEvents(h *Host) *deliveryEvents {
	return &deliveryEvents{h: h, ch: make(chan delivery.Event, 1024)}
}

// post is delivery.Options.OnEvent: it never blocks.
func (d *deliveryEvents) post(ev delivery.Event) {
	if ev.WorkerUID == "" {
		return
	}
	select {
	case d.ch <- ev:
	default:
	}
}

func (d *deliveryEvents) Start(context.Context) error {
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	go d.loop()
	return nil
}

func (d *deliveryEvents) Stop(ctx context.Context) error {
	close(d.stop)
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *deliveryEvents) loop() {
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case ev := <-d.ch:
			d.h.logs.Add(ev.WorkerUID, "", "warn", d.describe(ev))
		}
	}
}

func (d *deliveryEvents) describe(ev delivery.Event) string {
	name := func(uid string) string {
		if _, n, ok := d.h.metrics.resource(uid); ok {
			return n
		}
		return uid
	}
	msgs := fmt.Sprintf("%d messages", ev.Count)
	if ev.Count == 1 {
		msgs = "1 message"
	}
	switch ev.Kind {
	case delivery.EventDeadLettered:
		return fmt.Sprintf("delivery: %s of queue %s dead-lettered to queue %s after the last retry", msgs, name(ev.QueueUID), name(ev.DeadLetterQueueUID))
	case delivery.EventDiscarded:
		return fmt.Sprintf("delivery: %s of queue %s discarded after the last retry (the consumer has no dead-letter queue)", msgs, name(ev.QueueUID))
	case delivery.EventExpired:
		return fmt.Sprintf("delivery: %s of queue %s expired (its messageRetentionSeconds passed) and removed", msgs, name(ev.QueueUID))
	}
	return fmt.Sprintf("delivery: %s of queue %s: %s", msgs, name(ev.QueueUID), ev.Kind)
}
