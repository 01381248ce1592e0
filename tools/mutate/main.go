// Command mutate is the conformance kit's mutation check: it breaks the
// reference host one rule at a time and shows that the kit fails, each time
// in a scenario that names the broken rule.
//
//	go run ./tools/mutate [-only ID,...] [-list] [-md FILE]
//	go run ./tools/mutate -model [-only ID,...] [-model-checks N]
//
// Every mutation (table.go) is one or more search/replace edits, each
// anchored by a "// mutate:NAME" comment on the line it changes (a JSON
// schema, which has no comments, by a search string unique in its file); a
// marker that is missing or twice, or a search string that does not occur
// exactly once where it points, is an error, so the table cannot silently
// rot, and moving or rewording the code around a marker does not break it. The mutated copies are
// written to a temporary directory and reach the build only through
// `go run -overlay`: the working tree is never modified. For each mutation
// the runner runs
//
//	go run -overlay OVERLAY.json ./tools/conform -tags EXPR -format progress -junit FILE
//
// and reads the JUnit report: KILLED (an expected scenario failed),
// WRONG-SCENARIO (the kit failed, but in none of the expected scenarios),
// SURVIVED (the kit passed: a gap in the kit) or ERROR (the mutated host did
// not build or the runner wrote no report). First it runs the unmutated
// kit on the union of the mutations' tags and stops if that fails.
//
// With -model it runs, instead of the kit, runtime/delivery's model-based
// property test against each mutation of the engine and prints what it
// kills by itself (model.go); that run checks nothing and writes no report.
//
// It exits 0 only if every mutation is KILLED. A run of the whole table
// (no -only) writes features/MUTATIONS.md.
package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() { os.Exit(run()) }

