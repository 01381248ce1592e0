package main

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	s := spreadOf([]float64{0.9, 0.7, math.NaN(), 0.8, math.Inf(1), 1.0})
	if s.N != 4 || s.Lo != 0.7 || s.Hi != 1.0 || math.Abs(s.Median-0.85) > 1e-12 {
		t.Fatalf("spreadOf = %+v, want N 4, 0.7–1.0, median 0.85 (NaN and Inf dropped)", s)
	}
	if s := spreadOf([]float64{3, 1, 2}); s.Median != 2 {
		t.Fatalf("odd median = %v, want 2", s.Median)
	}
	if s := spreadOf(nil); s.N != 0 {
		t.Fatalf("spreadOf(nil) = %+v, want nothing measured", s)
	}
}

func TestVerdictOnRounds(t *testing.T) {
	cases := []struct {
		rounds    []float64
		threshold float64
		atLeast   verdictKind
		atMost    verdictKind
	}{
		{[]float64{0.80, 0.82, 0.90}, 0.75, verdictPass, verdictMiss},   // every round above
		{[]float64{0.60, 0.70, 0.74}, 0.75, verdictMiss, verdictPass},   // every round below
		{[]float64{0.70, 0.80, 0.90}, 0.75, verdictNoise, verdictNoise}, // threshold inside the spread
		{[]float64{0.75, 0.80}, 0.75, verdictPass, verdictNoise},        // on the boundary
		{nil, 0.75, verdictInvalid, verdictInvalid},
	}
	for _, c := range cases {
		s := spreadOf(c.rounds)
		if got := s.atLeast(c.threshold); got != c.atLeast {
			t.Errorf("%v atLeast(%v) = %v, want %v", c.rounds, c.threshold, got, c.atLeast)
		}
		if got := s.atMost(c.threshold); got != c.atMost {
			t.Errorf("%v atMost(%v) = %v, want %v", c.rounds, c.threshold, got, c.atMost)
		}
	}
}

func TestRoundsTargetsRender(t *testing.T) {
	r := &report{Command: "x"}
	noisy := spreadOf([]float64{0.70, 0.80, 0.90})
	r.target(roundsTarget("iso", "≥ 75%", noisy, noisy.atLeast(0.75), pct, ""))
	bad := spreadOf([]float64{5, 6})
	r.target(roundsTarget("mf", "≥ 4×", bad, verdictInvalid, func(v float64) string { return ratio(v, 1) }, "Miniflare failed 3.0% of its calls"))
	good := spreadOf([]float64{0.9, 0.95})
	r.target(roundsTarget("ok", "≥ 75%", good, good.atLeast(0.75), pct, ""))
	var b strings.Builder
	if err := r.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| WITHIN NOISE | iso | median 80.0% (3 rounds 70.0%–90.0%) | ≥ 75% |",
		"| INVALID | mf | median 5.50× (2 rounds 5.00×–6.00×); Miniflare failed 3.0% of its calls | ≥ 4× |",
		"| PASS | ok | median 92.5% (2 rounds 90.0%–95.0%) | ≥ 75% |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestCountingCallKeepsTheClientGoing(t *testing.T) {
	var calls, failed atomic.Int64
	var first atomic.Value
	var n atomic.Int64
	do := func(context.Context) error {
		if n.Add(1)%2 == 0 {
			return errors.New("500 Queue send failed")
		}
		return nil
	}
	ctx := context.Background()
	var counter atomic.Int64
	pt := runProducer(ctx, countingCall(ctx, do, &calls, &failed, &first), prodMode{"x", 10, 2}, 1, 30*time.Millisecond, &counter)
	if pt.Err != nil {
		t.Fatalf("a counted failure ended the point: %v", pt.Err)
	}
	c, f := calls.Load(), failed.Load()
	if c < 4 || f == 0 || f == c {
		t.Fatalf("calls %d, failed %d: want several calls, about half failed", c, f)
	}
	if pt.Msgs != (c-f)*10 {
		t.Fatalf("messages %d, want %d (only the calls that succeeded count)", pt.Msgs, (c-f)*10)
	}
	if first.Load() == nil {
		t.Fatal("the first failure was not kept")
	}
}
