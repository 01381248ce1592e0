package steps_test

import (
	"bytes"
	"io/fs"
	"strings"
	"testing"

	"github.com/cucumber/godog"

	"github.com/takoform/queuehost/features"
	"github.com/takoform/queuehost/features/steps"
)

// TestEveryStepIsDefined runs every scenario against an address where
// nothing listens: each fails at its first request, but godog still matches
// every later step, so an undefined or ambiguous step shows here without a
// host.
func TestEveryStepIsDefined(t *testing.T) {
	// As before capabilities: @store-faults scenarios are applicable
	// (and skipped for want of fault control).
	kit := nowhereKit(t, map[string]string{"admin": "a", "viewer": "v", "narrow": "n", "sender": "s", "other": "o"},
		map[string]bool{steps.CapStoreFaults: true})
	s := runKit(kit, "~@restart && ~@handler-limit", 8)
	for _, bad := range []string{"undefined", "ambiguous", "pending"} {
		if strings.Contains(s, bad) {
			i := strings.Index(s, bad)
			lo := max(0, i-2000)
			t.Errorf("a step is %s:\n%s", bad, s[lo:min(len(s), i+2000)])
		}
	}
	t.Log(s[max(0, len(s)-400):])
	if !strings.Contains(s, "scenarios") {
		t.Errorf("no scenario ran:\n%s", s)
	}
}

// nowhereKit is the kit against an address where nothing listens, with
// these principals' tokens and capabilities.
func nowhereKit(t *testing.T, tokens map[string]string, caps map[string]bool) *steps.Kit {
	t.Helper()
	rec, err := steps.StartRecorder("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	wfs, err := fs.Sub(features.FS, "workers")
	if err != nil {
		t.Fatal(err)
	}
	return steps.New(steps.Config{
		Base:         func() string { return "http://127.0.0.1:1" },
		Tokens:       tokens,
		Recorder:     rec,
		RecorderURL:  "http://" + rec.Addr(),
		Workers:      wfs,
		Capabilities: caps,
	})
}

// runKit runs the scenarios the tag expression selects and returns godog's
// progress output.
func runKit(kit *steps.Kit, tags string, concurrency int) string {
	var out bytes.Buffer
	godog.TestSuite{
		ScenarioInitializer: kit.InitializeScenario,
		Options: &godog.Options{Format: "progress", Paths: []string{"."}, FS: features.FS, Strict: true,
			Concurrency: concurrency, Output: &out, NoColors: true, Tags: tags},
	}.Run()
	return out.String()
}
