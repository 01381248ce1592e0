package journal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// ErrInjected is the cause of every fault FaultFS injects other than disk
// full (which is syscall.ENOSPC, as the kernel reports it).
var ErrInjected = errors.New("faultfs: injected fault")

// FaultFS wraps an FS and injects faults on demand: failing syncs, short
// writes, a disk that is full after a number of bytes, bit flips, and (over
// a MemFS) crashes that tear the last write. Faults are armed by the test
// and consumed by the journal's calls, and every random choice comes from
// the seed, so a failing run can be replayed.
type FaultFS struct {
	inner FS

	mu          sync.Mutex
	rng         *rand.Rand
	failSyncs   int
	failWrites  int
	shortWrites int
	failTruncs  int
	failRenames int
	capacity    int64 // < 0: unlimited
	sizes       map[string]int64
	syncs       int64
	writes      int64
}

var _ FS = (*FaultFS)(nil)

// NewFaultFS wraps inner. A nil inner is a fresh MemFS with the same seed.
func NewFaultFS(inner FS, seed uint64) *FaultFS {
	if inner == nil {
		inner = NewMemFS(seed)
	}
	return &FaultFS{
		inner:    inner,
		rng:      rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d)),
		capacity: -1,
		sizes:    map[string]int64{},
	}
}

// Inner is the wrapped FS.
func (f *FaultFS) Inner() FS { return f.inner }

// FailSyncs makes the next n Sync calls fail with ErrInjected.
func (f *FaultFS) FailSyncs(n int) { f.mu.Lock(); f.failSyncs = n; f.mu.Unlock() }

// FailWrites makes the next n WriteAt calls fail with ErrInjected, writing
// nothing.
func (f *FaultFS) FailWrites(n int) { f.mu.Lock(); f.failWrites = n; f.mu.Unlock() }

// ShortWrites makes the next n WriteAt calls write a random strict prefix of
// their data and fail with io.ErrShortWrite.
func (f *FaultFS) ShortWrites(n int) { f.mu.Lock(); f.shortWrites = n; f.mu.Unlock() }

// FailTruncates makes the next n Truncate calls fail with ErrInjected.
func (f *FaultFS) FailTruncates(n int) { f.mu.Lock(); f.failTruncs = n; f.mu.Unlock() }

// FailRenames makes the next n Rename calls fail with ErrInjected, renaming
// nothing (the journal renames only to replace its manifest).
func (f *FaultFS) FailRenames(n int) { f.mu.Lock(); f.failRenames = n; f.mu.Unlock() }

// SetCapacity makes the disk full once the files FaultFS has seen hold n
// bytes in all: a write past that writes what fits and fails with ENOSPC.
// Truncating or removing files frees space. n < 0 is unlimited.
func (f *FaultFS) SetCapacity(n int64) { f.mu.Lock(); f.capacity = n; f.mu.Unlock() }

// FreeSpace implements SpaceFS: what is left of the capacity, or the
// wrapped FS's free space when there is no capacity.
func (f *FaultFS) FreeSpace(dir string) (free, total int64, err error) {
	f.mu.Lock()
	capacity, used := f.capacity, f.usedLocked()
	f.mu.Unlock()
	if capacity >= 0 {
		// A test's disk: its capacity is what the reserve is kept in.
		return max(capacity-used, 0), -1, nil
	}
	if s, ok := f.inner.(SpaceFS); ok {
		return s.FreeSpace(dir)
	}
	return 0, 0, errors.ErrUnsupported
}

// Used is the number of bytes the files FaultFS has seen hold.
func (f *FaultFS) Used() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usedLocked()
}

func (f *FaultFS) usedLocked() int64 {
	var u int64
	for _, s := range f.sizes {
		u += s
	}
	return u
}

// Syncs is the number of successful Sync calls so far.
func (f *FaultFS) Syncs() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.syncs }

// Reset disarms every fault.
func (f *FaultFS) Reset() {
	f.mu.Lock()
	f.failSyncs, f.failWrites, f.shortWrites, f.failTruncs, f.failRenames, f.capacity = 0, 0, 0, 0, 0, -1
	f.mu.Unlock()
}

// FlipBit inverts one bit of a file in the wrapped FS (MemFS or OSFS).
func (f *FaultFS) FlipBit(name string, off int64, bit uint) error {
	fl, ok := f.inner.(interface {
		flipBit(string, int64, uint) error
	})
	if !ok {
		return fmt.Errorf("faultfs: %T cannot flip bits", f.inner)
	}
	return fl.flipBit(name, off, bit)
}

