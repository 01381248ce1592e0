package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTortureLastFrameDamage is the hostile suite's case: appends are
// acknowledged concurrently, the power fails, and then the last frames
// of the journal are damaged — a bit flipped or the file cut short. Open
// must either replay every acknowledged frame or report the damage; it
// may cut only what was never acknowledged. With the mark recorded only
// at checkpoints, a flip in the last acknowledged frame was cut as a torn
// tail. TORTURE=1 runs many more rounds.
func TestTortureLastFrameDamage(t *testing.T) {
	rounds := 40
	if os.Getenv("TORTURE") != "" {
		rounds = 600
	}
	if testing.Short() {
		rounds = 10
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var lost, reported, clean int
	for round := range rounds {
		rs := seed + uint64(round)
		rng := rand.New(rand.NewPCG(rs, 7))
		mem := NewMemFS(rs)
		cfs := &crashFS{FS: mem}
		// The checkpoint defaults the host runs with: while busy the
		// manifest's mark lags by up to a second.
		j, _, _, err := openWith("/j", Options{FS: cfs, SegmentSize: 1 << 20, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		acked := map[string]bool{}
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					p := fmt.Sprintf("send-%d-%d-%s", w, i, strings.Repeat("x", rng2(rs, w, i)))
					if _, err := j.Append(context.Background(), []byte(p), nil); err == nil {
						mu.Lock()
						acked[p] = true
						mu.Unlock()
					}
				}
			})
		}
		// Under load, then the power fails (the writers keep going
		// against dead handles until they are stopped).
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= 50+rng.IntN(200) {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		cfs.crash(CrashMode(rng.IntN(4)))
		stop()
		wg.Wait()
		j.Close()

		// Damage one of the last three frames of the last segment.
		name, frames := lastFrames(t, mem, "/j")
		if len(frames) == 0 {
			continue
		}
		f := frames[max(0, len(frames)-1-rng.IntN(3)):]
		at := f[0][0] + rng.Int64N(f[0][1]-f[0][0])
		what := "flip"
		if rng.IntN(4) == 0 {
			// No damage: the crash alone must never read as damage.
			j2, _, got, err := tryOpen(mem, "/j", 1<<20)
			if err != nil {
				t.Fatalf("round %d (seed %d): Open after a crash without damage: %v", round, rs, err)
			}
			j2.Close()
			if n := countMissing(acked, got); n > 0 {
				t.Fatalf("round %d (seed %d): crash without damage lost %d acknowledged frames", round, rs, n)
			}
			clean++
			continue
		}
		if rng.IntN(3) == 0 {
			what = "truncate"
			h, _ := mem.OpenFile(name, os.O_RDWR, 0)
			h.Truncate(at)
			h.Sync()
			h.Close()
		} else if err := mem.FlipBit(name, at, uint(rng.IntN(8))); err != nil {
			t.Fatal(err)
		}
		j2, _, got, err := tryOpen(mem, "/j", 1<<20)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("round %d (seed %d): %s at %d: Open = %v, want success or ErrCorrupt", round, rs, what, at, err)
			}
			reported++
			continue
		}
		have := map[string]bool{}
		for _, r := range got {
			have[r.payload] = true
		}
		var missing []string
		for p := range acked {
			if !have[p] {
				missing = append(missing, p)
			}
		}
		j2.Close()
		if len(missing) > 0 {
			lost++
			t.Errorf("round %d (seed %d): %s at offset %d of %s (frames end at %d): %d acknowledged frames silently dropped, e.g. %.20q",
				round, rs, what, at, name, frames[len(frames)-1][1], len(missing), missing[0])
			continue
		}
		clean++
	}
	t.Logf("%d rounds: %d damage reported, %d opened with every acknowledged frame, %d lost acknowledged frames", rounds, reported, clean, lost)
}

func countMissing(acked map[string]bool, got []rec) int {
	have := map[string]bool{}
	for _, r := range got {
		have[r.payload] = true
	}
	n := 0
	for p := range acked {
		if !have[p] {
			n++
		}
	}
	return n
}

// rng2 is a payload length that varies with the writer and the index.
func rng2(seed uint64, w, i int) int {
	return int((seed>>3 + uint64(w)*131 + uint64(i)*17) % 300)
}

