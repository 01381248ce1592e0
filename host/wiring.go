package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/membudget"
	"github.com/takoform/queuehost/runtime/store"
)

// sender authorises every producer Binding call at call time (a reference
// grants no permission), then sends through the engine: the version's
// creator, found by the ID the version recorded (never by name), must be
// allowed to send, and so must the principal whose request invoked the
// worker, when one did (spec/host-api.md §Authentication and
// authorisation). A refusal is backend_unavailable, the only rejection the
// Form names; its message (which the runtime logs to the worker's log) says
// why.
type sender struct{ h *Host }

func (s sender) Send(ctx context.Context, creator, space, queueUID string, msgs []abi.OutgoingMessage) ([]string, error) {
	// The grants are checked against the queue's Form (the registry's
	// queue Form when there is no such queue, so that a principal that may
	// not send learns that first, as before the queue is read).
	forms := s.h.forms
	q, err := s.h.st.Resource(ctx, queueUID)
	exists := err == nil && q.Space == space && forms.IsQueue(q.FormURL) && q.State != store.StateDeleting
	form := forms.DefaultQueue()
	if exists {
		form = q.FormURL
	}
	p, ok := s.h.principals.Creator(creator)
	if !ok || !p.Can(space, form, auth.Write) { // mutate:send-authorised-at-call
		return nil, fmt.Errorf("%w: the version's creator may not send to %s resources in space %q", abi.ErrBackendUnavailable, forms.Name(form), space)
	}
	if inv, ok := abi.Invoker(ctx); ok {
		ip, found := s.h.principals.ByID(inv)
		if !found || !ip.Can(space, form, auth.Write) {
			return nil, fmt.Errorf("%w: the principal that invoked the worker may not send to %s resources in space %q", abi.ErrBackendUnavailable, forms.Name(form), space)
		}
	}
	if !exists {
		return nil, fmt.Errorf("%w: the queue %s does not exist in space %q", abi.ErrBackendUnavailable, queueUID, space)
	}
	// The bodies are held until they are durable: charged to the invoking
	// principal (else the creator), refused when its share is in use.
	var size int64
	for _, m := range msgs {
		size += int64(len(m.Body))
	}
	hold := membudget.Holder{Principal: creator}
	if inv, ok := abi.Invoker(ctx); ok {
		hold.Principal = inv
	}
	res, err := s.h.budget.Reserve(hold, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; nothing was sent", abi.ErrBackendUnavailable, err)
	}
	defer res.Release()
	ids, err := s.h.eng.Send(ctx, queueUID, msgs)
	return ids, workerSendError(s.h.log, queueUID, err)
}

// workerSendError is the error a worker sees for a failed send: the Form's
// codes as they are, but a backend failure without the store's own text,
// which can name the host's files. The host's log keeps the cause.
func workerSendError(log *slog.Logger, queueUID string, err error) error {
	if err == nil || abi.Code(err) != "backend_unavailable" || errors.Is(err, abi.ErrUnknownQueue) {
		return err
	}
	log.Warn("a producer send failed", "queue", queueUID, "err", err)
	if errors.Is(err, store.ErrNoSpace) {
		return fmt.Errorf("%w: the host's disk is nearly full; nothing was sent", abi.ErrBackendUnavailable)
	}
	return fmt.Errorf("%w: the host could not make the send durable; nothing was sent, the host's log says why", abi.ErrBackendUnavailable)
}

// resolver maps a ModuleWorker to its selected version's queue handler at
// delivery time, so that selecting another version applies to the next
// batch.
type resolver struct{ h *Host }

func (r resolver) Resolve(ctx context.Context, workerUID string) (abi.Handler, error) {
	v, _, err := r.h.versions.Selected(ctx, workerUID)
	if err != nil {
		return nil, err
	}
	h, err := r.h.rt.QueueHandler(v)
	if err != nil {
		return nil, err
	}
	// The version is recorded with each attempt (attempt history).
	return abi.Versioned(h, v.UID), nil
}

// workers adapts the runtime to controller.Workers and server.Workers.
type workers struct{ h *Host }

// Compile uses the runtime's uncached compile: admission compiles versions
// that may still be refused, which the runtime's cache must not keep.
func (w workers) Compile(ctx context.Context, v *abi.Version) ([]string, error) {
	return w.h.rt.Compile(ctx, v)
}

// Fetch passes the request the server built (http://worker.invalid/<path>)
// to the runtime. The runtime answers a handler that threw or timed out
// with its own 500 problem; the host turns that into an error so that the
// server answers worker_error as spec/host-api.md says.
func (w workers) Fetch(ctx context.Context, v *abi.Version, r *http.Request) (*http.Response, error) {
	resp, err := w.h.rt.Fetch(ctx, v, r, r.URL.Path)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusInternalServerError && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		var p struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(b, &p) == nil && strings.HasPrefix(p.Code, "worker_") {
			return nil, fmt.Errorf("host: the worker's fetch handler failed (%s)", p.Code)
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	return resp, nil
}

// Logs reads the worker's log; with wait > 0 and nothing after the
// cursor, it first waits (at most wait, until the request ends or the host
// shuts down) for a line to arrive.
func (w workers) Logs(ctx context.Context, workerUID string, after int64, limit int, wait time.Duration) ([]api.LogEntry, error) {
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-w.h.logs.Wait(workerUID, after):
		case <-t.C:
		case <-ctx.Done():
		case <-w.h.stopping:
		}
	}
	return toAPILogs(w.h.logs.List(workerUID, after, limit)), nil
}

func (w workers) Invocations(workerUID string, limit int) []api.Invocation {
	l := w.h.invocations.list(workerUID, limit)
	out := make([]api.Invocation, len(l))
	for i, v := range l {
		out[i] = api.Invocation{ConsumerUid: v.ConsumerUID, QueueUid: v.QueueUID, Messages: v.Messages,
			DurationMillis: float64(v.Duration.Microseconds()) / 1000, FinishTimeMillis: v.Finished.UnixMilli(),
			Outcome: api.InvocationOutcomeSucceeded}
		if v.Failed {
			out[i].Outcome = api.InvocationOutcomeFailed
		}
	}
	return out
}

func (w workers) Evict(versionUID string) { w.h.rt.Evict(versionUID) }

func (w workers) ForgetWorker(workerUID string) {
	w.h.invocations.forget(workerUID)
	w.h.rt.ForgetWorker(workerUID)
	w.h.logs.Forget(workerUID)
}
