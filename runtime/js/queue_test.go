package js

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

func intp(i int) *int { return &i }

type errSeen struct {
	OK           bool   `json:"ok"`
	Name         string `json:"name"`
	Message      string `json:"message"`
	IsError      bool   `json:"isError"`
	IsTypeError  bool   `json:"isTypeError"`
	IsRangeError bool   `json:"isRangeError"`
	IsPromise    bool   `json:"isPromise"`
}

func TestBatchShape(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-shape", "shape")
	h, _ := rt.QueueHandler(v)
	b := s.batch("batch-1", 2)
	if err := h.HandleBatch(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	seenOne(t, rt, v.WorkerUID, "shape", &got)
	want := map[string]any{
		"id": "batch-1", "queue": "orders",
		"messages": []any{
			map[string]any{"id": "m1", "timestampMillis": 1700000000001.0, "attempts": 1.0, "isArrayBuffer": true, "body": "body 1"},
			map[string]any{"id": "m2", "timestampMillis": 1700000000002.0, "attempts": 2.0, "isArrayBuffer": true, "body": "body 2"},
		},
		"methods": []any{"function", "function", "function", "function"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if string(b.Messages[0].Body) != "body 1" {
		t.Fatalf("the JS body was not a copy: %q", b.Messages[0].Body)
	}
}

func TestAckOneRetryRest(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-ack", "ackOneRetryRest")
	if err := runBatch(t, rt, s, v, "b1", 3); err != nil {
		t.Fatal(err)
	}
	want := []abi.Settlement{
		{Kind: abi.Acknowledge, MessageID: "m1"},
		{Kind: abi.Retry, MessageID: "m2"},
		{Kind: abi.Retry, MessageID: "m3"},
	}
	got := s.settlements("b1")
	// the two retries run concurrently: compare as a set after the ack
	if len(got) != 3 || !reflect.DeepEqual(got[0], want[0]) {
		t.Fatalf("settlements %+v", got)
	}
	if !(reflect.DeepEqual(got[1:], want[1:]) || reflect.DeepEqual(got[1:], []abi.Settlement{want[2], want[1]})) {
		t.Fatalf("settlements %+v", got)
	}
	var res struct {
		Ack     bool   `json:"ack"`
		Retries []bool `json:"retries"`
	}
	seenOne(t, rt, v.WorkerUID, "results", &res)
	if !res.Ack || !reflect.DeepEqual(res.Retries, []bool{true, true}) {
		t.Fatalf("JS saw %+v", res)
	}
}

func TestRetryAllWithDelay(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	if err := runBatch(t, rt, s, queueVersion(t, "v-ra", "retryAllDelay"), "b1", 2); err != nil {
		t.Fatal(err)
	}
	got := s.settlements("b1")
	want := []abi.Settlement{{Kind: abi.RetryAll, Delay: intp(120)}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("settlements %+v", got)
	}
}

func TestThrowAfterAck(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-throw", "throwAfterAck")
	err := runBatch(t, rt, s, v, "b1", 2)
	var se *ScriptError
	if !errors.As(err, &se) || se.Name != "Error" || se.Message != "boom after ack" {
		t.Fatalf("HandleBatch = %v", err)
	}
	if !strings.Contains(se.Stack, "at throwAfterAck (main.js:44:10)\n") {
		t.Fatalf("stack does not point at main.js: %q", se.Stack)
	}
	if got := s.settlements("b1"); !reflect.DeepEqual(got, []abi.Settlement{{Kind: abi.Acknowledge, MessageID: "m1"}}) {
		t.Fatalf("settlements %+v", got)
	}
	logs := rt.Logs(v.WorkerUID, 0, 100)
	if len(logs) == 0 || logs[len(logs)-1].Level != "error" || !strings.Contains(logs[len(logs)-1].Message, "boom after ack") {
		t.Fatalf("uncaught error not logged: %+v", logs)
	}
}

func TestRejectWithNonError(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	err := runBatch(t, rt, newFakeSettler(), queueVersion(t, "v-rej", "rejectPlain"), "b1", 1)
	if !isScriptError(err, "just a string") {
		t.Fatalf("HandleBatch = %v", err)
	}
}

func TestSettleAfterReturn(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-keep", "byBody")
	// batch 1 keeps its (detached) acknowledge; batch 2, on the same
	// runtime, calls it after batch 1's invocation has ended.
	if err := runBodies(t, rt, s, v, "b1", "keepRef", "x"); err != nil {
		t.Fatal(err)
	}
	if got := s.settlements("b1"); !reflect.DeepEqual(got, []abi.Settlement{{Kind: abi.Acknowledge, MessageID: "m1"}}) {
		t.Fatalf("batch 1 settlements %+v", got)
	}
	if err := runBodies(t, rt, s, v, "b2", "useSaved"); err != nil {
		t.Fatal(err)
	}
	var e errSeen
	seenOne(t, rt, v.WorkerUID, "saved", &e)
	if e.OK || e.Name != "unknown_batch" || !e.IsError || e.Message != abi.ErrUnknownBatch.Error() {
		t.Fatalf("JS saw %+v", e)
	}
	if got := s.settlements("b2"); len(got) != 0 {
		t.Fatalf("batch 2 settlements %+v", got)
	}
}

func TestSettleTwice(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-twice", "settleTwice")
	if err := runBatch(t, rt, s, v, "b1", 2); err != nil {
		t.Fatal(err)
	}
	var e errSeen
	seenOne(t, rt, v.WorkerUID, "twice", &e)
	if e.OK || e.Name != "already_settled" || !e.IsError || e.Message != abi.ErrAlreadySettled.Error() {
		t.Fatalf("JS saw %+v", e)
	}
}

func TestUnknownMessage(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-unk", "unknownMessage")
	if err := runBatch(t, rt, s, v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	var e errSeen
	seenOne(t, rt, v.WorkerUID, "unknown", &e)
	if e.OK || e.Name != "unknown_message" || !e.IsError {
		t.Fatalf("JS saw %+v", e)
	}
	if len(s.settlements("b1")) != 0 {
		t.Fatal("something was settled")
	}
}

func TestSettlementBackendError(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	s.fail = errors.New("disk on fire")
	v := queueVersion(t, "v-down", "backendDown")
	if err := runBatch(t, rt, s, v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	var e errSeen
	seenOne(t, rt, v.WorkerUID, "down", &e)
	if e.Name != "backend_unavailable" || e.Message != "disk on fire" {
		t.Fatalf("JS saw %+v", e)
	}
}

func TestSettlementArgumentErrors(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-args", "argErrors")
	if err := runBatch(t, rt, s, v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	var got map[string]errSeen
	seenOne(t, rt, v.WorkerUID, "args", &got)
	typeErrs := []string{"ackNumber", "ackMissing", "retryNumber"}
	rangeErrs := []string{"retryFraction", "retryTooBig", "retryString", "retryNull", "retryAllNegative", "retryAllNaN"}
	for _, k := range typeErrs {
		if e := got[k]; !e.IsPromise || e.OK || !e.IsTypeError || e.Name != "TypeError" {
			t.Errorf("%s: %+v", k, e)
		}
	}
	for _, k := range rangeErrs {
		if e := got[k]; !e.IsPromise || e.OK || !e.IsRangeError || e.Name != "RangeError" {
			t.Errorf("%s: %+v", k, e)
		}
	}
	// only the two valid calls at the end reached the settler
	want := []abi.Settlement{{Kind: abi.Retry, MessageID: "m1", Delay: intp(0)}, {Kind: abi.RetryAll, Delay: intp(43200)}}
	if got := s.settlements("b1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("settlements %+v", got)
	}
}

func TestRuntimeReuse(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-count", "counter")
	for i, id := range []string{"b1", "b2", "b3"} {
		if err := runBatch(t, rt, s, v, id, 1); err != nil {
			t.Fatal(err)
		}
		all := seen(t, rt, v.WorkerUID, "counter")
		if len(all) != i+1 || string(all[i]) != `{"invocations":`+string(rune('1'+i))+`}` {
			t.Fatalf("after batch %d: %s", i+1, all)
		}
	}
}

func TestInfiniteLoopIsInterrupted(t *testing.T) {
	rt := New(Options{InvocationTimeout: 200 * time.Millisecond})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-inf", "infinite")
	start := time.Now()
	err := runBatch(t, rt, s, v, "b1", 1)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("HandleBatch = %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %s", d)
	}
	e, _ := rt.version(v)
	if idle, busy := e.pool.stats(); idle != 0 || busy != 0 {
		t.Fatalf("the interrupted runtime was kept: idle %d busy %d", idle, busy)
	}
}

func TestInterruptedRuntimeIsReplaced(t *testing.T) {
	rt := New(Options{InvocationTimeout: 200 * time.Millisecond})
	defer rt.Close()
	s := newFakeSettler()
	v := queueVersion(t, "v-inf2", "byBody")
	if err := runBodies(t, rt, s, v, "b0", "counter"); err != nil {
		t.Fatal(err)
	}
	if err := runBodies(t, rt, s, v, "b1", "infinite"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("HandleBatch = %v", err)
	}
	// the next invocation works, on a fresh runtime: module state restarts
	if err := runBodies(t, rt, s, v, "b2", "counter"); err != nil {
		t.Fatal(err)
	}
	all := seen(t, rt, v.WorkerUID, "counter")
	if len(all) != 2 || string(all[0]) != `{"invocations":1}` || string(all[1]) != `{"invocations":1}` {
		t.Fatalf("counter reports %s", all)
	}
}

func TestHangingPromiseEndsAtDeadline(t *testing.T) {
	rt := New(Options{InvocationTimeout: 150 * time.Millisecond})
	defer rt.Close()
	s := newFakeSettler()
	start := time.Now()
	err := runBatch(t, rt, s, queueVersion(t, "v-hang", "hang"), "b1", 1)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("HandleBatch = %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > time.Second {
		t.Fatalf("took %s", d)
	}
}

// A Cloudflare Queues habit (message.ack(), message.retry(), batch.ackAll())
// fails as the TypeError it is, and its message names the method to call
// on this host; another missing member keeps goja's message alone.
func TestCloudflareSettlementNamesTheTakoformMethod(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	for _, c := range []struct{ mode, want string }{
		{"cloudflareAck", "batch.acknowledge(message.id)"},
		{"cloudflareRetry", "batch.retry(message.id, delaySeconds)"},
		{"cloudflareAckAll", "batch.acknowledgeAll()"},
	} {
		err := runBatch(t, rt, newFakeSettler(), queueVersion(t, "v-"+c.mode, c.mode), "b1", 1)
		var se *ScriptError
		if !errors.As(err, &se) || se.Name != "TypeError" || !strings.Contains(se.Message, c.want) || !strings.Contains(se.Message, "Cloudflare") {
			t.Errorf("%s: HandleBatch = %v, want a TypeError naming %s", c.mode, err, c.want)
		}
	}
	err := runBatch(t, rt, newFakeSettler(), queueVersion(t, "v-other", "otherMissing"), "b1", 1)
	var se *ScriptError
	if !errors.As(err, &se) || se.Name != "TypeError" || strings.Contains(se.Message, "Cloudflare") || !strings.Contains(se.Message, "frobnicate") {
		t.Errorf("otherMissing: HandleBatch = %v, want goja's TypeError alone", err)
	}
}
