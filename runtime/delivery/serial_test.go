package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

func (h *harness) addSerial(uid string, delay, retention int) {
	h.t.Helper()
	if err := h.e.AddQueue(h.ctx, QueueConfig{UID: uid, Name: "name-" + uid, DeliveryDelaySeconds: delay, MessageRetentionSeconds: retention, Serialized: true}); err != nil {
		h.t.Fatal(err)
	}
}

// bodiesOf lists the bodies of every batch a recorder saw, batch by batch.
func bodiesOf(r *recorder) [][]string {
	var out [][]string
	for _, b := range r.all() {
		out = append(out, bodies(b))
	}
	return out
}

func nums(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// TestSerialOneBatchAtATime: however large maxConcurrency, a serialized
// queue hands out one batch at a time, the head and the messages right
// behind it, up to maxBatchSize; the next starts only when the previous
// is settled.
func TestSerialOneBatchAtATime(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 3; c.MaxConcurrency = 10 }), r)
	h.send("q", nums("m", 8)...)
	for i := 0; i < 3; i++ {
		r.next(t)
		h.advance(time.Second)
		if got := h.delivered(); got != int64(i+1) {
			t.Fatalf("%d batches in flight at once (maxConcurrency 10)", got-int64(i))
		}
		release <- nil
		h.waitFinished(int64(i + 1))
	}
	want := [][]string{{"m00", "m01", "m02"}, {"m03", "m04", "m05"}, {"m06", "m07"}}
	if got := bodiesOf(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if h.count("q") != 0 {
		t.Fatal("not all acknowledged")
	}
}

// TestSerialRetriedHeadStaysHead: a head that is retried (thrown, with the
// retry delay) blocks everything behind it until it is delivered again;
// an explicit retry with its own delay too.
func TestSerialRetriedHeadStaysHead(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	var mu sync.Mutex
	seen := map[string]int{}
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		m := b.Messages[0]
		seen[string(m.Body)]++
		switch {
		case string(m.Body) == "a" && seen["a"] == 1:
			return errThrow // retried after retryDelaySeconds (10 s)
		case string(m.Body) == "b" && seen["b"] == 1:
			return b.Retry(ctx, m.ID, intp(30))
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1; c.MaxConcurrency = 4; c.RetryDelaySeconds = 10 }), r)
	h.send("q", "a", "b", "c")
	h.waitFinished(1)
	h.advance(9999 * time.Millisecond)
	if h.delivered() != 1 {
		t.Fatalf("a message behind a retried head was delivered: %v", bodiesOf(r))
	}
	h.advance(time.Millisecond)
	h.waitFinished(3) // a again (acknowledged), then b (retried for 30 s)
	h.advance(29 * time.Second)
	if h.delivered() != 3 {
		t.Fatalf("a message behind an explicitly retried head was delivered: %v", bodiesOf(r))
	}
	h.advance(time.Second)
	h.waitFinished(5)
	want := [][]string{{"a"}, {"a"}, {"b"}, {"b"}, {"c"}}
	if got := bodiesOf(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if got := r.all()[1].Messages[0].Attempts; got != 2 {
		t.Fatalf("the retried head's attempts %d, want 2", got)
	}
}

