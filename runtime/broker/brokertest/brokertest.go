// Package brokertest is the suite every broker.Driver passes, in River's
// style (one suite, a constructor per driver): publish and consume with the
// envelope intact, acknowledgement, redelivery of what was not
// acknowledged, deletion on the broker's side, and, where the driver's
// test can cut its connection from the server's side, redelivery and
// working publishes after the driver reconnected by itself.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/store"
)

// Harness is what the suite needs of one driver.
type Harness struct {
	// Open returns a new driver on the broker under test; the suite
	// closes it.
	Open func(t *testing.T) broker.Driver
	// Drop cuts d's connection from the broker's side (nil: the
	// reconnect test is skipped, saying so).
	Drop func(t *testing.T, d broker.Driver)
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("PublishDeliversTheEnvelope", func(t *testing.T) { publishDelivers(t, h) })
	t.Run("AckRemoves", func(t *testing.T) { ackRemoves(t, h) })
	t.Run("UnackedIsRedelivered", func(t *testing.T) { unackedRedelivered(t, h) })
	t.Run("DeleteIsObserved", func(t *testing.T) { deleteObserved(t, h) })
	t.Run("ReconnectRedelivers", func(t *testing.T) { reconnect(t, h) })
	t.Run("ForeignMessage", func(t *testing.T) { foreign(t, h) })
	t.Run("PurgeRemovesWaiting", func(t *testing.T) { purge(t, h) })
}

// NewQueue declares a fresh queue on d and deletes it at the end.
func NewQueue(t *testing.T, d broker.Driver) broker.Queue {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	q := broker.Queue{UID: "r-" + hex.EncodeToString(b[:]), Name: "takotest-" + hex.EncodeToString(b[:])}
	if err := d.Declare(context.Background(), q); err != nil {
		t.Fatalf("Declare: %v", err)
	}
	t.Cleanup(func() { _ = d.Delete(context.Background(), q) })
	return q
}

// Recorder is a broker.Consumer that keeps what it is told.
type Recorder struct {
	mu    sync.Mutex
	got   []broker.Delivery
	lost  int
	gone  int
	event chan struct{}
}

// NewRecorder is an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{event: make(chan struct{}, 1)} }

// Consumer is r as a broker.Consumer.
func (r *Recorder) Consumer() broker.Consumer {
	note := func() {
		select {
		case r.event <- struct{}{}:
		default:
		}
	}
	return broker.Consumer{
		Deliver: func(d broker.Delivery) { r.mu.Lock(); r.got = append(r.got, d); r.mu.Unlock(); note() },
		Lost:    func() { r.mu.Lock(); r.lost++; r.mu.Unlock(); note() },
		Gone:    func() { r.mu.Lock(); r.gone++; r.mu.Unlock(); note() },
	}
}

// Wait waits until cond holds of what r was told, or fails t after d.
func (r *Recorder) Wait(t *testing.T, d time.Duration, what string, cond func(got []broker.Delivery, lost, gone int) bool) []broker.Delivery {
	t.Helper()
	deadline := time.After(d)
	for {
		r.mu.Lock()
		got, lost, gone := append([]broker.Delivery(nil), r.got...), r.lost, r.gone
		r.mu.Unlock()
		if cond(got, lost, gone) {
			return got
		}
		select {
		case <-r.event:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("waited %s for %s: %d deliveries, %d lost, %d gone", d, what, len(got), lost, gone)
		}
	}
}

// Reset forgets what r was told.
func (r *Recorder) Reset() { r.mu.Lock(); r.got, r.lost, r.gone = nil, 0, 0; r.mu.Unlock() }

func envs(n int) []broker.Envelope {
	out := make([]broker.Envelope, n)
	for i := range out {
		var b [8]byte
		_, _ = rand.Read(b[:])
		out[i] = broker.Envelope{ID: hex.EncodeToString(b[:]), AcceptedAt: 1700000000000 + int64(i), VisibleAt: 1700000005000 + int64(i),
			Attempts: i, Rev: int64(i + 1), Body: []byte("body-" + hex.EncodeToString(b[:]))}
	}
	if n > 1 {
		// The largest body a send takes (127000 bytes) fits in one message.
		out[1].Body = append(out[1].Body, make([]byte, 127000-len(out[1].Body))...)
	}
	out[0].TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	out[0].History = []store.Attempt{{Attempt: 1, StartedAt: 1700000000002, DurationMs: 3, Host: "h", WorkerVersion: "v", Outcome: "thrown", ErrorName: "Error", ErrorMessage: "boom", ErrorStack: "Error: boom\n    at queue (w.js:1:1)"}}
	out[0].DeadLetter = &store.DeadLetter{SourceQueue: "r-src", SourceQueueName: "src", Reason: store.ReasonRetriesExhausted, Attempts: 4, OriginalID: "orig", DeadLetteredAt: 1700000000001}
	return out
}

