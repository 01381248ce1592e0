package main

import (
	"go/token"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestApplyReplacesTheReportedTokenOnly(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "x.go")
	os.WriteFile(f, []byte("package x\n\nconst limit = 1 + 3\n\nfunc ok(a, b int) bool {\n\treturn a < b && b-a > 1\n}\n"), 0o644)
	for _, c := range []struct {
		line, col    int
		kind, want   string
		global, fail bool
	}{
		{6, 11, "CONDITIONALS_BOUNDARY", "return a <= b && b-a > 1", false, false},
		{6, 11, "CONDITIONALS_NEGATION", "return a >= b && b-a > 1", false, false},
		{6, 15, "INVERT_LOGICAL", "return a < b || b-a > 1", false, false},
		{6, 19, "ARITHMETIC_BASE", "return a < b && b+a > 1", false, false},
		{3, 17, "ARITHMETIC_BASE", "const limit = 1 - 3", true, false}, // no statement: coverage cannot see it
		{6, 11, "ARITHMETIC_BASE", "", false, true},                    // '<' is no arithmetic
		{6, 12, "CONDITIONALS_NEGATION", "", false, true},
	} {
		m := &mutant{file: f, line: c.line, col: c.col, kind: c.kind}
		src, global, err := apply(m)
		if c.fail {
			if err == nil {
				t.Errorf("%s: applied a mutant whose position does not hold its token", m.id())
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", m.id(), err)
		}
		if got := strings.Split(string(src), "\n")[c.line-1]; strings.TrimSpace(got) != c.want {
			t.Errorf("%s: line reads %q, want %q", m.id(), strings.TrimSpace(got), c.want)
		}
		if global != c.global {
			t.Errorf("%s: outside every function = %v", m.id(), global)
		}
	}
	if _, _, err := apply(&mutant{file: f, line: 3, col: 17, kind: "INVERT_BITWISE"}); err == nil {
		t.Error("a type this command does not know was applied")
	}
}

func TestWilsonInterval(t *testing.T) {
	for _, c := range []struct {
		k, n   int
		lo, hi float64
	}{
		{90, 100, 0.8256, 0.9448},
		{0, 10, 0, 0.2775},
		{10, 10, 0.7225, 1},
	} {
		lo, hi := wilson(c.k, c.n)
		if math.Abs(lo-c.lo) > 5e-4 || math.Abs(hi-c.hi) > 5e-4 {
			t.Errorf("wilson(%d, %d) = %.4f–%.4f, want %.4f–%.4f", c.k, c.n, lo, hi, c.lo, c.hi)
		}
	}
}

func TestReadEquivalentWantsAReason(t *testing.T) {
	f := filepath.Join(t.TempDir(), "eq.txt")
	os.WriteFile(f, []byte("# comment\na.go:1:2:X\tx < y\tonly a log line changes\n"), 0o644)
	eq, err := readEquivalent(f)
	if err != nil || eq["a.go:1:2:X"].reason != "only a log line changes" {
		t.Fatalf("%v %v", eq, err)
	}
	os.WriteFile(f, []byte("a.go:1:2:X\tx < y\t \n"), 0o644)
	if _, err := readEquivalent(f); err == nil {
		t.Fatal("an entry without a reason was accepted")
	}
}

func TestACaseExpressionIsReachedWhenItsSwitchRan(t *testing.T) {
	f := filepath.Join(t.TempDir(), "s.go")
	src := []byte("package s\n\nfunc k(n int) string {\n\tswitch {\n\tcase n < 0:\n\t\treturn \"neg\"\n\t}\n\treturn \"\"\n}\n")
	os.WriteFile(f, src, 0o644)
	m := &mutant{file: f, line: 5, col: 9, kind: "CONDITIONALS_BOUNDARY"}
	sw, ok := caseOf(m, src)
	if !ok || sw.Line != 4 {
		t.Fatalf("switch of the case expression: %v %v", sw, ok)
	}
	if _, ok := caseOf(&mutant{file: f, line: 8, col: 2}, src); ok {
		t.Fatal("a statement outside any case list was taken for a case expression")
	}
	// The function body ran (the block from line 3 to the switch), the
	// case body did not: the case expression was evaluated all the same.
	p := filepath.Join(t.TempDir(), "c.out")
	os.WriteFile(p, []byte("mode: set\nexample.com/m/s.go:3.24,4.9 1 1\nexample.com/m/s.go:5.13,6.15 1 0\n"), 0o644)
	cov, err := readCoverage(p, "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	if !cov.ran("s.go", sw) {
		t.Fatal("the switch ran, and is not seen as run")
	}
	if cov.ran("s.go", token.Position{Line: 6, Column: 3}) {
		t.Fatal("a block that never ran is seen as run")
	}
}
