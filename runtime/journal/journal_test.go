package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rec struct {
	pos     Pos
	payload string
}

func open(t *testing.T, fsys FS, dir string, segSize int64) (*Journal, RecoveryReport, []rec) {
	t.Helper()
	j, rep, got, err := tryOpen(fsys, dir, segSize)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j, rep, got
}

func tryOpen(fsys FS, dir string, segSize int64) (*Journal, RecoveryReport, []rec, error) {
	return openWith(dir, Options{FS: fsys, SegmentSize: segSize, Logger: quiet})
}

// openWith opens the journal in dir and returns what it replayed.
func openWith(dir string, opts Options) (*Journal, RecoveryReport, []rec, error) {
	var got []rec
	j, rep, err := Open(context.Background(), dir, opts, func(p Pos, b []byte) error {
		got = append(got, rec{p, string(b)})
		return nil
	})
	return j, rep, got, err
}

// openNoMark opens a journal that never records its acknowledged mark
// past what Open wrote, not even on Close: its Close leaves the manifest
// as a crash would (only the frames' damage tests need that).
func openNoMark(t *testing.T, fsys FS, dir string, segSize int64) *Journal {
	t.Helper()
	j, _, _, err := openWith(dir, Options{FS: fsys, SegmentSize: segSize, Logger: quiet, CheckpointIdle: -1, CheckpointEvery: -1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	j.noCloseMark = true
	j.noAck = true
	return j
}

func mustAppend(t *testing.T, j *Journal, s string) Pos {
	t.Helper()
	p, err := j.Append(context.Background(), []byte(s), nil)
	if err != nil {
		t.Fatalf("Append(%q): %v", s, err)
	}
	return p
}

func payloads(rs []rec) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.payload
	}
	return out
}

func equal(t *testing.T, got []rec, want ...string) {
	t.Helper()
	if g := strings.Join(payloads(got), ","); g != strings.Join(want, ",") {
		t.Fatalf("replayed %q, want %q", g, strings.Join(want, ","))
	}
}