// lastFrames lists [start, end) of the valid frames of the last segment
// in dir, by reading it as recovery does.
func lastFrames(t *testing.T, fsys FS, dir string) (string, [][2]int64) {
	t.Helper()
	names, _ := fsys.ReadDir(dir)
	var last string
	for _, n := range names {
		if _, ok := parseSegmentName(n); ok {
			last = n
		}
	}
	name := filepath.Join(dir, last)
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	f.ReadAt(b, 0)
	if size < SegmentHeaderSize {
		return name, nil
	}
	salt, _, err := parseSegmentHeader(b[:SegmentHeaderSize])
	if err != nil {
		return name, nil
	}
	var out [][2]int64
	for off := int64(SegmentHeaderSize); off < size; {
		payload, _, err := DecodeFrame(b[off:], salt, off)
		if err != nil {
			break
		}
		end := off + HeaderSize + int64(len(payload))
		out = append(out, [2]int64{off, end})
		off = end
	}
	return name, out
}

// crashFS is a MemFS whose power fails: after crash, nothing the journal
// still tries (a checkpoint, Close's manifest) reaches the disk, as after
// a kill -9 or a power loss.
type crashFS struct {
	FS   *MemFS
	mu   sync.RWMutex
	dead bool
}

var errDead = errors.New("crashfs: the power is off")

func (c *crashFS) crash(mode CrashMode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	c.FS.Crash(mode)
}

func (c *crashFS) do(f func() error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.dead {
		return errDead
	}
	return f()
}

func (c *crashFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	var f File
	err := c.do(func() (err error) { f, err = c.FS.OpenFile(name, flag, perm); return err })
	if err != nil {
		return nil, err
	}
	return &crashFile{c: c, f: f}, nil
}
func (c *crashFS) ReadDir(dir string) (names []string, err error) {
	err = c.do(func() (err error) { names, err = c.FS.ReadDir(dir); return err })
	return names, err
}
func (c *crashFS) Remove(name string) error { return c.do(func() error { return c.FS.Remove(name) }) }
func (c *crashFS) Rename(o, n string) error { return c.do(func() error { return c.FS.Rename(o, n) }) }
func (c *crashFS) MkdirAll(dir string, perm os.FileMode) error {
	return c.do(func() error { return c.FS.MkdirAll(dir, perm) })
}
func (c *crashFS) SyncDir(dir string) error { return c.do(func() error { return c.FS.SyncDir(dir) }) }

type crashFile struct {
	c *crashFS
	f File
}

func (f *crashFile) ReadAt(p []byte, off int64) (n int, err error) {
	err = f.c.do(func() (err error) { n, err = f.f.ReadAt(p, off); return err })
	return n, err
}
func (f *crashFile) WriteAt(p []byte, off int64) (n int, err error) {
	err = f.c.do(func() (err error) { n, err = f.f.WriteAt(p, off); return err })
	return n, err
}
func (f *crashFile) Sync() error { return f.c.do(f.f.Sync) }
func (f *crashFile) Truncate(size int64) error {
	return f.c.do(func() error { return f.f.Truncate(size) })
}
func (f *crashFile) Size() (n int64, err error) {
	err = f.c.do(func() (err error) { n, err = f.f.Size(); return err })
	return n, err
}
func (f *crashFile) Close() error { return f.f.Close() }

// A torn write of the ack file damages one slot; the other still holds
// the previous mark. Both damaged is reported, not ignored.
func TestAckFileSlots(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 1<<20)
	p1 := mustAppend(t, j, "one")
	p2 := mustAppend(t, j, "two")
	j.noCloseMark = true
	j.Close()
	ack := filepath.Join("/j", AckName)
	// The current mark is in one slot; damage the other: Open still sees
	// "two" as acknowledged, so a flip in "one" is reported.
	f, _ := mem.OpenFile(ack, os.O_RDONLY, 0)
	b := make([]byte, ackFileSize)
	f.ReadAt(b, 0)
	f.Close()
	a0, _ := decodeAck(b[:ackSlotSize])
	a1, _ := decodeAck(b[ackSlotSize:])
	older := int64(0)
	if a0.seq > a1.seq {
		older = ackSlotSize
	}
	mem.FlipBit(ack, older+9, 0)
	seg := filepath.Join("/j", SegmentName(1))
	mem.FlipBit(seg, p1.PayloadOffset()+1, 1)
	_, _, _, err := tryOpen(mem, "/j", 1<<20)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != seg || ce.Offset != p1.Offset {
		t.Fatalf("Open = %v, want a CorruptError at %s offset %d", err, seg, p1.Offset)
	}
	mem.FlipBit(seg, p1.PayloadOffset()+1, 1) // repaired
	mem.FlipBit(ack, ackSlotSize-older+9, 0)
	_, _, _, err = tryOpen(mem, "/j", 1<<20)
	if !errors.As(err, &ce) || ce.File != ack {
		t.Fatalf("Open with both slots damaged = %v, want a CorruptError naming %s", err, ack)
	}
	_ = p2
}

