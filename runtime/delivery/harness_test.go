package delivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/clock"
	"github.com/takoform/queuehost/runtime/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const waitLimit = 10 * time.Second // failure bound only, never a synchronisation

// resolver maps worker UIDs to handlers; failN makes the next N
// resolutions fail.
type resolver struct {
	mu       sync.Mutex
	handlers map[string]abi.Handler
	failN    int
	calls    int
}

func (r *resolver) Resolve(ctx context.Context, workerUID string) (abi.Handler, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.failN > 0 {
		r.failN--
		return nil, errors.New("worker not ready")
	}
	h := r.handlers[workerUID]
	if h == nil {
		return nil, fmt.Errorf("no handler for %s", workerUID)
	}
	return h, nil
}

func (r *resolver) set(worker string, h abi.Handler) {
	r.mu.Lock()
	r.handlers[worker] = h
	r.mu.Unlock()
}

type harness struct {
	t   *testing.T
	clk *clock.Fake
	st  *memStore
	res *resolver
	e   *Engine
	ctx context.Context
}

func newHarness(t *testing.T, opts ...func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewFake(t0), st: newMemStore(), res: &resolver{handlers: map[string]abi.Handler{}}, ctx: context.Background()}
	h.e = h.newEngine(opts...)
	return h
}

// newEngine makes (and starts, after the queues/consumers set up by setup
// are added) an engine over the harness's store and clock.
func (h *harness) newEngine(opts ...func(*Options)) *Engine {
	o := Options{Clock: h.clk, HandlerTimeout: time.Hour}
	for _, f := range opts {
		f(&o)
	}
	e := New(h.st, h.res, o)
	h.t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		e.Stop(ctx)
	})
	return e
}

func (h *harness) start() {
	h.t.Helper()
	if err := h.e.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) addQueue(uid string, delay, retention int) {
	h.t.Helper()
	if err := h.e.AddQueue(h.ctx, QueueConfig{UID: uid, Name: "name-" + uid, DeliveryDelaySeconds: delay, MessageRetentionSeconds: retention}); err != nil {
		h.t.Fatal(err)
	}
}

func consumerCfg(uid, queue, worker string, mod ...func(*ConsumerConfig)) ConsumerConfig {
	c := ConsumerConfig{UID: uid, QueueUID: queue, WorkerUID: worker, MaxBatchSize: 10, MaxBatchTimeoutSeconds: 0, MaxConcurrency: 1, MaxRetries: 3, RetryDelaySeconds: 0}
	for _, f := range mod {
		f(&c)
	}
	return c
}

func (h *harness) attach(c ConsumerConfig, hd abi.Handler) {
	h.t.Helper()
	h.res.set(c.WorkerUID, hd)
	if err := h.e.Attach(h.ctx, c); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) send(queue string, bodies ...string) []string {
	h.t.Helper()
	msgs := make([]abi.OutgoingMessage, len(bodies))
	for i, b := range bodies {
		msgs[i] = abi.OutgoingMessage{Body: []byte(b)}
	}
	ids, err := h.e.Send(h.ctx, queue, msgs)
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func (h *harness) sendDelay(queue, body string, delay int) string {
	h.t.Helper()
	ids, err := h.e.Send(h.ctx, queue, []abi.OutgoingMessage{{Body: []byte(body), Delay: &delay}})
	if err != nil {
		h.t.Fatal(err)
	}
	return ids[0]
}

// quiesce waits until the engine has no background work (dispatching,
// finalizing, background writes); handlers may still be running.
func (h *harness) quiesce() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.e.track.wait(ctx); err != nil {
		h.t.Fatalf("engine did not quiesce: %v", err)
	}
}

// advance moves the fake clock and waits for the work it caused.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clk.Advance(d)
	h.quiesce()
}

// waitUntil waits, on engine events, until cond holds.
func (h *harness) waitUntil(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.After(waitLimit)
	for {
		ch := h.e.events()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			h.t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func (h *harness) delivered() int64 { return h.e.delivered.Load() }

func (h *harness) waitFinished(n int64) {
	h.t.Helper()
	h.waitUntil(fmt.Sprintf("%d batches finished", n), func() bool { return h.e.finished.Load() >= n })
	h.quiesce()
}

func (h *harness) count(queue string) int {
	h.t.Helper()
	n, err := h.e.QueueStats(h.ctx, queue)
	if err != nil {
		h.t.Fatal(err)
	}
	sn, _ := h.st.MessageCount(h.ctx, queue)
	if sn != n {
		h.t.Fatalf("queue %s: engine counts %d messages, store holds %d", queue, n, sn)
	}
	return n
}

func (h *harness) storedMsg(queue, id string) (store.Message, bool) {
	m, err := h.st.Message(h.ctx, queue, id)
	return m, err == nil
}

// recorder is a handler that records each batch and then runs fn (nil:
// return nil). Batches are also sent on ch (buffered).
type recorder struct {
	mu      sync.Mutex
	batches []*abi.Batch
	ch      chan *abi.Batch
	fn      func(ctx context.Context, b *abi.Batch) error
}

func newRecorder(fn func(ctx context.Context, b *abi.Batch) error) *recorder {
	return &recorder{ch: make(chan *abi.Batch, 1000), fn: fn}
}

func (r *recorder) HandleBatch(ctx context.Context, b *abi.Batch) error {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	r.ch <- b
	if r.fn == nil {
		return nil
	}
	return r.fn(ctx, b)
}

func (r *recorder) all() []*abi.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*abi.Batch(nil), r.batches...)
}

func (r *recorder) next(t *testing.T) *abi.Batch {
	t.Helper()
	select {
	case b := <-r.ch:
		return b
	case <-time.After(waitLimit):
		t.Fatal("no batch delivered")
		return nil
	}
}

func ids(b *abi.Batch) []string {
	out := make([]string, len(b.Messages))
	for i, m := range b.Messages {
		out[i] = m.ID
	}
	return out
}

func bodies(b *abi.Batch) []string {
	out := make([]string, len(b.Messages))
	for i, m := range b.Messages {
		out[i] = string(m.Body)
	}
	return out
}

var errThrow = errors.New("handler threw")

func throwing(ctx context.Context, b *abi.Batch) error { return errThrow }

func intp(v int) *int { return &v }
