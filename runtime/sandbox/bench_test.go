package sandbox

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
// send). Each also reports cpu-µs/op, the CPU of this process and of its
// sandboxes per invocation: what isolation costs in work, far steadier on
// a shared machine than the time per invocation. Every run has a pool of
// its own, closed before its CPU is read, so that its sandbox has exited
// and getrusage counts it, and what a run costs beside its invocations
// (starting and ending the sandbox, about 45 ms of CPU) is measured on a
// run of one invocation and taken off.
func BenchmarkInvocation(b *testing.B) {
	v := worker("bench", benchSrc)
	msgs := make([]abi.Message, 100)
	for i := range msgs {
		msgs[i] = abi.Message{ID: "m", Body: make([]byte, 100), Attempts: 1}
	}
	ctx := context.Background()
	fetch := func(f func(context.Context, *abi.Version, *http.Request, string) (*http.Response, error)) func() error {
		return func() error {
			_, err := f(ctx, v, httptest.NewRequest("GET", "http://w/x", nil), "x")
			return err
		}
	}
	queue := func(h abi.Handler) func() error {
		return func() error { return h.HandleBatch(ctx, abi.NewBatch("b", "q", msgs, abitest.Settler{})) }
	}
	// A setup returns the invocation to repeat and what ends its runtime.
	type setup func(b *testing.B) (op func() error, end func())
	sandboxed := func(kind string) setup {
		return func(b *testing.B) (func() error, func()) {
			p, err := New(Options{Sender: abitest.Sender{}})
			if err != nil {
				b.Fatal(err)
			}
			if kind == "fetch" {
				return fetch(p.Fetch), p.Close
			}
			h, err := p.QueueHandler(ctx, v)
			if err != nil {
				p.Close()
				b.Fatal(err)
			}
			return queue(h), p.Close
		}
	}
	inProcess := func(kind string) setup {
		return func(b *testing.B) (func() error, func()) {
			rt := js.New(js.Options{Sender: abitest.Sender{}})
			if kind == "fetch" {
				return fetch(rt.Fetch), rt.Close
			}
			h, err := rt.QueueHandler(v)
			if err != nil {
				rt.Close()
				b.Fatal(err)
			}
			return queue(h), rt.Close
		}
	}
	// start is what a run costs beside its invocations: setting up, one
	// invocation that starts the sandbox and loads the module, ending.
	start := func(b *testing.B, s setup) time.Duration {
		c0 := processCPU()
		op, end := s(b)
		err := op()
		end()
		if err != nil {
			b.Fatal(err)
		}
		return processCPU() - c0
	}
	run := func(b *testing.B, s setup, parallel bool) {
		fixed := start(b, s)
		c0 := processCPU()
		op, end := s(b)
		b.Cleanup(end) // after a failure; ending twice is harmless
		if err := op(); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		if parallel {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		} else {
			for range b.N {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		end()
		b.ReportMetric(float64(processCPU()-c0-fixed)/1e3/float64(b.N), "cpu-µs/op")
	}
	for _, c := range []struct {
		name string
		s    setup
	}{
		{"fetch-send/sandbox", sandboxed("fetch")},
		{"fetch-send/in-process", inProcess("fetch")},
		{"queue100/sandbox", sandboxed("queue")},
		{"queue100/in-process", inProcess("queue")},
	} {
		b.Run("parallel/"+c.name, func(b *testing.B) { run(b, c.s, true) })
		b.Run("sequential/"+c.name, func(b *testing.B) { run(b, c.s, false) })
	}
}

// processCPU is the CPU of this process and of its children that have
// exited and been waited for.
func processCPU() time.Duration {
	var self, children unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}