func TestAppendReopenRotateReadAt(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   FS
		dir  string
	}{{"os", OSFS{}, t.TempDir()}, {"mem", NewMemFS(1), "/j"}} {
		t.Run(tc.name, func(t *testing.T) {
			j, rep, got := open(t, tc.fs, tc.dir, 100)
			if len(got) != 0 || rep.Truncated || rep.Segments != 0 {
				t.Fatalf("fresh journal: %+v %v", rep, got)
			}
			var want []string
			var pos []Pos
			for i := range 20 {
				s := fmt.Sprintf("record-%02d-%s", i, strings.Repeat("x", i))
				want = append(want, s)
				pos = append(pos, mustAppend(t, j, s))
			}
			segs := j.Segments()
			if len(segs) < 3 || segs[len(segs)-1].Sealed || !segs[0].Sealed {
				t.Fatalf("expected rotation at 100 bytes, got %+v", segs)
			}
			for i, p := range pos {
				buf := make([]byte, len(want[i]))
				if _, err := j.ReadAt(buf, p.Segment, p.PayloadOffset()); err != nil || string(buf) != want[i] {
					t.Fatalf("ReadAt %v = %q, %v; want %q", p, buf, err, want[i])
				}
				if b, err := j.ReadFrame(p); err != nil || string(b) != want[i] {
					t.Fatalf("ReadFrame %v = %q, %v", p, b, err)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j, rep, got = open(t, tc.fs, tc.dir, 100)
			defer j.Close()
			equal(t, got, want...)
			for i, r := range got {
				if r.pos != pos[i] {
					t.Fatalf("frame %d replayed at %v, appended at %v", i, r.pos, pos[i])
				}
			}
			if rep.Frames != 20 || rep.Segments != len(segs) || rep.Truncated {
				t.Fatalf("report %+v", rep)
			}
			mustAppend(t, j, "after-reopen")
		})
	}
}

func TestGroupCommitOrderAndBatching(t *testing.T) {
	ffs := &slowSyncFS{FS: NewMemFS(2), delay: 200 * time.Microsecond}
	j, _, _ := open(t, ffs, "/j", 1<<20)
	var mu sync.Mutex
	var order []Pos
	var wg sync.WaitGroup
	const writers, each = 32, 50
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				_, err := j.Append(context.Background(), fmt.Appendf(nil, "w%d-%d", w, i), func(p Pos) {
					mu.Lock()
					order = append(order, p)
					mu.Unlock()
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := j.Stats()
	if st.Appends != writers*each || st.Groups >= st.Appends {
		t.Fatalf("stats %+v: expected groups of more than one frame", st)
	}
	for i := 1; i < len(order); i++ {
		a, b := order[i-1], order[i]
		if a.Segment > b.Segment || a.Segment == b.Segment && a.Offset >= b.Offset {
			t.Fatalf("onDurable out of journal order: %v then %v", a, b)
		}
	}
	j.Close()
	_, _, got := open(t, ffs, "/j", 1<<20)
	if len(got) != writers*each {
		t.Fatalf("replayed %d frames", len(got))
	}
	for i, r := range got {
		if r.pos != order[i] {
			t.Fatalf("replay order differs from onDurable order at %d", i)
		}
	}
}

// failAndRecover checks the common contract of write faults: the failed
// frame is reported as failed with the cause, the next append works
// without reopening, and reopening shows exactly the acknowledged frames.
func failAndRecover(t *testing.T, arm func(*FaultFS), disarm func(*FaultFS), cause error) {
	t.Helper()
	ffs := NewFaultFS(nil, 3)
	j, _, _ := open(t, ffs, "/j", 1<<20)
	mustAppend(t, j, "a")
	arm(ffs)
	onDurable := false
	_, err := j.Append(context.Background(), []byte(strings.Repeat("b", 1000)), func(Pos) { onDurable = true })
	if err == nil || !errors.Is(err, cause) {
		t.Fatalf("Append under fault = %v, want %v", err, cause)
	}
	if onDurable {
		t.Fatal("onDurable called for a failed frame")
	}
	if disarm != nil {
		disarm(ffs)
	}
	mustAppend(t, j, "c")
	if s := j.Segments(); s[0].Size != SegmentHeaderSize+2*(HeaderSize+1) {
		t.Fatalf("segment holds %d bytes, want the two acknowledged frames only", s[0].Size)
	}
	ffs.Crash(CrashKeepAll)
	_, rep, got := open(t, ffs, "/j", 1<<20)
	equal(t, got, "a", "c")
	if rep.Truncated {
		t.Fatalf("unexpected truncation %+v", rep)
	}
}

func TestSyncFailure(t *testing.T) {
	failAndRecover(t, func(f *FaultFS) { f.FailSyncs(1) }, nil, ErrInjected)
}

func TestWriteFailure(t *testing.T) {
	failAndRecover(t, func(f *FaultFS) { f.FailWrites(1) }, nil, ErrInjected)
}

func TestShortWrite(t *testing.T) {
	failAndRecover(t, func(f *FaultFS) { f.ShortWrites(1) }, nil, io.ErrShortWrite)
}

func TestDiskFullRecoversByItself(t *testing.T) {
	failAndRecover(t, func(f *FaultFS) { f.SetCapacity(f.Used() + 500) }, func(f *FaultFS) { f.SetCapacity(-1) }, syscall.ENOSPC)
}

func TestFailedTruncateRefusesWrites(t *testing.T) {
	ffs := NewFaultFS(nil, 4)
	j, _, _ := open(t, ffs, "/j", 1<<20)
	mustAppend(t, j, "a")
	ffs.FailSyncs(1)
	ffs.FailTruncates(1)
	if _, err := j.Append(context.Background(), []byte("b"), nil); !errors.Is(err, ErrInjected) {
		t.Fatalf("Append = %v", err)
	}
	if _, err := j.Append(context.Background(), []byte("c"), nil); !errors.Is(err, ErrBroken) {
		t.Fatalf("Append after failed truncate = %v, want ErrBroken", err)
	}
	j.Close()
	ffs.Crash(CrashDropUnsynced)
	j, _, got := open(t, ffs, "/j", 1<<20)
	equal(t, got, "a")
	mustAppend(t, j, "d")
}

func TestTornTail(t *testing.T) {
	for _, mode := range []CrashMode{CrashKeepPrefix, CrashZeroFill} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("mode%d/seed%d", mode, seed), func(t *testing.T) {
				mem := NewMemFS(seed)
				j, _, _ := open(t, mem, "/j", 1<<20)
				mustAppend(t, j, "durable")
				seg := j.Segments()[0]
				// Write an unsynced frame straight to the file, as a crash
				// in the middle of a group commit leaves it.
				f, _ := mem.OpenFile(filepath.Join("/j", SegmentName(seg.ID)), 0, 0)
				appendTo(f, AppendFrame(nil, j.head.salt, seg.Size, bytes.Repeat([]byte("t"), 300)))
				mem.Crash(mode)
				j2, rep, got := open(t, mem, "/j", 1<<20)
				defer j2.Close()
				size := SegmentHeaderSize + HeaderSize + int64(len("durable"))
				full := size + HeaderSize + 300
				switch {
				case len(got) == 2:
					// The whole frame survived: nothing to cut.
					if mode == CrashZeroFill || rep.Truncated {
						t.Fatalf("zero fill cannot keep the frame intact: %+v", rep)
					}
				case len(got) == 1:
					if rep.Truncated != (rep.Dropped > 0) || rep.Truncated && (rep.Offset != size || rep.Dropped > full-size || !strings.HasSuffix(rep.File, SegmentName(seg.ID))) {
						t.Fatalf("report %+v", rep)
					}
				default:
					t.Fatalf("replayed %v", payloads(got))
				}
				if s := j2.Segments()[0].Size; s != size && s != full {
					t.Fatalf("segment size after recovery %d", s)
				}
				mustAppend(t, j2, "next")
			})
		}
	}
}

