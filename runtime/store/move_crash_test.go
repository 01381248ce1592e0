package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/takoform/queuehost/runtime/journal"
	"github.com/takoform/queuehost/runtime/store"
)

// A redrive's move (spec/peers.md §Redrive) is one Apply: the accept into
// the target, the removal from the dead-letter queue and the Operation's
// progress. Cut the journal at every byte of the last moves' frames (a
// crash during the write) and reopen: every message is in exactly one of
// the two queues, and the progress counts exactly those in the target.
func TestMoveIsAtomicAtEveryCrashPoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openJournaled(t, journal.OSFS{}, dir, 1<<20)
	const n = 6
	var muts []store.Mutation
	for i := range n {
		body := fmt.Appendf(nil, "body-%d", i)
		muts = append(muts, store.AcceptMessage{
			Message: store.Message{Queue: "dlq", ID: fmt.Sprintf("d%d", i), AcceptedAt: int64(i), VisibleAt: int64(i), Size: len(body),
				DeadLetter: &store.DeadLetter{SourceQueue: "q", Reason: store.ReasonRetriesExhausted, Attempts: 2}},
			Body: body,
		})
	}
	op := store.Operation{ID: "op-r", Space: "s", Kind: "redrive", ResourceUID: "dlq", State: store.OpRunning, Effect: store.EffectNone,
		Progress: json.RawMessage(`{"moved":0}`)}
	muts = append(muts, store.PutOperation{Operation: op})
	if err := s.Apply(ctx, muts...); err != nil {
		t.Fatal(err)
	}
	seg := lastSegment(t, dir)
	move := func(i int) {
		t.Helper()
		body := fmt.Appendf(nil, "body-%d", i)
		o := op
		o.Effect, o.Progress = store.EffectPartial, fmt.Appendf(nil, `{"moved":%d}`, i+1)
		if err := s.Apply(ctx,
			store.AcceptMessage{Message: store.Message{Queue: "q", ID: fmt.Sprintf("new-%d", i), AcceptedAt: 100, VisibleAt: 100, Size: len(body)}, Body: body},
			store.RemoveMessages{Queue: "dlq", IDs: []string{fmt.Sprintf("d%d", i)}, Reason: store.RemovedRedriven},
			store.PutOperation{Operation: o},
		); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n - 1 {
		move(i)
	}
	// The files as they are before the last move, and the segment after it.
	before := t.TempDir()
	copyDir(t, dir, before)
	start := fileSize(t, seg)
	move(n - 1)
	s.Close()
	full, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// A crash at every byte of the last move's frame, and after it.
	cuts := 0
	for cut := start; cut <= int64(len(full)); cut++ {
		cdir := t.TempDir()
		copyDir(t, before, cdir)
		if err := os.WriteFile(filepath.Join(cdir, filepath.Base(seg)), full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		r := openJournaled(t, journal.OSFS{}, cdir, 1<<20)
		inQ, inDLQ := bodies(t, r, "q"), bodies(t, r, "dlq")
		got, err := r.Operation(ctx, "op-r")
		r.Close()
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		var p struct{ Moved int }
		json.Unmarshal(got.Progress, &p)
		all := append(append([]string{}, inQ...), inDLQ...)
		sort.Strings(all)
		if len(all) != n {
			t.Fatalf("cut at %d: q holds %v, dlq %v: %d messages, want %d each once", cut, inQ, inDLQ, len(all), n)
		}
		for i, b := range all {
			if b != fmt.Sprintf("body-%d", i) {
				t.Fatalf("cut at %d: q holds %v, dlq %v", cut, inQ, inDLQ)
			}
		}
		want := n - 1
		if cut == int64(len(full)) {
			want = n
		}
		if p.Moved != len(inQ) || len(inQ) != want {
			t.Fatalf("cut at %d of %d: progress %d moved, q holds %d, want %d", cut, len(full), p.Moved, len(inQ), want)
		}
		cuts++
	}
	t.Logf("%d crash points checked", cuts)
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no segment")
	}
	sort.Strings(segs)
	return segs[len(segs)-1]
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			// A temporary file of a checkpoint that the journal, still
			// open, renamed after the listing.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func bodies(t *testing.T, s store.Store, queue string) []string {
	t.Helper()
	ms, err := s.Messages(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		b, err := store.Body(context.Background(), s, queue, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}
