package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture writes a features directory with the given sentence files and
// one feature file.
func fixture(t *testing.T, lists map[string]string, feature string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sentences"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range lists {
		if err := os.WriteFile(filepath.Join(dir, "sentences", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a.feature"), []byte(feature), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const feature = `Feature: f
  @EXT-X-1 @HAPI-OPS-2 @ext-x @HostAPI-v2
  Scenario: one
    Given nothing
`

func TestBuildCountsPerCapabilityAndReasons(t *testing.T) {
	dir := fixture(t, map[string]string{
		"ext-x.txt":   "# title: X; capability: ext-x; prefix: EXT-X\nEXT-X-1\t§X\tA rule.\nEXT-X-2\t§X\tA choice.\treason: reference-host choice\n",
		"hostapi.txt": "# title: Host API; capability: host-api; prefix: HAPI; order: 1\n# a comment\nHAPI-OPS-2\t§Operations\tAnother rule.\n",
	}, feature)
	doc, unc, err := build(dir)
	if err != nil || len(unc) != 0 {
		t.Fatalf("build: %v, uncovered %v", err, unc)
	}
	s := string(doc)
	for _, want := range []string{
		"| [Host API](#host-api) | `host-api` | 1 | 1 | 0 | 0 |",
		"| [X](#x) | `ext-x` | 2 | 1 | 1 | 0 |",
		"| EXT-X-2 | §X | A choice. | *not covered: reference-host choice* |",
		"| EXT-X-1 | §X | A rule. | a.feature: one |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("matrix lacks %q:\n%s", want, s)
		}
	}
	if strings.Index(s, "## Host API") > strings.Index(s, "## X") {
		t.Errorf("order 1 is not listed first:\n%s", s)
	}
}

func TestBuildRefusesUncoveredWithoutReason(t *testing.T) {
	dir := fixture(t, map[string]string{
		"ext-x.txt":   "# title: X; capability: ext-x; prefix: EXT-X\nEXT-X-1\t§X\tA rule.\nEXT-X-3\t§X\tUnchecked.\n",
		"hostapi.txt": "# title: Host API; capability: host-api; prefix: HAPI\nHAPI-OPS-2\t§Operations\tAnother rule.\n",
	}, feature)
	doc, unc, err := build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(unc) != 1 || unc[0] != "EXT-X-3" {
		t.Fatalf("uncovered %v, want [EXT-X-3]", unc)
	}
	if !strings.Contains(string(doc), "| EXT-X-3 | §X | Unchecked. | **UNCOVERED** |") {
		t.Errorf("matrix does not mark EXT-X-3 uncovered:\n%s", doc)
	}
}

func TestBuildErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		lists   map[string]string
		feature string
		want    string
	}{
		"unknown tag": {map[string]string{"x.txt": "# title: X; capability: ext-x; prefix: EXT-X\nEXT-X-1\ts\tt\n"},
			"Feature: f\n  @EXT-X-9\n  Scenario: s\n    Given x\n", "unknown sentence @EXT-X-9"},
		"no header": {map[string]string{"x.txt": "EXT-X-1\ts\tt\n"}, feature, "header"},
		"wrong prefix": {map[string]string{"x.txt": "# title: X; capability: ext-x; prefix: EXT-X\nEXT-Y-1\ts\tt\n"},
			feature, "want EXT-X-"},
		"bad reason": {map[string]string{"x.txt": "# title: X; capability: ext-x; prefix: EXT-X\nEXT-X-1\ts\tt\tbecause\n"},
			feature, "fourth column"},
		"stale reason": {map[string]string{"x.txt": "# title: X; capability: ext-x; prefix: EXT-X\nEXT-X-1\ts\tt\treason: none\n"},
			"Feature: f\n  @EXT-X-1\n  Scenario: s\n    Given x\n", "drop the reason"},
		"same prefix": {map[string]string{
			"x.txt": "# title: X; capability: ext-x; prefix: EXT-X\n",
			"y.txt": "# title: Y; capability: ext-y; prefix: EXT-X\n"}, "Feature: f\n", "same prefix"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := build(fixture(t, tc.lists, tc.feature))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("build: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
