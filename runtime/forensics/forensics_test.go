package forensics

import (
	"testing"

	"github.com/takoform/queuehost/runtime/store"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"order 1234 not found": "order <n> not found",
		"user 550e8400-e29b-41d4-a716-446655440000 has no  cart": "user <uuid> has no cart",
		"object deadbeef0042 missing":                            "object <hex> missing",
		"hash 0x7f3a9c21ff is bad":                               "hash <hex> is bad",
		`cannot read "name" of undefined`:                        "cannot read <str> of undefined",
		"took 12.5 ms":                                           "took <n> ms",
		"the page was defaced":                                   "the page was defaced",
		"Error at 2026-01-02T03:04:05Z":                          "Error at <n>-<n>-<n>T<n>:<n>:<n>Z",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func thrown(name, msg, stack string) []store.Attempt {
	return []store.Attempt{{Attempt: 1, Outcome: store.OutcomeRetried}, {Attempt: 2, Outcome: store.OutcomeThrown, ErrorName: name, ErrorMessage: msg, ErrorStack: stack}}
}

// The same failure with other IDs, on other lines (a new deployment), is
// one group; another error name, message shape or top frame is another.
func TestFingerprintGroupsByCause(t *testing.T) {
	base := thrown("TypeError", "order 17 has no customer 550e8400-e29b-41d4-a716-446655440000",
		"TypeError: order 17 has no customer\n    at charge (main.js:10:5)\n    at queue (main.js:30:9)\n    at run (lib.js:1:1)\n    at deep (lib.js:9:9)")
	same := []([]store.Attempt){
		thrown("TypeError", "order 99812 has no customer 123e4567-e89b-12d3-a456-426614174000",
			"TypeError: order 99812 has no customer\n    at charge (main.js:12:7)\n    at queue (main.js:41:2)\n    at run (lib.js:3:3)\n    at other (x.js:1:1)"),
	}
	differ := []([]store.Attempt){
		thrown("RangeError", "order 17 has no customer 550e8400-e29b-41d4-a716-446655440000", base[1].ErrorStack),
		thrown("TypeError", "order 17 has no address", base[1].ErrorStack),
		thrown("TypeError", "order 17 has no customer 550e8400-e29b-41d4-a716-446655440000",
			"TypeError: x\n    at refund (main.js:10:5)\n    at queue (main.js:30:9)\n    at run (lib.js:1:1)"),
		{{Attempt: 3, Outcome: store.OutcomeTimeLimit}},
		{{Attempt: 3, Outcome: store.OutcomeRetried}},
		nil,
	}
	fp := Fingerprint(base)
	for _, h := range same {
		if got := Fingerprint(h); got != fp {
			t.Errorf("%#v: fingerprint %s, want %s (same cause)", h, got, fp)
		}
	}
	seen := map[string]bool{fp: true}
	for _, h := range differ {
		got := Fingerprint(h)
		if seen[got] {
			t.Errorf("%#v: fingerprint %s collides", h, got)
		}
		seen[got] = true
	}
	if got := CauseOf(base).Title(); got != "TypeError: order <n> has no customer <uuid>" {
		t.Errorf("title %q", got)
	}
}

func TestGroups(t *testing.T) {
	dl := func(at int64) *store.DeadLetter { return &store.DeadLetter{DeadLetteredAt: at} }
	a := thrown("Error", "boom 1", "")
	b := []store.Attempt{{Attempt: 4, Outcome: store.OutcomeTimeLimit}}
	msgs := []store.Message{
		{ID: "m1", History: a, DeadLetter: dl(1000)},
		{ID: "m2", History: b, DeadLetter: dl(1500)},
		{ID: "m3", History: thrown("Error", "boom 2", ""), DeadLetter: dl(3000)},
		{ID: "m4", History: a, DeadLetter: dl(2000)},
	}
	gs := Groups(msgs, GroupOptions{Buckets: 3, Bucket: 1000, End: 3500})
	if len(gs) != 2 {
		t.Fatalf("%d groups: %#v", len(gs), gs)
	}
	g := gs[0]
	if g.Count != 3 || g.FirstSeen != 1000 || g.LastSeen != 3000 || g.Example != "m3" || g.Title != "Error: boom <n>" ||
		g.ExampleError == nil || g.ExampleError.ErrorMessage != "boom 2" {
		t.Fatalf("first group %#v", g)
	}
	// Buckets [500,1500) [1500,2500) [2500,3500).
	if h := g.Histogram; len(h) != 3 || h[0] != 1 || h[1] != 1 || h[2] != 1 {
		t.Fatalf("histogram %v", h)
	}
	if gs[1].Count != 1 || gs[1].Title != "time_limit" || gs[1].Histogram[1] != 1 {
		t.Fatalf("second group %#v", gs[1])
	}
}
