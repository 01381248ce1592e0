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
	// FsyncPerSec: fdatasync calls per second, each after a 4 KiB write
	// into a file already written with zeros, so that no sync also commits
	// a new file size. That is how the journal writes (it zeroes its head
	// segment ahead of the data), so it is the limit of a group commit.
	FsyncPerSec     float64
	SyncWriteMBps   float64 // sequential write bandwidth with one fdatasync per 1 MiB
	FsyncSamples    int
	BandwidthSample int64
}

// probeFileSize is the pre-zeroed file the fsync probe writes into, in
// place, round and round.
const probeFileSize = 16 << 20

// measureDisk writes 4 KiB into a pre-zeroed file then fdatasyncs, for d;
// then writes 1 MiB chunks with an fdatasync after each, for d. Both in
// fresh files in dir. counter counts fdatasync calls, for the progress
// display.
func measureDisk(dir string, d time.Duration, counter *atomic.Int64) (diskLimits, error) {
	var lim diskLimits
	rate, n, err := fsyncRate(dir, d, true, counter)
	if err != nil {
		return lim, err
	}
	lim.FsyncPerSec, lim.FsyncSamples = rate, n

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
	start := time.Now()
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

// fsyncRate is the rate of 4 KiB writes each followed by fdatasync, for d:
// into a pre-zeroed file (in place, round and round) when zeroed, else
// appended to a growing file, each sync then also committing the new size.
func fsyncRate(dir string, d time.Duration, zeroed bool, counter *atomic.Int64) (float64, int, error) {
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if zeroed {
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < probeFileSize; off += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros, off); err != nil {
				return 0, 0, fmt.Errorf("fsync probe: %w", err)
			}
		}
		if err := unix.Fsync(int(f.Fd())); err != nil {
			return 0, 0, fmt.Errorf("fsync probe: %w", err)
		}
	}
	small := make([]byte, 4096)
	for i := range small {
		small[i] = byte(i)
	}
	start := time.Now()
	n := 0
	for off := int64(0); time.Since(start) < d; off += int64(len(small)) {
		if zeroed {
			off %= probeFileSize
		}
		if _, err := f.WriteAt(small, off); err != nil {
			return 0, 0, fmt.Errorf("fsync probe write: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0, fmt.Errorf("fsync probe fdatasync: %w", err)
		}
		n++
		counter.Add(1)
	}
	return float64(n) / time.Since(start).Seconds(), n, nil
}