// Crash simulates a power loss of the wrapped MemFS (see MemFS.Crash).
func (f *FaultFS) Crash(mode CrashMode) error {
	m, ok := f.inner.(*MemFS)
	if !ok {
		return fmt.Errorf("faultfs: %T cannot crash", f.inner)
	}
	m.Crash(mode)
	f.mu.Lock()
	f.sizes = map[string]int64{}
	f.mu.Unlock()
	return nil
}

// OpenFile implements FS.
func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	size, err := file.Size()
	if err != nil {
		file.Close()
		return nil, err
	}
	f.mu.Lock()
	f.sizes[name] = size
	f.mu.Unlock()
	return &faultFile{fs: f, f: file, name: name}, nil
}

// ReadDir implements FS.
func (f *FaultFS) ReadDir(dir string) ([]string, error) { return f.inner.ReadDir(dir) }

// Remove implements FS.
func (f *FaultFS) Remove(name string) error {
	name = filepath.Clean(name)
	if err := f.inner.Remove(name); err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.sizes, name)
	f.mu.Unlock()
	return nil
}

// Rename implements FS.
func (f *FaultFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	f.mu.Lock()
	if f.failRenames > 0 {
		f.failRenames--
		f.mu.Unlock()
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: ErrInjected}
	}
	f.mu.Unlock()
	if err := f.inner.Rename(oldname, newname); err != nil {
		return err
	}
	f.mu.Lock()
	if s, ok := f.sizes[oldname]; ok {
		delete(f.sizes, oldname)
		f.sizes[newname] = s
	}
	f.mu.Unlock()
	return nil
}

// MkdirAll implements FS.
func (f *FaultFS) MkdirAll(dir string, perm os.FileMode) error { return f.inner.MkdirAll(dir, perm) }

// SyncDir implements FS.
func (f *FaultFS) SyncDir(dir string) error { return f.inner.SyncDir(dir) }

type faultFile struct {
	fs   *FaultFS
	f    File
	name string
}

func (ff *faultFile) ReadAt(p []byte, off int64) (int, error) { return ff.f.ReadAt(p, off) }
func (ff *faultFile) Size() (int64, error)                    { return ff.f.Size() }
func (ff *faultFile) Close() error                            { return ff.f.Close() }

func (ff *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f := ff.fs
	f.mu.Lock()
	n, fault := len(p), error(nil)
	switch {
	case f.failWrites > 0:
		f.failWrites--
		n, fault = 0, ErrInjected
	case f.shortWrites > 0 && len(p) > 0:
		f.shortWrites--
		n, fault = f.rng.IntN(len(p)), io.ErrShortWrite
	}
	if f.capacity >= 0 {
		// Only what grows the file takes space.
		grow := max(off+int64(n)-f.sizes[ff.name], 0)
		if free := max(f.capacity-f.usedLocked(), 0); grow > free {
			n, fault = int(max(f.sizes[ff.name]+free-off, 0)), syscall.ENOSPC
		}
	}
	f.mu.Unlock()
	written, err := ff.f.WriteAt(p[:n], off)
	f.mu.Lock()
	f.sizes[ff.name] = max(f.sizes[ff.name], off+int64(written))
	f.writes++
	f.mu.Unlock()
	if err != nil {
		return written, err
	}
	if fault != nil {
		return written, &fs.PathError{Op: "write", Path: ff.name, Err: fault}
	}
	return written, nil
}

func (ff *faultFile) Sync() error {
	f := ff.fs
	f.mu.Lock()
	if f.failSyncs > 0 {
		f.failSyncs--
		f.mu.Unlock()
		return &fs.PathError{Op: "fdatasync", Path: ff.name, Err: ErrInjected}
	}
	f.mu.Unlock()
	if err := ff.f.Sync(); err != nil {
		return err
	}
	f.mu.Lock()
	f.syncs++
	f.mu.Unlock()
	return nil
}

func (ff *faultFile) Truncate(size int64) error {
	ff.fs.mu.Lock()
	if ff.fs.failTruncs > 0 {
		ff.fs.failTruncs--
		ff.fs.mu.Unlock()
		return &fs.PathError{Op: "truncate", Path: ff.name, Err: ErrInjected}
	}
	ff.fs.mu.Unlock()
	if err := ff.f.Truncate(size); err != nil {
		return err
	}
	ff.fs.mu.Lock()
	ff.fs.sizes[ff.name] = size
	ff.fs.mu.Unlock()
	return nil
}