func run() int {
	only := flag.String("only", "", "comma-separated mutation IDs to run (default: all)")
	list := flag.Bool("list", false, "check every search string and print the table, run nothing")
	md := flag.String("md", "", "write the Markdown report here (default: features/MUTATIONS.md for a run of the whole table, none with -only)")
	modelRun := flag.Bool("model", false, "run each mutation of the delivery engine against runtime/delivery's model-based property test (TestEngineMatchesModel) alone instead of the kit; report only (model.go)")
	modelChecks := flag.Int("model-checks", 0, "with -model: the sequences rapid generates per mutation (-rapid.checks; 0: the test's default)")
	worktree := flag.Bool("worktree", true, "build and run in a temporary `git worktree` of HEAD, isolated from uncommitted edits in the checkout; false: the checkout itself (still only through overlays)")
	flag.Parse()

	checkout, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	root := checkout
	tmp, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	rev := "the working tree"
	if *worktree {
		root = filepath.Join(tmp, "tree")
		out, err := exec.Command("git", "-C", checkout, "worktree", "add", "--detach", root, "HEAD").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutate: git worktree add: %v\n%s", err, out)
			return 2
		}
		defer exec.Command("git", "-C", checkout, "worktree", "remove", "--force", root).Run()
		h, _ := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
		rev = "HEAD " + strings.TrimSpace(string(h)) + " (a temporary git worktree)"
	}
	fmt.Fprintf(os.Stderr, "mutate: host under test: %s\n", rev)
	sel := mutations
	if *only != "" {
		sel = nil
		for _, id := range strings.Split(*only, ",") {
			i := slices.IndexFunc(mutations, func(m mutation) bool { return m.ID == strings.TrimSpace(id) })
			if i < 0 {
				fmt.Fprintf(os.Stderr, "mutate: unknown mutation %q (see -list)\n", id)
				return 2
			}
			sel = append(sel, mutations[i])
		}
	}
	// Check the whole table first: a stale entry fails before anything runs.
	bad := false
	for _, m := range sel {
		if _, err := mutate(root, m); err != nil {
			fmt.Fprintf(os.Stderr, "mutate: %s: %v\n", m.ID, err)
			bad = true
		}
		if strings.ContainsAny(m.Tags, "&~()") || m.Tags == "" {
			fmt.Fprintf(os.Stderr, "mutate: %s: tags %q must be tags joined by \",\" only\n", m.ID, m.Tags)
			bad = true
		}
	}
	if bad {
		return 2
	}
	if *list {
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRULE\tTAGS\tEXPECTED SCENARIO")
		for _, m := range sel {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.ID, m.Rule, m.Tags, strings.Join(m.Expect, " | "))
		}
		tw.Flush()
		return 0
	}
	if *modelRun {
		return runModel(root, tmp, sel, *modelChecks)
	}
	if *md == "" && *only == "" {
		*md = filepath.Join(checkout, "features", "MUTATIONS.md")
	}
	started := time.Now()

	// Baselines: the unmutated host on the union of the tags, once for the
	// default run and once for the --slow run when a mutation needs it.
	var bases []result
	for _, slow := range []bool{false, true} {
		var union []string
		for _, m := range sel {
			if m.Slow != slow {
				continue
			}
			for _, t := range strings.Split(m.Tags, ",") {
				if t = strings.TrimSpace(t); !slices.Contains(union, t) {
					union = append(union, t)
				}
			}
		}
		if len(union) == 0 {
			continue
		}
		name := "baseline"
		if slow {
			name = "baseline-slow"
		}
		base := kitRun(root, filepath.Join(tmp, name), name, "", strings.Join(union, ","), slow)
		base.slow = slow
		fmt.Fprintf(os.Stderr, "mutate: %s (%s): %s in %s\n", name, strings.Join(union, ","), base.summary(), base.took.Round(time.Second))
		if base.err != nil || len(base.failed) > 0 || base.tests == 0 {
			fmt.Fprintf(os.Stderr, "mutate: the unmutated kit does not pass; log %s:\n%s\n", base.log, tail(base.output, 40))
			return 2
		}
		bases = append(bases, base)
	}

	var results []result
	for i, m := range sel {
		dir := filepath.Join(tmp, m.ID)
		overlay, err := writeOverlay(root, dir, m)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutate: %s: %v\n", m.ID, err)
			return 2
		}
		r := kitRun(root, dir, m.ID, overlay, m.Tags, m.Slow)
		r.m = m
		r.verdict = verdict(m, r)
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "mutate: [%d/%d] %-28s %-14s %s in %s\n", i+1, len(sel), m.ID, r.verdict, r.summary(), r.took.Round(time.Second))
		if r.verdict != "KILLED" {
			fmt.Fprintf(os.Stderr, "%s\n", tail(r.output, 30))
		}
		for _, f := range r.failed {
			fmt.Fprintf(os.Stderr, "      failed: %s\n", f)
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRESULT\tFAILED / RUN\tEXPECTED SCENARIO")
	ok := true
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d / %d\t%s\n", r.m.ID, r.verdict, len(r.failed), r.tests, strings.Join(r.m.Expect, " | "))
		ok = ok && r.verdict == "KILLED"
	}
	tw.Flush()
	if *md != "" {
		if err := writeMarkdown(*md, started, rev, bases, results); err != nil {
			fmt.Fprintln(os.Stderr, "mutate:", err)
			return 2
		}
		fmt.Fprintln(os.Stderr, "mutate: wrote", *md)
	}
	if !ok {
		return 1
	}
	return 0
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module; run from the repository")
	}
	return filepath.Dir(gomod), nil
}

// mutate returns the mutated contents of every file m edits, keyed by the
// path relative to root. It reads the files and never writes them.
func mutate(root string, m mutation) (map[string][]byte, error) {
	if len(m.Edits) == 0 || len(m.Expect) == 0 {
		return nil, errors.New("a mutation needs edits and expected scenarios")
	}
	out := map[string][]byte{}
	for _, e := range m.Edits {
		cur, ok := out[e.File]
		if !ok {
			b, err := os.ReadFile(filepath.Join(root, e.File))
			if err != nil {
				return nil, err
			}
			cur = b
		}
		if e.Mark != "" {
			b, err := applyMarked(cur, e)
			if err != nil {
				return nil, err
			}
			out[e.File] = b
			continue
		}
		if strings.HasSuffix(e.File, ".go") {
			return nil, fmt.Errorf("%s: an edit of a Go file is anchored by a marker (Mark and a \"// mutate:NAME\" comment on its line)", e.File)
		}
		if n := strings.Count(string(cur), e.Search); n != 1 {
			return nil, fmt.Errorf("%s: the search string occurs %d times, not once: %q", e.File, n, e.Search)
		}
		out[e.File] = []byte(strings.Replace(string(cur), e.Search, e.Replace, 1))
	}
	return out, nil
}

