package main

import (
	"fmt"
	"slices"
)

// A ratio target is decided on rounds, not on one figure. Each round of an
// interleaved point (mode A, mode B, mode B, mode A) yields a ratio of its
// own; on a shared 2-core machine those ratios move by several points from
// round to round and by more from run to run. So a verdict reads the
// median of the rounds, shows their spread (lowest–highest), and says
// "within noise" when the threshold lies inside that spread: such a run
// can neither claim the target nor refute it, and tuning against it
// measures the machine. A verdict is PASS only when every round passes,
// MISS only when every round misses.

// verdictKind is how a target came out.
type verdictKind int

const (
	verdictMiss verdictKind = iota
	verdictPass
	verdictNoise   // the threshold lies within the rounds' spread
	verdictInvalid // the measurement itself is not trustworthy (failures)
)

func (v verdictKind) String() string {
	switch v {
	case verdictPass:
		return "PASS"
	case verdictNoise:
		return "WITHIN NOISE"
	case verdictInvalid:
		return "INVALID"
	}
	return "MISS"
}

// spread is the rounds of one ratio: their median and range.
type spread struct {
	Median, Lo, Hi float64
	N              int
}

// spreadOf summarises rounds; NaN and infinite rounds (a mode measured
// nothing) are dropped. The zero spread (N 0) means nothing was measured.
func spreadOf(rounds []float64) spread {
	var v []float64
	for _, r := range rounds {
		if r == r && r < 1e300 && r > -1e300 {
			v = append(v, r)
		}
	}
	if len(v) == 0 {
		return spread{}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{Median: m, Lo: v[0], Hi: v[len(v)-1], N: len(v)}
}

// atLeast decides "ratio ≥ threshold" on the rounds.
func (s spread) atLeast(threshold float64) verdictKind {
	switch {
	case s.N == 0:
		return verdictInvalid
	case s.Lo >= threshold:
		return verdictPass
	case s.Hi < threshold:
		return verdictMiss
	}
	return verdictNoise
}

// atMost decides "ratio ≤ threshold" on the rounds.
func (s spread) atMost(threshold float64) verdictKind {
	switch {
	case s.N == 0:
		return verdictInvalid
	case s.Hi <= threshold:
		return verdictPass
	case s.Lo > threshold:
		return verdictMiss
	}
	return verdictNoise
}

// describe renders the spread with f for each figure: "median 82.3%
// (8 rounds 74.0%–91.2%)".
func (s spread) describe(f func(float64) string) string {
	if s.N == 0 {
		return "no round measured"
	}
	if s.N == 1 {
		return fmt.Sprintf("%s (1 round: no spread, so no verdict beyond it)", f(s.Median))
	}
	return fmt.Sprintf("median %s (%d rounds %s–%s)", f(s.Median), s.N, f(s.Lo), f(s.Hi))
}

// roundsTarget is a target decided on rounds.
func roundsTarget(name, want string, s spread, v verdictKind, f func(float64) string, extra string) target {
	m := s.describe(f)
	if extra != "" {
		m += "; " + extra
	}
	return target{Name: name, Verdict: v, Measured: m, Want: want}
}
