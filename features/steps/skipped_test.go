package steps_test

import "testing"

// TestMissingTokenIsSkippedNotPassed runs the scenarios that need the
// viewer principal with no viewer token, as against any host whose run
// gives only the admin token: each must be recorded skipped, with its
// reason, never passed (godog hands the After hook no error for a scenario
// its Before hook skipped, so the status cannot come from that error).
func TestMissingTokenIsSkippedNotPassed(t *testing.T) {
	kit := nowhereKit(t, map[string]string{"admin": "a"}, nil)
	out := runKit(kit, "@needs-viewer && ~@restart", 4)
	res := kit.Results()
	if len(res) == 0 {
		t.Fatalf("no scenario ran:\n%s", out)
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
