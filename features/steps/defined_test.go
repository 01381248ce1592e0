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
	rec, err := steps.StartRecorder("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	wfs, err := fs.Sub(features.FS, "workers")
	if err != nil {
		t.Fatal(err)
	}
	kit := steps.New(steps.Config{
		Base:        func() string { return "http://127.0.0.1:1" },
		Tokens:      map[string]string{"admin": "a", "viewer": "v", "narrow": "n", "sender": "s", "other": "o"},
		Recorder:    rec,
		RecorderURL: "http://" + rec.Addr(),
		Workers:     wfs,
		// As before capabilities: @store-faults scenarios are applicable
		// (and skipped for want of fault control).
		Capabilities: map[string]bool{steps.CapStoreFaults: true},
	})
	var out bytes.Buffer
	godog.TestSuite{
		ScenarioInitializer: kit.InitializeScenario,
		Options: &godog.Options{Format: "progress", Paths: []string{"."}, FS: features.FS, Strict: true,
			Concurrency: 8, Output: &out, NoColors: true, Tags: "~@restart && ~@handler-limit"},
	}.Run()
	s := out.String()
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
