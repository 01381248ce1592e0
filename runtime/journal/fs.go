package journal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// File is the part of an open file the journal uses. Writes are
// positional: the journal knows where each group goes, and it may write
// into space it zeroed ahead of the data (see Options.ZeroAhead).
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the written data durable. It need not flush metadata
	// other than what is needed to read the data back (fdatasync).
	Sync() error
	Truncate(size int64) error
	Size() (int64, error)
	Close() error
}

// FS is the file system under a journal. It exists so that tests can
// substitute MemFS and FaultFS for the real disk.
type FS interface {
	// OpenFile opens name with os.OpenFile flags.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// ReadDir returns the names of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	MkdirAll(dir string, perm os.FileMode) error
	// SyncDir makes the creation, removal and renaming of dir's entries
	// durable.
	SyncDir(dir string) error
}

// SpaceFS is an FS that can tell how much space is left for dir, and how
// large its file system is. The journal keeps Options.Reserve of it (at
// most an eighth of the file system) for AppendReserved; on an FS without
// it there is no reserve.
type SpaceFS interface {
	FreeSpace(dir string) (free, total int64, err error)
}

// OSFS is the real file system.
type OSFS struct{}

var _ FS = OSFS{}

// OpenFile implements FS.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// FreeSpace implements SpaceFS: the bytes an unprivileged user may still
// write on dir's file system.
func (OSFS) FreeSpace(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, &fs.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS. An existing dir that others may read or enter
// beyond perm is narrowed to perm: a data directory made by an older build
// (0755) holds message bodies and secrets too.
func (OSFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&^perm != 0 {
		return os.Chmod(dir, st.Mode().Perm()&perm)
	}
	return nil
}

// SyncDir implements FS.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// flipBit lets FaultFS corrupt a real file in tests.
func (OSFS) flipBit(name string, off int64, bit uint) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return err
	}
	b[0] ^= 1 << (bit % 8)
	_, err = f.WriteAt(b[:], off)
	return err
}

type osFile struct{ f *os.File }

func (f osFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f osFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }
func (f osFile) Truncate(size int64) error                { return f.f.Truncate(size) }
func (f osFile) Close() error                             { return f.f.Close() }

// Sync uses fdatasync: it still flushes the file size when a write grew
// the file, which is the only metadata replay needs. It saves the inode
// timestamp write that fsync would add to every group commit.
func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return &fs.PathError{Op: "fdatasync", Path: f.f.Name(), Err: err}
			}
			return nil
		}
	}
}

func (f osFile) Size() (int64, error) {
	st, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func join(dir, name string) string { return filepath.Join(dir, name) }
