package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PGBinDir is where -pg-private looks for initdb, pg_ctl and postgres when
// they are not on PATH (a variable so that a test can point it elsewhere).
var PGBinDir = "/usr/lib/postgresql/15/bin"

// ErrNoPostgres is returned by startPrivatePG when the PostgreSQL server
// binaries are not installed; the driver skips the run with that message.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found")

// privatePG is a PostgreSQL server the torture owns: initdb into a
// temporary directory, trust authentication, fsync on, listening on a free
// loopback port and a socket in that directory. Only this server is ever
// restarted; the shared server the -store flag names never is.
type privatePG struct {
	bin  string // directory of initdb, pg_ctl, postgres
	dir  string // temporary directory (owned by the server's user)
	data string
	port int
	URL  string
	cred *syscall.Credential // non-nil when running as root: run as postgres
}

// findPGBin returns the directory holding initdb and pg_ctl.
func findPGBin() (string, error) {
	if isExec(filepath.Join(PGBinDir, "initdb")) && isExec(filepath.Join(PGBinDir, "pg_ctl")) {
		return PGBinDir, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		dir := filepath.Dir(p)
		if isExec(filepath.Join(dir, "initdb")) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (looked in %s and PATH)", ErrNoPostgres, PGBinDir)
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startPrivatePG creates and starts a private server.
func startPrivatePG(ctx context.Context) (*privatePG, error) {
	bin, err := findPGBin()
	if err != nil {
		return nil, err
	}
	p := &privatePG{bin: bin}
	dir, err := os.MkdirTemp("", "torture-pg-")
	if err != nil {
		return nil, err
	}
	p.dir, p.data = dir, filepath.Join(dir, "data")
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root: run them as the
		// postgres user, in a directory it owns.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root and no postgres user to run the private server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if p.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	if out, err := p.cmd(ctx, "initdb", "-D", p.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := p.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// Start starts the server and waits until it accepts connections.
func (p *privatePG) Start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=200", p.port, p.dir)
	out, err := p.cmd(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", p.data, "-l", filepath.Join(p.dir, "server.log"), "-o", opts)
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, p.LogTail())
	}
	return nil
}

// Stop stops the server: mode "fast" (clients disconnected, clean
// shutdown checkpoint) or "immediate" (no checkpoint: crash recovery on
// the next start).
func (p *privatePG) Stop(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := p.cmd(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-D", p.data, "-m", mode)
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Close stops the server and removes its directory unless keep is set.
func (p *privatePG) Close(keep bool) {
	p.Stop("immediate")
	if !keep {
		os.RemoveAll(p.dir)
	}
}

// LogTail is the end of the server's log.
func (p *privatePG) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	s := string(b)
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

func (p *privatePG) cmd(ctx context.Context, name string, args ...string) (string, error) {
	c := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	c.Dir = p.dir
	c.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	if p.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
		c.Env = append(c.Env, "HOME="+p.dir, "USER=postgres", "LOGNAME=postgres")
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return strings.TrimSpace(out.String()), err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pgRestarter restarts the private server PGRestarts times during the
// load: stop (alternately -m fast and -m immediate, the latter a crash
// of the server), down for 1 to 3 s, start again. It holds hostMu while
// the server is down so that no host is started then: a host refuses to
// start against an unreachable database, by design, and the killer must
// not count that as a failed restart. The running hosts ride it out.
func (d *driver) pgRestarter(ctx context.Context, rng *rand.Rand) {
	avg := d.cfg.Duration / time.Duration(d.cfg.PGRestarts+1)
	for i := 0; i < d.cfg.PGRestarts && ctx.Err() == nil; i++ {
		sleepCtx(ctx, time.Duration(float64(avg)*(0.5+rng.Float64())))
		if ctx.Err() != nil {
			return
		}
		mode := "fast"
		if i%2 == 1 {
			mode = "immediate"
		}
		down := time.Duration(1000+rng.Intn(2000)) * time.Millisecond
		d.hostMu.Lock()
		t0 := time.Now()
		if err := d.pg.Stop(mode); err != nil {
			d.hostMu.Unlock()
			d.violate("PostgreSQL restart %d: %v", i+1, err)
			return
		}
		time.Sleep(down)
		// Start with a context of its own: the server must come back
		// even when the load is over, so that the drain can run.
		sctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := d.pg.Start(sctx)
		cancel()
		d.hostMu.Unlock()
		if err != nil {
			d.violate("PostgreSQL restart %d: %v", i+1, err)
			return
		}
		d.mu.Lock()
		d.res.PGRestarts++
		d.res.PGRestartModes[mode]++
		d.res.PGDown += time.Since(t0)
		d.mu.Unlock()
		if d.cfg.Verbose {
			d.logf("torture: PostgreSQL restarted (-m %s), down %s", mode, time.Since(t0).Round(time.Millisecond))
		}
	}
}
