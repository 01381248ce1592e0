// Command mutsample runs the conformance kit against a seeded random sample
// of generated mutants of the reference host: mutants nobody chose, where
// tools/mutate's table holds the ones somebody named.
//
//	go run ./tools/mutsample [-n 100] [-seed S] [-cover-profile FILE]
//	make mutate-sample [SEED=S] [N=100]
//
// Generation is go-gremlins/gremlins' (a `go tool` of this module): its
// `unleash --dry-run` lists every mutant of a package (conditionals
// negated or moved across their boundary, arithmetic swapped, ++/--
// inverted, negatives inverted, && and || swapped), each with its file,
// line, column and type, and with its status against a coverage profile.
// Gremlins gathers that profile by running the package's own `go test`;
// here the profile is the KIT's instead (the conform runner built with
// -cover, run once over the whole kit), passed to gremlins through a `go`
// shim on PATH that answers its coverage run with that file. So gremlins
// says which mutants the kit can reach at all: a mutant on a statement the
// kit never executes cannot be killed by it and counts as survived
// ("not reached") without a run. Mutants outside any function (constant
// and variable declarations, which coverage does not count) always run.
//
// Gremlins itself only runs `go test`, and its packages are internal, so
// this command applies a sampled mutant the way gremlins' token mutator
// does (the one token at the reported position replaced by its
// counterpart, the same table), refusing any mutant whose position does not
// hold the token gremlins reported, and builds the runner with the mutated
// file through `go build -overlay`: the working tree is never modified.
//
// Each mutant that the kit reaches runs in two passes, both -fail-fast: the
// default kit (every scenario but @slow), and only when that passes, the
// @slow scenarios; so a mutant has survived only the whole kit. A mutant
// that does not compile is "not viable" and a run past -timeout is killed
// (a host that hangs fails its users), as gremlins counts them. Mutants
// listed in features/mutants-equivalent.txt (ID, the mutated source line,
// why no host behaviour can tell them apart) leave the denominator.
//
// The report (-md, default features/MUTATIONS-SAMPLE.md) is rewritten
// after every mutant, so an interrupted run still reports what it
// measured: the kill rate over non-equivalent viable mutants with its 95 %
// Wilson score interval, the seed, and every sampled mutant with its
// verdict and, when killed, the first failing scenario.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// targets are the packages that carry the Forms' and the extensions'
// rules, and which of their files take part. cluster.go files only run
// with several hosts on one database (tools/conform -cluster, not this
// in-process single host), so they are left out; of the store, only the
// state machine every backend applies its mutations with.
var targets = []struct {
	dir  string
	keep func(file string) bool
}{
	{"controller", notCluster},
	{"runtime/delivery", notCluster},
	{"server", notCluster},
	{"auth", notCluster},
	{"runtime/store", func(f string) bool { return f == "state.go" }},
}

func notCluster(f string) bool { return f != "cluster.go" && !strings.Contains(f, "/") }

func main() { os.Exit(run()) }

