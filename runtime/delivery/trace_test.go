package delivery

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// fakeTracer records what the engine tells a Tracer; trace contexts are
// opaque strings to the engine, so they are names here.
type fakeTracer struct {
	mu      sync.Mutex
	sends   int
	ctxs    []string // the "caller" value of each Send's ctx
	batches []TracedBatch
	settled map[string][]Settlement // by batch ID
	ended   map[string]string       // batch ID -> outcome
}

type callerKey struct{}

func newFakeTracer() *fakeTracer {
	return &fakeTracer{settled: map[string][]Settlement{}, ended: map[string]string{}}
}

func (f *fakeTracer) Send(ctx context.Context, q TracedQueue, n int) (string, func([]string, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sends++
	c, _ := ctx.Value(callerKey{}).(string)
	f.ctxs = append(f.ctxs, c)
	return fmt.Sprintf("send-%d", f.sends), func([]string, error) {}
}

func (f *fakeTracer) Deliver(b TracedBatch) BatchSpans {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, b)
	return &fakeSpans{f: f, b: b}
}

func (f *fakeTracer) snapshot() ([]TracedBatch, map[string][]Settlement) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := map[string][]Settlement{}
	for k, v := range f.settled {
		s[k] = append([]Settlement(nil), v...)
	}
	return append([]TracedBatch(nil), f.batches...), s
}

type fakeSpans struct {
	f *fakeTracer
	b TracedBatch
}

func (s *fakeSpans) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerKey{}, "batch-"+s.b.ID)
}
func (s *fakeSpans) Attempt(i int) string { return fmt.Sprintf("attempt-%s-%d", s.b.ID, i) }
func (s *fakeSpans) Settled(id string, how Settlement) {
	s.f.mu.Lock()
	s.f.settled[s.b.ID] = append(s.f.settled[s.b.ID], how)
	s.f.mu.Unlock()
}
func (s *fakeSpans) End(outcome string, failed bool) {
	s.f.mu.Lock()
	s.f.ended[s.b.ID] = outcome
	s.f.mu.Unlock()
}

// TestTracedAttemptsLinkAcrossRetriesAndDeadLetter: each attempt is told
// the message's send context and its previous attempt's span, through a
// retry and a dead-letter move; the moved message keeps the send context
// in the store; each attempt's settlement is reported; a send made by a
// handler carries the batch's context.
func TestTracedAttemptsLinkAcrossRetriesAndDeadLetter(t *testing.T) {
	tr := newFakeTracer()
	h := newHarness(t, func(o *Options) { o.Tracer = tr })
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.addQueue("out", 0, 3600)
	h.start()
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 1; c.DeadLetterQueueUID = "dlq" }), newRecorder(throwing))
	h.attach(consumerCfg("cd", "dlq", "wd"), newRecorder(func(ctx context.Context, b *abi.Batch) error {
		_, err := h.e.Send(ctx, "out", []abi.OutgoingMessage{{Body: []byte("from the dlq handler")}})
		return err
	}))
	id := h.send("q", "payload")[0]
	h.advance(0)
	h.waitFinished(3)

	batches, settled := tr.snapshot()
	if len(batches) != 3 {
		t.Fatalf("%d traced batches, want 3 (two attempts, the DLQ's)", len(batches))
	}
	b1, b2, b3 := batches[0], batches[1], batches[2]
	want := []TracedMessage{
		{ID: id, Attempt: 1, Send: "send-1"},
		{ID: id, Attempt: 2, Send: "send-1", Previous: "attempt-" + b1.ID + "-0"},
		{ID: b3.Messages[0].ID, Attempt: 1, Send: "send-1", Previous: "attempt-" + b2.ID + "-0"},
	}
	for i, b := range batches {
		if !reflect.DeepEqual(b.Messages, want[i:i+1]) {
			t.Errorf("batch %d traced %+v, want %+v", i+1, b.Messages, want[i:i+1])
		}
	}
	if b1.Queue != (TracedQueue{UID: "q", Name: "name-q"}) || b3.Queue.UID != "dlq" {
		t.Errorf("traced queues %+v, %+v", b1.Queue, b3.Queue)
	}
	for b, how := range map[string]Settlement{b1.ID: SettledRetry, b2.ID: SettledDeadLetter, b3.ID: SettledAck} {
		if got := settled[b]; !reflect.DeepEqual(got, []Settlement{how}) {
			t.Errorf("batch %s settled %v, want [%s]", b, got, how)
		}
	}
	tr.mu.Lock()
	if tr.ended[b1.ID] != "threw" || tr.ended[b3.ID] != "returned" || len(tr.ended) != 3 {
		t.Errorf("batch spans ended %v", tr.ended)
	}
	if !reflect.DeepEqual(tr.ctxs, []string{"", "batch-" + b3.ID}) {
		t.Errorf("send contexts %q; want the DLQ handler's send under its batch", tr.ctxs)
	}
	tr.mu.Unlock()
	if m, ok := h.storedMsg("dlq", b3.Messages[0].ID); ok {
		t.Errorf("the DLQ's message was acknowledged but the store holds %+v", m)
	}
	outMsgs, _ := h.st.Messages(h.ctx, "out")
	if len(outMsgs) != 1 || outMsgs[0].TraceParent != "send-2" {
		t.Errorf("the handler's send stored %+v; want trace context send-2", outMsgs)
	}
}

