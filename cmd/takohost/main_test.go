package main

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1073741824": 1 << 30, "512MiB": 512 << 20, "512M": 512 << 20, "2GiB": 2 << 30, "2g": 2 << 30,
		"64 MB": 64 << 20, "1T": 1 << 40, "100K": 100 << 10, "7B": 7,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1G", "1.5G", "12X", "99999999999T"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("%q: %d, want an error", in, got)
		}
	}
}

// TestBadOTLPEndpointIsAUsageError: a -otlp-endpoint that is not an
// http(s) URL stops the host before it starts, with exit code 2.
func TestBadOTLPEndpointIsAUsageError(t *testing.T) {
	t.Setenv("OTEL_SDK_DISABLED", "")
	for _, bad := range []string{"127.0.0.1:4318", "grpc://127.0.0.1:4317"} {
		if code := run([]string{"-data", t.TempDir(), "-listen", "127.0.0.1:0", "-otlp-endpoint", bad}); code != 2 {
			t.Errorf("-otlp-endpoint %q: exit %d, want 2", bad, code)
		}
	}
}

// TestBadTraceURLIsAUsageError: a -trace-url with no {traceId}, not
// http(s), or with nothing traced to link to stops the host before it
// starts.
func TestBadTraceURLIsAUsageError(t *testing.T) {
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	for _, args := range [][]string{
		{"-otlp-endpoint", "http://127.0.0.1:4318", "-trace-url", "http://127.0.0.1:16686/trace/"},
		{"-otlp-endpoint", "http://127.0.0.1:4318", "-trace-url", "ftp://x/{traceId}"},
		{"-trace-url", "http://127.0.0.1:16686/trace/{traceId}"},
	} {
		if code := run(append([]string{"-data", t.TempDir(), "-listen", "127.0.0.1:0"}, args...)); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
