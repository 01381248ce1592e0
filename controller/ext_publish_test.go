package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// errSender answers every send with err, having seen what it was given.
// (With st, it writes the extra mutations there, as the engine writes
// them with the messages.)
type errSender struct {
	err   error
	calls int
	st    store.Store
}

func (s *errSender) SendWith(ctx context.Context, _ string, msgs []abi.OutgoingMessage, extra func([]string) []store.Mutation) ([]string, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	ids := make([]string, len(msgs))
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d-%d", s.calls, i)
	}
	if s.st != nil && extra != nil {
		if err := s.st.Apply(ctx, extra(ids)...); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func newPublishController(t *testing.T, s Sender) (*Controller, string) {
	t.Helper()
	st := store.NewMemory()
	c, err := New(Options{Store: st, Engine: newMemEngine(), Workers: noWorkers{}, Sender: s,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ObserveInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	op := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(t.Context(), CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds": 60}`)})
	})
	return c, op.ResourceUID
}

// Each engine error is answered with the producer Binding's code, as a
// problem with a 4xx or 503 status.
func TestPublishAnswersTheBindingsCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{abi.ErrBatchTooLarge, "batch_too_large"},
		{abi.ErrInvalidBody, "invalid_body"},
		{fmt.Errorf("messages[1]: %w", abi.ErrInvalidBody), "invalid_body"},
		{abi.ErrInvalidDelay, "invalid_body"},
		{abi.ErrMessageTooLarge, "message_too_large"},
		{abi.ErrUnknownQueue, "operation_in_progress"},
		{fmt.Errorf("%w: disk", abi.ErrBackendUnavailable), "backend_unavailable"},
		{errors.New("anything else"), "backend_unavailable"},
	} {
		s := &errSender{err: tc.err}
		c, q := newPublishController(t, s)
		_, _, err := c.Publish(t.Context(), PublishRequest{Principal: admin, Space: "s", UID: q, Messages: []abi.OutgoingMessage{{Body: []byte("a")}}})
		wantCode(t, err, tc.code)
	}
}

// The grant is checked before anything is read or sent.
func TestPublishChecksTheGrantFirst(t *testing.T) {
	s := &errSender{}
	c, q := newPublishController(t, s)
	pub := &auth.Principal{ID: "pr_p", Grants: []auth.Grant{{Space: "s", Role: auth.RolePublisher, Queues: []string{"r-other"}}}}
	for _, uid := range []string{q, "r-missing"} {
		_, _, err := c.Publish(t.Context(), PublishRequest{Principal: pub, Space: "s", UID: uid, Messages: []abi.OutgoingMessage{{Body: []byte("a")}}})
		wantCode(t, err, "forbidden")
	}
	if s.calls != 0 {
		t.Fatalf("a refused publish reached the sender %d times", s.calls)
	}
	pub.Grants[0].Queues = []string{q}
	ids, replayed, err := c.Publish(t.Context(), PublishRequest{Principal: pub, Space: "s", UID: q, Messages: []abi.OutgoingMessage{{Body: []byte("a")}}})
	if err != nil || replayed || len(ids) != 1 {
		t.Fatalf("publish as the queue's publisher: %v %v %v", ids, replayed, err)
	}
	// Without a Sender the host does not publish.
	c2, q2 := newPublishController(t, nil)
	_, _, err = c2.Publish(t.Context(), PublishRequest{Principal: admin, Space: "s", UID: q2, Messages: []abi.OutgoingMessage{{Body: []byte("a")}}})
	wantCode(t, err, "backend_unavailable")
}

// A space records at most MaxPublishKeysPerSpace keyed publishes per
// window: past it a keyed publish is limit_exceeded and sends nothing,
// while replays and publishes without a key go on; a publish that failed
// does not count, and the window moves on with the clock.
func TestPublishKeysPerSpaceAreBounded(t *testing.T) {
	st := store.NewMemory()
	s := &errSender{st: st}
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	c, err := New(Options{Store: st, Engine: newMemEngine(), Workers: noWorkers{}, Sender: s, MaxPublishKeysPerSpace: 2,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ObserveInterval: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	op := mustRun(t, c, func() (store.Operation, bool, error) {
		return c.Create(t.Context(), CreateRequest{Principal: admin, Space: "s", Name: "q", FormURL: schemas.FormAtLeastOnceQueue, Spec: []byte(`{"messageRetentionSeconds": 60}`)})
	})
	pub := func(key string) error {
		req := PublishRequest{Principal: admin, Space: "s", UID: op.ResourceUID, Messages: []abi.OutgoingMessage{{Body: []byte("a")}}}
		if key != "" {
			req.Idempotency = Idempotency{Key: key, Scope: "scope", Fingerprint: "f"}
		}
		_, _, err := c.Publish(t.Context(), req)
		return err
	}
	s.err = errors.New("store down")
	if err := pub("k0"); err == nil {
		t.Fatal("the failing send succeeded")
	}
	s.err = nil
	for _, k := range []string{"k1", "k2"} {
		if err := pub(k); err != nil {
			t.Fatalf("publish %s: %v", k, err)
		}
	}
	calls := s.calls
	wantCode(t, pub("k3"), "limit_exceeded")
	if s.calls != calls {
		t.Fatal("a publish over the bound reached the sender")
	}
	if err := pub(""); err != nil {
		t.Fatalf("a publish without a key: %v", err)
	}
	if err := pub("k1"); err != nil || s.calls != calls+1 {
		t.Fatalf("the replay of k1 past the bound: %v (sender called %d times, want %d)", err, s.calls, calls+1)
	}
	now = now.Add(23 * time.Hour)
	wantCode(t, pub("k3"), "limit_exceeded")
	now = now.Add(time.Hour)
	if err := pub("k3"); err != nil {
		t.Fatalf("a keyed publish a window later: %v", err)
	}
}