func run() int {
	n := flag.Int("n", 100, "mutants in the sample")
	seedFlag := flag.String("seed", os.Getenv("SEED"), "sample seed (default: a new random one, printed and reported)")
	md := flag.String("md", "features/MUTATIONS-SAMPLE.md", "the Markdown report, rewritten after each mutant")
	equivFile := flag.String("equivalent", "features/mutants-equivalent.txt", "the committed list of equivalent mutants")
	coverProfile := flag.String("cover-profile", "", "the kit's coverage profile from an earlier run (default: a coverage run of the whole kit first)")
	timeout := flag.Duration("timeout", 12*time.Minute, "a kit pass longer than this kills the mutant")
	list := flag.Bool("list", false, "generate and count every mutant, print the sample, run nothing")
	flag.Parse()

	root, err := moduleRoot()
	if err != nil {
		return fail(err)
	}
	if err := os.Chdir(root); err != nil {
		return fail(err)
	}
	var seed uint64
	if *seedFlag != "" {
		if seed, err = strconv.ParseUint(*seedFlag, 10, 64); err != nil {
			return fail(fmt.Errorf("-seed %q: want an unsigned integer", *seedFlag))
		}
	} else {
		var b [8]byte
		crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) % 1_000_000_000
	}
	tmp, err := os.MkdirTemp("", "mutsample-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	ctx := context.Background()

	profile := *coverProfile
	if profile == "" && !*list {
		logf("coverage: building the runner with -cover and running the whole kit once")
		if profile, err = kitCoverage(ctx, tmp); err != nil {
			return fail(err)
		}
	}
	all, err := generate(ctx, tmp, profile)
	if err != nil {
		return fail(err)
	}
	cov, err := readCoverage(profile, modulePath())
	if err != nil {
		return fail(err)
	}
	equiv, err := readEquivalent(*equivFile)
	if err != nil {
		return fail(err)
	}
	r := rand.New(rand.NewPCG(seed, 0x6d7574616e7473))
	perm := r.Perm(len(all))
	sample := make([]*mutant, 0, *n)
	for _, i := range perm[:min(*n, len(all))] {
		sample = append(sample, all[i])
	}
	logf("%d mutants generated over %d packages; seed %d; sample of %d", len(all), len(targets), seed, len(sample))
	rep := &report{seed: seed, total: len(all), sample: sample, started: time.Now(), byType: countTypes(all), profile: profile != ""}
	if *list {
		for _, m := range sample {
			fmt.Printf("%s\t%s\t%s\n", m.id(), m.status, strings.TrimSpace(m.src))
		}
		return 0
	}

	bin := filepath.Join(tmp, "conform-mut")
	for i, m := range sample {
		if why, ok := equiv[m.id()]; ok {
			if strings.TrimSpace(why.line) != strings.TrimSpace(m.src) {
				logf("%s: listed as equivalent, but its line now reads %q: run it", m.id(), strings.TrimSpace(m.src))
			} else {
				m.verdict, m.detail = "equivalent", why.reason
			}
		}
		if m.verdict == "" {
			m.verdict, m.detail = runMutant(ctx, m, cov, tmp, bin, *timeout)
		}
		logf("[%d/%d] %s: %s %s", i+1, len(sample), m.id(), m.verdict, m.detail)
		if err := os.WriteFile(*md, []byte(rep.markdown()), 0o644); err != nil {
			return fail(err)
		}
	}
	rep.finished = true
	if err := os.WriteFile(*md, []byte(rep.markdown()), 0o644); err != nil {
		return fail(err)
	}
	k, s := rep.counts()
	lo, hi := wilson(k, k+s)
	logf("seed %d: %d of %d non-equivalent viable mutants killed (%.1f %%, 95 %% Wilson interval %.1f–%.1f %%); report in %s",
		seed, k, k+s, pct(k, k+s), 100*lo, 100*hi, *md)
	return 0
}

// mutant is one of gremlins' mutants: a token at a position and what it
// becomes.
type mutant struct {
	file   string // relative to the module root
	line   int
	col    int
	kind   string // gremlins' mutation type
	status string // gremlins' status against the kit's coverage: RUNNABLE or NOT COVERED
	src    string // the source line (for the report and the equivalent list)

	// verdict: killed, survived, not reached, not viable, equivalent
	verdict, detail string
	seconds         float64
}

func (m *mutant) id() string { return fmt.Sprintf("%s:%d:%d:%s", m.file, m.line, m.col, m.kind) }

