package store

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func allMutations() []Mutation {
	t1 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	return []Mutation{
		PutResource{Resource{UID: "u", Space: "s", Name: "n", FormURL: "f", Offering: "o",
			Spec: json.RawMessage(`{"a":1}`), Observed: json.RawMessage(`{}`), State: StateActive,
			Generation: -3, ETag: "e", CreateTime: t1, UpdateTime: t1.Add(time.Second), Exports: []string{"fetch"}, Creator: "c"}},
		PutResource{Resource{UID: "u2", Exports: []string{}, Spec: json.RawMessage{}}},
		DeleteResource{UID: "u"},
		PutOperation{Operation{ID: "o", Space: "s", Kind: "create", ResourceUID: "u", State: OpFailed, Effect: EffectNone,
			Error: json.RawMessage(`{"status":500}`), IdempotencyKey: "k", Principal: "p", FormURL: "f", Intent: json.RawMessage(`{}`), CreateTime: t1, UpdateTime: t1}},
		DeleteOperation{ID: "o"},
		PutIdempotency{IdempotencyRecord{Scope: "sc", Key: "k", Fingerprint: "fp", OperationID: "o", CreateTime: t1}},
		DeleteIdempotency{Scope: "sc", Key: "k"},
		AcceptMessage{Message{Queue: "q", ID: "m", AcceptedAt: 1 << 40, VisibleAt: -1, Attempts: 3, Lease: "b", Size: 4}, []byte("body")},
		AcceptMessage{Message{Queue: "q", ID: "empty"}, []byte{}},
		DeliverMessages{Queue: "q", Batch: "b", IDs: []string{"m", "x"}},
		RetryMessage{Queue: "q", ID: "m", VisibleAt: 99},
		RemoveMessages{Queue: "q", IDs: []string{"m"}, Reason: RemovedAcknowledged},
		DropQueue{Queue: "q"},
		AcceptMessage{Message{Queue: "q", ID: "traced", Size: 1, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, []byte("x")},
		AcceptMessage{Message{Queue: "q", ID: "traced-dead", Size: 1, TraceParent: "tp",
			DeadLetter: &DeadLetter{SourceQueue: "s", Reason: ReasonRetriesExhausted, Attempts: 2, OriginalID: "o", DeadLetteredAt: 5}}, []byte("y")},
		RetryMessage{Queue: "q", ID: "m", VisibleAt: 100, Attempt: &Attempt{Attempt: 2, StartedAt: 1 << 41, DurationMs: 12, Host: "h", WorkerVersion: "v",
			Outcome: OutcomeThrown, DelaySeconds: 30, ErrorName: "TypeError", ErrorMessage: "x is undefined", ErrorStack: "TypeError: x\n  at main.js:1:2"}},
		AcceptMessage{Message{Queue: "dlq", ID: "h1", Size: 1, History: []Attempt{{Attempt: 1, Outcome: OutcomeTimeLimit}}}, []byte("h")},
		AcceptMessage{Message{Queue: "dlq", ID: "h2", Size: 1, DeadLetter: &DeadLetter{SourceQueue: "q", Reason: ReasonRetriesExhausted, Attempts: 2},
			History: []Attempt{{Attempt: 1, Outcome: OutcomeRetried, DelaySeconds: 5}, {Attempt: 2, Outcome: OutcomeSandboxEnded, ErrorMessage: "memory"}}}, []byte("h")},
		AcceptMessage{Message{Queue: "dlq", ID: "h3", Size: 1, TraceParent: "tp", DeadLetter: &DeadLetter{SourceQueue: "q", Reason: ReasonRetriesExhausted, Attempts: 1},
			History: []Attempt{{Attempt: 1, Outcome: OutcomeThrown, ErrorName: "Error"}}}, []byte("h")},
	}
}

func TestCodecRoundTrip(t *testing.T) {
	muts := allMutations()
	p, meta, err := encodeGroup(nil, muts)
	if err != nil {
		t.Fatal(err)
	}
	got, meta2, err := decodeGroup(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, muts) {
		t.Fatalf("round trip:\n got  %#v\n want %#v", got, muts)
	}
	if !reflect.DeepEqual(meta, meta2) {
		t.Fatalf("meta %v vs %v", meta, meta2)
	}
	am := meta[7]
	if string(p[am.bodyOff:am.bodyOff+4]) != "body" {
		t.Fatalf("body offset %d wrong", am.bodyOff)
	}
}

func TestCodecRejects(t *testing.T) {
	p, _, _ := encodeGroup(nil, allMutations())
	for _, tc := range []struct {
		name string
		p    []byte
		want string
	}{
		{"future version", append([]byte{2}, p[1:]...), "version 2"},
		{"unknown type", []byte{1, 1, 77}, "unknown record type 77"},
		{"trailing bytes", append(p[:len(p):len(p)], 0), "after the last record"},
		{"truncated", p[:len(p)-3], "at byte"},
		{"body past the end", []byte{1, 1, 6, 1, 'q', 0, 0, 0, 0, 0, 1, 2, 3, 4, 50, 1}, "past the end"},
		{"huge count", []byte{1, 0xff, 0xff, 0xff, 0x0f}, "exceeds"},
		{"empty", nil, "truncated"},
		{"unknown message flags", unknownMessageFlags(t), "unknown message flags"},
	} {
		_, _, err := decodeGroup(tc.p)
		if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// unknownMessageFlags is a traced AcceptMessage record whose flags byte
// has a bit no version defines.
func unknownMessageFlags(t *testing.T) []byte {
	p, _, err := encodeGroup(nil, []Mutation{AcceptMessage{Message{Queue: "q", ID: "m", Size: 1, TraceParent: "t"}, []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	// version, count, type, "q", "m", acceptedAt, visibleAt, attempts, lease: the flags.
	const at = 1 + 1 + 1 + 2 + 2 + 1 + 1 + 1 + 1
	if p[2] != recAcceptMessage3 || p[at] != acceptHasTrace {
		t.Fatalf("record layout changed: % x", p)
	}
	p[at] |= 1 << 5
	return p
}

func FuzzDecodeGroup(f *testing.F) {
	p, _, _ := encodeGroup(nil, allMutations())
	f.Add(p)
	for _, m := range allMutations() {
		p, _, _ := encodeGroup(nil, []Mutation{m})
		f.Add(p)
	}
	f.Add([]byte{1, 1, 77})
	f.Fuzz(func(t *testing.T, b []byte) {
		muts, meta, err := decodeGroup(b)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		p, meta2, err := encodeGroup(nil, muts)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := decodeGroup(p)
		if err != nil || !reflect.DeepEqual(again, muts) || len(meta) != len(meta2) {
			t.Fatalf("re-encoding does not round-trip: %v", err)
		}
		// Applying whatever decodes must not panic either.
		newState(false).apply(muts, 1, 8, meta)
	})
}
