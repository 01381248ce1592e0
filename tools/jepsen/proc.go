package main

import (
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

// host is one takohost process, restartable on the same data directory and
// port. It runs in a process group of its own (its sandboxes inherit it),
// so that a freeze can stop the host process alone or the whole group.
type host struct {
	name    string
	bin     string
	dataDir string
	addr    string
	args    []string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	log    *os.File
}

func newHost(name, bin, dataDir, logDir string, args []string) (*host, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return &host{name: name, bin: bin, dataDir: dataDir, addr: addr, args: args, logPath: filepath.Join(logDir, name+".log")}, nil
}

func (h *host) base() string { return "http://" + h.addr }

func (h *host) running() bool {
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

func (h *host) pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil || h.cmd.Process == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// start starts the process and waits until GET /v2/openapi.json answers 200.
func (h *host) start(ctx context.Context, timeout time.Duration) error {
	if h.running() {
		return errors.New(h.name + " already running")
	}
	if h.log == nil {
		f, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		h.log = f
	}
	args := append([]string{"-data", h.dataDir, "-listen", h.addr}, h.args...)
	cmd := exec.Command(h.bin, args...)
	cmd.Stdout, cmd.Stderr = h.log, h.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fmt.Fprintf(h.log, "=== jepsen: start #%d: %s %s\n", h.starts+1, h.bin, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.cmd, h.done = cmd, done
	h.starts++
	h.mu.Unlock()
	go func() {
		cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited before serving (log %s):\n%s", h.name, h.logPath, tailFile(h.logPath, 3000))
		case <-ctx.Done():
			h.kill()
			return ctx.Err()
		default:
		}
		if res, err := hc.Get(h.base() + "/v2/openapi.json"); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			h.kill()
			return fmt.Errorf("%s did not serve within %s (log %s):\n%s", h.name, timeout, h.logPath, tailFile(h.logPath, 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill SIGKILLs the process group (the host and its sandboxes) and waits
// for the host to go.
func (h *host) kill() {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	fmt.Fprintf(h.log, "=== jepsen: SIGKILL process group %d\n", cmd.Process.Pid)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// signal sends sig to the host process alone, or to its process group.
func (h *host) signal(sig syscall.Signal, group bool) error {
	pid := h.pid()
	if pid == 0 || !h.running() {
		return fmt.Errorf("%s is not running", h.name)
	}
	if group {
		pid = -pid
	}
	return syscall.Kill(pid, sig)
}

// stop ends the host with SIGTERM (SIGKILL after limit) and closes its log.
func (h *host) stop(limit time.Duration) {
	if h.running() {
		h.signal(syscall.SIGCONT, true)
		h.signal(syscall.SIGTERM, false)
		h.mu.Lock()
		done := h.done
		h.mu.Unlock()
		select {
		case <-done:
		case <-time.After(limit):
			h.kill()
		}
	}
	if h.log != nil {
		h.log.Close()
		h.log = nil
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// buildHost builds cmd/takohost into dir and returns the binary's path.
func buildHost(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the module: cannot build cmd/takohost (give -bin)")
	}
	bin := filepath.Join(dir, "takohost")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/takohost")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/takohost: %v\n%s", err, b)
	}
	return bin, nil
}
