package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/telemetry/otlptest"
	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestTraceAcrossRetries: the real binary, with -otlp-endpoint naming an
// OTLP/HTTP receiver this test runs, exports a trace of one message sent
// by a sandboxed JavaScript worker's fetch handler (called with a
// traceparent) that the queue handler throws on once and acknowledges on
// its second attempt: the send is a child of the caller's span; both
// attempts are children of the send and link to it; attempt 2 links to
// attempt 1; each attempt's settlement (retry, then ack) is its child.
func TestTraceAcrossRetries(t *testing.T) {
	rcv, err := otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcv.Close() })
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200") // export within 200 ms, not the default 5 s
	const view = "http://traces.example/trace/{traceId}"
	e := startEnv(t, hostOpts{args: []string{"-otlp-endpoint", rcv.URL(), "-trace-url", view}})
	ctx := ctxT(t, 90*time.Second)
	topo := e.topology(harness.TopologyOptions{MaxBatchSize: 1})

	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	hdr := http.Header{"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}}
	r, err := e.admin.Do(ctx, "POST", "/v2/spaces/"+topo.Space+"/resources/"+topo.Worker+"/fetch/send",
		map[string]any{"binding": "WORK", "bodies": []string{body("traced", []string{"throw", "ack"})}}, hdr)
	if err != nil || r.Status != 200 {
		t.Fatalf("fetch /send: %v %v", err, r)
	}
	var sr harness.SendResult
	if err := r.JSON(&sr); err != nil || len(sr.IDs) != 1 {
		t.Fatalf("send result %s: %v", r, err)
	}
	id := sr.IDs[0]

	var send, a1, a2, s1, s2 otlptest.Span
	err = harness.Poll(30*time.Second, func() error {
		send, a1, a2, s1, s2 = otlptest.Span{}, otlptest.Span{}, otlptest.Span{}, otlptest.Span{}, otlptest.Span{}
		spans := rcv.Spans()
		for _, s := range spans {
			switch {
			case s.Name == "send "+topo.QueueName && s.Attrs["messaging.message.id"] == id:
				send = s
			case s.Name == "process "+topo.QueueName && s.Attrs["messaging.message.id"] == id && s.Attrs["takoform.message.attempt"] == "1":
				a1 = s
			case s.Name == "process "+topo.QueueName && s.Attrs["messaging.message.id"] == id && s.Attrs["takoform.message.attempt"] == "2":
				a2 = s
			}
		}
		for _, s := range spans {
			switch {
			case a1.SpanID != "" && s.ParentSpanID == a1.SpanID:
				s1 = s
			case a2.SpanID != "" && s.ParentSpanID == a2.SpanID:
				s2 = s
			}
		}
		if send.SpanID == "" || a1.SpanID == "" || a2.SpanID == "" || s1.SpanID == "" || s2.SpanID == "" {
			return fmt.Errorf("the receiver has %d spans in %d requests; missing one of send %q, attempt 1 %q, attempt 2 %q and their settlements %q %q",
				len(spans), rcv.Requests(), send.SpanID, a1.SpanID, a2.SpanID, s1.Name, s2.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The send: a producer span, the child of the caller's span.
	if send.TraceID != callerTrace || send.ParentSpanID != callerSpan {
		t.Errorf("send span in trace %s under %s; want the caller's trace %s under %s", send.TraceID, send.ParentSpanID, callerTrace, callerSpan)
	}
	if send.Kind.String() != "SPAN_KIND_PRODUCER" || send.Attrs["messaging.operation.type"] != "send" || send.Attrs["messaging.destination.name"] != topo.QueueName ||
		send.Attrs["messaging.system"] != "takoform" || send.Service != "takohost" {
		t.Errorf("send span %+v", send)
	}
	// Both attempts: children of the send, in its trace, linked to it.
	for i, a := range []otlptest.Span{a1, a2} {
		if a.TraceID != send.TraceID || a.ParentSpanID != send.SpanID {
			t.Errorf("attempt %d in trace %s under %s; want under the send %s/%s", i+1, a.TraceID, a.ParentSpanID, send.TraceID, send.SpanID)
		}
		if !linked(a, send, "send") {
			t.Errorf("attempt %d does not link to the send: %+v", i+1, a.Links)
		}
		if a.Kind.String() != "SPAN_KIND_CONSUMER" || a.Attrs["messaging.operation.type"] != "process" || a.Attrs["messaging.consumer.group.name"] == "" {
			t.Errorf("attempt %d span %+v", i+1, a)
		}
		if !hasLink(a, "delivery") {
			t.Errorf("attempt %d does not link to its batch's receive span: %+v", i+1, a.Links)
		}
	}
	if !linked(a2, a1, "previous_attempt") {
		t.Errorf("attempt 2 does not link to attempt 1 (%s): %+v", a1.SpanID, a2.Links)
	}
	if hasLink(a1, "previous_attempt") {
		t.Errorf("attempt 1 links to a previous attempt: %+v", a1.Links)
	}
	if !a1.StatusError || a2.StatusError {
		t.Errorf("attempt statuses: 1 error=%v (threw), 2 error=%v (acknowledged)", a1.StatusError, a2.StatusError)
	}
	if s1.Name != "retry "+topo.QueueName || s1.Attrs["messaging.operation.type"] != "settle" {
		t.Errorf("attempt 1's settlement %q %v; want retry", s1.Name, s1.Attrs)
	}
	if s2.Name != "ack "+topo.QueueName || s2.Attrs["messaging.operation.type"] != "settle" {
		t.Errorf("attempt 2's settlement %q %v; want ack", s2.Name, s2.Attrs)
	}
	// The batch deliveries: receive spans linked to the send.
	receives := 0
	for _, s := range rcv.Spans() {
		if s.Name == "receive "+topo.QueueName && linked(s, send, "send") {
			receives++
			if s.ParentSpanID != "" || s.Kind.String() != "SPAN_KIND_CONSUMER" {
				t.Errorf("receive span %+v: want a consumer span starting a trace", s)
			}
		}
	}
	if receives != 2 {
		t.Errorf("%d receive spans link to the send; want 2 (one per attempt's batch)", receives)
	}

	// The publish route: its send span is the child of the caller's span.
	const pubSpan = "1111111111111111"
	r, err = e.admin.Do(ctx, "POST", "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue+"/messages",
		map[string]any{"messages": []map[string]any{{"body": body("published", "ack")}}},
		http.Header{"Traceparent": {"00-" + callerTrace + "-" + pubSpan + "-01"}})
	if err != nil || r.Status != 200 {
		t.Fatalf("publish: %v %v", err, r)
	}
	var pub struct{ MessageIDs []string }
	if err := r.JSON(&pub); err != nil || len(pub.MessageIDs) != 1 {
		t.Fatalf("publish answered %s: %v", r, err)
	}
	err = harness.Poll(30*time.Second, func() error {
		for _, s := range rcv.Spans() {
			if s.Name == "send "+topo.QueueName && s.Attrs["messaging.message.id"] == pub.MessageIDs[0] {
				if s.TraceID != callerTrace || s.ParentSpanID != pubSpan || s.Kind.String() != "SPAN_KIND_PRODUCER" {
					t.Errorf("the publish's send span %+v; want a producer span under %s/%s", s, callerTrace, pubSpan)
				}
				return nil
			}
		}
		return fmt.Errorf("no send span of the published message %s", pub.MessageIDs[0])
	})
	if err != nil {
		t.Error(err)
	}
	// The listing names a waiting traced message's trace and links to the
	// operator's trace view.
	r, err = e.admin.Do(ctx, "POST", "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue+"/messages",
		map[string]any{"messages": []map[string]any{{"body": body("waiting", "ack"), "delaySeconds": 3600}}},
		http.Header{"Traceparent": {"00-" + callerTrace + "-" + pubSpan + "-01"}})
	if err != nil || r.Status != 200 {
		t.Fatalf("publish: %v %v", err, r)
	}
	var waiting struct{ MessageIDs []string }
	if err := r.JSON(&waiting); err != nil || len(waiting.MessageIDs) != 1 {
		t.Fatalf("publish answered %s: %v", r, err)
	}
	r, err = e.admin.Do(ctx, "GET", "/v2/spaces/"+topo.Space+"/resources/"+topo.Queue+"/messages", nil, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("list messages: %v %v", err, r)
	}
	var list struct {
		Items []struct{ ID, TraceID, TraceURL string }
	}
	if err := r.JSON(&list); err != nil {
		t.Fatalf("list messages %s: %v", r, err)
	}
	found := false
	for _, m := range list.Items {
		if m.ID == waiting.MessageIDs[0] {
			found = true
			if want := strings.ReplaceAll(view, "{traceId}", callerTrace); m.TraceID != callerTrace || m.TraceURL != want {
				t.Errorf("listed traced message: traceId %q traceUrl %q; want %q and %q", m.TraceID, m.TraceURL, callerTrace, want)
			}
		}
	}
	if !found {
		t.Errorf("the waiting message %s is not listed: %s", waiting.MessageIDs[0], r)
	}
	if t.Failed() {
		var b strings.Builder
		for _, s := range rcv.Spans() {
			fmt.Fprintf(&b, "%s %s/%s parent %s links %v\n", s.Name, s.TraceID, s.SpanID, s.ParentSpanID, s.Links)
		}
		t.Logf("spans:\n%s", b.String())
	}
}

// linked reports whether s has a link of that kind to to.
func linked(s, to otlptest.Span, kind string) bool {
	for _, l := range s.Links {
		if l.TraceID == to.TraceID && l.SpanID == to.SpanID && l.Attrs["takoform.link"] == kind {
			return true
		}
	}
	return false
}

func hasLink(s otlptest.Span, kind string) bool {
	for _, l := range s.Links {
		if l.Attrs["takoform.link"] == kind {
			return true
		}
	}
	return false
}
