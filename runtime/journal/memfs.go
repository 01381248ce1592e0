package journal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// CrashMode says what a simulated crash does to data written after the
// last Sync of a file.
type CrashMode int

const (
	// CrashDropUnsynced loses all unsynced data: the file is as of its
	// last Sync.
	CrashDropUnsynced CrashMode = iota
	// CrashKeepPrefix keeps a random prefix of the unsynced data, as when
	// the page cache had written back part of the last write.
	CrashKeepPrefix
	// CrashZeroFill keeps a random prefix of the unsynced data and turns
	// the rest into zeros, as file systems that extend the size before the
	// data blocks reach the disk leave it.
	CrashZeroFill
	// CrashKeepAll keeps everything that was written.
	CrashKeepAll
)

// MemFS is an in-memory FS that models what survives a power loss: file
// data as of the last Sync, and directory entries as of the last SyncDir
// of their directory. Crash applies that model: of the writes made since
// the last Sync, in the order they were made, it keeps none, all, or a
// prefix (see CrashMode). It is deterministic for a given seed.
type MemFS struct {
	mu      sync.Mutex
	rng     *rand.Rand
	gen     int // incremented by Crash; older handles stop working
	dirs    map[string]bool
	files   map[string]*memNode
	durable map[string]*memNode // the namespace a crash returns to
}

type memNode struct {
	data    []byte
	durable []byte     // data as of the last Sync
	pending []memWrite // writes since the last Sync, in order
}

type memWrite struct {
	off  int64
	data []byte
}

// NewMemFS returns an empty MemFS whose crashes are drawn from seed.
func NewMemFS(seed uint64) *MemFS {
	return &MemFS{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		dirs:    map[string]bool{"/": true, ".": true},
		files:   map[string]*memNode{},
		durable: map[string]*memNode{},
	}
}

var errCrashed = errors.New("memfs: file handle predates a simulated crash")

// OpenFile implements FS. O_CREATE, O_EXCL and O_TRUNC are honoured.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[name]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case !ok:
		if !m.dirs[filepath.Dir(name)] {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		n = &memNode{}
		m.files[name] = n
	}
	if flag&os.O_TRUNC != 0 {
		n.data, n.durable, n.pending = n.data[:0], n.durable[:0], nil
	}
	return &memFile{m: m, n: n, name: name, gen: m.gen}, nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[dir] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for name := range m.files {
		if filepath.Dir(name) == dir {
			names = append(names, filepath.Base(name))
		}
	}
	slices.Sort(names)
	return names, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	name = filepath.Clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.files, name)
	return nil
}

// Rename implements FS.
func (m *MemFS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[oldname]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	delete(m.files, oldname)
	m.files[newname] = n
	return nil
}

// MkdirAll implements FS. Directories are durable at once.
func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := dir; !m.dirs[d]; d = filepath.Dir(d) {
		m.dirs[d] = true
	}
	return nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.durable {
		if filepath.Dir(name) == dir {
			delete(m.durable, name)
		}
	}
	for name, n := range m.files {
		if filepath.Dir(name) == dir {
			m.durable[name] = n
		}
	}
	return nil
}

// Crash simulates a power loss: the namespace returns to its last SyncDir,
// each file keeps its synced data plus whatever mode keeps of the rest.
// Handles opened before the crash fail from now on.
func (m *MemFS) Crash(mode CrashMode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	m.files = map[string]*memNode{}
	for name, n := range m.durable {
		var total int
		for _, w := range n.pending {
			total += len(w.data)
		}
		keep := total
		switch mode {
		case CrashDropUnsynced:
			keep = 0
		case CrashKeepPrefix, CrashZeroFill:
			if total > 0 {
				keep = m.rng.IntN(total + 1)
			}
		}
		data := append([]byte(nil), n.durable...)
		for _, w := range n.pending {
			k := min(keep, len(w.data))
			keep -= k
			data = writeAt(data, w.data[:k], w.off)
		}
		if mode == CrashZeroFill && len(n.data) > len(data) {
			// The file system extended the size before the data blocks
			// reached the disk.
			data = append(data, make([]byte, len(n.data)-len(data))...)
		}
		n.data, n.durable, n.pending = data, append([]byte(nil), data...), nil
		m.files[name] = n
	}
}

// writeAt writes p into b at off, growing b (with zeros up to off) as
// needed, and returns b.
func writeAt(b, p []byte, off int64) []byte {
	if end := int(off) + len(p); end > len(b) {
		if end > cap(b) {
			b = append(b[:cap(b)], make([]byte, end-cap(b))...)
		}
		clear(b[len(b):end])
		b = b[:end]
	}
	copy(b[off:], p)
	return b
}

// FlipBit inverts one bit of a file, durably: it models media corruption.
func (m *MemFS) FlipBit(name string, off int64, bit uint) error {
	return m.flipBit(name, off, bit)
}

func (m *MemFS) flipBit(name string, off int64, bit uint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.files[filepath.Clean(name)]
	if !ok {
		return &fs.PathError{Op: "flipbit", Path: name, Err: fs.ErrNotExist}
	}
	if off < 0 || off >= int64(len(n.data)) {
		return fmt.Errorf("memfs: flip bit at %d of %s: beyond %d bytes", off, name, len(n.data))
	}
	n.data[off] ^= 1 << (bit % 8)
	return nil
}

// Usage is the sum of the sizes of all files.
func (m *MemFS) Usage() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var u int64
	for _, n := range m.files {
		u += int64(len(n.data))
	}
	return u
}

type memFile struct {
	m      *MemFS
	n      *memNode
	name   string
	gen    int
	closed bool
}

func (f *memFile) check() error {
	if f.closed {
		return fs.ErrClosed
	}
	if f.gen != f.m.gen {
		return errCrashed
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fs.ErrInvalid
	}
	f.n.data = writeAt(f.n.data, p, off)
	f.n.pending = append(f.n.pending, memWrite{off, append([]byte(nil), p...)})
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	f.n.durable = append(f.n.durable[:0], f.n.data...)
	f.n.pending = nil
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	if size < 0 {
		return fs.ErrInvalid
	}
	if size <= int64(len(f.n.data)) {
		f.n.data = f.n.data[:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, size-int64(len(f.n.data)))...)
	}
	// A crash keeps either the old or the new length; modelling the new
	// one is enough for the journal, which only truncates what it cannot
	// have reported durable: the durable data is cut too, and pending
	// writes beyond the new size are forgotten.
	if size < int64(len(f.n.durable)) {
		f.n.durable = f.n.durable[:size]
	}
	pending := f.n.pending[:0]
	for _, w := range f.n.pending {
		if w.off < size {
			w.data = w.data[:min(int64(len(w.data)), size-w.off)]
			pending = append(pending, w)
		}
	}
	f.n.pending = pending
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	return int64(len(f.n.data)), nil
}

func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return fs.ErrClosed
	}
	f.closed = true
	return nil
}
