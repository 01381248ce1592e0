package delivery

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

func TestRetentionExpiresMessageInRetryBackoff(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 60)
	h.start()
	r := newRecorder(throwing)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.RetryDelaySeconds = 120 }), r)
	id := h.send("q", "a")[0]
	h.waitFinished(1)
	h.advance(59999 * time.Millisecond)
	if h.count("q") != 1 {
		t.Fatal("expired early")
	}
	h.advance(time.Millisecond)
	if h.count("q") != 0 {
		t.Fatal("message in retry backoff not expired at accept time + retention")
	}
	if got := h.st.removals("q", store.RemovedExpired); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("expired %v", got)
	}
	h.advance(time.Hour)
	if h.delivered() != 1 {
		t.Fatal("expired message delivered")
	}
}

func TestRetentionUpdateAppliesToExistingMessages(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	old := h.send("q", "old")[0]
	h.advance(100 * time.Second)
	young := h.send("q", "young")[0]
	if err := h.e.UpdateQueue(h.ctx, QueueConfig{UID: "q", Name: "name-q", MessageRetentionSeconds: 120}); err != nil {
		t.Fatal(err)
	}
	h.quiesce()
	if _, ok := h.storedMsg("q", old); !ok {
		t.Fatal("expired before the new deadline")
	}
	h.advance(20 * time.Second) // old: 120s since accept
	if _, ok := h.storedMsg("q", old); ok {
		t.Fatal("shortened retention not applied to an existing message")
	}
	h.advance(40 * time.Second) // young: 60s since accept, retention 120
	if _, ok := h.storedMsg("q", young); !ok {
		t.Fatal("young expired early")
	}
	if err := h.e.UpdateQueue(h.ctx, QueueConfig{UID: "q", Name: "name-q", MessageRetentionSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	h.quiesce()
	if _, ok := h.storedMsg("q", young); ok {
		t.Fatal("message past the new retention not removed at the update")
	}
	if err := h.e.UpdateQueue(h.ctx, QueueConfig{UID: "q", Name: "name-q", MessageRetentionSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	if h.count("q") != 0 {
		t.Fatal("expired message restored")
	}
}

func TestRetentionOfLeasedMessageAppliesWhenBatchEnds(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 60)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w"), r)
	id := h.send("q", "a")[0]
	b := r.next(t)
	h.advance(90 * time.Second)
	if _, ok := h.storedMsg("q", id); !ok {
		t.Fatal("message yanked from a running handler")
	}
	if err := b.Retry(h.ctx, id, intp(0)); err != nil {
		t.Fatalf("retry of an expired leased message: %v", err)
	}
	if _, ok := h.storedMsg("q", id); ok {
		t.Fatal("expired message retried instead of removed")
	}
	release <- errThrow
	h.waitFinished(1)
	h.advance(time.Hour)
	if h.delivered() != 1 {
		t.Fatal("expired message redelivered")
	}
	if got := h.st.removals("q", store.RemovedExpired); !reflect.DeepEqual(got, []string{id}) {
		t.Fatalf("expired %v", got)
	}
}

func TestDelayOverrideVersusQueueDefault(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 10, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	def := h.send("q", "default")[0]
	zero := h.sendDelay("q", "zero", 0)
	long := h.sendDelay("q", "long", 20)
	if b := r.next(t); b.Messages[0].ID != zero {
		t.Fatalf("first delivered %s, want the delay-0 override", bodies(b))
	}
	h.waitFinished(1)
	h.advance(9999 * time.Millisecond)
	if h.delivered() != 1 {
		t.Fatal("default delay not honoured")
	}
	h.advance(time.Millisecond)
	if b := r.next(t); b.Messages[0].ID != def {
		t.Fatalf("delivered %v at 10s", bodies(b))
	}
	h.waitFinished(2)
	h.advance(10 * time.Second)
	if b := r.next(t); b.Messages[0].ID != long {
		t.Fatalf("delivered %v at 20s", bodies(b))
	}
}

func TestDeliveryDelayUpdateAffectsOnlyLaterSends(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 10, 3600)
	h.start()
	a := h.send("q", "a")[0]
	if err := h.e.UpdateQueue(h.ctx, QueueConfig{UID: "q", Name: "name-q", DeliveryDelaySeconds: 100, MessageRetentionSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	b := h.send("q", "b")[0]
	ma, _ := h.storedMsg("q", a)
	mb, _ := h.storedMsg("q", b)
	if ma.VisibleAt != t0.Add(10*time.Second).UnixMilli() || mb.VisibleAt != t0.Add(100*time.Second).UnixMilli() {
		t.Fatalf("visibleAt a=%d b=%d", ma.VisibleAt-t0.UnixMilli(), mb.VisibleAt-t0.UnixMilli())
	}
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	h.advance(10 * time.Second)
	if got := r.next(t); got.Messages[0].ID != a {
		t.Fatal("a not delivered at 10s")
	}
	h.waitFinished(1)
	h.advance(89 * time.Second)
	if h.delivered() != 1 {
		t.Fatal("b delivered before its 100s delay")
	}
	h.advance(time.Second)
	if got := r.next(t); got.Messages[0].ID != b {
		t.Fatal("b not delivered at 100s")
	}
}

func TestSendValidation(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	ok := abi.OutgoingMessage{Body: []byte("x")}
	many := make([]abi.OutgoingMessage, 101)
	for i := range many {
		many[i] = ok
	}
	cases := []struct {
		name string
		msgs []abi.OutgoingMessage
		want error
		code string
	}{
		{"none", nil, abi.ErrBatchTooLarge, "batch_too_large"},
		{"101", many, abi.ErrBatchTooLarge, "batch_too_large"},
		{"empty body", []abi.OutgoingMessage{ok, {Body: []byte{}}}, abi.ErrInvalidBody, "invalid_body"},
		{"too large", []abi.OutgoingMessage{ok, {Body: make([]byte, abi.MaxBodyBytes+1)}}, abi.ErrMessageTooLarge, "message_too_large"},
		{"negative delay", []abi.OutgoingMessage{{Body: []byte("x"), Delay: intp(-1)}}, abi.ErrInvalidDelay, "RangeError"},
		{"delay too long", []abi.OutgoingMessage{{Body: []byte("x"), Delay: intp(abi.MaxDelaySeconds + 1)}}, abi.ErrInvalidDelay, "RangeError"},
	}
	for _, c := range cases {
		_, err := h.e.Send(h.ctx, "q", c.msgs)
		if !errors.Is(err, c.want) || abi.Code(err) != c.code {
			t.Errorf("%s: %v (code %q), want %v", c.name, err, abi.Code(err), c.want)
		}
	}
	if n := h.st.applyCount(); n != 0 {
		t.Fatalf("an invalid send reached the store (%d applies)", n)
	}
	if _, err := h.e.Send(h.ctx, "nope", []abi.OutgoingMessage{ok}); !errors.Is(err, abi.ErrUnknownQueue) || abi.Code(err) != "backend_unavailable" {
		t.Errorf("unknown queue: %v", err)
	}
	edge := []abi.OutgoingMessage{{Body: make([]byte, abi.MaxBodyBytes)}, {Body: []byte("y"), Delay: intp(abi.MaxDelaySeconds)}, {Body: []byte("z"), Delay: intp(0)}}
	ids, err := h.e.Send(h.ctx, "q", edge)
	if err != nil || len(ids) != 3 {
		t.Fatalf("limits rejected: %v", err)
	}
	if _, err := h.e.Send(h.ctx, "q", many[:100]); err != nil {
		t.Fatalf("100 messages rejected: %v", err)
	}
}

func TestSendBatchAtomicAndInOrder(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.st.setFail(func([]store.Mutation) error { return errors.New("fsync failed") })
	msgs := []abi.OutgoingMessage{{Body: []byte("1")}, {Body: []byte("2")}, {Body: []byte("3")}}
	if ids, err := h.e.Send(h.ctx, "q", msgs); !errors.Is(err, abi.ErrBackendUnavailable) || ids != nil {
		t.Fatalf("failing store: %v %v", ids, err)
	}
	if h.count("q") != 0 {
		t.Fatal("a failed send accepted messages")
	}
	h.st.setFail(nil)
	ids, err := h.e.Send(h.ctx, "q", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.st.applyCount(); n != 1 {
		t.Fatalf("sendBatch took %d applies, want 1", n)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if id == "" || len(id) > abi.MaxIDLength || seen[id] {
			t.Fatalf("bad or duplicate ID %q", id)
		}
		seen[id] = true
		body, _ := store.Body(h.ctx, h.st, "q", id)
		m, _ := h.storedMsg("q", id)
		if string(body) != string(msgs[i].Body) || m.AcceptedAt != t0.UnixMilli() || m.Attempts != 0 {
			t.Fatalf("message %d: body %q %+v", i, body, m)
		}
	}
}

func TestQueueWithoutConsumerAccumulatesUntilAttach(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.send("q", "a")
	h.send("q", "b")
	h.advance(time.Minute)
	if h.delivered() != 0 || h.count("q") != 2 {
		t.Fatal("messages without a consumer did not wait")
	}
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	if got := bodies(r.next(t)); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("delivered %v", got)
	}
}

func TestRemoveQueueDropsMessages(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	h.send("q", "a", "b")
	if err := h.e.RemoveQueue(h.ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if n, _ := h.st.MessageCount(h.ctx, "q"); n != 0 {
		t.Fatal("messages not dropped")
	}
	if _, err := h.e.QueueStats(h.ctx, "q"); !errors.Is(err, abi.ErrUnknownQueue) {
		t.Fatal(err)
	}
	if _, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("x")}}); !errors.Is(err, abi.ErrUnknownQueue) {
		t.Fatal(err)
	}
}
