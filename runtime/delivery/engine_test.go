package delivery

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

func TestFullBatchDeliveredAtOnce(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 3; c.MaxBatchTimeoutSeconds = 5 }), r)
	h.send("q", "a", "b")
	h.quiesce()
	if h.delivered() != 0 {
		t.Fatal("a partial batch was delivered before its timeout")
	}
	h.send("q", "c")
	b := r.next(t)
	if got := bodies(b); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("batch %v", got)
	}
	if b.Queue != "name-q" || b.ID == "" || len(b.ID) > abi.MaxIDLength {
		t.Fatalf("batch queue %q id %q", b.Queue, b.ID)
	}
	for _, m := range b.Messages {
		if m.Attempts != 1 || m.TimestampMillis != t0.UnixMilli() {
			t.Fatalf("message %+v", m)
		}
	}
	h.waitFinished(1)
	if h.count("q") != 0 {
		t.Fatal("a returned handler did not acknowledge its batch")
	}
}

func TestPartialBatchDeliveredWhenTimeoutPasses(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 10; c.MaxBatchTimeoutSeconds = 5 }), r)
	h.send("q", "a")
	h.advance(2 * time.Second)
	h.send("q", "b")
	h.advance(2999 * time.Millisecond)
	if h.delivered() != 0 {
		t.Fatal("delivered before the batch timeout")
	}
	h.advance(time.Millisecond)
	if got := bodies(r.next(t)); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("batch %v", got)
	}
}

func TestTimeoutZeroDeliversImmediately(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 10; c.MaxBatchTimeoutSeconds = 0 }), r)
	h.send("q", "a")
	if got := bodies(r.next(t)); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("batch %v", got)
	}
}

func TestAttemptsCountAcrossRetries(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(throwing)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 2; c.RetryDelaySeconds = 1 }), r)
	id := h.send("q", "a")[0]
	h.waitFinished(1)
	h.advance(time.Second)
	h.waitFinished(2)
	h.advance(time.Second)
	h.waitFinished(3)
	h.advance(time.Hour)
	var got []int
	for _, b := range r.all() {
		if b.Messages[0].ID != id {
			t.Fatalf("message ID changed across redeliveries: %s, want %s", b.Messages[0].ID, id)
		}
		got = append(got, b.Messages[0].Attempts)
	}
	if !reflect.DeepEqual(got, []int{1, 2, 3}) {
		t.Fatalf("attempts %v, want [1 2 3] (maxRetries 2 → 3 deliveries)", got)
	}
	if h.count("q") != 0 {
		t.Fatal("exhausted message not discarded")
	}
	if d := h.st.removals("q", "discarded"); !reflect.DeepEqual(d, []string{id}) {
		t.Fatalf("discarded %v", d)
	}
}

func TestSettleAfterHandlerReturned(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r)
	h.send("q", "a")
	b := r.next(t)
	h.waitFinished(1)
	ctx := context.Background()
	for name, err := range map[string]error{
		"acknowledge":    b.Acknowledge(ctx, b.Messages[0].ID),
		"retry":          b.Retry(ctx, b.Messages[0].ID, nil),
		"acknowledgeAll": b.AcknowledgeAll(ctx),
		"retryAll":       b.RetryAll(ctx, nil),
		"never existed":  h.e.Settle(ctx, "no-such-batch", abi.Settlement{Kind: abi.AcknowledgeAll}),
	} {
		if err != abi.ErrUnknownBatch || abi.Code(err) != "unknown_batch" {
			t.Errorf("%s after the invocation ended: %v, want ErrUnknownBatch", name, err)
		}
	}
}
