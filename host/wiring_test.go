package host

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/store"
)

// A failed send shows the worker its Form code without the store's text
// (which names the host's files); the host's log keeps the cause (#14).
func TestWorkerSendErrorHidesTheHostsFiles(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cause := fmt.Errorf("%w: journal: write /srv/takohost/data/0000000000000007.wal: input/output error", store.ErrUnavailable)
	err := workerSendError(log, "q1", fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, cause))
	if abi.Code(err) != "backend_unavailable" || strings.Contains(err.Error(), "/srv/") || strings.Contains(err.Error(), ".wal") {
		t.Fatalf("the worker sees %q (code %s)", err, abi.Code(err))
	}
	if !strings.Contains(logged.String(), "0000000000000007.wal") {
		t.Fatalf("the host's log lost the cause: %s", logged.String())
	}
	full := workerSendError(log, "q1", fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, fmt.Errorf("%w: /srv/x", store.ErrNoSpace)))
	if !strings.Contains(full.Error(), "disk is nearly full") || strings.Contains(full.Error(), "/srv/") {
		t.Fatalf("disk full: %q", full)
	}
	// The Form's other codes and an unknown queue pass through unchanged.
	for _, e := range []error{abi.ErrInvalidBody, abi.ErrMessageTooLarge, abi.ErrBatchTooLarge, abi.ErrUnknownQueue, nil} {
		if got := workerSendError(log, "q1", e); !errors.Is(got, e) && got != e {
			t.Errorf("%v became %v", e, got)
		}
	}
}