// TestZeroTailKept: zeros after the last frame of the head (space zeroed
// ahead, or what a crash that grew the file leaves) are not damage: Open
// reports nothing, keeps the space, and the next group is written right
// after the data.
func TestZeroTailKept(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 1<<20)
	mustAppend(t, j, "durable")
	j.Close()
	name := filepath.Join("/j", SegmentName(1))
	f, _ := mem.OpenFile(name, 0, 0)
	appendTo(f, make([]byte, 4096))
	size, _ := f.Size()
	f.Close()
	j, rep, got := open(t, mem, "/j", 1<<20)
	equal(t, got, "durable")
	if rep.Truncated {
		t.Fatalf("report %+v", rep)
	}
	if segs := j.Segments(); segs[0].Size != int64(SegmentHeaderSize+HeaderSize+len("durable")) {
		t.Fatalf("segment size %d", segs[0].Size)
	}
	mustAppend(t, j, "next")
	j.Close()
	f, _ = mem.OpenFile(name, 0, 0)
	if after, _ := f.Size(); after != size {
		t.Fatalf("the next group grew the file from %d to %d bytes instead of using the zeros", size, after)
	}
	f.Close()
	_, _, got = open(t, mem, "/j", 1<<20)
	equal(t, got, "durable", "next")
}

func TestBadCRCAtTailIsCut(t *testing.T) {
	mem := NewMemFS(1)
	j := openNoMark(t, mem, "/j", 1<<20)
	mustAppend(t, j, "one")
	mustAppend(t, j, "two")
	j.Close()
	name := filepath.Join("/j", SegmentName(1))
	mem.FlipBit(name, int64(SegmentHeaderSize+HeaderSize+3+HeaderSize+1), 3)
	_, rep, got := open(t, mem, "/j", 1<<20)
	equal(t, got, "one")
	if !rep.Truncated || rep.Offset != SegmentHeaderSize+HeaderSize+3 || rep.Reason != "checksum mismatch" {
		t.Fatalf("report %+v", rep)
	}
}

func TestCorruptionBeforeTailFailsOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  int64 // of the flipped byte, in the first segment, after its header
		segs int
	}{
		{"payload bit", HeaderSize + 2, 1},
		{"crc bit", 5, 1},
		{"length bit", 1, 1},
		{"sealed segment tail", 3*(HeaderSize+9) + HeaderSize + 4, 2},
		{"sealed segment header", -SegmentHeaderSize + 13, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemFS(1)
			const segSize = SegmentHeaderSize + 4*(HeaderSize+9)
			j, _, _ := open(t, mem, "/j", segSize)
			for i := range 6 {
				mustAppend(t, j, fmt.Sprintf("payload-%d", i))
			}
			if n := len(j.Segments()); n != 2 {
				t.Fatalf("%d segments", n)
			}
			j.Close()
			name := filepath.Join("/j", SegmentName(1))
			if err := mem.FlipBit(name, SegmentHeaderSize+tc.off, 0); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := tryOpen(mem, "/j", segSize)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want a CorruptError", err)
			}
			wantOff := SegmentHeaderSize + tc.off/(HeaderSize+9)*(HeaderSize+9)
			if tc.off < 0 {
				wantOff = 0
			}
			if ce.File != name || ce.Offset != wantOff || !strings.Contains(err.Error(), name) {
				t.Fatalf("error %v names %s at %d, want %s at %d", err, ce.File, ce.Offset, name, wantOff)
			}
		})
	}
}

func TestRemoveSegment(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 30)
	var pos []Pos
	for i := range 5 {
		pos = append(pos, mustAppend(t, j, fmt.Sprintf("record-%d-abcdefgh", i)))
	}
	segs := j.Segments()
	if len(segs) != 5 {
		t.Fatalf("%+v", segs)
	}
	if err := j.RemoveSegment(segs[1].ID); err == nil {
		t.Fatal("removed a segment that is not the oldest")
	}
	if err := j.RemoveSegment(segs[4].ID); err == nil {
		t.Fatal("removed the head")
	}
	if err := j.RemoveSegment(segs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := j.ReadAt(make([]byte, 1), pos[0].Segment, 0); !errors.Is(err, ErrNoSegment) {
		t.Fatalf("ReadAt removed segment = %v", err)
	}
	j.Close()
	_, rep, got := open(t, mem, "/j", 30)
	if len(got) != 4 || rep.Segments != 4 || got[0].pos != pos[1] {
		t.Fatalf("after removal: %+v %v", rep, got)
	}
}

