package sandbox

import (
	"context"
	"time"

	"golang.org/x/sys/unix"

	"github.com/takoform/queuehost/abi"
)

// monoNow is the machine's CLOCK_MONOTONIC in nanoseconds: one clock for
// the host and its sandboxes (a Go time's monotonic reading is its
// process's own), which goes on while a process is stopped.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("sandbox: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}

// startBy is the StartBy of the frame of a batch handed over with ctx
// (abi.WithStartBy): an absolute time of the machine's clock, so that a
// stall of this process after this call does not move it; 0 without.
func startBy(ctx context.Context) int64 {
	t, ok := abi.StartBy(ctx)
	if !ok {
		return 0
	}
	return monoNow() + int64(time.Until(t))
}
