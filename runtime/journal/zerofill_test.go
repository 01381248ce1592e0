package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openZeroAhead(t *testing.T, fsys FS, dir string, segSize int64) (*Journal, RecoveryReport, []rec) {
	t.Helper()
	j, rep, got, err := openWith(dir, Options{FS: fsys, SegmentSize: segSize, ZeroAhead: DefaultZeroAhead, Logger: quiet})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j, rep, got
}

func fileSize(t *testing.T, fsys FS, name string) int64 {
	t.Helper()
	f, err := fsys.OpenFile(name, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	return size
}

// waitFor polls cond for up to a few seconds: the zeroing runs on its own
// goroutine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestZeroAheadWritesIntoZeros: with ZeroAhead, the head's file is zeroed
// past its data before groups are written, so groups land in space the
// file has; a sealed segment is cut back to its data; every frame replays,
// on the real disk and on MemFS.
func TestZeroAheadWritesIntoZeros(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   FS
		dir  string
	}{{"os", OSFS{}, t.TempDir()}, {"mem", NewMemFS(1), "/j"}} {
		t.Run(tc.name, func(t *testing.T) {
			const segSize = 3 << 20
			j, _, _ := openZeroAhead(t, tc.fs, tc.dir, segSize)
			head := filepath.Join(tc.dir, SegmentName(1))
			waitFor(t, "the first chunk of zeros", func() bool { return fileSize(t, tc.fs, head) >= zeroChunk })
			payload := strings.Repeat("p", 4000)
			var want []string
			for i := 0; i < 2000; i++ { // about 8 MB: three segments
				s := fmt.Sprintf("%d:%s", i, payload)
				mustAppend(t, j, s)
				want = append(want, s)
			}
			segs := j.Segments()
			if len(segs) < 3 {
				t.Fatalf("%d segments", len(segs))
			}
			for _, g := range segs {
				size := fileSize(t, tc.fs, filepath.Join(tc.dir, SegmentName(g.ID)))
				switch {
				case g.Sealed && size != g.Size:
					t.Fatalf("sealed segment %d: file of %d bytes for %d bytes of data", g.ID, size, g.Size)
				case !g.Sealed && size < g.Size:
					t.Fatalf("head %d: file of %d bytes for %d bytes of data", g.ID, size, g.Size)
				}
			}
			last := segs[len(segs)-1]
			waitFor(t, "zeros ahead of the head's data", func() bool {
				return fileSize(t, tc.fs, filepath.Join(tc.dir, SegmentName(last.ID))) > last.Size
			})
			j.Close()
			j, rep, got := openZeroAhead(t, tc.fs, tc.dir, segSize)
			defer j.Close()
			if rep.Truncated {
				t.Fatalf("reopening reported %+v", rep)
			}
			equal(t, got, want...)
		})
	}
}

// TestZeroAheadCrash: crashes while groups are written into zeroed space
// (and while the zeroing runs) lose nothing that was acknowledged, and
// recovery finds data, then at most a torn group, then zeros.
func TestZeroAheadCrash(t *testing.T) {
	for _, mode := range []CrashMode{CrashDropUnsynced, CrashKeepPrefix, CrashZeroFill, CrashKeepAll} {
		for seed := range uint64(8) {
			mem := NewMemFS(seed)
			j, _, _ := openZeroAhead(t, mem, "/j", 2<<20)
			var acked []string
			for i := range 300 + int(seed)*40 {
				s := fmt.Sprintf("m%d-%s", i, strings.Repeat("x", int(seed)*97%3000))
				if _, err := j.Append(context.Background(), []byte(s), nil); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, s)
			}
			mem.Crash(mode)
			j2, rep, got := openZeroAhead(t, mem, "/j", 2<<20)
			if len(got) < len(acked) {
				t.Fatalf("mode %d seed %d: %d of %d acknowledged frames replayed (report %+v)", mode, seed, len(got), len(acked), rep)
			}
			equal(t, got[:len(acked)], acked...)
			mustAppend(t, j2, "after")
			j2.Close()
			j.Close()
			_, _, again := openZeroAhead(t, mem, "/j", 2<<20)
			if payloads(again)[len(again)-1] != "after" {
				t.Fatalf("mode %d seed %d: the frame after recovery was not replayed", mode, seed)
			}
		}
	}
}

// TestZeroAheadDiskFull: when zeroing ahead fails (no space), writes go on
// growing the file as without it, until the disk is full for them too.
func TestZeroAheadDiskFull(t *testing.T) {
	mem := NewMemFS(1)
	ffs := NewFaultFS(mem, 1)
	ffs.SetCapacity(ackFileSize + SegmentHeaderSize + 64<<10) // the ack file, and less than one chunk of zeros
	j, _, _ := openZeroAhead(t, ffs, "/j", 4<<20)
	var acked []string
	for i := range 400 {
		s := fmt.Sprintf("m%d-%s", i, strings.Repeat("y", 300))
		if _, err := j.Append(context.Background(), []byte(s), nil); err != nil {
			break
		}
		acked = append(acked, s)
	}
	if len(acked) < 100 || len(acked) == 400 {
		t.Fatalf("%d of 400 appends of 300 bytes fit in 64 KiB", len(acked))
	}
	j.Close()
	ffs.Reset()
	j, _, got := openZeroAhead(t, ffs, "/j", 4<<20)
	defer j.Close()
	equal(t, got, acked...)
}
