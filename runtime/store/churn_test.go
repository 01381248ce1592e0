package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"
)

// retained is what the state keeps of resources and Operations, in bytes
// of the slices that can be large (specs, intents, errors).
func retained(s *state) (n int64) {
	for _, e := range s.resources {
		n += int64(len(e.r.Spec) + len(e.r.Observed) + len(e.r.PrivateInputs))
	}
	for _, e := range s.ops {
		n += int64(len(e.o.Intent) + len(e.o.Error))
	}
	return n
}

// TestChurnStaysProportionalToLive creates and deletes a resource with a
// large spec over and over, with its create and delete Operations as the
// server journals them (the intent holds the whole record): memory and
// the journal must come back to proportional-to-live, not grow with the
// number of cycles.
func TestChurnStaysProportionalToLive(t *testing.T) {
	ctx := context.Background()
	const seg = 1 << 20
	dir := t.TempDir()
	opts := Options{SegmentSize: seg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DisableCompaction: true, ZeroAhead: -1}
	s, _, err := Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	spec := json.RawMessage(`{"module":"` + string(bytes.Repeat([]byte("x"), 256<<10)) + `"}`)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const cycles = 30
	for i := range cycles {
		at := t0.Add(time.Duration(i) * time.Minute)
		r := Resource{UID: fmt.Sprintf("u%d", i), Space: "s", Name: "w", FormURL: "f", Spec: spec, Observed: json.RawMessage(`{}`), State: StateActive, CreateTime: at, UpdateTime: at}
		intent, _ := json.Marshal(map[string]any{"formUrl": "f", "resource": r})
		create := Operation{ID: fmt.Sprintf("c%d", i), Space: "s", Kind: "create", ResourceUID: r.UID, State: OpRunning, Effect: EffectNone, FormURL: "f", Intent: intent, CreateTime: at, UpdateTime: at}
		del := Operation{ID: fmt.Sprintf("d%d", i), Space: "s", Kind: "delete", ResourceUID: r.UID, State: OpRunning, Effect: EffectNone, FormURL: "f", Intent: []byte(`{"formUrl":"f"}`), CreateTime: at, UpdateTime: at}
		steps := [][]Mutation{
			{PutResource{r}, PutOperation{create}, PutIdempotency{IdempotencyRecord{Scope: "p", Key: create.ID, OperationID: create.ID, CreateTime: at}}},
			{PutOperation{done(create)}},
			{PutOperation{del}},
			{DeleteResource{r.UID}, PutOperation{done(del)}},
		}
		for _, muts := range steps {
			if err := s.Apply(ctx, muts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Within the 24 hours the Operations stay, but without their intents.
	if got := retained(s.st); got > 1<<10 {
		t.Fatalf("after %d create+delete cycles the state retains %d bytes of specs and intents, want ~0", cycles, got)
	}
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Bytes > 2*seg {
		t.Fatalf("after churn and compaction the journal holds %d bytes (%d live), want at most two segments", st.Bytes, st.LiveBytes)
	}
	// After the 24 hours they go, with their idempotency keys.
	n, err := s.ExpireRecords(ctx, t0.Add(cycles*time.Minute+24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3*cycles || len(s.st.ops) != 0 || len(s.st.idem) != 0 {
		t.Fatalf("expired %d records; %d Operations and %d keys left", n, len(s.st.ops), len(s.st.idem))
	}
	s.Close()
	s, _, err = Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.st.ops) != 0 || len(s.st.idem) != 0 || len(s.st.resources) != 0 {
		t.Fatalf("after reopening: %d Operations, %d keys, %d resources", len(s.st.ops), len(s.st.idem), len(s.st.resources))
	}
}

func done(o Operation) Operation {
	o.State, o.Effect = OpSucceeded, EffectApplied
	o.UpdateTime = o.UpdateTime.Add(time.Second)
	return o
}