func byID(ds []broker.Delivery) map[string]broker.Delivery {
	m := map[string]broker.Delivery{}
	for _, d := range ds {
		m[d.ID] = d
	}
	return m
}

func count(n int) func([]broker.Delivery, int, int) bool {
	return func(got []broker.Delivery, _, _ int) bool { return len(byID(got)) >= n }
}

func open(t *testing.T, h Harness) broker.Driver {
	d := h.Open(t)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func publishDelivers(t *testing.T, h Harness) {
	d := open(t, h)
	q := NewQueue(t, d)
	want := envs(3)
	if err := d.Publish(context.Background(), q, want); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder()
	stop, err := d.Consume(q, r.Consumer())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	got := byID(r.Wait(t, 10*time.Second, "3 deliveries", count(3)))
	for _, w := range want {
		g, ok := got[w.ID]
		if !ok {
			t.Fatalf("message %s not delivered", w.ID)
		}
		if g.Foreign || g.TraceParent != w.TraceParent || g.AcceptedAt != w.AcceptedAt || g.VisibleAt != w.VisibleAt || g.Attempts != w.Attempts || g.Rev != w.Rev || string(g.Body) != string(w.Body) {
			t.Errorf("delivered %+v, published %+v", g.Envelope, w)
		}
		if !slices.Equal(g.History, w.History) {
			t.Errorf("attempt history: delivered %+v, published %+v", g.History, w.History)
		}
		if (g.DeadLetter == nil) != (w.DeadLetter == nil) || (w.DeadLetter != nil && *g.DeadLetter != *w.DeadLetter) {
			t.Errorf("dead-letter metadata: delivered %+v, published %+v", g.DeadLetter, w.DeadLetter)
		}
		if g.Handle == nil {
			t.Errorf("delivery of %s without a handle", w.ID)
		}
	}
	if ok, _, err := d.Stat(context.Background(), q); err != nil || !ok {
		t.Fatalf("Stat of a declared queue: exists %v, %v", ok, err)
	}
}

func ackRemoves(t *testing.T, h Harness) {
	d := open(t, h)
	q := NewQueue(t, d)
	if err := d.Publish(context.Background(), q, envs(2)); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder()
	stop, err := d.Consume(q, r.Consumer())
	if err != nil {
		t.Fatal(err)
	}
	got := r.Wait(t, 10*time.Second, "2 deliveries", count(2))
	if err := d.Ack(context.Background(), q, []any{got[0].Handle}); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	stop()
	r2 := NewRecorder()
	stop2, err := d.Consume(q, r2.Consumer())
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	again := r2.Wait(t, 10*time.Second, "the unacknowledged message again", count(1))
	time.Sleep(300 * time.Millisecond)
	again = r2.Wait(t, time.Second, "", func(g []broker.Delivery, _, _ int) bool { return true })
	if len(byID(again)) != 1 || again[0].ID != got[1].ID {
		t.Fatalf("after acknowledging %s of 2, a new consumer got %v", got[0].ID, ids(again))
	}
}

func ids(ds []broker.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func unackedRedelivered(t *testing.T, h Harness) {
	d := open(t, h)
	q := NewQueue(t, d)
	want := envs(3)
	if err := d.Publish(context.Background(), q, want); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder()
	stop, _ := d.Consume(q, r.Consumer())
	r.Wait(t, 10*time.Second, "3 deliveries", count(3))
	stop()
	// Another driver (another host) gets all three.
	d2 := open(t, h)
	r2 := NewRecorder()
	stop2, _ := d2.Consume(q, r2.Consumer())
	defer stop2()
	got := byID(r2.Wait(t, 10*time.Second, "3 redeliveries", count(3)))
	for _, w := range want {
		if g := got[w.ID]; g.Attempts != w.Attempts || g.Rev != w.Rev {
			t.Errorf("redelivered %+v, published %+v", g.Envelope, w)
		}
	}
}

func deleteObserved(t *testing.T, h Harness) {
	d := open(t, h)
	q := NewQueue(t, d)
	r := NewRecorder()
	stop, _ := d.Consume(q, r.Consumer())
	defer stop()
	// Deleted by someone else (an operator, another driver).
	other := open(t, h)
	if err := other.Delete(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := d.Stat(context.Background(), q); err != nil || ok {
		t.Fatalf("Stat after a delete on the broker: exists %v, %v", ok, err)
	}
	r.Wait(t, 10*time.Second, "Gone", func(_ []broker.Delivery, _, gone int) bool { return gone > 0 })
	if err := d.Delete(context.Background(), q); err != nil {
		t.Fatalf("deleting an absent queue: %v", err)
	}
	if err := d.Publish(context.Background(), q, envs(1)); !errors.Is(err, broker.ErrQueueGone) {
		t.Fatalf("publishing to a deleted queue: %v, want ErrQueueGone", err)
	}
}

func reconnect(t *testing.T, h Harness) {
	if h.Drop == nil {
		t.Skip("this driver's test cannot cut a connection from the broker's side")
	}
	d := open(t, h)
	q := NewQueue(t, d)
	want := envs(2)
	if err := d.Publish(context.Background(), q, want); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder()
	stop, _ := d.Consume(q, r.Consumer())
	defer stop()
	first := r.Wait(t, 10*time.Second, "2 deliveries", count(2))
	h.Drop(t, d)
	r.Wait(t, 10*time.Second, "Lost", func(_ []broker.Delivery, lost, _ int) bool { return lost > 0 })
	// A handle of the dropped connection is void.
	if err := d.Ack(context.Background(), q, []any{first[0].Handle}); !errors.Is(err, broker.ErrUnavailable) {
		t.Fatalf("Ack of a handle from a dropped connection: %v, want ErrUnavailable", err)
	}
	n := len(first)
	got := r.Wait(t, 30*time.Second, "both messages again after the reconnect", func(g []broker.Delivery, _, _ int) bool { return len(byID(g[n:])) >= 2 })[n:]
	if err := d.Ack(context.Background(), q, []any{got[0].Handle, got[1].Handle}); err != nil {
		t.Fatalf("Ack after the reconnect: %v", err)
	}
	more := envs(1)
	if err := d.Publish(context.Background(), q, more); err != nil {
		t.Fatalf("Publish after the reconnect: %v", err)
	}
	r.Wait(t, 10*time.Second, "a message published after the reconnect", func(g []broker.Delivery, _, _ int) bool { _, ok := byID(g)[more[0].ID]; return ok })
}

// foreign: a copy without an envelope is delivered as Foreign, its body
// intact. The harness publishes it with Envelope fields zero, which every
// driver must refuse to read as an envelope (Rev 0).
func foreign(t *testing.T, h Harness) {
	d := open(t, h)
	q := NewQueue(t, d)
	if err := d.Publish(context.Background(), q, []broker.Envelope{{ID: "", Body: []byte("from elsewhere")}}); err != nil {
		t.Fatal(err)
	}
	r := NewRecorder()
	stop, _ := d.Consume(q, r.Consumer())
	defer stop()
	got := r.Wait(t, 10*time.Second, "the foreign message", count(1))
	if !got[0].Foreign || string(got[0].Body) != "from elsewhere" {
		t.Fatalf("delivered %+v (foreign %v), want a foreign message with its body", got[0].Envelope, got[0].Foreign)
	}
}

func purge(t *testing.T, h Harness) {
	d := open(t, h)
	q := NewQueue(t, d)
	if err := d.Publish(context.Background(), q, envs(3)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ready, err := d.Stat(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if ready == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stat counts %d waiting messages of 3 published", ready)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n, err := d.Purge(context.Background(), q); err != nil || n != 3 {
		t.Fatalf("Purge: %d, %v; want 3", n, err)
	}
	r := NewRecorder()
	stop, _ := d.Consume(q, r.Consumer())
	defer stop()
	time.Sleep(300 * time.Millisecond)
	if got := r.Wait(t, time.Second, "", func([]broker.Delivery, int, int) bool { return true }); len(got) != 0 {
		t.Fatalf("after a purge, %d messages were delivered", len(got))
	}
}
