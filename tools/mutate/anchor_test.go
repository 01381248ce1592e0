package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const anchored = `package p

func f(a, b int) bool {
	if a > b { // mutate:gt
		return true
	}
	x := a + // explains the sum mutate:not-a-marker
		b // mutate:two mutate:sum
	return x > 0
}
`

func TestApplyMarked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		e       edit
		want    string // a line of the result
		wantErr string
	}{
		{"one line", edit{File: "f.go", Mark: "gt", Search: "if ", Replace: "if false && "}, "\tif false && a > b {\n", ""},
		{"a marker among two", edit{File: "f.go", Mark: "sum", Search: "b", Replace: "-b"}, "\t\t-b\n", ""},
		{"spans the next line", edit{File: "f.go", Mark: "gt", Search: "a > b {\n\t\treturn true", Replace: "a > b {\n\t\treturn false"}, "\t\treturn false\n", ""},
		{"missing", edit{File: "f.go", Mark: "lt", Search: "if ", Replace: ""}, "", "no line is marked // mutate:lt"},
		{"text that is not a marker", edit{File: "f.go", Mark: "not-a-marker", Search: "+", Replace: "-"}, "", "no line is marked"},
		{"not on the marked line", edit{File: "f.go", Mark: "gt", Search: "return", Replace: ""}, "", "occurs 0 times on the marked line"},
		{"twice on the marked line", edit{File: "f.go", Mark: "sum", Search: "", Replace: ""}, "", "occurs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := applyMarked([]byte(anchored), tc.e)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), tc.want) {
				t.Fatalf("no line %q in\n%s", tc.want, got)
			}
			if strings.Count(string(got), "\n") != strings.Count(anchored, "\n") {
				t.Fatal("the mutated copy moved lines")
			}
		})
	}
	// A marker on two lines is refused.
	twice := strings.Replace(anchored, "return x > 0", "return x > 0 // mutate:gt", 1)
	if _, err := applyMarked([]byte(twice), edit{File: "f.go", Mark: "gt", Search: "if ", Replace: ""}); err == nil || !strings.Contains(err.Error(), "both marked") {
		t.Fatalf("a marker twice: %v", err)
	}
}

// Every mutation of the table applies to the checkout and leaves each Go
// file it changes parseable and changed; an edit of a Go file has a marker.
func TestTableApplies(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutations {
		files, err := mutate(root, m)
		if err != nil {
			t.Errorf("%s: %v", m.ID, err)
			continue
		}
		for rel, b := range files {
			orig, _ := os.ReadFile(filepath.Join(root, rel))
			if string(orig) == string(b) {
				t.Errorf("%s: %s is unchanged", m.ID, rel)
			}
			if strings.HasSuffix(rel, ".go") {
				if _, err := parser.ParseFile(token.NewFileSet(), rel, b, parser.SkipObjectResolution); err != nil {
					t.Errorf("%s: the mutated %s does not parse: %v", m.ID, rel, err)
				}
			}
		}
	}
}