// The last group is synced together with its copy in the ack file: when
// the segment's bytes of it differ from the copy (a crash tore the group
// after the slot was durable, or the disk damaged it), Open writes the
// copy back and reports it; every acknowledged frame is replayed.
// (Checked to fail before the copy existed: Open refused the flip as
// corruption.)
func TestLastGroupRestoredFromAckCopy(t *testing.T) {
	for _, damage := range []string{"flip", "truncate", "zeros"} {
		t.Run(damage, func(t *testing.T) {
			mem := NewMemFS(1)
			j, _, _ := open(t, mem, "/j", 1<<20)
			mustAppend(t, j, "one")
			p := mustAppend(t, j, "two")
			j.noCloseMark = true
			j.Close()
			seg := filepath.Join("/j", SegmentName(1))
			switch damage {
			case "flip":
				mem.FlipBit(seg, p.PayloadOffset()+1, 3)
			case "truncate":
				f, _ := mem.OpenFile(seg, os.O_RDWR, 0)
				f.Truncate(p.Offset + 5)
				f.Sync()
				f.Close()
			case "zeros":
				f, _ := mem.OpenFile(seg, os.O_RDWR, 0)
				f.WriteAt(make([]byte, HeaderSize+3), p.Offset)
				f.Sync()
				f.Close()
			}
			j, rep, got := open(t, mem, "/j", 1<<20)
			equal(t, got, "one", "two")
			if !rep.Restored || rep.RestoredFile != seg || rep.RestoredOffset != p.Offset || rep.RestoredBytes != HeaderSize+3 || rep.Truncated {
				t.Fatalf("report %+v", rep)
			}
			j.Close()
			// Below the copy, damage is still refused.
			mem.FlipBit(seg, SegmentHeaderSize+HeaderSize+1, 3)
			if _, _, _, err := tryOpen(mem, "/j", 1<<20); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open with a flip in the group before = %v, want ErrCorrupt", err)
			}
		})
	}
}

// pairSyncFS makes every file's Sync, while armed, wait (up to a
// timeout) for a second Sync to be in flight, and counts the Syncs that
// found one.
type pairSyncFS struct {
	FS
	armed  atomic.Bool
	mu     sync.Mutex
	cond   *sync.Cond
	gen    int // counts the pairs formed
	wait   bool
	paired atomic.Int64
}

type pairSyncFile struct {
	File
	fs *pairSyncFS
}

func (p *pairSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := p.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return pairSyncFile{f, p}, nil
}

func (f pairSyncFile) Sync() error {
	p := f.fs
	if p.armed.Load() {
		p.mu.Lock()
		if p.wait {
			p.wait = false
			p.gen++
			p.paired.Add(2)
			p.cond.Broadcast()
		} else {
			p.wait = true
			gen := p.gen
			t := time.AfterFunc(2*time.Second, func() { p.mu.Lock(); p.cond.Broadcast(); p.mu.Unlock() })
			deadline := time.Now().Add(2 * time.Second)
			for p.gen == gen && time.Now().Before(deadline) {
				p.cond.Wait()
			}
			t.Stop()
			if p.gen == gen {
				p.wait = false // alone
			}
		}
		p.mu.Unlock()
	}
	return f.File.Sync()
}

