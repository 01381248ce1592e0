package host

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// eventBatchFailed is a host-side event kind: a batch whose queue handler
// threw, rejected or panicked (from delivery.Options.ObserveBatch).
const eventBatchFailed = "batch_failed"

// deliveryEvents puts delivery events into the log of the worker that
// consumes the queue, by queue name, so that `tako tail` and GET .../logs
// show them, not only the host's stdout: messages dead-lettered,
// discarded after their last retry, expired, redelivered after a restart,
// and batches that failed. The engine calls in with a queue's lock held,
// so events go through a bounded channel to one goroutine that resolves
// names; when it is full an event is dropped (the engine's own log line
// remains).
type deliveryEvents struct {
	h    *Host
	ch   chan hostEvent
	stop chan struct{}
	done chan struct{}
	// workers caches each consumer's worker (the loop writes it).
	mu      sync.Mutex
	workers map[string]cachedWorker
}

// hostEvent is an engine event, or a finished batch (ConsumerUID set,
// Batch its observation; Kind eventBatchFailed when it failed).
type hostEvent struct {
	delivery.Event
	ConsumerUID string
	Batch       *delivery.BatchObservation
}

func newDeliveryEvents(h *Host) *deliveryEvents {
	return &deliveryEvents{h: h, ch: make(chan hostEvent, 1024), workers: map[string]cachedWorker{}}
}

// cachedWorker is a consumer's worker as last read, for the invocations
// of its batches (read again after a while: a consumer's spec may change).
type cachedWorker struct {
	uid  string
	read time.Time
}

// post is delivery.Options.OnEvent: it never blocks. An event without a
// worker (a queue with no consumer) goes nowhere, except a redelivery,
// whose consumer is looked up.
func (d *deliveryEvents) post(ev delivery.Event) {
	if ev.WorkerUID == "" && ev.Kind != delivery.EventRedelivered {
		return
	}
	d.send(hostEvent{Event: ev})
}

// batch is called with every finished batch (ObserveBatch): each is an
// invocation of the consumer's worker, and a failed one also a log line.
// While the consumer's worker is cached the invocation is recorded here
// and only a failure goes through the channel, so that a busy queue's
// batches do not crowd out the events; otherwise the loop looks the
// worker up once.
func (d *deliveryEvents) batch(o delivery.BatchObservation) {
	ev := hostEvent{Event: delivery.Event{QueueUID: o.QueueUID, Count: o.Messages}, ConsumerUID: o.ConsumerUID}
	if o.Failed {
		ev.Kind = eventBatchFailed
	}
	if w, ok := d.cached(o.ConsumerUID); ok {
		if w != "" {
			d.h.invocations.add(w, o)
		}
		if o.Failed && w != "" {
			ev.WorkerUID = w
			d.send(ev)
		}
		return
	}
	ev.Batch = &o
	d.send(ev)
}

// cached is the consumer's worker as read less than 30 s ago.
func (d *deliveryEvents) cached(consumerUID string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.workers[consumerUID]
	if !ok || time.Since(c.read) >= 30*time.Second {
		return "", false
	}
	return c.uid, true
}

func (d *deliveryEvents) send(ev hostEvent) {
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
			worker := ev.WorkerUID
			if worker == "" && ev.Batch != nil {
				worker = d.consumerWorker(ev)
			} else if worker == "" {
				worker = d.workerOf(ev)
			}
			if worker == "" {
				continue
			}
			if ev.Batch != nil {
				d.h.invocations.add(worker, *ev.Batch)
			}
			if ev.Kind != "" {
				d.h.logs.Add(worker, "", "warn", d.describe(ev))
			}
		}
	}
}

// consumerWorker is workerOf for a batch, cached for 30 s per consumer
// (a batch finishes many times a second on a busy queue).
func (d *deliveryEvents) consumerWorker(ev hostEvent) string {
	if uid, ok := d.cached(ev.ConsumerUID); ok {
		return uid
	}
	uid := d.workerOf(ev)
	d.mu.Lock()
	if len(d.workers) >= maxInvocationWorkers {
		clear(d.workers)
	}
	d.workers[ev.ConsumerUID] = cachedWorker{uid: uid, read: time.Now()}
	d.mu.Unlock()
	return uid
}

// workerOf finds the worker of an event that names only its consumer (a
// failed batch) or its queue (a redelivery): "" when there is none.
func (d *deliveryEvents) workerOf(ev hostEvent) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	forms := d.h.forms
	if ev.ConsumerUID != "" {
		r, err := d.h.st.Resource(ctx, ev.ConsumerUID)
		if err != nil {
			return ""
		}
		cfg, err := forms.ConsumerConfig(r)
		if err != nil {
			return ""
		}
		return cfg.WorkerUID
	}
	q, err := d.h.st.Resource(ctx, ev.QueueUID)
	if err != nil {
		return ""
	}
	for _, url := range forms.Consumers() {
		cs, err := d.h.st.Resources(ctx, q.Space, url)
		if err != nil {
			return ""
		}
		for _, c := range cs {
			if cfg, err := forms.ConsumerConfig(c); c.State != store.StateDeleting && err == nil && cfg.QueueUID == ev.QueueUID {
				return cfg.WorkerUID
			}
		}
	}
	return ""
}

// idList names an event's messages by ID, so that a log line leads to
// them (tako queues peek, the console's message view): "m1, m2" or
// "m1, m2 and 8 more".
func idList(ids []string, count int) string {
	if len(ids) == 0 {
		return ""
	}
	s := strings.Join(ids, ", ")
	if count > len(ids) {
		s += fmt.Sprintf(" and %d more", count-len(ids))
	}
	return s
}

func (d *deliveryEvents) describe(ev hostEvent) string {
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
	if ids := idList(ev.MessageIDs, ev.Count); ids != "" {
		msgs += " (" + ids + ")"
	}
	switch ev.Kind {
	case delivery.EventDeadLettered:
		return fmt.Sprintf("delivery: %s of queue %s dead-lettered to queue %s after the last retry", msgs, name(ev.QueueUID), name(ev.DeadLetterQueueUID))
	case delivery.EventDiscarded:
		return fmt.Sprintf("delivery: %s of queue %s discarded after the last retry (the consumer has no dead-letter queue)", msgs, name(ev.QueueUID))
	case delivery.EventExpired:
		return fmt.Sprintf("delivery: %s of queue %s expired (its messageRetentionSeconds passed) and removed", msgs, name(ev.QueueUID))
	case delivery.EventRedelivered:
		return fmt.Sprintf("delivery: %s of queue %s left unsettled by a batch when the host stopped, delivered again", msgs, name(ev.QueueUID))
	case eventBatchFailed:
		return fmt.Sprintf("delivery: a batch of %s of queue %s failed (the queue handler threw or rejected); what it did not settle is retried or dead-lettered as consumer %s says", msgs, name(ev.QueueUID), name(ev.ConsumerUID))
	}
	return fmt.Sprintf("delivery: %s of queue %s: %s", msgs, name(ev.QueueUID), ev.Kind)
}