// gremlinsReport is the part of gremlins' JSON output this reads.
type gremlinsReport struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// generate runs gremlins' dry run over every target package against the
// kit's coverage profile (or none: then every mutant is NOT COVERED) and
// returns every mutant of the kept files, in a stable order.
func generate(ctx context.Context, tmp, profile string) ([]*mutant, error) {
	shim := filepath.Join(tmp, "shim")
	if err := os.MkdirAll(shim, 0o755); err != nil {
		return nil, err
	}
	realGo, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	if profile == "" {
		profile = filepath.Join(tmp, "empty.cover")
		os.WriteFile(profile, []byte("mode: set\n"), 0o644)
	}
	if profile, err = filepath.Abs(profile); err != nil {
		return nil, err
	}
	// gremlins runs `go test -cover -coverprofile FILE ./pkg/...` to learn
	// what is covered; the shim answers it with the kit's profile and
	// passes every other go command through.
	script := fmt.Sprintf("#!/bin/sh\nprev=\nfor a in \"$@\"; do\n  if [ \"$prev\" = -coverprofile ]; then cp %q \"$a\"; exit $?; fi\n  prev=$a\ndone\nexec %q \"$@\"\n", profile, realGo)
	if err := os.WriteFile(filepath.Join(shim, "go"), []byte(script), 0o755); err != nil {
		return nil, err
	}
	gremlins := filepath.Join(tmp, "gremlins")
	if out, err := exec.CommandContext(ctx, realGo, "build", "-o", gremlins, "github.com/go-gremlins/gremlins/cmd/gremlins").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building gremlins: %v\n%s", err, out)
	}
	var all []*mutant
	for _, t := range targets {
		out := filepath.Join(tmp, strings.ReplaceAll(t.dir, "/", "_")+".json")
		cmd := exec.CommandContext(ctx, gremlins, "unleash", "--dry-run", "--invert-logical", "--output", out, "./"+t.dir)
		cmd.Env = append(os.Environ(), "PATH="+shim+string(os.PathListSeparator)+os.Getenv("PATH"))
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gremlins over %s: %v\n%s", t.dir, err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		var gr gremlinsReport
		if err := json.Unmarshal(b, &gr); err != nil {
			return nil, fmt.Errorf("gremlins' report for %s: %w", t.dir, err)
		}
		for _, f := range gr.Files {
			if !t.keep(f.Name) {
				continue
			}
			for _, mu := range f.Mutations {
				all = append(all, &mutant{file: t.dir + "/" + f.Name, line: mu.Line, col: mu.Column, kind: mu.Type, status: mu.Status})
			}
		}
	}
	slices.SortFunc(all, func(a, b *mutant) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line), cmp.Compare(a.col, b.col), cmp.Compare(a.kind, b.kind))
	})
	all = slices.CompactFunc(all, func(a, b *mutant) bool { return a.id() == b.id() })
	lines := map[string][]string{}
	for _, m := range all {
		if lines[m.file] == nil {
			b, err := os.ReadFile(m.file)
			if err != nil {
				return nil, err
			}
			lines[m.file] = strings.Split(string(b), "\n")
		}
		if m.line-1 < len(lines[m.file]) {
			m.src = lines[m.file][m.line-1]
		}
	}
	return all, nil
}

// replacements is gremlins' token mutator table (internal/engine/mappings.go).
var replacements = map[string]map[token.Token]token.Token{
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL, token.SUB: token.ADD},
	"CONDITIONALS_BOUNDARY": {token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ},
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR, token.LSS: token.GEQ, token.NEQ: token.EQL},
	"INCREMENT_DECREMENT":   {token.DEC: token.INC, token.INC: token.DEC},
	"INVERT_LOGICAL":        {token.LAND: token.LOR, token.LOR: token.LAND},
	"INVERT_NEGATIVES":      {token.SUB: token.ADD},
}

// apply returns the file with the mutant's token replaced, and whether the
// mutant lies outside every function (where coverage counts nothing).
func apply(m *mutant) (src []byte, global bool, err error) {
	b, err := os.ReadFile(m.file)
	if err != nil {
		return nil, false, err
	}
	fset := token.NewFileSet()
	f := fset.AddFile(m.file, -1, len(b))
	var s scanner.Scanner
	s.Init(f, b, nil, scanner.ScanComments)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			break
		}
		p := fset.Position(pos)
		if p.Line != m.line || p.Column != m.col {
			continue
		}
		to, ok := replacements[m.kind][tok]
		if !ok {
			return nil, false, fmt.Errorf("%s: the token there is %s, which %s does not mutate", m.id(), tok, m.kind)
		}
		off := p.Offset
		out := append(append(append([]byte{}, b[:off]...), to.String()...), b[off+len(tok.String()):]...)
		return out, outsideFuncs(m, b), nil
	}
	return nil, false, fmt.Errorf("%s: no token at that position", m.id())
}