// markComment is a trailing comment of mutation markers, and the line end
// after it.
var markComment = regexp.MustCompile(`[ \t]*// mutate:[A-Za-z0-9-]+(?: mutate:[A-Za-z0-9-]+)*[ \t]*(\n|$)`)

// marked reports whether line carries the marker name.
func marked(line, name string) bool {
	c := markComment.FindString(line)
	for _, f := range strings.Fields(strings.TrimPrefix(strings.TrimSpace(c), "//")) {
		if f == "mutate:"+name {
			return true
		}
	}
	return false
}

// applyMarked applies e (Mark set) to src: Search, exactly once in the
// marked line and the lines after it that Search spans (markers left out),
// becomes Replace. The mutated copy keeps every line where it was.
func applyMarked(src []byte, e edit) ([]byte, error) {
	lines := strings.SplitAfter(string(src), "\n")
	at := -1
	for i, l := range lines {
		if marked(l, e.Mark) {
			if at >= 0 {
				return nil, fmt.Errorf("%s: lines %d and %d are both marked mutate:%s", e.File, at+1, i+1, e.Mark)
			}
			at = i
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("%s: no line is marked // mutate:%s", e.File, e.Mark)
	}
	end := min(at+strings.Count(e.Search, "\n")+1, len(lines))
	region := markComment.ReplaceAllString(strings.Join(lines[at:end], ""), "$1")
	if n := strings.Count(region, e.Search); n != 1 {
		return nil, fmt.Errorf("%s:%d (mutate:%s): the search string occurs %d times on the marked line(s), not once: %q", e.File, at+1, e.Mark, n, e.Search)
	}
	region = strings.Replace(region, e.Search, e.Replace, 1)
	return []byte(strings.Join(lines[:at], "") + region + strings.Join(lines[end:], "")), nil
}

// writeOverlay writes the mutated copies under dir and the overlay JSON
// that maps the real (absolute) paths to them.
func writeOverlay(root, dir string, m mutation) (string, error) {
	files, err := mutate(root, m)
	if err != nil {
		return "", err
	}
	ov := struct{ Replace map[string]string }{Replace: map[string]string{}}
	for rel, b := range files {
		dst := filepath.Join(dir, "src", rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return "", err
		}
		ov.Replace[filepath.Join(root, rel)] = dst
	}
	b, _ := json.MarshalIndent(ov, "", "  ")
	p := filepath.Join(dir, "overlay.json")
	return p, os.WriteFile(p, b, 0o644)
}

type result struct {
	m       mutation
	verdict string
	tests   int
	failed  []string // failed scenarios: "feature: scenario"
	names   []string // failed scenario names, outline suffix " #n" removed
	err     error
	took    time.Duration
	log     string
	output  string
	cmd     string
	slow    bool // a --slow run
}

func (r result) summary() string {
	if r.err != nil && r.tests == 0 {
		return "no report: " + r.err.Error()
	}
	return fmt.Sprintf("%d of %d scenarios failed", len(r.failed), r.tests)
}

// kitRun runs the kit (with overlay, if any) and reads its JUnit report.
func kitRun(root, dir, id, overlay, tags string, slow bool) result {
	os.MkdirAll(dir, 0o755)
	junit := filepath.Join(dir, "junit.xml")
	args := []string{"run"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(args, "./tools/conform", "-tags", tags, "-format", "progress", "-junit", junit)
	if slow {
		args = append(args, "-slow")
	}
	r := result{log: filepath.Join(dir, "conform.log"), cmd: "go " + shellJoin(args)}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r.took = time.Since(start)
	r.output = string(out)
	os.WriteFile(r.log, out, 0o644)
	r.err = err
	b, rerr := os.ReadFile(junit)
	if rerr != nil {
		if r.err == nil {
			r.err = rerr
		}
		return r
	}
	var rep struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name   string `xml:"name,attr"`
				Status string `xml:"status,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
		Time float64 `xml:"time,attr"`
	}
	if err := xml.Unmarshal(b, &rep); err != nil {
		r.err = fmt.Errorf("JUnit report %s: %w", junit, err)
		return r
	}
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			r.tests++
			if c.Status != "passed" && c.Status != "skipped" {
				r.failed = append(r.failed, fmt.Sprintf("%s: %s (%s)", s.Name, c.Name, c.Status))
				r.names = append(r.names, outlineSuffix.ReplaceAllString(c.Name, ""))
			}
		}
	}
	return r
}

var outlineSuffix = regexp.MustCompile(` #\d+$`)

func verdict(m mutation, r result) string {
	switch {
	case r.tests == 0:
		return "ERROR"
	case len(r.failed) == 0 && r.err == nil:
		return "SURVIVED"
	case len(r.failed) == 0:
		return "ERROR" // the runner failed without a failed scenario
	}
	for _, n := range r.names {
		if slices.Contains(m.Expect, n) {
			return "KILLED"
		}
	}
	return "WRONG-SCENARIO"
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"&|,~@()$*;<>") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}

func writeMarkdown(path string, started time.Time, rev string, bases []result, results []result) error {
	var b strings.Builder
	killed := 0
	for _, r := range results {
		if r.verdict == "KILLED" {
			killed++
		}
	}
	fmt.Fprintf(&b, "# Mutation check: results\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./tools/mutate` on %s (took %s). Do not edit: run it again.\n\n",
		started.UTC().Format("2006-01-02 15:04 MST"), time.Since(started).Round(time.Second))
	fmt.Fprintf(&b, "Host under test: %s.\n\n", rev)
	fmt.Fprintf(&b, "Each mutation is one deliberate single-rule breakage of the reference host, applied only through a Go overlay\n")
	fmt.Fprintf(&b, "(the working tree is not modified); the table of mutations is `tools/mutate/table.go`. Each row ran\n\n")
	fmt.Fprintf(&b, "```sh\ngo run -overlay OVERLAY.json ./tools/conform -tags TAGS -format progress -junit FILE\n```\n\n")
	for _, base := range bases {
		run := "default run"
		if base.slow {
			run = "`--slow` run"
		}
		fmt.Fprintf(&b, "Baseline, %s (unmutated host, the union of the tags): %s.\n\n", run, base.summary())
	}
	for _, slow := range []bool{false, true} {
		n, k := 0, 0
		for _, r := range results {
			if r.m.Slow == slow {
				n++
				if r.verdict == "KILLED" {
					k++
				}
			}
		}
		if n == 0 {
			continue
		}
		run := "Default run (`~@slow`)"
		if slow {
			run = "`--slow` run (`@slow` scenarios included)"
		}
		fmt.Fprintf(&b, "%s: **%d of %d mutations killed.**\n\n", run, k, n)
	}
	fmt.Fprintf(&b, "**%d of %d mutations killed in all.**\n\n", killed, len(results))
	fmt.Fprintf(&b, "| ID | rule | mutation | tags | run | expected scenario | result | failing scenarios |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		var where []string
		for _, e := range r.m.Edits {
			if !slices.Contains(where, "`"+e.File+"`") {
				where = append(where, "`"+e.File+"`")
			}
		}
		failed := "—"
		if len(r.failed) > 0 {
			failed = fmt.Sprintf("%d of %d: ", len(r.failed), r.tests) + strings.Join(r.failed, "; ")
		} else {
			failed = fmt.Sprintf("none of %d", r.tests)
		}
		run := "default"
		if r.m.Slow {
			run = "`--slow`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s (%s) | `%s` | %s | %s | **%s** | %s |\n",
			r.m.ID, r.m.Rule, mdEscape(r.m.What), strings.Join(where, ", "), r.m.Tags, run,
			mdEscape("*"+strings.Join(r.m.Expect, "*, *")+"*"), r.verdict, mdEscape(failed))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
