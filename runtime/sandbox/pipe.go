package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// pipeConn is one side of the connection: frames are read from r and
// written to w (both non-blocking, on the Go runtime's poller). Close
// closes both, which ends a read in progress on either side's loop.
type pipeConn struct{ r, w *os.File }

// newPipe is one direction of the connection: one pipe's two ends, split
// between the host and the sandbox by Pool.start.
func newPipe() (pipeConn, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return pipeConn{}, fmt.Errorf("sandbox: pipe: %w", err)
	}
	return pipeConn{r, w}, nil
}

func (c pipeConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c pipeConn) Write(b []byte) (int, error) { return c.w.Write(b) }

func (c pipeConn) Close() error {
	return errors.Join(c.r.Close(), c.w.Close())
}

// openPipeConn is the sandbox's side, from the descriptors it inherited.
// They are made non-blocking so that os.NewFile puts them on the poller (a
// blocking read would hold one of the sandbox's processors).
func openPipeConn(readFD, writeFD int) (pipeConn, error) {
	for _, fd := range []int{readFD, writeFD} {
		if err := syscall.SetNonblock(fd, true); err != nil {
			return pipeConn{}, fmt.Errorf("descriptor %d: %w", fd, err)
		}
	}
	return pipeConn{r: os.NewFile(uintptr(readFD), "from-host"), w: os.NewFile(uintptr(writeFD), "to-host")}, nil
}
