package js

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"weak"

	"github.com/takoform/queuehost/abi"
)

type sendSeen struct {
	OK      bool            `json:"ok"`
	Value   json.RawMessage `json:"value"`
	Name    string          `json:"name"`
	Message string          `json:"message"`
	IsError bool            `json:"isError"`
}

func TestProducerBindings(t *testing.T) {
	t.Run("Sender", func(t *testing.T) { testProducerBindings(t, &fakeSender{}, nil) })
	// The same, through a SendStarter and a Waiter: each send is started
	// on the loop and its result comes from another goroutine.
	t.Run("SendStarter", func(t *testing.T) {
		snd := &startingSender{fakeSender: &fakeSender{}}
		w := &countingWaiter{}
		testProducerBindings(t, snd, w)
		if n, want := snd.started.Load(), int64(len(snd.sent())); n != want {
			t.Errorf("%d sends started, %d sent: the runtime called Send, not StartSend", n, want)
		}
		if w.waits.Load() == 0 || w.wakes.Load() < snd.started.Load() {
			t.Errorf("the Waiter waited %d times and was woken %d times for %d sends", w.waits.Load(), w.wakes.Load(), snd.started.Load())
		}
	})
}

// startingSender is a SendStarter whose sends each complete on a goroutine
// of their own.
type startingSender struct {
	*fakeSender
	started atomic.Int64
}

func (s *startingSender) StartSend(ctx context.Context, principal, space, queueUID string, msgs []abi.OutgoingMessage, done func([]string, error)) {
	s.started.Add(1)
	go func() { done(s.Send(ctx, principal, space, queueUID, msgs)) }()
}

// countingWaiter waits as the runtime does without one, counting.
type countingWaiter struct{ waits, wakes atomic.Int64 }

func (w *countingWaiter) Wait(ctx context.Context, wake <-chan struct{}) {
	w.waits.Add(1)
	select {
	case <-wake:
	case <-ctx.Done():
	}
}

func (w *countingWaiter) Wake(context.Context) { w.wakes.Add(1) }

func testProducerBindings(t *testing.T, sender abi.Sender, w Waiter) {
	var snd *fakeSender
	switch s := sender.(type) {
	case *fakeSender:
		snd = s
	case *startingSender:
		snd = s.fakeSender
	}
	rt := New(Options{Sender: sender, Waiter: w})
	defer rt.Close()
	v := queueVersion(t, "v-sends", "sends")
	if err := runBatch(t, rt, newFakeSettler(), v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	var got map[string]sendSeen
	seenOne(t, rt, v.WorkerUID, "sends", &got)

	if string(got["keys"].Value) != `["send","sendBatch"]` {
		t.Errorf("env.OUT has %s", got["keys"].Value)
	}
	rejects := map[string]string{
		"tooLarge":          "message_too_large",
		"tooLargeString":    "message_too_large",
		"object":            "invalid_body",
		"number":            "invalid_body",
		"null":              "invalid_body",
		"undefined":         "invalid_body",
		"empty":             "invalid_body",
		"unknownOption":     "invalid_body",
		"badDelay":          "invalid_body",
		"delayTooBig":       "invalid_body",
		"optionsNotObject":  "invalid_body",
		"batchOf101":        "batch_too_large",
		"batchOf0":          "batch_too_large",
		"batchNotArray":     "invalid_body",
		"batchUnknownField": "invalid_body",
		"batchBadBody":      "invalid_body",
		"batchTooLargeBody": "message_too_large",
	}
	for k, name := range rejects {
		if e := got[k]; e.OK || e.Name != name || !e.IsError || e.Message == "" {
			t.Errorf("%s: %+v, want a rejection named %s", k, e, name)
		}
	}
	// what reached the Sender, in order: only the valid sends
	calls := snd.sent()
	type msg struct {
		body  []byte
		delay *int
	}
	var flat [][]msg
	for _, c := range calls {
		if c.Principal != "alice" || c.Space != "space-1" || c.Queue != "queue-out" {
			t.Errorf("send call %+v", c)
		}
		var ms []msg
		for _, m := range c.Msgs {
			ms = append(ms, msg{m.Body, m.Delay})
		}
		flat = append(flat, ms)
	}
	want := [][]msg{
		{{[]byte("é"), nil}},
		{{[]byte{2, 3, 4}, nil}},
		{{[]byte{5, 6, 7}, nil}},
		{{[]byte{2, 3}, nil}},
		{{[]byte{0, 1, 2, 3, 4, 5, 6, 7}, nil}},
		{{[]byte("later"), intp(30)}},
		{{make([]byte, 127000), nil}},
		{{[]byte("a"), nil}, {[]byte("b"), intp(5)}, {[]byte("c"), nil}},
	}
	if len(flat) != len(want) {
		t.Fatalf("%d sends, want %d: %+v", len(flat), len(want), calls)
	}
	for i := range want {
		if len(flat[i]) != len(want[i]) {
			t.Fatalf("send %d: %d messages", i, len(flat[i]))
		}
		for j := range want[i] {
			if !bytes.Equal(flat[i][j].body, want[i][j].body) || !reflect.DeepEqual(flat[i][j].delay, want[i][j].delay) {
				t.Errorf("send %d message %d: body %x delay %v", i, j, flat[i][j].body, flat[i][j].delay)
			}
		}
	}
	if len(calls[0].Msgs[0].Body) != 2 {
		t.Errorf("\"é\" sent as %d bytes", len(calls[0].Msgs[0].Body))
	}
	// resolved values: the IDs, in input order for sendBatch
	if string(got["utf8"].Value) != `"id-1"` || string(got["max"].Value) != `"id-7"` {
		t.Errorf("send resolved %s, %s", got["utf8"].Value, got["max"].Value)
	}
	if string(got["batch"].Value) != `["id-8","id-9","id-10"]` {
		t.Errorf("sendBatch resolved %s", got["batch"].Value)
	}
}

func TestSendBackendErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		name string
	}{
		{abi.ErrBackendUnavailable, "backend_unavailable"},
		{abi.ErrUnknownQueue, "backend_unavailable"},
		{errors.New("forbidden for alice"), "backend_unavailable"},
		{abi.ErrMessageTooLarge, "message_too_large"},
	} {
		snd := &fakeSender{fail: c.err}
		rt := New(Options{Sender: snd})
		v := queueVersion(t, "v-sendfail", "sendFails")
		if err := runBatch(t, rt, newFakeSettler(), v, "b1", 1); err != nil {
			t.Fatal(err)
		}
		var e sendSeen
		seenOne(t, rt, v.WorkerUID, "fail", &e)
		if e.OK || e.Name != c.name || e.Message != c.err.Error() {
			t.Errorf("%v: JS saw %+v", c.err, e)
		}
		rt.Close()
	}
}

