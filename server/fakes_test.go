package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/takoform/queuehost/runtime/store"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/delivery"
)

// fakeEngine records what the server asks of the delivery engine. Gates
// let a test hold an effect (a Detach that has not proven its stop
// boundary, a queue removal in progress).
type fakeEngine struct {
	mu        sync.Mutex
	queues    map[string]delivery.QueueConfig
	consumers map[string]delivery.ConsumerConfig
	counts    map[string]int
	calls     []string
	stats     int // QueueStats calls

	detachGate chan struct{} // when set, Detach waits for it to be closed
	removeGate chan struct{}
	failAttach error
	failStats  error
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{queues: map[string]delivery.QueueConfig{}, consumers: map[string]delivery.ConsumerConfig{}, counts: map[string]int{}}
}

func (e *fakeEngine) record(c string) {
	e.calls = append(e.calls, c)
}

func (e *fakeEngine) AddQueue(_ context.Context, q delivery.QueueConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record("AddQueue " + q.UID)
	if _, ok := e.queues[q.UID]; ok {
		return fmt.Errorf("queue %s exists", q.UID)
	}
	e.queues[q.UID] = q
	return nil
}

func (e *fakeEngine) UpdateQueue(_ context.Context, q delivery.QueueConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record("UpdateQueue " + q.UID)
	if _, ok := e.queues[q.UID]; !ok {
		return abi.ErrUnknownQueue
	}
	e.queues[q.UID] = q
	return nil
}

func (e *fakeEngine) RemoveQueue(ctx context.Context, uid string) error {
	e.mu.Lock()
	gate := e.removeGate
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record("RemoveQueue " + uid)
	if _, ok := e.queues[uid]; !ok {
		return abi.ErrUnknownQueue
	}
	delete(e.queues, uid)
	return nil
}

// ChangedQueues lists every queue the fake holds: its counts are set by
// the tests directly, so it cannot tell which changed.
func (e *fakeEngine) ChangedQueues() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.queues))
	for uid := range e.queues {
		out = append(out, uid)
	}
	return out
}

func (e *fakeEngine) QueueStats(_ context.Context, uid string) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats++
	if e.failStats != nil {
		return 0, e.failStats
	}
	if _, ok := e.queues[uid]; !ok {
		return 0, abi.ErrUnknownQueue
	}
	return e.counts[uid], nil
}

func (e *fakeEngine) Attach(_ context.Context, c delivery.ConsumerConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record("Attach " + c.UID)
	if e.failAttach != nil {
		return e.failAttach
	}
	if _, ok := e.queues[c.QueueUID]; !ok {
		return abi.ErrUnknownQueue
	}
	if _, ok := e.consumers[c.UID]; ok {
		return fmt.Errorf("consumer %s attached", c.UID)
	}
	e.consumers[c.UID] = c
	return nil
}

func (e *fakeEngine) UpdateConsumer(_ context.Context, c delivery.ConsumerConfig) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record("UpdateConsumer " + c.UID)
	if _, ok := e.consumers[c.UID]; !ok {
		return errors.New("not attached")
	}
	e.consumers[c.UID] = c
	return nil
}

func (e *fakeEngine) Detach(ctx context.Context, uid string) error {
	e.mu.Lock()
	gate := e.detachGate
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record("Detach " + uid)
	delete(e.consumers, uid)
	return nil
}

func (e *fakeEngine) ConsumerAttached(_ context.Context, uid string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.consumers[uid]
	return ok, nil
}

// Inspect reports the fake's message count for the queue.
func (e *fakeEngine) Inspect(_ context.Context, uid string) (delivery.QueueInspection, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.queues[uid]; !ok {
		return delivery.QueueInspection{}, abi.ErrUnknownQueue
	}
	return delivery.QueueInspection{Messages: e.counts[uid]}, nil
}

// MessagePage lists nothing: the fake holds counts, not messages.
func (e *fakeEngine) MessagePage(ctx context.Context, uid string, after delivery.Cursor, _ int) ([]delivery.MessageInfo, delivery.Cursor, bool, error) {
	if _, err := e.Inspect(ctx, uid); err != nil {
		return nil, after, false, err
	}
	return nil, after, false, nil
}

func (e *fakeEngine) has(kind, uid string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if kind == "queue" {
		_, ok := e.queues[uid]
		return ok
	}
	_, ok := e.consumers[uid]
	return ok
}