// TestTraceContextSurvivesRestart: after a restart the first attempt
// links to the stored send context, and to no previous attempt (that is
// kept in memory only).
func TestTraceContextSurvivesRestart(t *testing.T) {
	tr := newFakeTracer()
	h := newHarness(t, func(o *Options) { o.Tracer = tr })
	h.addQueue("q", 0, 3600)
	h.start()
	id := h.send("q", "payload")[0]
	if m, _ := h.storedMsg("q", id); m.TraceParent != "send-1" {
		t.Fatalf("stored %+v; want trace context send-1", m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.e.Stop(ctx)
	tr2 := newFakeTracer()
	h.e = h.newEngine(func(o *Options) { o.Tracer = tr2 })
	h.addQueue("q", 0, 3600)
	h.attach(consumerCfg("c", "q", "w"), newRecorder(nil))
	h.start()
	h.advance(0)
	h.waitFinished(1)
	batches, _ := tr2.snapshot()
	if len(batches) != 1 || !reflect.DeepEqual(batches[0].Messages, []TracedMessage{{ID: id, Attempt: 1, Send: "send-1"}}) {
		t.Fatalf("after restart traced %+v", batches)
	}
}

// TestUntracedSendAddsNoAllocations: without a Tracer, Send costs what
// the untraced send path costs: the tracing hook allocates nothing.
func TestUntracedSendAddsNoAllocations(t *testing.T) {
	h := newHarness(t)
	h.addQueue("q", 0, 3600)
	h.start()
	msgs := []abi.OutgoingMessage{{Body: []byte("payload")}}
	viaSend := testing.AllocsPerRun(200, func() {
		if _, err := h.e.Send(h.ctx, "q", msgs); err != nil {
			t.Fatal(err)
		}
	})
	bare := testing.AllocsPerRun(200, func() {
		if _, err := h.e.send(h.ctx, "q", msgs, nil, ""); err != nil {
			t.Fatal(err)
		}
	})
	if viaSend > bare {
		t.Fatalf("Send without a tracer allocates %.1f times, the untraced path %.1f", viaSend, bare)
	}
	t.Logf("a one-message Send allocates %.1f times, with tracing off", viaSend)
}

// BenchmarkSendTracing compares a one-message Send without a tracer and
// with one (a tracer that does nothing: the engine's own cost).
func BenchmarkSendTracing(b *testing.B) {
	for _, traced := range []bool{false, true} {
		b.Run(fmt.Sprintf("traced=%v", traced), func(b *testing.B) {
			t := &testing.T{}
			h := &harness{t: t, clk: nil, st: newMemStore(), res: &resolver{handlers: map[string]abi.Handler{}}, ctx: context.Background()}
			o := Options{}
			if traced {
				o.Tracer = newFakeTracer()
			}
			h.e = New(h.st, h.res, o)
			if err := h.e.AddQueue(h.ctx, QueueConfig{UID: "q", Name: "q", MessageRetentionSeconds: 3600}); err != nil {
				b.Fatal(err)
			}
			if err := h.e.Start(h.ctx); err != nil {
				b.Fatal(err)
			}
			defer h.e.Stop(context.Background())
			msgs := []abi.OutgoingMessage{{Body: []byte("payload")}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.e.Send(h.ctx, "q", msgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRedriveKeepsTraceContext: a message dead-lettered and then
// redriven keeps its send's trace context in the store at each move, so
// its attempts after the redrive still link to the send.
func TestRedriveKeepsTraceContext(t *testing.T) {
	tr := newFakeTracer()
	h := newHarness(t, func(o *Options) { o.Tracer = tr })
	h.addQueue("q", 0, 3600)
	h.addQueue("dlq", 0, 3600)
	h.start()
	fail := true
	var mu sync.Mutex
	h.attach(consumerCfg("c", "q", "w", func(c *ConsumerConfig) { c.MaxRetries = 0; c.DeadLetterQueueUID = "dlq" }), newRecorder(func(context.Context, *abi.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errThrow
		}
		return nil
	}))
	h.send("q", "payload")
	h.advance(0)
	h.waitFinished(1)
	dead, _ := h.st.Messages(h.ctx, "dlq")
	if len(dead) != 1 || dead[0].TraceParent != "send-1" {
		t.Fatalf("the dead-letter queue holds %+v; want one message with trace context send-1", dead)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	res, err := h.e.MoveNext(h.ctx, MoveRequest{From: "dlq", AcceptedBy: h.e.nowMs(), Target: func(*store.DeadLetter) string { return "q" }})
	if err != nil || res.NewID == "" {
		t.Fatalf("MoveNext: %+v, %v", res, err)
	}
	back, _ := h.st.Message(h.ctx, "q", res.NewID)
	if back.TraceParent != "send-1" {
		t.Fatalf("the redriven message is stored as %+v; want trace context send-1", back)
	}
	h.advance(0)
	h.waitFinished(2)
	batches, settled := tr.snapshot()
	last := batches[len(batches)-1]
	if len(batches) != 2 || last.Messages[0].ID != res.NewID || last.Messages[0].Send != "send-1" || last.Messages[0].Previous != "attempt-"+batches[0].ID+"-0" {
		t.Fatalf("traced batches %+v", batches)
	}
	if got := settled[last.ID]; !reflect.DeepEqual(got, []Settlement{SettledAck}) {
		t.Fatalf("the redriven attempt settled %v", got)
	}
}

// TestRemoteSendAndAdoptKeepTraceContext: in a cluster, a send into a
// queue another engine holds stores the send's trace context, and the
// owner that adopts a message from the store links its attempt to it.
func TestRemoteSendAndAdoptKeepTraceContext(t *testing.T) {
	rs := newRemoteStub()
	rs.queues["elsewhere"] = 0
	tr := newFakeTracer()
	h := newHarness(t, func(o *Options) { o.Remote = rs; o.Tracer = tr })
	h.addQueue("q", 0, 3600)
	h.start()
	ids, err := h.e.Send(h.ctx, "elsewhere", []abi.OutgoingMessage{{Body: []byte("remote")}})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := h.storedMsg("elsewhere", ids[0]); m.TraceParent != "send-1" {
		t.Fatalf("the remote send stored %+v; want trace context send-1", m)
	}
	// Another engine's send into q, found by a re-read of the store.
	if err := h.st.Apply(h.ctx, store.AcceptMessage{Message: store.Message{Queue: "q", ID: "adopted", AcceptedAt: h.e.nowMs(), VisibleAt: h.e.nowMs(), Size: 1, TraceParent: "their-send"}, Body: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	sms, _ := h.st.Messages(h.ctx, "q")
	h.e.Adopt("q", sms)
	h.attach(consumerCfg("c", "q", "w"), newRecorder(nil))
	h.advance(0)
	h.waitFinished(1)
	batches, _ := tr.snapshot()
	if len(batches) != 1 || !reflect.DeepEqual(batches[0].Messages, []TracedMessage{{ID: "adopted", Attempt: 1, Send: "their-send"}}) {
		t.Fatalf("traced %+v", batches)
	}
}
