package delivery

import (
	"context"
	"log/slog"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// TestRestartOverJournaledStore: the engine over the real journaled store
// redelivers, after reopening, what a forced shutdown left unsettled; its
// delivery was durably counted.
func TestRestartOverJournaledStore(t *testing.T) {
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
	h.addQueue("q", 0, 3600)
	r := newRecorder(func(ctx context.Context, b *abi.Batch) error {
		if err := b.Acknowledge(ctx, b.Messages[0].ID); err != nil {
			return err
		}
		select {}
	})
	h.attach(consumerCfg("c", "q", "w"), r)
	h.start()
	sent := h.send("q", "acked", "left")
	r.next(t)
	h.waitUntil("the first message is acknowledged", func() bool { return len(h.st.removals("q", store.RemovedAcknowledged)) == 1 })
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	h.e.Stop(cancelled)
	if err := js.Close(); err != nil {
		t.Fatal(err)
	}

	js = open()
	defer js.Close()
	h.st = wrapStore(js)
	h.e = h.newEngine()
	h.addQueue("q", 0, 3600)
	r2 := newRecorder(nil)
	h.attach(consumerCfg("c", "q", "w"), r2)
	h.start()
	b := r2.next(t)
	if len(b.Messages) != 1 || b.Messages[0].ID != sent[1] || b.Messages[0].Attempts != 2 || string(b.Messages[0].Body) != "left" {
		t.Fatalf("after reopening: %+v", b.Messages)
	}
	h.waitFinished(1)
	if h.count("q") != 0 {
		t.Fatal("not acknowledged")
	}
}