func outsideFuncs(m *mutant, src []byte) bool {
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, m.file, src, parser.SkipObjectResolution)
	if err != nil {
		return false
	}
	for _, d := range af.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if fset.Position(fd.Pos()).Line <= m.line && m.line <= fset.Position(fd.End()).Line {
			return false
		}
	}
	return true
}

// caseOf returns the position of the switch whose case expression holds
// the mutant. Go's coverage counts a case clause's body, not its
// expressions, which run whenever the switch reaches them: gremlins calls
// such a mutant not covered even when its switch ran.
func caseOf(m *mutant, src []byte) (token.Position, bool) {
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, m.file, src, parser.SkipObjectResolution)
	if err != nil {
		return token.Position{}, false
	}
	var found token.Position
	var ok bool
	var stack []ast.Node
	ast.Inspect(af, func(n ast.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return false
		}
		stack = append(stack, n)
		cc, isCase := n.(*ast.CaseClause)
		if !isCase || ok {
			return true
		}
		for _, e := range cc.List {
			a, b := fset.Position(e.Pos()), fset.Position(e.End())
			if before(a, m.line, m.col) && !before(b, m.line, m.col) {
				for i := len(stack) - 1; i >= 0; i-- {
					switch sw := stack[i].(type) {
					case *ast.SwitchStmt:
						found, ok = fset.Position(sw.Pos()), true
					case *ast.TypeSwitchStmt:
						found, ok = fset.Position(sw.Pos()), true
					}
					if ok {
						break
					}
				}
			}
		}
		return true
	})
	return found, ok
}

// before reports whether p is at or before line:col.
func before(p token.Position, line, col int) bool {
	return p.Line < line || p.Line == line && p.Column <= col
}

// coverage is the kit's profile: the blocks that ran, per module-relative
// file.
type coverage map[string][][4]int

func readCoverage(file, module string) (coverage, error) {
	cov := coverage{}
	if file == "" {
		return cov, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		// name.go:L1.C1,L2.C2 statements count
		f, rest, ok := strings.Cut(l, ":")
		fs := strings.Fields(rest)
		if !ok || len(fs) != 3 || fs[2] == "0" {
			continue
		}
		var bl [4]int
		if _, err := fmt.Sscanf(fs[0], "%d.%d,%d.%d", &bl[0], &bl[1], &bl[2], &bl[3]); err != nil {
			continue
		}
		f = strings.TrimPrefix(f, module+"/")
		cov[f] = append(cov[f], bl)
	}
	return cov, nil
}

// ran reports whether a block holding p ran.
func (c coverage) ran(file string, p token.Position) bool {
	for _, b := range c[file] {
		if (p.Line > b[0] || p.Line == b[0] && p.Column >= b[1]) && (p.Line < b[2] || p.Line == b[2] && p.Column <= b[3]) {
			return true
		}
	}
	return false
}

var failedScenario = regexp.MustCompile(`conform: \[\d+\] failed: (.*)`)

// runMutant builds the runner with the mutant and runs the kit's two
// passes against it.
func runMutant(ctx context.Context, m *mutant, cov coverage, tmp, bin string, timeout time.Duration) (verdict, detail string) {
	start := time.Now()
	defer func() { m.seconds = time.Since(start).Seconds() }()
	src, global, err := apply(m)
	if err != nil {
		return "error", err.Error()
	}
	if m.status != "RUNNABLE" && !global {
		sw, inCase := caseOf(m, src)
		if !inCase || !cov.ran(m.file, sw) {
			return "not reached", "no scenario executes this statement"
		}
	}
	mf := filepath.Join(tmp, "mutant.go")
	if err := os.WriteFile(mf, src, 0o644); err != nil {
		return "error", err.Error()
	}
	abs, _ := filepath.Abs(m.file)
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mf}})
	ovf := filepath.Join(tmp, "overlay.json")
	os.WriteFile(ovf, ov, 0o644)
	if out, err := exec.CommandContext(ctx, "go", "build", "-overlay", ovf, "-o", bin, "./tools/conform").CombinedOutput(); err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(lastLines(out, 3)), "\n")
		return "not viable", "does not compile: " + first
	}
	for _, pass := range [][]string{
		{"-format", "progress", "-fail-fast"},
		{"-format", "progress", "-fail-fast", "-slow", "-tags", "@slow"},
	} {
		c, cancel := context.WithTimeout(ctx, timeout)
		cmd := exec.CommandContext(c, bin, pass...)
		cmd.WaitDelay = 10 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := c.Err() != nil
		cancel()
		if timedOut {
			return "killed", fmt.Sprintf("the kit ran past %s (%s)", timeout, strings.Join(pass, " "))
		}
		if err != nil {
			mm := failedScenario.FindSubmatch(stderr.Bytes())
			if mm == nil {
				return "killed", "the runner failed: " + strings.TrimSpace(lastLines(stderr.Bytes(), 1))
			}
			// On a loaded machine a scenario can fail for want of time:
			// a kill counts when the failing scenario fails again, alone.
			name := string(mm[1])
			c, cancel := context.WithTimeout(ctx, timeout)
			again := exec.CommandContext(c, bin, "-format", "progress", "-slow", "-only", "^"+regexp.QuoteMeta(name)+"$")
			again.WaitDelay = 10 * time.Second
			err := again.Run()
			timedOut := c.Err() != nil
			cancel()
			if err != nil || timedOut {
				return "killed", "failed (and again alone): " + name
			}
			return "unconfirmed", "failed once, passed alone: " + name
		}
	}
	return "survived", "the whole kit passed"
}

