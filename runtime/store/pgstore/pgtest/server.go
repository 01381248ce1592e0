package pgtest

// A PostgreSQL server of the caller's own, for the torture and the
// independent checker (tools/torture -pg-private, tools/jepsen): the one
// server those runs may restart and crash, never the shared one that
// TAKOHOST_TEST_POSTGRES names.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGBinDir is where StartPrivateServer looks for initdb, pg_ctl and postgres when
// they are not on PATH (a variable so that a test can point it elsewhere).
var PGBinDir = "/usr/lib/postgresql/15/bin"

// ErrNoPostgres is returned by StartPrivateServer when the PostgreSQL server
// binaries are not installed; the run is skipped with that message.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found")

// ErrNoServer is returned by CreateDB when the PostgreSQL server does not
// answer.
var ErrNoServer = errors.New("PostgreSQL server unreachable")

// PrivateServer is a PostgreSQL server its caller owns: initdb into a
// temporary directory, trust authentication, fsync on, listening on a free
// loopback port and a socket in that directory. Only such a server is ever
// restarted by the torture and the checker; a shared server never is.
type PrivateServer struct {
	bin  string // directory of initdb, pg_ctl, postgres
	Dir  string // its temporary directory (owned by the server's user), the log in server.log
	data string
	Port int
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

// StartPrivateServer creates and starts a private server.
func StartPrivateServer(ctx context.Context, prefix string) (*PrivateServer, error) {
	bin, err := findPGBin()
	if err != nil {
		return nil, err
	}
	p := &PrivateServer{bin: bin}
	dir, err := os.MkdirTemp("", prefix+"-pg-")
	if err != nil {
		return nil, err
	}
	p.Dir, p.data = dir, filepath.Join(dir, "data")
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
	if p.Port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
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
func (p *PrivateServer) Start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=200", p.Port, p.Dir)
	out, err := p.cmd(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", p.data, "-l", filepath.Join(p.Dir, "server.log"), "-o", opts)
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, p.LogTail())
	}
	return nil
}

// Stop stops the server: mode "fast" (clients disconnected, clean
// shutdown checkpoint) or "immediate" (no checkpoint: crash recovery on
// the next start).
func (p *PrivateServer) Stop(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := p.cmd(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-D", p.data, "-m", mode)
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Close stops the server and removes its directory unless keep is set.
func (p *PrivateServer) Close(keep bool) {
	p.Stop("immediate")
	if !keep {
		os.RemoveAll(p.Dir)
	}
}

// LogTail is the end of the server's log.
func (p *PrivateServer) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "server.log"))
	s := string(b)
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

func (p *PrivateServer) cmd(ctx context.Context, name string, args ...string) (string, error) {
	c := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	c.Dir = p.Dir
	c.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	if p.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
		c.Env = append(c.Env, "HOME="+p.Dir, "USER=postgres", "LOGNAME=postgres")
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

// CreateDB creates a fresh database on server (a postgres:// URL) and
// returns its URL and a function that drops it.
func CreateDB(ctx context.Context, server, prefix string) (string, func(), error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", nil, fmt.Errorf("PostgreSQL URL: %w", err)
	}
	c, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrNoServer, err)
	}
	defer c.Close(context.Background())
	name := fmt.Sprintf("%s%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	du := *u
	du.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return du.String(), drop, nil
}

// TerminateBackends terminates every other connection to the database of
// dbURL (what a PostgreSQL restart does to its clients) and returns how
// many it terminated.
func TerminateBackends(ctx context.Context, dbURL string) (int, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return 0, err
	}
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var n int
	err = c.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()) k`, strings.TrimPrefix(u.Path, "/")).Scan(&n)
	return n, err
}