func (e *fakeEngine) callsOf(prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// fakeWorkers stands in for the goja runtime in admission tests: a module
// "exports" the handlers whose method it defines, and the text
// SYNTAX_ERROR at line L, column C is a compile error there.
type fakeWorkers struct {
	mu        sync.Mutex
	evicted   []string
	forgotten []string // ModuleWorkers whose runtime state was dropped
	// invocations answers Invocations by worker UID.
	invocations map[string][]api.Invocation
	fetches     int // Fetch calls
}

func (f *fakeWorkers) fetchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches
}

var handlerRe = regexp.MustCompile(`\b(fetch|queue)\s*\(`)

func (f *fakeWorkers) Compile(_ context.Context, v *abi.Version) ([]string, error) {
	var exports []string
	for _, m := range v.Modules {
		for i, line := range strings.Split(m.Content, "\n") {
			if c := strings.Index(line, "SYNTAX_ERROR"); c >= 0 {
				return nil, &abi.CompileError{File: m.Name, Line: i + 1, Column: c + 1, Message: "Unexpected token"}
			}
		}
		if m.Name == v.MainModule {
			for _, mm := range handlerRe.FindAllStringSubmatch(m.Content, -1) {
				if !slices.Contains(exports, mm[1]) {
					exports = append(exports, mm[1])
				}
			}
		}
	}
	return exports, nil
}

// Fetch echoes what the worker would see; a request header "X-Throw"
// makes the handler throw.
func (f *fakeWorkers) Fetch(_ context.Context, v *abi.Version, req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.fetches++
	f.mu.Unlock()
	if req.Header.Get("X-Throw") != "" {
		return nil, errors.New("Error: boom")
	}
	body, _ := io.ReadAll(req.Body)
	rec := httptest.NewRecorder()
	rec.Header().Set("X-Seen-Auth", req.Header.Get("Authorization"))
	rec.Header().Set("X-Seen-Cookie", req.Header.Get("Cookie"))
	rec.Header().Set("X-Seen-Proxy-Auth", req.Header.Get("Proxy-Authorization"))
	if req.Header.Get("X-Forge") != "" {
		// A worker answering like the host would, with framing that
		// disagrees with its body.
		rec.Header().Set("Content-Type", "application/problem+json")
		rec.Header().Set("X-Request-Id", "forged")
		rec.Header().Set("Takohost-Response-Source", "host")
		rec.Header().Set("Set-Cookie", "session=stolen; Path=/")
		rec.WriteHeader(401)
		fmt.Fprint(rec, `{"code":"unauthenticated"}`)
		res := rec.Result()
		res.Header.Set("Content-Length", "99999")
		return res, nil
	}
	if hs := req.Header.Get("X-Set-Headers"); hs != "" {
		// A worker setting these response headers (a JSON object of
		// name to list of values).
		var set map[string][]string
		if err := json.Unmarshal([]byte(hs), &set); err != nil {
			return nil, err
		}
		for k, vs := range set {
			for _, v := range vs {
				rec.Header().Add(k, v)
			}
		}
	}
	rec.WriteHeader(201)
	fmt.Fprintf(rec, "%s %s %s %s", req.Method, req.URL.String(), v.UID, body)
	return rec.Result(), nil
}

func (f *fakeWorkers) Logs(context.Context, string, int64, int, time.Duration) ([]api.LogEntry, error) {
	return nil, nil
}

func (f *fakeWorkers) Invocations(workerUID string, limit int) []api.Invocation {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.invocations[workerUID]
	return l[:min(limit, len(l))]
}

func (f *fakeWorkers) ForgetWorker(uid string) {
	f.mu.Lock()
	f.forgotten = append(f.forgotten, uid)
	f.mu.Unlock()
}

func (f *fakeWorkers) Evict(uid string) {
	f.mu.Lock()
	f.evicted = append(f.evicted, uid)
	f.mu.Unlock()
}

// Purge empties the fake's count for the queue.
func (e *fakeEngine) Purge(ctx context.Context, uid string, extra func(int) []store.Mutation) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.queues[uid]; !ok {
		return 0, abi.ErrUnknownQueue
	}
	n := e.counts[uid]
	e.counts[uid] = 0
	return n, nil
}

// MoveNext finds nothing to move: the fake holds counts, not messages.
func (e *fakeEngine) MoveNext(ctx context.Context, req delivery.MoveRequest) (delivery.MoveResult, error) {
	if _, err := e.Inspect(ctx, req.From); err != nil {
		return delivery.MoveResult{}, err
	}
	return delivery.MoveResult{Outcome: delivery.MoveDone, Next: req.After}, nil
}