func lastLines(b []byte, n int) string {
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// kitCoverage builds the runner with coverage of the target packages, runs
// the whole kit once and returns the text profile.
func kitCoverage(ctx context.Context, tmp string) (string, error) {
	bin := filepath.Join(tmp, "conform-cover")
	// Every package of the module is instrumented (no -coverpkg): with a
	// -coverpkg list that leaves the main package out, the binary writes
	// no coverage data at all.
	if out, err := exec.CommandContext(ctx, "go", "build", "-cover", "-o", bin, "./tools/conform").CombinedOutput(); err != nil {
		return "", fmt.Errorf("coverage build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "covdata")
	os.MkdirAll(dir, 0o755)
	cmd := exec.CommandContext(ctx, bin, "-slow", "-format", "progress")
	cmd.Env = append(os.Environ(), "GOCOVERDIR="+dir)
	cmd.Stdout = nil
	if out, err := cmd.CombinedOutput(); err != nil {
		// A flaky scenario only lowers what counts as reached; say so.
		logf("coverage run: the kit failed (%v); coverage is what it reached:\n%s", err, lastLines(out, 5))
	}
	profile := filepath.Join(tmp, "kit.cover")
	if out, err := exec.CommandContext(ctx, "go", "tool", "covdata", "textfmt", "-i", dir, "-o", profile).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go tool covdata: %v\n%s", err, out)
	}
	keep := filepath.Join("bin", "kit.cover")
	if b, err := os.ReadFile(profile); err == nil {
		os.MkdirAll("bin", 0o755)
		os.WriteFile(keep, b, 0o644)
		logf("coverage: the kit's profile is kept in %s (pass -cover-profile %s to reuse it)", keep, keep)
	}
	return profile, nil
}

type equivalent struct{ line, reason string }

// readEquivalent reads ID<TAB>source line<TAB>reason lines ('#' comments).
func readEquivalent(file string) (map[string]equivalent, error) {
	out := map[string]equivalent{}
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 3 || strings.TrimSpace(f[2]) == "" {
			return nil, fmt.Errorf("%s:%d: want ID<TAB>source line<TAB>reason", file, n)
		}
		out[f[0]] = equivalent{line: f[1], reason: f[2]}
	}
	return out, sc.Err()
}

type report struct {
	seed     uint64
	total    int
	sample   []*mutant
	byType   map[string]int
	started  time.Time
	finished bool
	profile  bool
}

func countTypes(all []*mutant) map[string]int {
	c := map[string]int{}
	for _, m := range all {
		c[m.kind]++
	}
	return c
}

// counts: killed and survived (not reached included) among the
// non-equivalent viable mutants run so far.
func (r *report) counts() (killed, survived int) {
	for _, m := range r.sample {
		switch m.verdict {
		case "killed":
			killed++
		case "survived", "not reached":
			survived++
		}
	}
	return
}

// wilson is the 95 % Wilson score interval of k successes in n trials.
func wilson(k, n int) (lo, hi float64) {
	if n == 0 {
		return 0, 1
	}
	const z = 1.959963984540054
	p, nf := float64(k)/float64(n), float64(n)
	d := 1 + z*z/nf
	c := (p + z*z/(2*nf)) / d
	h := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / d
	return max(0, c-h), min(1, c+h)
}

func pct(k, n int) float64 {
	if n == 0 {
		return 0
	}
	return 100 * float64(k) / float64(n)
}

func (r *report) markdown() string {
	var b strings.Builder
	k, s := r.counts()
	lo, hi := wilson(k, k+s)
	done := 0
	verdicts := map[string]int{}
	for _, m := range r.sample {
		if m.verdict != "" {
			done++
			verdicts[m.verdict]++
		}
	}
	fmt.Fprintf(&b, "# Generated mutants: a seeded sample against the kit\n\n")
	fmt.Fprintf(&b, "Generated by `make mutate-sample` (`go run ./tools/mutsample`); the mutants are go-gremlins/gremlins' over `controller/`, `runtime/delivery/`, `server/`, `auth/` and the store's state machine (`runtime/store/state.go`), `cluster.go` files left out (they run only with several hosts). The regression set somebody chose is [MUTATIONS.md](MUTATIONS.md).\n\n")
	status := "complete"
	if !r.finished {
		status = fmt.Sprintf("**in progress or interrupted**: %d of %d sampled mutants run", done, len(r.sample))
	}
	fmt.Fprintf(&b, "- seed **%d**, sample of %d out of %d generated mutants (%s); started %s\n", r.seed, len(r.sample), r.total, status, r.started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- **kill rate: %d of %d non-equivalent viable mutants (%.1f %%), 95 %% Wilson score interval %.1f–%.1f %%**\n", k, k+s, pct(k, k+s), 100*lo, 100*hi)
	fmt.Fprintf(&b, "- verdicts:")
	for _, v := range []string{"killed", "survived", "not reached", "equivalent", "not viable", "unconfirmed", "error"} {
		fmt.Fprintf(&b, " %s %d;", v, verdicts[v])
	}
	fmt.Fprintf(&b, " not yet run %d\n", len(r.sample)-done)
	if !r.profile {
		fmt.Fprintf(&b, "- run without the kit's coverage profile: every mutant ran\n")
	}
	types := make([]string, 0, len(r.byType))
	for t := range r.byType {
		types = append(types, t)
	}
	slices.Sort(types)
	fmt.Fprintf(&b, "- generated by type:")
	for _, t := range types {
		fmt.Fprintf(&b, " %s %d;", t, r.byType[t])
	}
	fmt.Fprintf(&b, "\n\n")
	fmt.Fprintf(&b, "*not reached*: no scenario executes the mutated statement (the kit's coverage), so the kit cannot kill it; it counts as survived. *equivalent*: listed with its reason in [mutants-equivalent.txt](mutants-equivalent.txt); out of the denominator. *not viable*: does not compile; out of the denominator. *unconfirmed*: a scenario failed in the pass but passed when run again alone (a loaded machine); out of the denominator, listed.\n\n")
	fmt.Fprintf(&b, "| mutant | source line | verdict | detail | seconds |\n| --- | --- | --- | --- | --- |\n")
	for _, m := range r.sample {
		v := m.verdict
		if v == "" {
			v = "not yet run"
		}
		if v == "survived" || v == "not reached" {
			v = "**" + v + "**"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %.0f |\n", m.id(), mdEscape(strings.TrimSpace(m.src)), v, mdEscape(m.detail), m.seconds)
	}
	return b.String()
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "`", "'", "\n", " ").Replace(s)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not in a Go module")
	}
	return filepath.Dir(mod), nil
}

// modulePath is the module's import path (coverage profiles name files by it).
func modulePath() string {
	out, _ := exec.Command("go", "list", "-m").Output()
	return strings.TrimSpace(string(out))
}

func logf(f string, a ...any) { fmt.Fprintf(os.Stderr, "mutsample: "+f+"\n", a...) }

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "mutsample:", err)
	return 2
}
