package host

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
)

// syncBuffer is a bytes.Buffer safe for the host's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A data directory whose journal is gone (host.json kept) starts with a
// warning that everything of the old journal is gone; a first start does
// not warn; a journal with a segment missing does not start at all.
func TestLostJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	start := func() (*Host, string, error) {
		var log syncBuffer
		h, err := New(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0", ShutdownGrace: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		return h, log.String(), err
	}
	h, log, err := start()
	if err != nil {
		t.Fatal(err)
	}
	h.Shutdown(context.Background())
	if strings.Contains(log, "level=WARN") || !strings.Contains(log, "created a new journal") {
		t.Fatalf("first start: %s", log)
	}
	h, log, err = start()
	if err != nil {
		t.Fatal(err)
	}
	h.Shutdown(context.Background())
	if strings.Contains(log, "created a new") || !strings.Contains(log, "journal recovered") {
		t.Fatalf("second start: %s", log)
	}

	// The segment files alone gone: the manifest names what is missing.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no segment files")
	}
	for _, s := range segs {
		os.Remove(s)
	}
	if h, _, err := start(); err == nil || !strings.Contains(err.Error(), filepath.Base(segs[0])) {
		if h != nil {
			h.Shutdown(context.Background())
		}
		t.Fatalf("start with the segments deleted: %v", err)
	}
	// The whole journal gone, host.json kept: a warning.
	os.Remove(filepath.Join(dir, journal.ManifestName))
	h, log, err = start()
	if err != nil {
		t.Fatal(err)
	}
	h.Shutdown(context.Background())
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "already holds host.json") {
		t.Fatalf("start on a lost journal: %s", log)
	}
}