func TestAppendAfterClose(t *testing.T) {
	j, _, _ := open(t, NewMemFS(1), "/j", 0)
	j.Close()
	if _, err := j.Append(context.Background(), []byte("x"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if _, err := j.Append(context.Background(), nil, nil); err == nil {
		t.Fatal("empty payload accepted")
	}
}

func TestCorruptionInLastSegmentWithDataAfterFailsOpen(t *testing.T) {
	mem := NewMemFS(1)
	j := openNoMark(t, mem, "/j", 1<<20)
	for i := range 4 {
		mustAppend(t, j, fmt.Sprintf("payload-%d", i))
	}
	j.Close()
	name := filepath.Join("/j", SegmentName(1))
	frame := int64(HeaderSize + len("payload-0"))
	mem.FlipBit(name, SegmentHeaderSize+frame+HeaderSize+4, 6)
	_, _, _, err := tryOpen(mem, "/j", 1<<20)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != name || ce.Offset != SegmentHeaderSize+frame || !strings.Contains(ce.Reason, fmt.Sprintf("valid frame follows at offset %d", SegmentHeaderSize+2*frame)) {
		t.Fatalf("Open = %v", err)
	}
}

// A message body is the client's. One that holds a well-formed frame, lying
// in a torn tail, must not make the crash look like damage before the tail
// (which would keep the host from starting): a frame validates only with
// its segment's salt and at its own offset.
func TestFramedPayloadInTornTailRecovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func(file []byte, salt uint64, at int64) []byte // the frame to embed, lying at offset at
	}{
		{"verbatim copy of a record of the segment", func(file []byte, _ uint64, _ int64) []byte {
			return file[SegmentHeaderSize:]
		}},
		{"frame for its exact offset with another salt", func(_ []byte, salt uint64, at int64) []byte {
			return AppendFrame(nil, salt^0x5a5a, at, []byte("forged"))
		}},
		{"frame without salt or offset", func([]byte, uint64, int64) []byte {
			body := []byte("forged")
			b := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
			return append(binary.LittleEndian.AppendUint32(b, Checksum(body)), body...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemFS(1)
			j, _, _ := open(t, mem, "/j", 1<<20)
			mustAppend(t, j, "durable")
			seg := j.Segments()[0]
			name := filepath.Join("/j", SegmentName(seg.ID))
			file := make([]byte, seg.Size)
			if _, err := j.ReadAt(file, seg.ID, 0); err != nil {
				t.Fatal(err)
			}
			prefix := []byte("body:")
			at := seg.Size + HeaderSize + int64(len(prefix))
			body := append(append(prefix, tc.inner(file, j.head.salt, at)...), "…and the rest of the body"...)
			outer := AppendFrame(nil, j.head.salt, seg.Size, body)
			// The crash kept the group's write but its last bytes.
			f, _ := mem.OpenFile(name, 0, 0)
			appendTo(f, outer[:len(outer)-4])
			mem.Crash(CrashKeepAll)

			j2, rep, got := open(t, mem, "/j", 1<<20)
			equal(t, got, "durable")
			if !rep.Truncated || rep.File != name || rep.Offset != seg.Size || rep.Dropped != int64(len(outer)-4) {
				t.Fatalf("report %+v", rep)
			}
			mustAppend(t, j2, "next")
			j2.Close()
			_, rep, got = open(t, mem, "/j", 1<<20)
			equal(t, got, "durable", "next")
			if rep.Truncated {
				t.Fatalf("second open: %+v", rep)
			}
		})
	}
}

// A crash while a segment is being created can leave the last segment
// empty or with a torn header, and nothing in it: Open rewrites the header.
// A bad header with data after it is damage.
// A crash while a segment is created, before the manifest lists it,
// leaves a file of no more than a header after the last listed segment:
// Open removes it and appends go on in the last listed one. A file there
// with more than a header, or any other unlisted segment, is refused.
func TestTornSegmentHeader(t *testing.T) {
	hdr := AppendSegmentHeader(nil, 42)
	for _, tc := range []struct {
		name    string
		id      uint64
		content []byte
		corrupt bool
	}{
		{"empty", 2, nil, false},
		{"partial", 2, hdr[:11], false},
		{"zero-filled", 2, make([]byte, SegmentHeaderSize), false},
		{"flipped, nothing after", 2, append(slices.Clone(hdr[:12]), append([]byte{hdr[12] ^ 1}, hdr[13:]...)...), false},
		{"whole header", 2, hdr, false},
		{"zeros then data", 2, append(make([]byte, SegmentHeaderSize), AppendFrame(nil, 42, SegmentHeaderSize, []byte("x"))...), true},
		{"header after a gap", 4, hdr, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemFS(1)
			j, _, _ := open(t, mem, "/j", 1<<20)
			mustAppend(t, j, "durable")
			j.Close()
			name := filepath.Join("/j", SegmentName(tc.id))
			f, _ := mem.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
			appendTo(f, tc.content)
			f.Close()
			j, rep, got, err := tryOpen(mem, "/j", 1<<20)
			if tc.corrupt {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.File != name || ce.Offset != 0 || !strings.Contains(err.Error(), "not listed") {
					t.Fatalf("Open = %v, want a CorruptError at %s offset 0", err, name)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			equal(t, got, "durable")
			if rep.Truncated || rep.Segments != 1 {
				t.Fatalf("report %+v", rep)
			}
			if names, _ := mem.ReadDir("/j"); slices.Contains(names, SegmentName(tc.id)) {
				t.Fatalf("%s left in place: %v", name, names)
			}
			p := mustAppend(t, j, "next")
			if p.Segment != 1 {
				t.Fatalf("appended at %v", p)
			}
			j.Close()
			_, rep, got = open(t, mem, "/j", 1<<20)
			equal(t, got, "durable", "next")
			if rep.Truncated {
				t.Fatalf("second open: %+v", rep)
			}
		})
	}
}

// slowSyncFS makes every Sync take delay, as a disk does, and counts them.
type slowSyncFS struct {
	FS
	delay time.Duration
	syncs atomic.Int64
}

type slowSyncFile struct {
	File
	fs *slowSyncFS
}

func (s *slowSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{f, s}, nil
}

func (f slowSyncFile) Sync() error {
	time.Sleep(f.fs.delay)
	f.fs.syncs.Add(1)
	return f.File.Sync()
}

// With N writers appending in a loop behind a slow sync, nearly all N ride
// every sync: a group's writers are back in the queue before the next
// group is written. (Without gather, groups alternate between a few
// frames and nearly all, about N/2 on average.)
func TestGroupCommitFillsUnderConcurrency(t *testing.T) {
	const writers, each = 64, 30
	fsys := &slowSyncFS{FS: NewMemFS(1), delay: 4 * time.Millisecond}
	// No checkpoints: they would count as syncs.
	j, _, _, err := openWith("/j", Options{FS: fsys, SegmentSize: 1 << 30, Logger: quiet, CheckpointIdle: -1, CheckpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before := fsys.syncs.Load() // the segment header's
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := j.Append(context.Background(), fmt.Appendf(nil, "w%d-%d", w, i), nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Each group commit is two syncs, of the segment and of the ack file.
	syncs := fsys.syncs.Load() - before
	perGroup := float64(writers*each) / float64(syncs/2)
	t.Logf("%d records, %d syncs: %.1f records per group; stats %+v", writers*each, syncs, perGroup, j.Stats())
	if st := j.Stats(); 2*st.Groups != uint64(syncs) || st.Appends != writers*each {
		t.Fatalf("stats %+v, %d syncs", st, syncs)
	}
	if perGroup < 0.85*writers {
		t.Fatalf("%.1f records per group with %d writers, want nearly %d", perGroup, writers, writers)
	}
}

// Past a bad frame, recovery looks at every later byte for a valid frame.
// Each false start must cost only the header check, not a CRC over all
// that follows: with one large damaged frame at the tail that scan would
// otherwise be quadratic and Open would hang instead of cutting the tail.
// The payload is chosen so that every false start carries a length that fits.
func TestDamagedLargeTailScanIsLinear(t *testing.T) {
	mem := NewMemFS(1)
	j := openNoMark(t, mem, "/j", 64<<20)
	mustAppend(t, j, "durable")
	big := make([]byte, 8<<20)
	for i := 0; i+4 <= len(big); i += 4 {
		// At every 4-byte position, a length that runs almost to the end:
		// a payload CRC per false start would cover megabytes each time.
		binary.LittleEndian.PutUint32(big[i:], uint32(len(big)-i-64))
	}
	p, err := j.Append(context.Background(), big, nil)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	name := filepath.Join("/j", SegmentName(1))
	mem.FlipBit(name, p.PayloadOffset()+1000, 3)
	done := make(chan struct{})
	var rep RecoveryReport
	var got []rec
	go func() {
		defer close(done)
		var j2 *Journal
		j2, rep, got, err = tryOpen(mem, "/j", 64<<20)
		if err == nil {
			j2.Close()
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("Open did not finish: the scan past a bad frame is not linear")
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	equal(t, got, "durable")
	if !rep.Truncated || rep.Offset != p.Offset || rep.Dropped != int64(HeaderSize+len(big)) {
		t.Fatalf("report %+v, want the damaged last frame at %d cut", rep, p.Offset)
	}
}

// appendTo writes b at the end of f, as a crash that kept an unsynced
// write leaves it.
func appendTo(f File, b []byte) {
	size, _ := f.Size()
	f.WriteAt(b, size)
}
