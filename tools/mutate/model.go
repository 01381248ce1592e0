package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
)

// modelTest is the property test -model runs: runtime/delivery's engine
// against features/model, the executable model of the Forms.
const (
	modelPkg  = "./runtime/delivery"
	modelTest = "^TestEngineMatchesModel$"
)

// runModel is `mutate -model`: each selected mutation of the delivery
// engine (or of a package it is built from) is run against the model-based
// property test alone, not the kit, to show what that test catches by
// itself. A mutation elsewhere (controller, JavaScript runtime, ...) cannot
// reach the test and is reported n/a. KILLED: the test failed (its first
// line of failure is shown); SURVIVED: it passed; ERROR: the mutant did not
// build. It exits 0 whatever survives: the table is the result.
func runModel(root, tmp string, sel []mutation, checks int) int {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}", modelPkg).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate: go list:", err)
		return 2
	}
	deps := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(mustAbs(moduleDir()), d); err == nil && !strings.HasPrefix(rel, "..") {
			deps[rel] = true
		}
	}
	type row struct {
		id, verdict, why string
		took             time.Duration
	}
	var rows []row
	killed, ran := 0, 0
	for i, m := range sel {
		reach := false
		for _, e := range m.Edits {
			if deps[filepath.Dir(e.File)] && strings.HasSuffix(e.File, ".go") {
				reach = true
			}
		}
		if !reach {
			rows = append(rows, row{id: m.ID, verdict: "n/a", why: "edits nothing " + modelPkg + " is built from"})
			continue
		}
		dir := filepath.Join(tmp, m.ID)
		overlay, err := writeOverlay(root, dir, m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutate: %s: %v\n", m.ID, err)
			return 2
		}
		args := []string{"test", "-overlay", overlay, "-count=1", "-timeout", "10m", "-run", modelTest, modelPkg}
		if checks > 0 {
			args = append(args, "-args", fmt.Sprintf("-rapid.checks=%d", checks))
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		start := time.Now()
		b, err := cmd.CombinedOutput()
		r := row{id: m.ID, took: time.Since(start)}
		os.WriteFile(filepath.Join(dir, "test.log"), b, 0o644)
		switch {
		case err == nil:
			r.verdict = "SURVIVED"
		case strings.Contains(string(b), "[build failed]") || strings.Contains(string(b), "[setup failed]"):
			r.verdict, r.why = "ERROR", "the mutant does not build"
		default:
			r.verdict, r.why = "KILLED", firstFailure(string(b))
			killed++
		}
		ran++
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "mutate: model [%d/%d] %-28s %-9s in %s\n", i+1, len(sel), m.ID, r.verdict, r.took.Round(time.Second))
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMODEL TEST\tWHY")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.id, r.verdict, r.why)
	}
	tw.Flush()
	n := "the test's default"
	if checks > 0 {
		n = fmt.Sprint(checks)
	}
	fmt.Printf("\n%s alone (rapid checks: %s) killed %d of the %d mutations that reach %s.\n", modelTest, n, killed, ran, modelPkg)
	return 0
}

var rapidFailure = regexp.MustCompile(`\[rapid\] failed[^:]*: ([^\n]*)`)

// firstFailure is the test's failure in one line.
func firstFailure(out string) string {
	if m := rapidFailure.FindStringSubmatch(out); m != nil {
		s := m[1]
		if len(s) > 160 {
			s = s[:160] + "…"
		}
		return s
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "panic:") || strings.Contains(l, "timed out") {
			return strings.TrimSpace(l)
		}
	}
	return "the test failed (see its log)"
}

func moduleDir() string {
	d, err := moduleRoot()
	if err != nil {
		return "."
	}
	return d
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
