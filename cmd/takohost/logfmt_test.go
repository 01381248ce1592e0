package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

// The default log is one line a person reads per event; -log-format json
// is one JSON object per line; request logs and the host's own events
// share the format.
func TestLogFormats(t *testing.T) {
	var b bytes.Buffer
	l, err := newLogger(&b, "text", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("request", "method", "GET", "path", "/v2/spaces/demo/resources", "status", 200)
	l.With("component", "engine").WithGroup("queue").Warn("batch failed", "name", "tasks", "err", "the handler threw")
	l.Debug("not shown")
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} INFO  request method=GET path=/v2/spaces/demo/resources status=200$`),
		regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} WARN  batch failed component=engine queue\.name=tasks queue\.err="the handler threw"$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d %q, want %s", i, lines[i], re)
		}
	}

	b.Reset()
	if l, err = newLogger(&b, "json", slog.LevelInfo); err != nil {
		t.Fatal(err)
	}
	l.Info("request", "status", 200)
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["msg"] != "request" || m["status"] != 200.0 {
		t.Fatalf("json line %q: %v", b.String(), err)
	}
	if _, err := newLogger(&b, "yaml", slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Fatalf("an unknown format: %v", err)
	}
}
