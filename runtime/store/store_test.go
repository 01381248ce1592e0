package store_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/takoform/queuehost/runtime/journal"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openJournaled(t *testing.T, fsys journal.FS, dir string, segSize int64) *store.Journaled {
	t.Helper()
	s, _, err := store.Open(context.Background(), dir, store.Options{FS: fsys, SegmentSize: segSize, Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformanceJournaledOS(t *testing.T) {
	ffs := journal.NewFaultFS(journal.OSFS{}, 1)
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		return openJournaled(t, ffs, dir, 4096)
	}, storetest.WithFault(func(t *testing.T, on bool) {
		if on {
			ffs.FailSyncs(1)
		} else {
			ffs.Reset()
		}
	}))
}

func TestConformanceJournaledFaultFS(t *testing.T) {
	ffs := journal.NewFaultFS(nil, 2)
	storetest.Run(t, func(t *testing.T, dir string) store.Store {
		return openJournaled(t, ffs, dir, 1<<20)
	}, storetest.WithFault(func(t *testing.T, on bool) {
		if on {
			ffs.SetCapacity(ffs.Used())
		} else {
			ffs.Reset()
		}
	}))
}

func TestConformanceMemory(t *testing.T) {
	storetest.Run(t, func(*testing.T, string) store.Store { return store.NewMemory() }, storetest.NoReopen())
}
