package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/takoform/queuehost/features"
	"github.com/takoform/queuehost/features/steps"
)

// bundle is a run's results bundle (--bundle DIR), in the spirit of a
// Kubernetes conformance results tarball: what ran, against what, with
// what outcome, per scenario and per normative sentence.
//
//	results.json  the kit version, the host, its declared capabilities, and every scenario's status
//	junit.xml     the JUnit report (godog's, with skipped cases marked skipped)
//	coverage.md   each sentence of the Forms with its scenarios and their outcome in this run
//	host.json     the host under test and its declared capabilities
type bundle struct {
	dir            string
	fsys           fs.FS
	kit            *steps.Kit
	certify        bool
	status         int
	tags           string
	hosts          []string
	host           *steps.HostInfo
	declared       map[string]bool
	started        time.Time
	handlerTimeout time.Duration
}

type hostDoc struct {
	URLs                  []string        `json:"urls"`
	Host                  *steps.HostInfo `json:"host,omitempty"`
	Capabilities          []string        `json:"capabilities"`
	HandlerTimeoutSeconds float64         `json:"handlerTimeoutSeconds,omitempty"`
}

type kitDoc struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

func kitVersion() kitDoc {
	k := kitDoc{Version: features.Version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				k.Revision = s.Value
			case "vcs.modified":
				k.Modified = s.Value == "true"
			}
		}
	}
	if k.Revision == "" {
		// `go run` stamps no VCS information: ask git, when the kit runs
		// from a checkout.
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
			k.Revision = strings.TrimSpace(string(out))
			if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
				k.Modified = len(strings.TrimSpace(string(st))) > 0
			}
		}
	}
	return k
}

func (b bundle) write() error {
	var caps []string
	for c, ok := range b.declared {
		if ok {
			caps = append(caps, c)
		}
	}
	sort.Strings(caps)
	host := hostDoc{URLs: b.hosts, Host: b.host, Capabilities: caps, HandlerTimeoutSeconds: b.handlerTimeout.Seconds()}
	results := b.kit.Results()
	sort.SliceStable(results, func(i, j int) bool {
		if results[i].Feature != results[j].Feature {
			return results[i].Feature < results[j].Feature
		}
		return results[i].Name < results[j].Name
	})
	totals := map[string]int{}
	for _, r := range results {
		totals[r.Status]++
	}
	doc := struct {
		Kit       kitDoc                 `json:"kit"`
		Host      hostDoc                `json:"host"`
		Certify   bool                   `json:"certify"`
		Certified bool                   `json:"certified"`
		Status    int                    `json:"exitStatus"`
		Tags      string                 `json:"tags"`
		Started   time.Time              `json:"started"`
		Seconds   float64                `json:"seconds"`
		Totals    map[string]int         `json:"totals"`
		Checker   []steps.CheckerReport  `json:"checker"`
		Scenarios []steps.ScenarioResult `json:"scenarios"`
	}{
		Kit: kitVersion(), Host: host, Certify: b.certify, Certified: b.certify && b.status == 0, Status: b.status,
		Tags: b.tags, Started: b.started.UTC(), Seconds: time.Since(b.started).Seconds(), Totals: totals,
		Checker: b.kit.CheckerReports(), Scenarios: results,
	}
	if err := writeJSON(filepath.Join(b.dir, "results.json"), doc); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(b.dir, "host.json"), host); err != nil {
		return err
	}
	cov, err := b.coverage(results)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "coverage.md"), cov, 0o644)
}

func writeJSON(path string, v any) error {
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// coverage is the matrix of features/COVERAGE.md with this run's outcome:
// each sentence is PASS (every scenario naming it ran and passed), FAIL
// (one failed), NOT RUN (none of its scenarios ran: skipped, not
// applicable or filtered out) or UNCOVERED (no scenario names it).
func (b bundle) coverage(results []steps.ScenarioResult) ([]byte, error) {
	bySentence := map[string][]steps.ScenarioResult{}
	for _, r := range results {
		for _, t := range r.Tags {
			bySentence[strings.TrimPrefix(t, "@")] = append(bySentence[strings.TrimPrefix(t, "@")], r)
		}
	}
	files, err := fs.Glob(b.fsys, "sentences/*.txt")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no sentences/*.txt in the features (%v)", err)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(files))) // QueueConsumer before AtLeastOnceQueue, the extensions and the Host API between them
	var out strings.Builder
	fmt.Fprintf(&out, "# Conformance results per sentence\n\n")
	fmt.Fprintf(&out, "Kit %s, run started %s, tags `%s`. PASS: every scenario naming the sentence ran and passed; FAIL: one failed; NOT RUN: none ran (skipped, not applicable or not selected); NOT COVERED: no scenario names it, for the reason given; UNCOVERED: no scenario names it.\n\n",
		features.Version, b.started.UTC().Format(time.RFC3339), b.tags)
	type row struct{ id, section, text, verdict, scen string }
	for _, f := range files {
		fh, err := b.fsys.Open(f)
		if err != nil {
			return nil, err
		}
		var rows []row
		count := map[string]int{}
		title := strings.TrimSuffix(filepath.Base(f), ".txt")
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if h, ok := strings.CutPrefix(line, "# title:"); ok && len(rows) == 0 {
				// The header: "# title: T; capability: C; prefix: P" (tools/coverage).
				title, _, _ = strings.Cut(h, ";")
				title = strings.TrimSpace(title)
				continue
			}
			// ID, section, sentence and, for a sentence no scenario checks, "reason: ...".
			parts := strings.SplitN(line, "\t", 4)
			if len(parts) < 3 || strings.HasPrefix(line, "#") {
				continue
			}
			rs := bySentence[parts[0]]
			verdict := "UNCOVERED"
			if len(parts) == 4 {
				verdict = "NOT COVERED (" + strings.TrimPrefix(parts[3], "reason: ") + ")"
			}
			var names []string
			ran, failed := 0, 0
			for _, r := range rs {
				names = append(names, r.Name+" ("+r.Status+")")
				switch r.Status {
				case "passed":
					ran++
				case "failed":
					ran++
					failed++
				}
			}
			switch {
			case failed > 0:
				verdict = "**FAIL**"
			case ran > 0:
				verdict = "PASS"
			case len(rs) > 0:
				verdict = "NOT RUN"
			}
			if len(parts) == 4 && len(rs) == 0 {
				count["NOT COVERED"]++
			} else {
				count[strings.Trim(verdict, "*")]++
			}
			rows = append(rows, row{parts[0], parts[1], parts[2], verdict, strings.Join(names, "; ")})
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
		fmt.Fprintf(&out, "## %s\n\nPASS %d, FAIL %d, NOT RUN %d, NOT COVERED with a reason %d, UNCOVERED %d of %d sentences.\n\n", title, count["PASS"], count["FAIL"], count["NOT RUN"], count["NOT COVERED"], count["UNCOVERED"], len(rows))
		fmt.Fprintf(&out, "| ID | section | sentence | result | scenarios |\n| --- | --- | --- | --- | --- |\n")
		for _, r := range rows {
			fmt.Fprintf(&out, "| %s | %s | %s | %s | %s |\n", r.id, md(r.section), md(r.text), r.verdict, md(r.scen))
		}
		out.WriteString("\n")
	}
	return []byte(out.String()), nil
}

func md(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
