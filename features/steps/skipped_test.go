package steps_test

import (
	"bytes"
	"io/fs"
	"testing"

	"github.com/cucumber/godog"

	"github.com/takoform/queuehost/features"
	"github.com/takoform/queuehost/features/steps"
)

// TestMissingTokenIsSkippedNotPassed runs the scenarios that need the
// viewer principal with no viewer token, as against any host whose run
// gives only the admin token: each must be recorded skipped, with its
// reason, never passed (godog hands the After hook no error for a scenario
// its Before hook skipped, so the status cannot come from that error).
func TestMissingTokenIsSkippedNotPassed(t *testing.T) {
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
		Tokens:      map[string]string{"admin": "a"},
		Recorder:    rec,
		RecorderURL: "http://" + rec.Addr(),
		Workers:     wfs,
	})
	var out bytes.Buffer
	godog.TestSuite{
		ScenarioInitializer: kit.InitializeScenario,
		Options: &godog.Options{Format: "progress", Paths: []string{"."}, FS: features.FS, Strict: true,
			Concurrency: 4, Output: &out, NoColors: true, Tags: "@needs-viewer && ~@restart"},
	}.Run()
	res := kit.Results()
	if len(res) == 0 {
		t.Fatalf("no scenario ran:\n%s", out.String())
	}
	for _, r := range res {
		if r.Status == "not-applicable" {
			continue // it needs a capability too, which this run declares none of
		}
		if r.Status != "skipped" || r.Reason == "" {
			t.Errorf("%s: status %q, reason %q; want skipped for want of the viewer token", r.Name, r.Status, r.Reason)
		}
	}
}
