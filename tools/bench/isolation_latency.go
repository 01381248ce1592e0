package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/sandbox"
)

// isolationLatencyRounds × isolationLatencyCalls sequential invocations per
// runtime, the runtimes alternating round by round.
const (
	isolationLatencyRounds = 5
	isolationLatencyCalls  = 400
)

// isolationLatency measures what a sandbox adds to one invocation, one at
// a time and without a disk: the bench worker's fetch that sends one
// message (four pipe crossings in a sandbox: the request, the send, its
// answer, the response) and a queue batch of 100 messages (two), each in a
// sandbox (runtime/sandbox) and in process (runtime/js), with a sender
// that answers at once. It adds a note to s with the medians of the
// rounds' means.
func (b *bench) isolationLatency(ctx context.Context, s *section) {
	pool, err := sandbox.New(sandbox.Options{Sender: abitest.Sender{}, Logger: quietLogger})
	if err != nil {
		s.note("Sequential latency: not measured: starting a sandbox pool: %v", err)
		return
	}
	defer pool.Close()
	rt := js.New(js.Options{Sender: abitest.Sender{}, Logger: quietLogger})
	defer rt.Close()
	v := benchVersion("v-latency", []abi.Binding{{Name: "Q", QueueUID: "q"}})
	msgs := make([]abi.Message, 100)
	for i := range msgs {
		msgs[i] = abi.Message{ID: fmt.Sprintf("m%d", i), Body: make([]byte, 100), Attempts: 1}
	}
	sbQueue, err := pool.QueueHandler(ctx, v)
	if err != nil {
		s.note("Sequential latency: not measured: loading the worker in a sandbox: %v", err)
		return
	}
	inQueue, err := rt.QueueHandler(v)
	if err != nil {
		s.note("Sequential latency: not measured: loading the worker in process: %v", err)
		return
	}
	fetch := func(f func(context.Context, *abi.Version, *http.Request, string) (*http.Response, error)) func() error {
		return func() error {
			resp, err := f(ctx, v, httptest.NewRequest("GET", "http://w/one?size=100", nil), "one")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
	queue := func(h abi.Handler) func() error {
		return func() error { return h.HandleBatch(ctx, abi.NewBatch("b", "q", msgs, abitest.Settler{})) }
	}
	ops := []struct {
		name                 string
		sandboxed, inProcess func() error
	}{
		{"a fetch that sends one message", fetch(pool.Fetch), fetch(rt.Fetch)},
		{"a queue batch of 100 messages", queue(sbQueue), queue(inQueue)},
	}
	for _, o := range ops {
		var sb, in []time.Duration
		for range isolationLatencyRounds {
			for _, sandboxed := range []bool{true, false} {
				f := o.inProcess
				if sandboxed {
					f = o.sandboxed
				}
				_ = f() // a first call outside the timing
				t0 := time.Now()
				for range isolationLatencyCalls {
					if err := f(); err != nil {
						s.note("Sequential latency of %s: not measured: %v", o.name, err)
						return
					}
				}
				mean := time.Since(t0) / isolationLatencyCalls
				if sandboxed {
					sb = append(sb, mean)
				} else {
					in = append(in, mean)
				}
			}
		}
		msb, mIn := percentilesOf(sb).P50, percentilesOf(in).P50
		s.note("Sequential latency of %s (one at a time, no disk, a sender that answers at once; median of %d rounds of %d, alternating): %s in a sandbox, %s in process: the sandbox adds %s (%s of the in-process time).",
			o.name, isolationLatencyRounds, isolationLatencyCalls, usec(msb), usec(mIn), usec(msb-mIn), ratio(float64(msb), float64(mIn)))
	}
}
