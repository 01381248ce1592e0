package sandbox

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
	"github.com/takoform/queuehost/runtime/js"
)

const benchSrc = `export default {
  async fetch(req, env) { await env.OUT.send("x"); return new Response("ok"); },
  async queue(batch) { let n = 0; for (const m of batch.messages) n += m.body.byteLength; },
};`

// BenchmarkInvocation compares one fetch invocation with one send, and one
// queue batch of 100 messages, in a sandbox and in process: "parallel" from
// 4 goroutines per processor (throughput), "sequential" one at a time (the
// latency a sandbox adds: two pipe crossings per request, two more per
// send).
func BenchmarkInvocation(b *testing.B) {
	v := worker("bench", benchSrc)
	p, err := New(Options{Sender: abitest.Sender{}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	rt := js.New(js.Options{Sender: abitest.Sender{}})
	defer rt.Close()
	msgs := make([]abi.Message, 100)
	for i := range msgs {
		msgs[i] = abi.Message{ID: "m", Body: make([]byte, 100), Attempts: 1}
	}
	ctx := context.Background()
	sandboxed, err := p.QueueHandler(ctx, v)
	if err != nil {
		b.Fatal(err)
	}
	inProcess, err := rt.QueueHandler(v)
	if err != nil {
		b.Fatal(err)
	}
	fetch := func(f func(context.Context, *abi.Version, *http.Request, string) (*http.Response, error)) func() error {
		return func() error {
			_, err := f(ctx, v, httptest.NewRequest("GET", "http://w/x", nil), "x")
			return err
		}
	}
	queue := func(h abi.Handler) func() error {
		return func() error { return h.HandleBatch(ctx, abi.NewBatch("b", "q", msgs, abitest.Settler{})) }
	}
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"fetch-send/sandbox", fetch(p.Fetch)},
		{"fetch-send/in-process", fetch(rt.Fetch)},
		{"queue100/sandbox", queue(sandboxed)},
		{"queue100/in-process", queue(inProcess)},
	} {
		b.Run("parallel/"+c.name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.op(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		b.Run("sequential/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
