package broker_test

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/broker/rabbitmq"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

func rabbitURL(t *testing.T) string {
	u := os.Getenv("TAKOHOST_TEST_RABBITMQ")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	d, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: u})
	if err != nil {
		t.Skipf("no RabbitMQ at %s (TAKOHOST_TEST_RABBITMQ): %v", u, err)
	}
	d.Close()
	return u
}

// open is a broker store over inner with one broker "rmq".
func open(t *testing.T, u string, inner store.Store) *broker.Store {
	t.Helper()
	d, err := rabbitmq.Open(context.Background(), rabbitmq.Config{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	return broker.New(inner, broker.Options{Drivers: map[string]broker.Driver{"rmq": d}, HandleWait: 5 * time.Second, DrainWait: 5 * time.Second})
}

// keepOpen is a store whose Close does not close the inner store: a host
// "restarting" on the same inner store.
type keepOpen struct{ store.Store }

func (keepOpen) Close() error { return nil }

func queueRecord(uid string) store.Resource {
	return store.Resource{UID: uid, Space: "test", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Offering: "rmq",
		Spec: json.RawMessage(`{"messageRetentionSeconds":3600}`), Observed: json.RawMessage(`{}`), State: store.StateActive}
}

func TestStoreKeepsTheFormsStateOnTheBroker(t *testing.T) {
	u := rabbitURL(t)
	ctx := context.Background()
	inner := store.NewMemory()
	s := open(t, u, keepOpen{inner})
	uid := "r-" + time.Now().Format("150405.000000")
	if err := s.Apply(ctx, store.PutResource{Resource: queueRecord(uid)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Apply(ctx, store.DropQueue{Queue: uid}, store.DeleteResource{UID: uid}); s.Close() })
	if ms, err := s.Messages(ctx, uid); err != nil || len(ms) != 0 {
		t.Fatalf("a new broker queue holds %v, %v", ms, err)
	}
	now := time.Now().UnixMilli()
	big := make([]byte, 127000)
	for i := range big {
		big[i] = 'x'
	}
	msgs := []store.Message{
		{Queue: uid, ID: "m1", AcceptedAt: now, VisibleAt: now, Size: 3},
		{Queue: uid, ID: "m2", AcceptedAt: now, VisibleAt: now, Size: len(big)},
		{Queue: uid, ID: "m3", AcceptedAt: now + 1, VisibleAt: now + 600_000, Size: 3},
	}
	if err := s.Apply(ctx, store.AcceptMessage{Message: msgs[0], Body: []byte("one")}, store.AcceptMessage{Message: msgs[1], Body: big},
		store.AcceptMessage{Message: msgs[2], Body: []byte("thr")}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Apply(ctx, store.DeliverMessages{Queue: uid, Batch: "b1", IDs: []string{"m1", "m2"}}); err != nil {
		t.Fatal(err)
	}
	bodies, err := s.Bodies(ctx, uid, []string{"m1", "m2", "nope"})
	if err != nil || string(bodies[0]) != "one" || len(bodies[1]) != 127000 || bodies[2] != nil {
		t.Fatalf("Bodies: %d bodies, %v", len(bodies), err)
	}
	if err := s.Apply(ctx, store.RemoveMessages{Queue: uid, IDs: []string{"m2"}, Reason: store.RemovedAcknowledged}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a delivery and an acknowledgement took %s", d)
	}
	// The host stops (nothing more is acknowledged) and starts again on
	// the same records: m1 comes back with its attempt counted, m2 is
	// gone, m3 keeps its delay.
	s.Close()
	s2 := open(t, u, keepOpen{inner})
	defer s2.Close()
	ms, err := s2.Messages(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.Message{}
	for _, m := range ms {
		got[m.ID] = m
	}
	if len(got) != 2 || got["m1"].Attempts != 1 || got["m3"].Attempts != 0 || got["m3"].VisibleAt != msgs[2].VisibleAt || got["m1"].AcceptedAt != now {
		t.Fatalf("after a restart the broker queue holds %+v", ms)
	}
	// A retry with a delay is kept too, with the attempt that ended so in
	// the message's history.
	ended := store.Attempt{Attempt: 2, StartedAt: now, DurationMs: 7, Host: "h1", Outcome: "thrown", ErrorName: "TypeError", ErrorMessage: "no customer"}
	if err := s2.Apply(ctx, store.DeliverMessages{Queue: uid, Batch: "b2", IDs: []string{"m1"}},
		store.RetryMessage{Queue: uid, ID: "m1", VisibleAt: now + 30_000, Attempt: &ended}); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	s3 := open(t, u, keepOpen{inner})
	s = s3
	ms, err = s3.Messages(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == "m1" && (m.Attempts != 2 || m.VisibleAt != now+30_000 || len(m.History) != 1 || m.History[0] != ended) {
			t.Fatalf("a retried message after a restart: %+v", m)
		}
	}
	if len(ms) != 2 {
		t.Fatalf("after the second restart: %+v", ms)
	}
	exists, n, ok, err := s3.Observe(ctx, uid)
	if !ok || err != nil || !exists || n != 2 {
		t.Fatalf("Observe: exists %v, count %d, ok %v, %v", exists, n, ok, err)
	}
}

// TestStoreRefreshesAndAdopts: a copy held past RefreshAfter is
// republished (RabbitMQ would close a channel whose delivery stays
// unacknowledged past its consumer_timeout), with its state; a message
// another producer put on the queue becomes a message of it.
func TestStoreRefreshesAndAdopts(t *testing.T) {
	u := rabbitURL(t)
	ctx := context.Background()
	d, err := rabbitmq.Open(ctx, rabbitmq.Config{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	s := broker.New(store.NewMemory(), broker.Options{Drivers: map[string]broker.Driver{"rmq": d}, RefreshAfter: 300 * time.Millisecond})
	defer s.Close()
	uid := "r-" + time.Now().Format("150405.000000")
	rec := queueRecord(uid)
	if err := s.Apply(ctx, store.PutResource{Resource: rec}); err != nil {
		t.Fatal(err)
	}
	defer s.Apply(ctx, store.DropQueue{Queue: uid}, store.DeleteResource{UID: uid})
	var adopted []store.Message
	var mu sync.Mutex
	s.SetAdopter(func(q string, ms []store.Message) int {
		mu.Lock()
		adopted = append(adopted, ms...)
		mu.Unlock()
		return len(ms)
	})
	if _, err := s.Messages(ctx, uid); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if err := s.Apply(ctx, store.AcceptMessage{Message: store.Message{Queue: uid, ID: "m1", AcceptedAt: now, VisibleAt: now + 5000, Size: 3}, Body: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	// Another producer, without an envelope.
	if err := d.Publish(ctx, broker.Queue{UID: uid, Name: broker.QueueName(rec)}, []broker.Envelope{{Body: []byte("from elsewhere")}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(adopted)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the foreign message was adopted %d times", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if adopted[0].Attempts != 0 || adopted[0].ID == "" || adopted[0].Size != len("from elsewhere") {
		t.Fatalf("adopted %+v", adopted[0])
	}
	if r := s.Revision(uid, "m1"); r != 1 {
		t.Fatalf("a new message's copy has revision %d", r)
	}
	time.Sleep(1500 * time.Millisecond) // several refreshes
	if r := s.Revision(uid, "m1"); r < 3 {
		t.Fatalf("after 1.5 s with RefreshAfter 300ms the copy has revision %d: it was not republished", r)
	}
	m, err := s.Message(ctx, uid, "m1")
	if err != nil || m.VisibleAt != now+5000 || m.Attempts != 0 {
		t.Fatalf("after refreshes: %+v, %v", m, err)
	}
	exists, n, _, err := s.Observe(ctx, uid)
	if err != nil || !exists || n != 2 {
		t.Fatalf("after refreshes the broker holds %d messages (exists %v, %v), want 2: the replaced copies were not acknowledged", n, exists, err)
	}
	if b, _ := s.Bodies(ctx, uid, []string{"m1", adopted[0].ID}); string(b[0]) != "one" || string(b[1]) != "from elsewhere" {
		t.Fatalf("bodies after refreshes: %q", b)
	}
}
