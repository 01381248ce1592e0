package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fiveSegments writes a journal of five segments of one record each and
// closes it cleanly.
func fiveSegments(t *testing.T, mem *MemFS) []Pos {
	t.Helper()
	j, _, _ := open(t, mem, "/j", 40)
	var pos []Pos
	for i := range 5 {
		pos = append(pos, mustAppend(t, j, fmt.Sprintf("record-%d-abcdefgh", i)))
	}
	if n := len(j.Segments()); n != 5 {
		t.Fatalf("%d segments", n)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return pos
}

// Deleting a segment file — one in the middle, the last one, all of them —
// must not start the journal with fewer records: Open names what is gone.
func TestMissingSegmentRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove []uint64
	}{
		{"middle", []uint64{3}},
		{"last", []uint64{5}},
		{"first", []uint64{1}},
		{"all", []uint64{1, 2, 3, 4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := NewMemFS(1)
			fiveSegments(t, mem)
			for _, id := range tc.remove {
				if err := mem.Remove(filepath.Join("/j", SegmentName(id))); err != nil {
					t.Fatal(err)
				}
			}
			_, _, _, err := tryOpen(mem, "/j", 40)
			want := filepath.Join("/j", SegmentName(tc.remove[0]))
			if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "missing") {
				t.Fatalf("Open = %v, want an error naming %s as missing", err, want)
			}
		})
	}
}

// Without the manifest, format 3 segments cannot be trusted to be all of
// the journal.
func TestMissingManifestRefusesToStart(t *testing.T) {
	mem := NewMemFS(1)
	fiveSegments(t, mem)
	mem.Remove(filepath.Join("/j", ManifestName))
	_, _, _, err := tryOpen(mem, "/j", 40)
	if err == nil || !strings.Contains(err.Error(), ManifestName+" is missing") {
		t.Fatalf("Open = %v", err)
	}
	// A manifest that does not parse is refused too.
	f, _ := mem.OpenFile(filepath.Join("/j", ManifestName), os.O_RDWR|os.O_CREATE, 0o600)
	f.WriteAt([]byte(`{"format":3,"segm`), 0)
	f.Close()
	if _, _, _, err := tryOpen(mem, "/j", 40); err == nil || !strings.Contains(err.Error(), "does not parse") {
		t.Fatalf("Open with a torn manifest = %v", err)
	}
}

// An empty directory is a new journal, and the report says so.
func TestCreatedIsReported(t *testing.T) {
	mem := NewMemFS(1)
	j, rep, _ := open(t, mem, "/j", 0)
	if !rep.Created {
		t.Fatalf("new journal: %+v", rep)
	}
	mustAppend(t, j, "x")
	j.Close()
	_, rep, _ = open(t, mem, "/j", 0)
	if rep.Created {
		t.Fatalf("existing journal reported as created: %+v", rep)
	}
}

// The case: a bit flip in an acknowledged frame at the end of
// the journal. Once the mark covers it, it is damage (Open fails naming
// the file and offset), not a torn tail to cut. (The last group itself
// has a copy in the ack file and is restored from it instead:
// TestLastGroupRestoredFromAckCopy.)
func TestBitFlipBelowTheMarkFailsOpen(t *testing.T) {
	for _, stop := range []string{"close", "idle"} {
		t.Run(stop, func(t *testing.T) {
			mem := NewMemFS(1)
			j, _, _ := open(t, mem, "/j", 1<<20)
			p := mustAppend(t, j, "one")
			last := mustAppend(t, j, "two")
			if stop == "close" {
				j.Close()
			} else {
				// Idle: the writer records the mark by itself; then a
				// crash, no Close.
				waitMark(t, j, Mark{1, last.Offset + HeaderSize + 3})
				j.noCloseMark = true
				j.Close()
			}
			name := filepath.Join("/j", SegmentName(1))
			mem.FlipBit(name, p.PayloadOffset()+1, 2)
			_, _, _, err := tryOpen(mem, "/j", 1<<20)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != name || ce.Offset != p.Offset || !strings.Contains(ce.Reason, "acknowledged mark") {
				t.Fatalf("Open = %v, want a CorruptError at %s offset %d", err, name, p.Offset)
			}
		})
	}
}

func waitMark(t *testing.T, j *Journal, want Mark) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j.mu.Lock()
		got := j.mark
		j.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mark %+v, want %+v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// A segment file cut short below the mark (and below the last group,
// which the ack file's copy restores) lost acknowledged frames.
func TestTruncatedBelowTheMarkFailsOpen(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 1<<20)
	p := mustAppend(t, j, "one")
	mustAppend(t, j, "two")
	j.Close()
	name := filepath.Join("/j", SegmentName(1))
	f, _ := mem.OpenFile(name, os.O_RDWR, 0)
	f.Truncate(p.Offset)
	f.Sync()
	f.Close()
	_, _, _, err := tryOpen(mem, "/j", 1<<20)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != name || ce.Offset != p.Offset {
		t.Fatalf("Open = %v", err)
	}
}

