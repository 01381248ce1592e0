package delivery

import (
	"reflect"
	"testing"
	"time"
)

// TestSerialBatchDueWhenFull: a serialized queue's batch is due as soon as
// maxBatchSize consecutive messages from the head are visible, not only
// when the head has waited maxBatchTimeoutSeconds (spec/peers.md
// §Serialized queues). Found by TestEngineMatchesModel: a message behind
// the head that became visible later armed no timer, so the full batch
// waited for the head's fill timeout.
func TestSerialBatchDueWhenFull(t *testing.T) {
	h := newHarness(t)
	h.addSerial("q", 0, 3600)
	h.start()
	r := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxBatchSize = 2; c.MaxBatchTimeoutSeconds = 2 }), r)
	h.send("q", "head")
	h.sendDelay("q", "behind", 1)
	h.advance(0)
	if got := h.delivered(); got != 0 {
		t.Fatalf("%d batches before the batch is full or due", got)
	}
	h.advance(time.Second) // "behind" is visible: two visible from the head
	b := r.next(t)
	if got := bodies(b); !reflect.DeepEqual(got, []string{"head", "behind"}) {
		t.Fatalf("batch %v, want [head behind]", got)
	}
	if now := h.clk.Now(); now.Sub(t0) != time.Second {
		t.Fatalf("the full batch started at +%v, want +1s", now.Sub(t0))
	}
}
