package sandbox

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
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
// send). "fetch-send-durable" is the fetch with a sender that, like the
// journal, has one goroutine write every send queued meanwhile to a file
// and fdatasync it before answering them all: the full host's single
// sends from 8 clients (docs/BENCHMARKS.md §Cost of worker isolation) in
// seconds rather than a host run, each send waiting for the disk and both
// sides idle meanwhile. It also reports sends/sync, the sends one
// fdatasync answered: fewer sandboxed, whose sends reach the writer spread
// out by their crossings (2026-12-04: 2.5–2.7 against 2.8–3.4). Each also
// reports cpu-µs/op, the CPU of this process and of its sandboxes per
// invocation: what isolation costs in work, far steadier on
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
	// sender is what a run's invocations send with, and what it reports.
	sender := func(b *testing.B, kind string) (abi.Sender, func()) {
		if kind != "fetch-durable" {
			return abitest.Sender{}, func() {}
		}
		s := newSyncSender(b)
		return s, func() {
			if n := s.syncs.Load(); n > 0 {
				b.ReportMetric(float64(s.sends.Load())/float64(n), "sends/sync")
			}
		}
	}
	sandboxed := func(kind string) setup {
		return func(b *testing.B) (func() error, func()) {
			snd, report := sender(b, kind)
			p, err := New(Options{Sender: snd})
			if err != nil {
				b.Fatal(err)
			}
			if kind != "queue" {
				return fetch(p.Fetch), func() { p.Close(); report() }
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
			snd, report := sender(b, kind)
			rt := js.New(js.Options{Sender: snd})
			if kind != "queue" {
				return fetch(rt.Fetch), func() { rt.Close(); report() }
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
		name         string
		s            setup
		parallelOnly bool // one at a time, every sync would answer one send
	}{
		{"fetch-send/sandbox", sandboxed("fetch"), false},
		{"fetch-send/in-process", inProcess("fetch"), false},
		{"fetch-send-durable/sandbox", sandboxed("fetch-durable"), true},
		{"fetch-send-durable/in-process", inProcess("fetch-durable"), true},
		{"queue100/sandbox", sandboxed("queue"), false},
		{"queue100/in-process", inProcess("queue"), false},
	} {
		b.Run("parallel/"+c.name, func(b *testing.B) { run(b, c.s, true) })
		if !c.parallelOnly {
			b.Run("sequential/"+c.name, func(b *testing.B) { run(b, c.s, false) })
		}
	}
}

// syncSender answers sends as the journal does: one goroutine takes every
// send queued while the previous sync ran, writes a record for each to a
// file and fdatasyncs it, then answers them all.
type syncSender struct {
	queue        chan chan error
	sends, syncs atomic.Int64
}

func newSyncSender(b *testing.B) *syncSender {
	f, err := os.Create(filepath.Join(b.TempDir(), "journal"))
	if err != nil {
		b.Fatal(err)
	}
	s := &syncSender{queue: make(chan chan error, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var records []byte // 128 bytes a send
		var batch []chan error
		for first := range s.queue {
			batch = append(batch[:0], first)
		more:
			for {
				select {
				case c, ok := <-s.queue:
					if !ok { // closed: answer what was taken, then end
						break more
					}
					batch = append(batch, c)
				default:
					break more
				}
			}
			records = slices.Grow(records[:0], 128*len(batch))[:128*len(batch)]
			_, err := f.Write(records) // the group in one write, as the journal writes it
			if err == nil {
				err = unix.Fdatasync(int(f.Fd()))
			}
			s.sends.Add(int64(len(batch)))
			s.syncs.Add(1)
			for _, c := range batch {
				c <- err
			}
		}
	}()
	b.Cleanup(func() {
		close(s.queue)
		<-done
		f.Close()
	})
	return s
}

// Send implements abi.Sender.
func (s *syncSender) Send(ctx context.Context, _, _, _ string, msgs []abi.OutgoingMessage) ([]string, error) {
	c := make(chan error, 1)
	s.queue <- c
	if err := <-c; err != nil {
		return nil, err
	}
	ids := make([]string, len(msgs))
	for i := range ids {
		ids[i] = "id"
	}
	return ids, nil
}

// processCPU is the CPU of this process and of its children that have
// exited and been waited for.
func processCPU() time.Duration {
	var self, children unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &children)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}
