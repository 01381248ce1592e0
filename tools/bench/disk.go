package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// diskLimits are the raw limits of the disk under the data directory,
// measured in the same run as everything they are compared with: a
// benchmark's figure means little on a shared machine, its ratio to these
// means a lot.
type diskLimits struct {
	FsyncPerSec     float64 // fdatasync calls per second, each after a 4 KiB append
	SyncWriteMBps   float64 // sequential write bandwidth with one fdatasync per 1 MiB
	FsyncSamples    int
	BandwidthSample int64
}

// measureDisk appends 4 KiB then fdatasyncs, for d; then writes 1 MiB
// chunks with an fdatasync after each, for d. Both in a fresh file in dir.
// counter counts fdatasync calls, for the progress display.
func measureDisk(dir string, d time.Duration, counter *atomic.Int64) (diskLimits, error) {
	var lim diskLimits
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		return lim, err
	}
	name := f.Name()
	defer os.Remove(name)
	defer f.Close()

	small := make([]byte, 4096)
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		if _, err := f.Write(small); err != nil {
			return lim, fmt.Errorf("fsync probe write: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return lim, fmt.Errorf("fsync probe fdatasync: %w", err)
		}
		n++
		counter.Add(1)
	}
	lim.FsyncSamples = n
	lim.FsyncPerSec = float64(n) / time.Since(start).Seconds()

	g, err := os.Create(filepath.Join(dir, "bandwidth-probe"))
	if err != nil {
		return lim, err
	}
	defer os.Remove(g.Name())
	defer g.Close()
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 31)
	}
	start = time.Now()
	var written int64
	for time.Since(start) < d {
		if _, err := g.Write(big); err != nil {
			return lim, fmt.Errorf("bandwidth probe write: %w", err)
		}
		if err := unix.Fdatasync(int(g.Fd())); err != nil {
			return lim, fmt.Errorf("bandwidth probe fdatasync: %w", err)
		}
		written += int64(len(big))
		counter.Add(1)
	}
	lim.BandwidthSample = written
	lim.SyncWriteMBps = float64(written) / (1 << 20) / time.Since(start).Seconds()
	return lim, nil
}

// measureOverwriteFsync is the fdatasync rate of 4 KiB writes into a file
// already written with zeros, so that no write changes its size: what a
// journal that pre-zeroed its segments would pay per sync. The journal
// appends, so each of its syncs also commits the file's new size.
func measureOverwriteFsync(dir string, d time.Duration, counter *atomic.Int64) (float64, error) {
	f, err := os.CreateTemp(dir, "overwrite-probe-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const size = 64 << 20
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return 0, fmt.Errorf("overwrite probe: %w", err)
		}
	}
	if err := unix.Fsync(int(f.Fd())); err != nil {
		return 0, fmt.Errorf("overwrite probe: %w", err)
	}
	small := make([]byte, 4096)
	start := time.Now()
	n := 0
	for off := int64(0); time.Since(start) < d && off+int64(len(small)) <= size; off += int64(len(small)) {
		if _, err := f.WriteAt(small, off); err != nil {
			return 0, fmt.Errorf("overwrite probe write: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, fmt.Errorf("overwrite probe fdatasync: %w", err)
		}
		n++
		counter.Add(1)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
