package server

import "testing"

// TestTraceID: the listing names the trace only of a well-formed W3C
// traceparent; anything else (empty, another shape, upper case, the
// invalid all-zero ID) names none.
func TestTraceID(t *testing.T) {
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"": "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01":  "",
		"4bf92f3577b34da6a3ce929d0e0e4736":                        "",
	} {
		if got := traceID(tp); got != want {
			t.Errorf("traceID(%q) = %q, want %q", tp, got, want)
		}
	}
}
