package js

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/takoform/queuehost/abi"
)

// loadVersion builds a Version from testdata/<dir>: every file is a module
// named by its path under the directory; main.js is the main module.
func loadVersion(t testing.TB, dir, uid string) *abi.Version {
	t.Helper()
	root := filepath.Join("testdata", dir)
	var mods []abi.Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		mods = append(mods, abi.Module{Name: filepath.ToSlash(rel), Content: string(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name })
	return &abi.Version{UID: uid, Space: "space-1", WorkerUID: "worker-" + uid, Principal: "alice", MainModule: "main.js", Modules: mods}
}

// fakeSettler is the engine's side of settlements: batches are live until
// end() (what the engine does when HandleBatch returns).
type fakeSettler struct {
	mu      sync.Mutex
	batches map[string]*fakeBatch
	fail    error
}

type fakeBatch struct {
	ids     []string
	settled map[string]bool
	live    bool
	log     []abi.Settlement
}

func newFakeSettler() *fakeSettler { return &fakeSettler{batches: map[string]*fakeBatch{}} }

func (s *fakeSettler) batch(id string, n int) *abi.Batch {
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("body %d", i+1)
	}
	return s.batchOf(id, bodies...)
}

// batchOf makes a live batch with messages m1, m2, ... carrying bodies.
func (s *fakeSettler) batchOf(id string, bodies ...string) *abi.Batch {
	var msgs []abi.Message
	fb := &fakeBatch{settled: map[string]bool{}, live: true}
	for i, body := range bodies {
		mid := fmt.Sprintf("m%d", i+1)
		fb.ids = append(fb.ids, mid)
		msgs = append(msgs, abi.Message{ID: mid, TimestampMillis: 1700000000000 + int64(i+1), Body: []byte(body), Attempts: i + 1})
	}
	s.mu.Lock()
	s.batches[id] = fb
	s.mu.Unlock()
	return abi.NewBatch(id, "orders", msgs, s)
}

func (s *fakeSettler) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.batches[id]; b != nil {
		b.live = false
	}
}

func (s *fakeSettler) settlements(id string) []abi.Settlement {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]abi.Settlement(nil), s.batches[id].log...)
}

func (s *fakeSettler) Settle(ctx context.Context, batchID string, st abi.Settlement) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	b := s.batches[batchID]
	if b == nil || !b.live {
		return abi.ErrUnknownBatch
	}
	switch st.Kind {
	case abi.Acknowledge, abi.Retry:
		found := false
		for _, id := range b.ids {
			found = found || id == st.MessageID
		}
		if !found {
			return abi.ErrUnknownMessage
		}
		if b.settled[st.MessageID] {
			return abi.ErrAlreadySettled
		}
		b.settled[st.MessageID] = true
	default:
		for _, id := range b.ids {
			b.settled[id] = true
		}
	}
	b.log = append(b.log, st)
	return nil
}

// fakeSender records sends and issues IDs.
type fakeSender struct {
	mu    sync.Mutex
	calls []sendCall
	next  int
	fail  error
}

type sendCall struct {
	Principal, Space, Queue string
	Msgs                    []abi.OutgoingMessage
}

func (s *fakeSender) Send(ctx context.Context, principal, space, queueUID string, msgs []abi.OutgoingMessage) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	s.calls = append(s.calls, sendCall{principal, space, queueUID, msgs})
	ids := make([]string, len(msgs))
	for i := range msgs {
		s.next++
		ids[i] = fmt.Sprintf("id-%d", s.next)
	}
	return ids, nil
}

func (s *fakeSender) sent() []sendCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sendCall(nil), s.calls...)
}

// seen returns the values the fixtures reported with seen(tag, value), in
// order.
func seen(t testing.TB, rt *Runtime, worker, tag string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, e := range rt.Logs(worker, 0, 100000) {
		rest, ok := strings.CutPrefix(e.Message, "SEEN "+tag+" ")
		if ok {
			out = append(out, json.RawMessage(rest))
		}
	}
	return out
}

func seenOne(t testing.TB, rt *Runtime, worker, tag string, v any) {
	t.Helper()
	all := seen(t, rt, worker, tag)
	if len(all) != 1 {
		t.Fatalf("seen %q: %d reports, want 1; logs: %+v", tag, len(all), rt.Logs(worker, 0, 1000))
	}
	if err := json.Unmarshal(all[0], v); err != nil {
		t.Fatalf("seen %q: %v", tag, err)
	}
}

// queueVersion is the queue fixture with MODE set.
func queueVersion(t testing.TB, uid, mode string) *abi.Version {
	v := loadVersion(t, "queue", uid)
	v.Vars = map[string]string{"MODE": mode, "GREETING": "hello"}
	v.Secrets = map[string]string{"TOKEN": "s3cret"}
	v.Bindings = []abi.Binding{{Name: "OUT", QueueUID: "queue-out"}}
	return v
}

// runBatch runs one batch of n messages through v's queue handler and ends
// the batch afterwards, as the engine does.
func runBatch(t testing.TB, rt *Runtime, s *fakeSettler, v *abi.Version, batchID string, n int) error {
	t.Helper()
	h, err := rt.QueueHandler(v)
	if err != nil {
		t.Fatalf("QueueHandler: %v", err)
	}
	b := s.batch(batchID, n)
	err = h.HandleBatch(context.Background(), b)
	s.end(batchID)
	return err
}

// runBodies is runBatch with the messages' bodies given (MODE "byBody").
func runBodies(t testing.TB, rt *Runtime, s *fakeSettler, v *abi.Version, batchID string, bodies ...string) error {
	t.Helper()
	h, err := rt.QueueHandler(v)
	if err != nil {
		t.Fatalf("QueueHandler: %v", err)
	}
	err = h.HandleBatch(context.Background(), s.batchOf(batchID, bodies...))
	s.end(batchID)
	return err
}

func isScriptError(err error, msg string) bool {
	var se *ScriptError
	return errors.As(err, &se) && strings.Contains(se.Message, msg)
}