// TestSerialBatchRetryKeepsOrder: a thrown batch of several retries them
// all; they come back as one batch in the same order, ahead of the rest.
func TestSerialBatchRetryKeepsOrder(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	first := true
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if first {
			first = false
			return errThrow
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 3; c.RetryDelaySeconds = 5 }), r)
	h.send("q", nums("m", 5)...)
	h.waitFinished(1)
	h.advance(5 * time.Second)
	h.waitFinished(3)
	want := [][]string{{"m00", "m01", "m02"}, {"m00", "m01", "m02"}, {"m03", "m04"}}
	if got := bodiesOf(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestSerialDelaysDoNotReorder: a message delayed by its send blocks the
// messages sent after it until it is visible (head-of-line), and a batch
// stops at the first message that is not yet visible.
func TestSerialDelaysDoNotReorder(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 10 }), r)
	h.sendDelay("q", "late", 20)
	h.send("q", "x", "y")
	h.advance(19 * time.Second)
	if h.delivered() != 0 {
		t.Fatalf("messages sent after a delayed head were delivered first: %v", bodiesOf(r))
	}
	h.advance(time.Second)
	h.waitFinished(1)
	// Now a visible run with a delayed message in the middle.
	h.send("q", "p")
	h.sendDelay("q", "mid", 5)
	h.send("q", "s")
	h.waitFinished(2)
	h.advance(5 * time.Second)
	h.waitFinished(3)
	want := [][]string{{"late", "x", "y"}, {"p"}, {"mid", "s"}}
	if got := bodiesOf(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestSerialBatchFillTimeout: the fill timeout counts from the head's
// visibility; a full run of visible messages is due at once.
func TestSerialBatchFillTimeout(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 3; c.MaxBatchTimeoutSeconds = 10 }), r)
	h.send("q", "a", "b")
	h.advance(9 * time.Second)
	if h.delivered() != 0 {
		t.Fatal("a batch that is neither full nor due started")
	}
	h.send("q", "c", "d")
	h.waitFinished(1)
	h.advance(9 * time.Second)
	if h.delivered() != 1 {
		t.Fatal("the rest was delivered before its fill timeout")
	}
	h.advance(time.Second)
	h.waitFinished(2)
	want := [][]string{{"a", "b", "c"}, {"d"}}
	if got := bodiesOf(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// TestSerialDeadLetteredHeadUnblocksNext: a head that exhausts its
// deliveries is moved to the (serialized) DLQ before the next message is
// delivered; the DLQ delivers the moved messages in the order they were
// moved, under new IDs.
func TestSerialDeadLetteredHeadUnblocksNext(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.addSerial("dlq", 0, 3600)
	h.start()
	var mu sync.Mutex
	var order []string
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		m := b.Messages[0]
		mu.Lock()
		order = append(order, fmt.Sprintf("%s#%d", m.Body, m.Attempts))
		mu.Unlock()
		if strings.HasPrefix(string(m.Body), "bad") {
			return errThrow
		}
		return nil
	})
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) {
		c.MaxBatchSize = 1
		c.MaxRetries = 1
		c.RetryDelaySeconds = 3
		c.DeadLetterQueueUID = "dlq"
	}), r)
	sent := h.send("q", "bad1", "ok1", "bad2", "ok2")
	h.waitFinished(1)
	h.advance(3 * time.Second)
	h.waitFinished(3) // bad1 again, dead-lettered; ok1
	h.advance(3 * time.Second)
	h.waitFinished(5)
	want := []string{"bad1#1", "bad1#2", "ok1#1", "bad2#1", "bad2#2", "ok2#1"}
	h.waitUntil("ok2 delivered", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 6 })
	mu.Lock()
	got := append([]string(nil), order...)
	mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
	if got := h.st.removals("q", store.RemovedDeadLettered); !reflect.DeepEqual(got, []string{sent[0], sent[2]}) {
		t.Fatalf("dead-lettered %v", got)
	}
	dl := newRecorder(nil)
	h.attach(consumerCfg("cd", "dlq", "wd"), dl)
	b := dl.next(t)
	if !reflect.DeepEqual(bodies(b), []string{"bad1", "bad2"}) {
		t.Fatalf("DLQ batch %v", bodies(b))
	}
	for _, m := range b.Messages {
		if m.ID == sent[0] || m.ID == sent[2] || m.Attempts != 1 {
			t.Fatalf("moved message %+v", m)
		}
	}
}

// TestSerialRestartKeepsOrder: messages of one send share an accept
// millisecond; after a restart (the head left unsettled in a batch of the
// earlier run) the queue delivers the head first and the rest in accept
// order, over the journaled store, and later sends come after them.
func TestSerialRestartKeepsOrder(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() *store.Journaled {
		js, _, err := store.Open(ctx, dir, store.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	h := newHarness(t)
	js := open()
	h.st = wrapStore(js)
	h.e = h.newEngine()
	h.addSerial("q", 0, 3600)
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	h.start()
	all := nums("m", 40)
	h.send("q", all[:30]...) // one millisecond
	for _, b := range all[30:] {
		h.send("q", b)
	}
	if b := r.next(t); string(b.Messages[0].Body) != "m00" {
		t.Fatalf("first batch %v", bodies(b))
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	h.e.Stop(cancelled) // m00 stays leased
	close(release)
	if err := js.Close(); err != nil {
		t.Fatal(err)
	}

	js = open()
	defer js.Close()
	h.st = wrapStore(js)
	h.e = h.newEngine()
	h.addSerial("q", 0, 3600)
	h.start()
	h.send("q", "later")
	r2 := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 7 }), r2)
	h.waitUntil("everything acknowledged", func() bool { n, _ := h.e.QueueStats(ctx, "q"); return n == 0 })
	h.quiesce()
	var got []string
	for i, b := range r2.all() {
		got = append(got, bodies(b)...)
		if i == 0 && b.Messages[0].Attempts != 2 {
			t.Fatalf("the head left unsettled: attempts %d, want 2", b.Messages[0].Attempts)
		}
	}
	if want := append(append([]string(nil), all...), "later"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart delivered %v, want %v", got, want)
	}
}

