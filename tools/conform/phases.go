package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// andTags joins two godog tag expressions with "&&". godog's expressions
// are a conjunction of comma-separated alternatives, so the join needs no
// parentheses.
func andTags(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + " && " + b
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