func TestNoSenderIsBackendUnavailable(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := queueVersion(t, "v-nosender", "sendFails")
	if err := runBatch(t, rt, newFakeSettler(), v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	var e sendSeen
	seenOne(t, rt, v.WorkerUID, "fail", &e)
	if e.OK || e.Name != "backend_unavailable" {
		t.Fatalf("JS saw %+v", e)
	}
}

func TestEnvHoldsVarsSecretsBindings(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := queueVersion(t, "v-env", "env")
	if err := runBatch(t, rt, newFakeSettler(), v, "b1", 1); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Keys     []string `json:"keys"`
		GREETING string
		TOKEN    string
	}
	seenOne(t, rt, v.WorkerUID, "env", &got)
	// The worker reports env through its log, which hides secret values:
	// exactly "[secret TOKEN]" means env.TOKEN held exactly the secret.
	if !reflect.DeepEqual(got.Keys, []string{"GREETING", "MODE", "OUT", "TOKEN"}) || got.GREETING != "hello" || got.TOKEN != "[secret TOKEN]" {
		t.Fatalf("env %+v", got)
	}
}

// keepingSender is a SendStarter that checks, before it completes a send,
// that nothing else holds the bodies it was given: once started, a send's
// bodies are the sender's (a sandbox frees them as soon as they are
// written to the host, which can take long to answer).
type keepingSender struct {
	checked, held atomic.Int64
}

func (*keepingSender) Send(context.Context, string, string, string, []abi.OutgoingMessage) ([]string, error) {
	return nil, errors.New("keepingSender: Send called, not StartSend")
}

func (s *keepingSender) StartSend(ctx context.Context, principal, space, queueUID string, msgs []abi.OutgoingMessage, done func([]string, error)) {
	ids := make([]string, len(msgs))
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	var bodies []weak.Pointer[byte]
	for _, m := range msgs {
		if len(m.Body) >= 1000 {
			bodies = append(bodies, weak.Make(&m.Body[0]))
		}
	}
	go func() {
		runtime.GC()
		runtime.GC()
		for _, b := range bodies {
			s.checked.Add(1)
			if b.Value() != nil {
				s.held.Add(1)
			}
		}
		done(ids, nil)
	}()
}

func TestStartedSendsKeepNoBodies(t *testing.T) {
	snd := &keepingSender{}
	rt := New(Options{Sender: snd})
	defer rt.Close()
	if err := runBatch(t, rt, newFakeSettler(), queueVersion(t, "v-keep", "sends"), "b1", 1); err != nil {
		t.Fatal(err)
	}
	if snd.checked.Load() == 0 || snd.held.Load() != 0 {
		t.Fatalf("%d of %d large bodies still held by the runtime while their send waited", snd.held.Load(), snd.checked.Load())
	}
}
