package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// andTags is the conjunction of two godog tag expressions. godog reads an
// expression as a disjunction of comma-separated alternatives, each a
// conjunction joined by "&&" ("@a,@b && ~@slow" is @a, or @b without
// @slow), so the conjunction distributes over the alternatives of both.
func andTags(a, b string) string {
	switch {
	case strings.TrimSpace(a) == "":
		return b
	case strings.TrimSpace(b) == "":
		return a
	}
	var out []string
	for _, x := range strings.Split(a, ",") {
		for _, y := range strings.Split(b, ",") {
			out = append(out, strings.TrimSpace(x)+" && "+strings.TrimSpace(y))
		}
	}
	return strings.Join(out, ",")
}

// junitSuites is godog's JUnit document: one <testsuites> of <testsuite>s,
// kept as they were written.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Attrs []xml.Attr `xml:",any,attr"`
	Inner string     `xml:",innerxml"`
}

// mergeJUnit writes into file one JUnit document holding the test suites
// of every phase's document (parts, removed afterwards), with the totals
// added up. A phase that ran no scenario may have written nothing.
func mergeJUnit(file string, parts []string) error {
	out := junitSuites{Name: "conform"}
	var secs float64
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		os.Remove(p)
		var d junitSuites
		if err := xml.Unmarshal(b, &d); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out.Name = d.Name
		out.Tests += d.Tests
		out.Skipped += d.Skipped
		out.Failures += d.Failures
		out.Errors += d.Errors
		t, _ := strconv.ParseFloat(d.Time, 64)
		secs += t
		out.Suites = append(out.Suites, d.Suites...)
	}
	out.Time = strconv.FormatFloat(secs, 'f', 3, 64)
	b, err := xml.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}