// A group commit is one round of syncs: the segment's and the ack
// file's are in flight at the same time, not one after the other.
// (Checked to fail with the two syncs made one after the other: each
// Sync waited alone.)
func TestGroupSyncsAtOnce(t *testing.T) {
	fsys := &pairSyncFS{FS: NewMemFS(1)}
	fsys.cond = sync.NewCond(&fsys.mu)
	j, _, _, err := openWith("/j", Options{FS: fsys, Logger: quiet, CheckpointIdle: -1, CheckpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	fsys.armed.Store(true)
	for i := range 3 {
		mustAppend(t, j, fmt.Sprint("frame ", i))
	}
	fsys.armed.Store(false)
	if n := fsys.paired.Load(); n != 6 {
		t.Fatalf("%d of 6 syncs were in flight with another", n)
	}
}

// An ack file of format 1 (two 512-byte slots, no copy) is read, its
// mark honoured, and the file replaced by one of the current format.
func TestAckFileFormat1(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 1<<20)
	mustAppend(t, j, "one")
	p := mustAppend(t, j, "two")
	j.noCloseMark = true
	j.Close()
	ack := filepath.Join("/j", AckName)
	mark := Mark{1, p.Offset + HeaderSize + 3}
	b := make([]byte, ackV1FileSize)
	for slot, seq := range []uint64{7, 8} {
		r := b[slot*ackV1SlotSize:]
		copy(r, ackMagic)
		binary.LittleEndian.PutUint32(r[4:], 1)
		binary.LittleEndian.PutUint64(r[8:], seq)
		binary.LittleEndian.PutUint64(r[16:], mark.Segment)
		binary.LittleEndian.PutUint64(r[24:], uint64(mark.Offset))
		binary.LittleEndian.PutUint32(r[32:], crc32.Checksum(r[:32], castagnoli))
	}
	mem.Remove(ack)
	f, _ := mem.OpenFile(ack, os.O_RDWR|os.O_CREATE, 0o600)
	f.WriteAt(b, 0)
	f.Sync()
	f.Close()
	// The mark covers "two": a flip in it is damage.
	seg := filepath.Join("/j", SegmentName(1))
	mem.FlipBit(seg, p.PayloadOffset()+1, 3)
	if _, _, _, err := tryOpen(mem, "/j", 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	mem.FlipBit(seg, p.PayloadOffset()+1, 3)
	j, _, got := open(t, mem, "/j", 1<<20)
	equal(t, got, "one", "two")
	mustAppend(t, j, "three")
	j.Close()
	f, _ = mem.OpenFile(ack, os.O_RDONLY, 0)
	size, _ := f.Size()
	f.Close()
	if size != ackFileSize {
		t.Fatalf("ack file of %d bytes after Open, want %d", size, ackFileSize)
	}
	_, _, got = open(t, mem, "/j", 1<<20)
	equal(t, got, "one", "two", "three")
}

// failAckSyncFS fails the syncs of the ack file while armed.
type failAckSyncFS struct {
	FS
	fail sync.Mutex
	n    int
}

func (f *failAckSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != AckName {
		return file, err
	}
	return &failAckSyncFile{File: file, fs: f}, nil
}

type failAckSyncFile struct {
	File
	fs *failAckSyncFS
}

func (f *failAckSyncFile) Sync() error {
	f.fs.fail.Lock()
	defer f.fs.fail.Unlock()
	if f.fs.n > 0 {
		f.fs.n--
		return ErrInjected
	}
	return f.File.Sync()
}

// When the mark cannot be recorded, the group is not acknowledged: its
// Append fails, the frame is cut off (so it does not come back on replay)
// and the next Append works.
func TestAckWriteFailureFailsTheGroup(t *testing.T) {
	mem := NewMemFS(1)
	fsys := &failAckSyncFS{FS: mem}
	j, _, _ := open(t, fsys, "/j", 1<<20)
	mustAppend(t, j, "one")
	fsys.fail.Lock()
	fsys.n = 1
	fsys.fail.Unlock()
	if _, err := j.Append(context.Background(), []byte("lost"), nil); !errors.Is(err, ErrInjected) {
		t.Fatalf("Append with a failing mark = %v", err)
	}
	mustAppend(t, j, "three")
	j.Close()
	_, _, got := open(t, mem, "/j", 1<<20)
	equal(t, got, "one", "three")
}

// A journal deleted whole but for its ack file is a new journal: the ack
// file marks nothing without the manifest and segments it belonged to.
func TestLeftoverAckFileOfADeletedJournal(t *testing.T) {
	mem := NewMemFS(1)
	j, _, _ := open(t, mem, "/j", 1<<20)
	mustAppend(t, j, "one")
	j.Close()
	mem.Remove(filepath.Join("/j", ManifestName))
	mem.Remove(filepath.Join("/j", SegmentName(1)))
	j, rep, got := open(t, mem, "/j", 1<<20)
	if !rep.Created || len(got) != 0 {
		t.Fatalf("report %+v, replayed %v", rep, got)
	}
	mustAppend(t, j, "two")
	j.Close()
	_, _, got = open(t, mem, "/j", 1<<20)
	equal(t, got, "two")
}
