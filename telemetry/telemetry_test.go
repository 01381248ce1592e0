package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/telemetry"
	"github.com/takoform/queuehost/telemetry/otlptest"
)

type handlers map[string]abi.Handler

func (h handlers) Resolve(_ context.Context, worker string) (abi.Handler, error) {
	if x := h[worker]; x != nil {
		return x, nil
	}
	return nil, fmt.Errorf("no worker %s", worker)
}

type handlerFunc func(ctx context.Context, b *abi.Batch) error

func (f handlerFunc) HandleBatch(ctx context.Context, b *abi.Batch) error { return f(ctx, b) }

// run is one life of an engine with tracing over the journal in dir.
type run struct {
	t   *testing.T
	st  *store.Journaled
	e   *delivery.Engine
	tr  *telemetry.Tracing
	ctx context.Context
}

func start(t *testing.T, dir, endpoint string, h handlers, consumers ...delivery.ConsumerConfig) *run {
	t.Helper()
	ctx := context.Background()
	st, _, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := telemetry.New(ctx, telemetry.Config{Endpoint: endpoint, BatchTimeout: 50 * time.Millisecond})
	if err != nil || tr == nil {
		t.Fatalf("telemetry.New: %v, %v", tr, err)
	}
	e := delivery.New(st, h, delivery.Options{Tracer: tr})
	for _, q := range []string{"q", "dlq"} {
		if err := e.AddQueue(ctx, delivery.QueueConfig{UID: q, Name: "name-" + q, MessageRetentionSeconds: 3600}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range consumers {
		if err := e.Attach(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	return &run{t: t, st: st, e: e, tr: tr, ctx: ctx}
}

func (r *run) stop() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.e.Stop(ctx); err != nil {
		r.t.Fatal(err)
	}
	if err := r.tr.Shutdown(ctx); err != nil {
		r.t.Fatal(err)
	}
	r.st.Close()
}

func consumer(uid, queue, worker string, maxRetries int, dlq string) delivery.ConsumerConfig {
	return delivery.ConsumerConfig{UID: uid, Name: "name-" + uid, QueueUID: queue, WorkerUID: worker, MaxBatchSize: 1, MaxConcurrency: 1, MaxRetries: maxRetries, DeadLetterQueueUID: dlq}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func process(spans []otlptest.Span, queue string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.Name == "process "+queue {
			out = append(out, s)
		}
	}
	return out
}

func link(s otlptest.Span, kind string) (otlptest.Link, bool) {
	for _, l := range s.Links {
		if l.Attrs["takoform.link"] == kind {
			return l, true
		}
	}
	return otlptest.Link{}, false
}

// TestLinksSurviveRestartAndDeadLetter, with the OTel SDK exporting to a
// real OTLP/HTTP receiver: a message's first attempt throws; the engine
// restarts on the same journal; the second attempt, its last, throws too
// and moves it to the dead-letter queue, whose handler acknowledges it.
// Every attempt is in the send's trace and links to the send (the stored
// context); the attempt after the restart links to no previous one (kept
// in memory only); the dead-letter queue's attempt links to the last
// attempt in the source queue.
func TestLinksSurviveRestartAndDeadLetter(t *testing.T) {
	rcv, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	dir := t.TempDir()
	var acked atomic.Int32
	h := handlers{
		"w":  handlerFunc(func(context.Context, *abi.Batch) error { return errors.New("directed failure") }),
		"wd": handlerFunc(func(context.Context, *abi.Batch) error { acked.Add(1); return nil }),
	}
	// A retry delay of 2 s: the first run stops between the retry and the
	// second attempt.
	cs := []delivery.ConsumerConfig{consumer("c", "q", "w", 1, "dlq"), consumer("cd", "dlq", "wd", 0, "")}
	cs[0].RetryDelaySeconds = 2

	r := start(t, dir, rcv.URL(), h, cs[0])
	ids, err := r.e.Send(r.ctx, "q", []abi.OutgoingMessage{{Body: []byte("poison")}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first attempt's retry", func() bool {
		m, err := r.st.Message(r.ctx, "q", ids[0])
		return err == nil && m.Attempts == 1 && m.Lease == ""
	})
	r.stop()

	r = start(t, dir, rcv.URL(), h, cs...)
	waitFor(t, "the dead-letter queue's acknowledgement", func() bool { return acked.Load() == 1 })
	r.stop()

	spans := rcv.Spans()
	var send otlptest.Span
	for _, s := range spans {
		if s.Name == "send name-q" {
			send = s
		}
	}
	src, dl := process(spans, "name-q"), process(spans, "name-dlq")
	if send.SpanID == "" || len(src) != 2 || len(dl) != 1 {
		t.Fatalf("send %q, %d attempts in the source queue, %d in the dead-letter queue; want 1, 2, 1", send.SpanID, len(src), len(dl))
	}
	a1, a2 := src[0], src[1]
	if a1.Attrs["takoform.message.attempt"] != "1" {
		a1, a2 = a2, a1
	}
	for name, a := range map[string]otlptest.Span{"attempt 1": a1, "attempt 2 (after the restart)": a2, "the dead-letter attempt": dl[0]} {
		if a.TraceID != send.TraceID || a.ParentSpanID != send.SpanID {
			t.Errorf("%s is in %s under %s; want the send's trace, under it", name, a.TraceID, a.ParentSpanID)
		}
		if l, ok := link(a, telemetry.LinkSend); !ok || l.SpanID != send.SpanID {
			t.Errorf("%s does not link to the send: %+v", name, a.Links)
		}
	}
	if _, ok := link(a2, telemetry.LinkPreviousAttempt); ok {
		t.Errorf("the attempt after a restart links to a previous attempt, which is kept in memory only: %+v", a2.Links)
	}
	if l, ok := link(dl[0], telemetry.LinkPreviousAttempt); !ok || l.SpanID != a2.SpanID {
		t.Errorf("the dead-letter attempt does not link to the source's last attempt %s: %+v", a2.SpanID, dl[0].Links)
	}
	settles := map[string]string{}
	for _, s := range spans {
		for _, a := range []otlptest.Span{a1, a2, dl[0]} {
			if s.ParentSpanID == a.SpanID {
				settles[a.SpanID] = s.Name
			}
		}
	}
	if settles[a1.SpanID] != "retry name-q" || settles[a2.SpanID] != "dead_letter name-q" || settles[dl[0].SpanID] != "ack name-dlq" {
		t.Errorf("settlements %v; want retry, dead_letter, ack", settles)
	}
}

// TestMiddlewareCarriesTraceparent: a request's traceparent is the
// parent of what the request's handler starts; a request without one, or
// with a malformed one, carries none.
func TestMiddlewareCarriesTraceparent(t *testing.T) {
	rcv, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	tr, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: rcv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var got trace.SpanContext
	h := tr.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = trace.SpanContextFromContext(r.Context()) }))
	for _, c := range []struct{ header, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00f067aa0ba902b7"},
		{"", ""},
		{"00-zz-00f067aa0ba902b7-01", ""},
	} {
		got = trace.SpanContext{}
		req := httptest.NewRequest("POST", "/x", nil)
		if c.header != "" {
			req.Header.Set("traceparent", c.header)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		if c.want == "" && got.IsValid() || c.want != "" && got.SpanID().String() != c.want {
			t.Errorf("traceparent %q: the handler's context has %v", c.header, got)
		}
	}
}

// TestConfig: tracing is off without an endpoint, on with the flag or
// the SDK's variables, off again with OTEL_SDK_DISABLED; a bad endpoint
// or a gRPC protocol is refused with a sentence naming the setting.
func TestConfig(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SDK_DISABLED"} {
		t.Setenv(v, "")
	}
	if telemetry.Enabled(telemetry.Config{}) {
		t.Error("tracing is on with no endpoint")
	}
	if tr, err := telemetry.New(context.Background(), telemetry.Config{}); tr != nil || err != nil {
		t.Errorf("New without an endpoint: %v, %v; want nil, nil", tr, err)
	}
	if !telemetry.Enabled(telemetry.Config{Endpoint: "http://127.0.0.1:4318"}) {
		t.Error("tracing is off with an endpoint")
	}
	for _, bad := range []string{"127.0.0.1:4318", "ftp://x", "http://", "::"} {
		if err := telemetry.Check(telemetry.Config{Endpoint: bad}); err == nil || !strings.Contains(err.Error(), "http(s) URL") {
			t.Errorf("endpoint %q: %v", bad, err)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	if !telemetry.Enabled(telemetry.Config{}) {
		t.Error("tracing is off with OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if err := telemetry.Check(telemetry.Config{}); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("protocol grpc: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	if err := telemetry.Check(telemetry.Config{}); err != nil {
		t.Errorf("the traces protocol wins over the general one: %v", err)
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if telemetry.Enabled(telemetry.Config{Endpoint: "http://127.0.0.1:4318"}) {
		t.Error("tracing is on with OTEL_SDK_DISABLED=true")
	}
}