// Frames after the mark are still a torn tail: a crash after an
// unsynced write is cut, as before.
func TestTornTailAfterTheMarkIsCut(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 1<<20)
	mustAppend(t, j, "one")
	j.Close()
	f, _ := mem.OpenFile(filepath.Join("/j", SegmentName(1)), os.O_RDWR, 0)
	size, _ := f.Size()
	appendTo(f, AppendFrame(nil, 1, size, []byte("torn"))[:10])
	f.Close()
	j, rep, got := open(t, mem, "/j", 1<<20)
	equal(t, got, "one")
	if !rep.Truncated || rep.Offset != size || rep.Acked != (Mark{1, size}) {
		t.Fatalf("report %+v", rep)
	}
	j.Close()
}

// Compaction drops a segment from the manifest before removing its file:
// a crash in between leaves a file older than the first listed segment,
// which Open removes without replaying it.
func TestLeftoverOfRemovalIsRemoved(t *testing.T) {
	mem := NewMemFS(1)
	fiveSegments(t, mem)
	j, _, _ := open(t, mem, "/j", 40)
	f, _ := mem.OpenFile(filepath.Join("/j", SegmentName(1)), os.O_RDONLY, 0)
	size, _ := f.Size()
	data := make([]byte, size)
	f.ReadAt(data, 0)
	f.Close()
	if err := j.RemoveSegment(1); err != nil {
		t.Fatal(err)
	}
	j.Close()
	// Bring the file back as if its removal had not happened.
	f, _ = mem.OpenFile(filepath.Join("/j", SegmentName(1)), os.O_RDWR|os.O_CREATE, 0o600)
	f.WriteAt(data, 0)
	f.Close()
	_, rep, got := open(t, mem, "/j", 40)
	if rep.Segments != 4 || len(got) != 4 || got[0].pos.Segment != 2 {
		t.Fatalf("replayed %v, report %+v", got, rep)
	}
	if names, _ := mem.ReadDir("/j"); slices.Contains(names, SegmentName(1)) {
		t.Fatalf("leftover kept: %v", names)
	}
}

// A journal of format 2 (segments, no manifest) is migrated: its
// segments are taken as found and the manifest written.
func TestMigrateFormat2(t *testing.T) {
	mem := NewMemFS(1)
	mem.MkdirAll("/j", 0o700)
	var want []string
	for id := uint64(1); id <= 3; id++ {
		salt := uint64(100 + id)
		b := appendSegmentHeader(nil, salt, 2)
		payload := fmt.Sprintf("v2-%d", id)
		b = AppendFrame(b, salt, int64(len(b)), []byte(payload))
		want = append(want, payload)
		f, _ := mem.OpenFile(filepath.Join("/j", SegmentName(id)), os.O_RDWR|os.O_CREATE, 0o644)
		f.WriteAt(b, 0)
		f.Close()
	}
	j, rep, got := open(t, mem, "/j", 1<<20)
	equal(t, got, want...)
	if !rep.Migrated || rep.Created {
		t.Fatalf("report %+v", rep)
	}
	mustAppend(t, j, "v3")
	j.Close()
	_, rep, got = open(t, mem, "/j", 1<<20)
	equal(t, got, append(want, "v3")...)
	if rep.Migrated {
		t.Fatalf("migrated twice: %+v", rep)
	}

	// A format 2 journal with a gap is refused, naming the missing file.
	mem = NewMemFS(1)
	mem.MkdirAll("/j", 0o700)
	for _, id := range []uint64{1, 3} {
		f, _ := mem.OpenFile(filepath.Join("/j", SegmentName(id)), os.O_RDWR|os.O_CREATE, 0o644)
		f.WriteAt(appendSegmentHeader(nil, 7, 2), 0)
		f.Close()
	}
	if _, _, _, err := tryOpen(mem, "/j", 1<<20); err == nil || !strings.Contains(err.Error(), SegmentName(2)) {
		t.Fatalf("Open = %v", err)
	}
}

// The journal holds message bodies and secrets: 0700 and 0600.
func TestFilePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	j, _, _, err := openWith(dir, Options{SegmentSize: 100, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := j.Append(context.Background(), fmt.Appendf(nil, "record-%d-%s", i, strings.Repeat("x", 60)), nil); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v", st.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) < 3 {
		t.Fatalf("files %v", ents)
	}
	for _, e := range ents {
		st, _ := os.Stat(filepath.Join(dir, e.Name()))
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v", e.Name(), st.Mode().Perm())
		}
	}
}

