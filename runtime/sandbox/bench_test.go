package sandbox

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
)

const benchSrc = `export default {
  async fetch(req, env) { await env.OUT.send("x"); return new Response("ok"); },
  async queue(batch) { let n = 0; for (const m of batch.messages) n += m.body.byteLength; },
};`

type nopSender struct{}

func (nopSender) Send(_ context.Context, _, _, _ string, msgs []abi.OutgoingMessage) ([]string, error) {
	ids := make([]string, len(msgs))
	for i := range ids {
		ids[i] = "id"
	}
	return ids, nil
}

type nopSettler struct{}

func (nopSettler) Settle(context.Context, string, abi.Settlement) error { return nil }

// BenchmarkInvocation compares one fetch invocation with one send, and one
// queue batch of 100 messages, in a sandbox and in process.
func BenchmarkInvocation(b *testing.B) {
	v := worker("bench", benchSrc)
	p, err := New(Options{Sender: nopSender{}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	rt := js.New(js.Options{Sender: nopSender{}})
	defer rt.Close()
	msgs := make([]abi.Message, 100)
	for i := range msgs {
		msgs[i] = abi.Message{ID: "m", Body: make([]byte, 100), Attempts: 1}
	}
	ctx := context.Background()
	b.Run("fetch-send/sandbox", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := p.Fetch(ctx, v, httptest.NewRequest("GET", "http://w/x", nil), "x"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("fetch-send/in-process", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := rt.Fetch(ctx, v, httptest.NewRequest("GET", "http://w/x", nil), "x"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("queue100/sandbox", func(b *testing.B) {
		h, err := p.QueueHandler(ctx, v)
		if err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := h.HandleBatch(ctx, abi.NewBatch("b", "q", msgs, nopSettler{})); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("queue100/in-process", func(b *testing.B) {
		h, err := rt.QueueHandler(v)
		if err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := h.HandleBatch(ctx, abi.NewBatch("b", "q", msgs, nopSettler{})); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
