package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMergeJUnitKeepsEveryPhasesCases(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	b := filepath.Join(dir, "b")
	os.WriteFile(a, []byte(xml.Header+`<testsuites name="conform" tests="2" skipped="0" failures="1" errors="0" time="1.5">
  <testsuite name="F1" tests="2" skipped="0" failures="1" errors="0" time="1.5">
    <testcase name="s1" status="passed" time="1"></testcase>
    <testcase name="s2" status="failed" time="0.5"><failure message="boom"></failure></testcase>
  </testsuite>
</testsuites>`), 0o644)
	os.WriteFile(b, []byte(xml.Header+`<testsuites name="conform" tests="1" skipped="1" failures="0" errors="0" time="2">
  <testsuite name="F2" tests="1" skipped="1" failures="0" errors="0" time="2">
    <testcase name="r1" status="" time="2"></testcase>
  </testsuite>
</testsuites>`), 0o644)
	out := filepath.Join(dir, "junit.xml")
	if err := mergeJUnit(out, []string{a, b, filepath.Join(dir, "missing")}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	var d junitSuites
	if err := xml.Unmarshal(got, &d); err != nil {
		t.Fatalf("merged document: %v\n%s", err, got)
	}
	if d.Tests != 3 || d.Failures != 1 || d.Skipped != 1 || d.Time != "3.500" || len(d.Suites) != 2 {
		t.Fatalf("totals: %+v\n%s", d, got)
	}
	for _, want := range []string{`name="F1"`, `name="F2"`, `<failure message="boom">`, `name="r1" status=""`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("merged document lacks %s:\n%s", want, got)
		}
	}
	if _, err := os.Stat(a); err == nil {
		t.Error("a phase's part was left behind")
	}
}

func TestAndTags(t *testing.T) {
	for _, c := range [][3]string{
		{"", "@restart,@serial", "@restart,@serial"},
		{"~@slow", "", "~@slow"},
		{"~@slow", "~@restart && ~@serial", "~@slow && ~@restart && ~@serial"},
		{"@a,@b && ~@x", "@restart,@serial", "@a && @restart,@a && @serial,@b && ~@x && @restart,@b && ~@x && @serial"},
	} {
		if got := andTags(c[0], c[1]); got != c[2] {
			t.Errorf("andTags(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