// A full disk refuses Append but not AppendReserved, and Rotate seals the
// head so that its space can be reclaimed by removing it.
func TestReserveAndRotate(t *testing.T) {
	ffs := NewFaultFS(nil, 1)
	j, _, _, err := openWith("/j", Options{FS: ffs, SegmentSize: 1 << 20, Logger: quiet, Reserve: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ffs.SetCapacity(ffs.Used() + 20<<10)
	ctx := context.Background()
	big := make([]byte, 1000)
	var n int
	for ; n < 100; n++ {
		if _, err = j.Append(ctx, big, nil); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNoSpace) || n < 10 || n > 16 {
		t.Fatalf("after %d appends: %v, want ErrNoSpace once about 16 KiB are used", n, err)
	}
	// The reserve is there for what frees space.
	if _, err := j.AppendReserved(ctx, big, nil); err != nil {
		t.Fatalf("AppendReserved on a disk at the reserve: %v", err)
	}
	head := j.Segments()[0].ID
	if err := j.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	segs := j.Segments()
	if len(segs) != 2 || !segs[0].Sealed || segs[1].ID != head+1 {
		t.Fatalf("after Rotate: %+v", segs)
	}
	// Rotating an empty head does nothing.
	if err := j.Rotate(ctx); err != nil || len(j.Segments()) != 2 {
		t.Fatalf("Rotate of an empty head: %v, %+v", err, j.Segments())
	}
	if err := j.RemoveSegment(head); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(ctx, big, nil); err != nil {
		t.Fatalf("Append after the old head was removed: %v", err)
	}
}

// A manifest that cannot be written fails what needed it and nothing
// more: a rotation fails its group (no frame goes to an unlisted segment)
// and the next one succeeds; a removal fails and the segment stays; the
// journal reopens with every acknowledged frame.
func TestManifestWriteFailures(t *testing.T) {
	ffs := NewFaultFS(nil, 1)
	j, _, _, err := openWith("/j", Options{FS: ffs, SegmentSize: 40, Logger: quiet, CheckpointIdle: -1, CheckpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []string
	appendOK := func(s string) {
		t.Helper()
		if _, err := j.Append(ctx, []byte(s), nil); err != nil {
			t.Fatalf("Append(%s): %v", s, err)
		}
		want = append(want, s)
	}
	appendOK("record-0-abcdefgh")
	ffs.FailRenames(1)
	if _, err := j.Append(ctx, []byte("record-x-abcdefgh"), nil); err == nil || !errors.Is(err, ErrInjected) {
		t.Fatalf("Append needing a rotation with the manifest unwritable: %v", err)
	}
	if n := len(j.Segments()); n != 1 {
		t.Fatalf("%d segments after a failed rotation", n)
	}
	appendOK("record-1-abcdefgh")
	appendOK("record-2-abcdefgh")
	first := j.Segments()[0].ID
	ffs.FailRenames(1)
	if err := j.RemoveSegment(first); err == nil {
		t.Fatal("RemoveSegment with the manifest unwritable succeeded")
	}
	if _, err := j.ReadFrame(Pos{first, SegmentHeaderSize}); err != nil {
		t.Fatalf("the segment a failed removal kept: %v", err)
	}
	j.Close()
	_, _, got := open(t, ffs, "/j", 40)
	equal(t, got, want...)
}

// renameCountFS counts the renames onto the manifest: one per checkpoint.
type renameCountFS struct {
	*MemFS
	manifests atomic.Int64
}

func (f *renameCountFS) Rename(oldname, newname string) error {
	if filepath.Base(newname) == ManifestName {
		f.manifests.Add(1)
	}
	return f.MemFS.Rename(oldname, newname)
}

// A writer busy with one small group after another, its queue empty
// between them (one request at a time), is not idle: the idle checkpoint
// waits until no group has been taken for CheckpointIdle, and while busy
// only CheckpointEvery records the mark. The idle timer used to fire
// CheckpointIdle after the first wait whatever came since, writing the
// manifest every CheckpointIdle under a steady trickle.
func TestIdleCheckpointWaitsForIdle(t *testing.T) {
	fsys := &renameCountFS{MemFS: NewMemFS(1)}
	const idle = 30 * time.Millisecond
	j, _, _, err := openWith("/j", Options{FS: fsys, Logger: quiet, CheckpointIdle: idle, CheckpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before := fsys.manifests.Load()
	var last Pos
	gaps := int64(0) // pauses of CheckpointIdle or more (a loaded machine's oversleeps): each may checkpoint
	prev := time.Now()
	for end := time.Now().Add(20 * idle); time.Now().Before(end); {
		if time.Since(prev) >= idle {
			gaps++
		}
		if last, err = j.Append(context.Background(), []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		prev = time.Now()
		time.Sleep(idle / 10)
	}
	if n := fsys.manifests.Load() - before; n > gaps {
		t.Fatalf("%d checkpoints while appending every %s with CheckpointIdle %s (%d pauses of %s or more), want at most one per pause", n, idle/10, idle, gaps, idle)
	}
	before = fsys.manifests.Load()
	// Idle now: the mark is recorded by itself, once.
	waitMark(t, j, Mark{last.Segment, last.Offset + HeaderSize + 1})
	time.Sleep(3 * idle)
	if n := fsys.manifests.Load() - before; n > 1 {
		t.Fatalf("%d checkpoints after going idle, want 1", n)
	}
}