// TestSerialPendingSendBlocksLaterOnes: a send whose write has not ended
// holds back every message accepted after it, so that concurrent sends are
// delivered in their accept order (the order of their sequence numbers).
func TestSerialPendingSendBlocksLaterOnes(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	gate := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	h.st.setFail(func(muts []store.Mutation) error {
		if a, ok := muts[0].(store.AcceptMessage); ok && a.Message.Size == len("slow") {
			once.Do(func() { close(entered) })
			<-gate
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("slow")}})
		done <- err
	}()
	<-entered
	h.send("q", "quick")
	h.advance(time.Minute)
	if h.delivered() != 0 {
		t.Fatalf("a message accepted after a send in flight was delivered first: %v", bodiesOf(r))
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.waitFinished(1)
	if got := bodiesOf(r); !reflect.DeepEqual(got, [][]string{{"slow", "quick"}}) {
		t.Fatalf("batches %v", got)
	}

	// A failed send ends its mark too: what follows is delivered.
	h.st.setFail(func(muts []store.Mutation) error {
		if a, ok := muts[0].(store.AcceptMessage); ok && a.Message.Size == len("doomed") {
			return errors.New("disk full")
		}
		return nil
	})
	if _, err := h.e.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("doomed")}}); !errors.Is(err, abi.ErrBackendUnavailable) {
		t.Fatalf("failed send: %v", err)
	}
	h.send("q", "after")
	h.waitFinished(2)
	if got := bodiesOf(r); !reflect.DeepEqual(got[1], []string{"after"}) {
		t.Fatalf("batches %v", got)
	}
}

// TestSerialIsFixed: whether a queue is serialized cannot change; its IDs
// carry its accept order.
func TestSerialIsFixed(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.addQueue("p", 0, 3600)
	h.start()
	if err := h.e.UpdateQueue(h.ctx, QueueConfig{UID: "q", MessageRetentionSeconds: 3600}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("unserializing a queue: %v", err)
	}
	if err := h.e.UpdateQueue(h.ctx, QueueConfig{UID: "p", MessageRetentionSeconds: 3600, Serialized: true}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("serializing a queue: %v", err)
	}
	ids := h.send("q", "a", "b", "c")
	var prev uint64
	for _, id := range ids {
		s, ok := serialSeq(id)
		if !ok || s <= prev || len(id) != 32 {
			t.Fatalf("IDs %v do not carry the accept order", ids)
		}
		prev = s
	}
}

