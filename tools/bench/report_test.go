package main

import (
	"strings"
	"testing"
	"time"
)

func TestPercentilesNearestRank(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	p := percentilesOf(s)
	want := percentiles{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if p != want {
		t.Fatalf("percentilesOf(1..100 ms) = %+v, want %+v", p, want)
	}
	if got := percentilesOf(nil); got != (percentiles{}) {
		t.Fatalf("percentilesOf(nil) = %+v, want zero", got)
	}
	one := percentilesOf([]time.Duration{7})
	if one.P50 != 7 || one.P99 != 7 || one.Max != 7 || one.N != 1 {
		t.Fatalf("percentilesOf([7]) = %+v", one)
	}
}

func TestNumberFormatting(t *testing.T) {
	cases := []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1234567, "1,234,567"}, {-1234, "-1,234"}, {512, "512"}, {12.34, "12.3"},
		{1.234, "1.23"}, {0.1234, "0.123"}, {0.00123, "0.0012"},
	}
	for _, c := range cases {
		if got := num(c.v); got != c.want {
			t.Errorf("num(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := ratio(500, 1000); got != "50.0%" {
		t.Errorf("ratio(500, 1000) = %q", got)
	}
	if got := ratio(3000, 1000); got != "3.00×" {
		t.Errorf("ratio(3000, 1000) = %q", got)
	}
	if got := ratio(1, 0); got != "n/a" {
		t.Errorf("ratio(1, 0) = %q", got)
	}
	if got := dur(1500 * time.Microsecond); got != "1.50 ms" {
		t.Errorf("dur(1.5ms) = %q", got)
	}
	if got := bytesize(127000); got != "127000 B" {
		t.Errorf("bytesize(127000) = %q", got)
	}
	if got := bytesize(4096); got != "4 KiB" {
		t.Errorf("bytesize(4096) = %q", got)
	}
}

func TestReportMarkdown(t *testing.T) {
	r := &report{Command: "go run ./tools/bench -quick"}
	r.Machine = []kv{{"nproc", "2"}}
	s := r.section("Layer", "intro", "a", "b|c")
	s.row("1", "x|y")
	s.row("short")
	n := r.section("Missing", "")
	n.NotMeasured = "package x has not landed"
	s.Blocks = append(s.Blocks, block{Caption: "profile", Text: "flat flat%\n"})
	r.target(target{Name: "t1", Pass: true, Measured: "60%", Want: "≥ 50%"})
	r.target(target{Name: "t2", Measured: "40%", Want: "≥ 50%"})
	r.target(target{Name: "t3", Skipped: "not measured: why", Want: "x"})
	var b strings.Builder
	if err := r.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Command: `go run ./tools/bench -quick`",
		"| a | b\\|c |\n| --- | --- |\n| 1 | x\\|y |\n| short |  |\n",
		"Not measured: package x has not landed.",
		"| PASS | t1 | 60% | ≥ 50% |",
		"| MISS | t2 | 40% | ≥ 50% |",
		"| NOT CHECKED | t3 | not measured: why | x |",
		"```\nflat flat%\n```",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestHotSpots(t *testing.T) {
	top := `File: bench
Type: cpu
Showing nodes accounting for 1.5s, 75% of 2s total
      flat  flat%   sum%        cum   cum%
     0.40s 20.00% 20.00%      0.40s 20.00%  internal/runtime/syscall/linux.Syscall6
     0.30s 15.00% 35.00%      0.50s 25.00%  github.com/dop251/goja.(*vm).run
     0.25s 12.50% 47.50%      0.25s 12.50%  hash/crc32.castagnoliSSE42
     0.22s 11.00% 58.50%      0.30s 15.00%  github.com/takoform/queuehost/runtime/delivery.(*queue).pump
     0.10s  5.00% 63.50%      0.10s  5.00%  runtime.mallocgc
`
	hs := hotSpots(top, 10)
	if len(hs) != 2 {
		t.Fatalf("hotSpots = %+v, want goja and delivery", hs)
	}
	if hs[0].Package != "github.com/dop251/goja" || hs[0].Flat != 15 {
		t.Errorf("first hot spot %+v", hs[0])
	}
	if hs[1].Package != "github.com/takoform/queuehost/runtime/delivery" {
		t.Errorf("second hot spot %+v", hs[1])
	}
	if got := funcPackage("runtime.mallocgc"); got != "runtime" {
		t.Errorf("funcPackage(runtime.mallocgc) = %q", got)
	}
}

func TestPackageShares(t *testing.T) {
	top := `      flat  flat%   sum%        cum   cum%
     0.30s 15.00% 15.00%      0.50s 25.00%  github.com/dop251/goja.(*vm).run
     0.10s  5.00% 20.00%      0.10s  5.00%  github.com/dop251/goja.(*Runtime).NewObject
     0.20s 10.00% 30.00%      0.20s 10.00%  runtime.mallocgc
`
	ps := packageShares(top)
	if len(ps) != 2 || ps[0].Package != "github.com/dop251/goja" || ps[0].Flat != 20 || ps[1].Package != "runtime" {
		t.Fatalf("packageShares = %+v", ps)
	}
}
