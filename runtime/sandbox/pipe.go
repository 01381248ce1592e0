package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// pipeConn is one side of a connection or a lane: frames are read from r
// and written to w, two pipe ends on the Go runtime's poller. Close closes
// both, which ends a read in progress on this side.
type pipeConn struct{ r, w rawFile }

// newPipe makes one pipe: its read end and its write end, split between
// the host and the sandbox by Pool.start.
func newPipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	return r, w, nil
}

// newPipeConn reads r and writes w (non-blocking descriptors).
func newPipeConn(r, w *os.File) (pipeConn, error) {
	rr, err := newRawFile(r)
	if err != nil {
		return pipeConn{}, err
	}
	rw, err := newRawFile(w)
	if err != nil {
		return pipeConn{}, err
	}
	return pipeConn{rr, rw}, nil
}

func (c pipeConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c pipeConn) Write(b []byte) (int, error) { return c.w.Write(b) }

func (c pipeConn) Close() error {
	return errors.Join(c.r.f.Close(), c.w.f.Close())
}

// openPipeConn is the sandbox's side, from the descriptors it inherited.
// They are made non-blocking so that os.NewFile puts them on the poller (a
// blocking read would hold one of the sandbox's processors).
func openPipeConn(readFD, writeFD int, name string) (pipeConn, error) {
	for _, fd := range []int{readFD, writeFD} {
		if err := syscall.SetNonblock(fd, true); err != nil {
			return pipeConn{}, fmt.Errorf("%s: descriptor %d: %w", name, fd, err)
		}
	}
	return newPipeConn(os.NewFile(uintptr(readFD), name+"-from-host"), os.NewFile(uintptr(writeFD), name+"-to-host"))
}

// rawFile does a pipe end's reads and writes as raw system calls, waiting
// on the Go runtime's poller when the pipe is empty (or full).
//
// Why: os.File enters each read and write through the scheduler's system
// call path, which, in a process that was idle, wakes the runtime's
// monitor thread (sysmon); the monitor then polls every 20 µs until the
// process is idle again. A sandbox and its host go idle and wake again at
// every frame they exchange, and perf put the monitor's wake-ups at about
// a seventh of each side's CPU in an invocation. A read or write of a
// non-blocking pipe never blocks, so it needs no scheduler hand-off.
type rawFile struct {
	f  *os.File
	rc syscall.RawConn
}

func newRawFile(f *os.File) (rawFile, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return rawFile{}, fmt.Errorf("sandbox: %s: %w", f.Name(), err)
	}
	return rawFile{f, rc}, nil
}

func (r rawFile) Read(b []byte) (n int, err error) {
	if len(b) == 0 {
		return 0, nil
	}
	werr := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case 0:
				if n = int(m); n == 0 {
					err = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait on the poller, then again
			default:
				err = e
				return true
			}
		}
	})
	if err == nil {
		err = werr
	}
	return n, err
}

func (r rawFile) Write(b []byte) (n int, err error) {
	werr := r.rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n))
			switch e {
			case 0:
				n += int(m)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // full: wait on the poller, then the rest
			default:
				err = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}
