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
type errSender struct {
	err   error
	calls int
}

func (s *errSender) SendWith(_ context.Context, _ string, msgs []abi.OutgoingMessage, _ func([]string) []store.Mutation) ([]string, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	ids := make([]string, len(msgs))
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
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
