// Package harness runs the real host binary (cmd/takohost) for the
// end-to-end tests and the torture driver: it builds the binary once, starts
// it on a data directory and a fixed loopback port, waits until it serves,
// kills it (SIGKILL) or stops it (SIGTERM), and keeps everything it printed.
// It talks to the host only over the Host API v2 (client.go) and receives
// the test workers' reports on a loopback recorder (recorder.go).
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ModuleRoot is the directory holding the module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	p := strings.TrimSpace(string(out))
	if p == "" || p == os.DevNull {
		return "", errors.New("not inside the module")
	}
	return filepath.Dir(p), nil
}

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

// RemoveBuild deletes the binary BuildHost built, if any. Test binaries
// call it from TestMain and commands before they exit, so that runs leave
// nothing behind in the temporary directory.
func RemoveBuild() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// BuildHost builds cmd/takohost once per process into a temporary
// directory and returns the binary's path. TAKOHOST_BIN, when set, names a
// binary to use instead.
func BuildHost() (string, error) {
	if p := os.Getenv("TAKOHOST_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("TAKOHOST_BIN: %w", err)
		}
		return p, nil
	}
	buildOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if _, err := os.Stat(filepath.Join(root, "cmd", "takohost")); err != nil {
			buildErr = fmt.Errorf("cmd/takohost: %w", err)
			return
		}
		dir, err := os.MkdirTemp("", "takohost-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		bin := filepath.Join(dir, "takohost")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/takohost")
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/takohost: %v\n%s", err, out.String())
			return
		}
		buildPath = bin
	})
	return buildPath, buildErr
}

// FreePort returns a loopback address with a port that was free a moment ago.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// SyncBuffer is a goroutine-safe growing buffer (the host's output).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is the number of bytes written so far.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// Host is one host process on one data directory; Start may be called again
// after Kill or Term (a restart on the same data directory and port).
type Host struct {
	Bin     string
	DataDir string
	Addr    string   // 127.0.0.1:port, fixed across restarts
	Args    []string // extra flags (-allow-fetch, -handler-timeout, ...)
	// Wrap, when set, is a command prefix the binary runs under (it must
	// exec the binary in the same process, e.g. unshare -m sh -c '... exec "$0" "$@"').
	Wrap []string
	// Out receives the output of every run (stdout and stderr).
	Out *SyncBuffer
	// ReadyTimeout bounds Start; 60 s when zero.
	ReadyTimeout time.Duration

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	Starts  int
}

// NewHost prepares a host on dataDir and a free loopback port.
func NewHost(bin, dataDir string, args ...string) (*Host, error) {
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	return &Host{Bin: bin, DataDir: dataDir, Addr: addr, Args: args, Out: &SyncBuffer{}}, nil
}

// Base is the host's base URL.
func (h *Host) Base() string { return "http://" + h.Addr }

// Running reports whether the process is alive.
func (h *Host) Running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		return false
	}
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// Start starts the process and returns once GET /v2/openapi.json answers
// 200, or an error if the process exits or does not serve in time.
func (h *Host) Start(ctx context.Context) error {
	if h.Running() {
		return errors.New("host already running")
	}
	args := append([]string{"-data", h.DataDir, "-listen", h.Addr}, h.Args...)
	argv := append([]string{h.Bin}, args...)
	if len(h.Wrap) > 0 {
		argv = append(append([]string{}, h.Wrap...), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	fmt.Fprintf(h.Out, "=== harness: start #%d: %s\n", h.Starts+1, strings.Join(argv, " "))
	cmd.Stdout, cmd.Stderr = h.Out, h.Out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.cmd, h.done, h.waitErr = cmd, done, nil
	h.Starts++
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		h.mu.Lock()
		h.waitErr = err
		h.mu.Unlock()
		close(done)
	}()
	timeout := h.ReadyTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-done:
			return fmt.Errorf("host exited before serving: %v\n%s", h.WaitErr(), tail(h.Out.String(), 4000))
		case <-ctx.Done():
			h.Kill()
			return ctx.Err()
		default:
		}
		res, err := hc.Get(h.Base() + "/v2/openapi.json")
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			h.Kill()
			return fmt.Errorf("host did not serve within %s\n%s", timeout, tail(h.Out.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitErr is the last run's exit error (nil for exit 0).
func (h *Host) WaitErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waitErr
}

// Pid is the running process's id, 0 when none.
func (h *Host) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil || h.cmd.Process == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the process to go.
func (h *Host) Kill() error {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd == nil || done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	fmt.Fprintf(h.Out, "=== harness: SIGKILL pid %d\n", cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-done
	return nil
}

// Term sends SIGTERM and waits up to limit for the process to exit. It
// returns the exit code (-1 when killed by a signal) and how long the stop
// took; on timeout it kills the process and returns an error.
func (h *Host) Term(limit time.Duration) (code int, took time.Duration, err error) {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd == nil || done == nil {
		return 0, 0, errors.New("not started")
	}
	start := time.Now()
	fmt.Fprintf(h.Out, "=== harness: SIGTERM pid %d\n", cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, 0, err
	}
	select {
	case <-done:
	case <-time.After(limit):
		h.Kill()
		return -1, time.Since(start), fmt.Errorf("host did not exit within %s of SIGTERM", limit)
	}
	took = time.Since(start)
	return cmd.ProcessState.ExitCode(), took, nil
}

// AdminToken reads <data>/admin-token.
func AdminToken(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string { return tail(s, n) }