// TestSerialPausedAndDetached: a paused serialized queue starts nothing;
// a detached consumer's unsettled head stays the head for the next one.
func TestSerialPausedAndDetached(t *testing.T) {
	h := newHarness(t)
	cfg := QueueConfig{UID: "q", Name: "name-q", MessageRetentionSeconds: 3600, Serialized: true}
	if err := h.e.AddQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.start()
	fn, release := blocking()
	r := newRecorder(fn)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r)
	h.send("q", "a", "b")
	r.next(t)
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if err := h.e.Detach(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	release <- nil
	cfg.Paused = true
	if err := h.e.UpdateQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	r2 := newRecorder(nil)
	h.attach(consumerCfg("c2", "q", "w2", func(c *ConsumerConfig) { c.MaxBatchSize = 1 }), r2)
	h.advance(time.Minute)
	if len(r2.all()) != 0 {
		t.Fatal("a paused serialized queue delivered")
	}
	cfg.Paused = false
	if err := h.e.UpdateQueue(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h.waitUntil("both delivered", func() bool { return len(r2.all()) == 2 })
	if got := bodiesOf(r2); !reflect.DeepEqual(got, [][]string{{"a"}, {"b"}}) {
		t.Fatalf("after detach: %v", got)
	}
	if r2.all()[0].Messages[0].Attempts != 2 {
		t.Fatal("the detached head's delivery was not counted")
	}
}

// TestSerialLoadOrdersBySequence: after a restart a serialized queue is
// ordered by the accept sequence its IDs carry, not by accept time (which
// a clock stepped back can invert), and later sends are numbered after the
// largest loaded one.
func TestSerialLoadOrdersBySequence(t *testing.T) {
	h := newHarness(t)
	ms := t0.UnixMilli()
	for _, m := range []struct {
		seq uint64
		at  int64
		b   string
	}{{1001, ms, "second"}, {1000, ms + 5000, "first"}, {1002, ms - 3000, "third"}} {
		id := fmt.Sprintf("%016x%016x", m.seq, 7)
		if err := h.st.Apply(h.ctx, store.AcceptMessage{Message: store.Message{Queue: "q", ID: id, AcceptedAt: m.at, VisibleAt: m.at - 10000, Size: len(m.b)}, Body: []byte(m.b)}); err != nil {
			t.Fatal(err)
		}
	}
	h.addSerial("q", 0, 3600)
	h.start()
	h.send("q", "fourth")
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.waitFinished(1)
	if got := bodiesOf(r); !reflect.DeepEqual(got, [][]string{{"first", "second", "third", "fourth"}}) {
		t.Fatalf("after load: %v", got)
	}
}

// remoteStub is the cluster's view of queues held by another engine.
type remoteStub struct {
	mu       sync.Mutex
	queues   map[string]int
	accepted map[string][]string
	lost     map[string]bool
	short    map[string]bool
	until    time.Time
}

func (r *remoteStub) Queue(uid string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.queues[uid]
	if !ok {
		return 0, abi.ErrUnknownQueue
	}
	return d, nil
}

// Current: the stub's engine holds its queues' leases, but those in
// lost, until r.until (zero: no end given).
func (r *remoteStub) Current(uid string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until, !r.lost[uid]
}

// Deliverable: Current, and not running out (short).
func (r *remoteStub) Deliverable(uid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.lost[uid] && !r.short[uid]
}

func (r *remoteStub) set(m *map[string]bool, uid string, v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *m == nil {
		*m = map[string]bool{}
	}
	(*m)[uid] = v
}

func (r *remoteStub) Accepted(q string, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.accepted[q] = append(r.accepted[q], ids...)
}

// TestSerialAdoptTakesItsPlace: in a cluster, a message sent to a
// serialized queue through another engine carries its accept sequence in
// its ID; the owner adopts it into its place by accept time, ahead of a
// later local send it learns of first.
func TestSerialAdoptTakesItsPlace(t *testing.T) {
	h := newHarness(t)
	owner := h.newEngine(func(o *Options) { o.Remote = &remoteStub{queues: map[string]int{}, accepted: map[string][]string{}} })
	other := &remoteStub{queues: map[string]int{"q": 0}, accepted: map[string][]string{}}
	sender := h.newEngine(func(o *Options) { o.Remote = other })
	h.e = owner
	h.addSerial("q", 0, 3600)
	h.start()
	if err := sender.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.send("q", "a1")
	h.clk.Advance(time.Millisecond)
	remoteIDs, err := sender.Send(h.ctx, "q", []abi.OutgoingMessage{{Body: []byte("b1")}})
	if err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(time.Millisecond)
	h.send("q", "a2")
	sms, err := h.st.Messages(h.ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if n := owner.Adopt("q", sms); n != 1 || !reflect.DeepEqual(other.accepted["q"], remoteIDs) {
		t.Fatalf("adopted %d, announced %v", n, other.accepted["q"])
	}
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.waitFinished(1)
	if got := bodiesOf(r); !reflect.DeepEqual(got, [][]string{{"a1", "b1", "a2"}}) {
		t.Fatalf("delivered %v, want a1, b1, a2 (accept time order across engines)", got)
	}
}
