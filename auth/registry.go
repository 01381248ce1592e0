package auth

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Registry is the host's live set of principals: a Config that the
// principal API changes while the host runs. Every change is written to
// host.json (atomically, synced) before it takes effect, so it is durable
// when the call returns and the next start reads the same set. Readers get
// an immutable snapshot: a change swaps in a new Config and never edits
// the one a request is using.
type Registry struct {
	path  string // host.json; "" keeps changes in memory only
	mu    sync.Mutex
	cur   atomic.Pointer[Config]
	stamp stamp // of host.json as last read or written here (under mu)

	chMu    sync.Mutex
	changed chan struct{} // closed at the next change; nil until asked for
}

// Changed is a channel closed at the next change of the principals (a
// create, a revoke or a reload that found host.json changed): a request
// that waits (a long poll) re-authenticates its token then, so that a
// revoked token ends it at once.
func (r *Registry) Changed() <-chan struct{} {
	r.chMu.Lock()
	defer r.chMu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

func (r *Registry) notify() {
	r.chMu.Lock()
	defer r.chMu.Unlock()
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// NewRegistry serves c (just loaded from path), writing changes to path
// ("" for a host without disk).
func NewRegistry(c *Config, path string) *Registry {
	r := &Registry{path: path}
	if path != "" {
		r.stamp = fileStamp(path)
	}
	r.cur.Store(c)
	return r
}

// Config is the current snapshot; callers must not change it.
func (r *Registry) Config() *Config { return r.cur.Load() }

// Authenticate is Config.Authenticate on the current snapshot.
func (r *Registry) Authenticate(token string) (*Principal, bool) {
	return r.Config().Authenticate(token)
}

// ByID is Config.ByID on the current snapshot.
func (r *Registry) ByID(id string) (*Principal, bool) { return r.Config().ByID(id) }

// Creator is Config.Creator on the current snapshot.
func (r *Registry) Creator(recorded string) (*Principal, bool) {
	return r.Config().Creator(recorded)
}

// IsAdmin reports whether p may manage principals: it holds an editor
// grant on every space ("*") that no Form list narrows, so it can already
// do everything any principal it could create can do.
func (p *Principal) IsAdmin() bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.Space == AllSpaces && g.Role == RoleEditor && len(g.Forms) == 0 {
			return true
		}
	}
	return false
}

// Errors of the principal API. The server maps them to problems.
var (
	ErrPrincipalExists   = errors.New("a principal of this name exists")
	ErrNoPrincipal       = errors.New("no principal of this ID or name exists")
	ErrLastAdmin         = errors.New("the last principal that may manage principals cannot be revoked")
	ErrInvalidPrincipal  = errors.New("invalid principal")
	ErrRegistryReadOnly  = errors.New("principals cannot be written")
	principalNamePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
)

// MaxPrincipals bounds host.json: each request compares its token with
// every principal's digest.
const MaxPrincipals = 1000

// Create adds a principal with grants and a fresh token, which it returns
// once (host.json keeps only its SHA-256). The name is 1..63 of a-z, 0-9,
// '.', '_', '-' (starting and ending with a letter or digit) and must be
// unused; every grant needs a space (a space name or "*"), a role (viewer,
// editor or publisher), Form URLs (absolute https URLs) if any, and, on a
// publisher grant only, queue UIDs if any.
func (r *Registry) Create(name string, grants []Grant) (Principal, string, error) {
	if !principalNamePattern.MatchString(name) {
		return Principal{}, "", fmt.Errorf("%w: name %q must be 1 to 63 of a-z, 0-9, '.', '_', '-', starting and ending with a letter or digit", ErrInvalidPrincipal, name)
	}
	if len(grants) == 0 {
		return Principal{}, "", fmt.Errorf("%w: at least one grant is required", ErrInvalidPrincipal)
	}
	for i, g := range grants {
		if g.Space != AllSpaces && !spacePattern.MatchString(g.Space) {
			return Principal{}, "", fmt.Errorf("%w: grants[%d]: space %q must be \"*\" or a space name (1 to 63 of a-z, 0-9, '-')", ErrInvalidPrincipal, i, g.Space)
		}
		if err := g.check(); err != nil {
			return Principal{}, "", fmt.Errorf("%w: grants[%d]: %w", ErrInvalidPrincipal, i, err)
		}
		for _, f := range g.Forms {
			if !strings.HasPrefix(f, "https://") || len(f) > 512 {
				return Principal{}, "", fmt.Errorf("%w: grants[%d]: Form %q must be a Form URL (https://…)", ErrInvalidPrincipal, i, f)
			}
		}
	}
	tok, err := NewToken()
	if err != nil {
		return Principal{}, "", err
	}
	id, err := NewPrincipalID()
	if err != nil {
		return Principal{}, "", err
	}
	p := Principal{ID: id, Name: name, TokenSHA256: HashToken(tok), Grants: cloneGrants(grants)}
	err = r.change(func(c *Config) error {
		if _, ok := c.Principal(name); ok {
			return fmt.Errorf("%w: %q", ErrPrincipalExists, name)
		}
		if len(c.Principals) >= MaxPrincipals {
			return fmt.Errorf("%w: a host holds at most %d principals", ErrInvalidPrincipal, MaxPrincipals)
		}
		c.Principals = append(c.Principals, p)
		return nil
	})
	if err != nil {
		return Principal{}, "", err
	}
	return p, tok, nil
}

// Revoke removes the principal of that ID (or, failing that, name): its
// token stops working at once. The last principal that IsAdmin is kept,
// so that principals can always be managed.
func (r *Registry) Revoke(idOrName string) (Principal, error) {
	var gone Principal
	err := r.change(func(c *Config) error {
		i := slices.IndexFunc(c.Principals, func(p Principal) bool { return p.ID == idOrName })
		if i < 0 {
			i = slices.IndexFunc(c.Principals, func(p Principal) bool { return p.Name == idOrName })
		}
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrNoPrincipal, idOrName)
		}
		gone = c.Principals[i]
		c.Principals = slices.Delete(c.Principals, i, i+1)
		if gone.IsAdmin() && !slices.ContainsFunc(c.Principals, func(p Principal) bool { return p.IsAdmin() }) {
			return ErrLastAdmin
		}
		return nil
	})
	return gone, err
}

// List is the principals, in host.json's order.
func (r *Registry) List() []Principal {
	c := r.Config()
	out := make([]Principal, len(c.Principals))
	for i, p := range c.Principals {
		p.Grants = cloneGrants(p.Grants)
		out[i] = p
	}
	return out
}

// change applies f to a copy of the current Config, validates it, writes
// it to host.json and then makes it current. Changes are serialised, in
// the process by r.mu and between processes that share the file (hosts of
// one cluster on one data directory) by an exclusive lock on host.json.lock,
// under which the change starts from the file as it is, so that two hosts
// creating principals at once both keep theirs.
func (r *Registry) change(f func(*Config) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.Config()
	if r.path != "" {
		unlock, err := lockFile(r.path + ".lock")
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRegistryReadOnly, err)
		}
		defer unlock()
		if onDisk, err := Load(r.path); err == nil {
			old = onDisk
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %v", ErrRegistryReadOnly, err)
		}
	}
	next := &Config{PrincipalIDs: old.PrincipalIDs, AllowedFetchHosts: slices.Clone(old.AllowedFetchHosts)}
	for _, p := range old.Principals {
		p.Grants = cloneGrants(p.Grants)
		next.Principals = append(next.Principals, p)
	}
	if err := f(next); err != nil {
		return err
	}
	if err := next.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPrincipal, err)
	}
	if r.path != "" {
		if err := Save(r.path, next); err != nil {
			return fmt.Errorf("%w: %v", ErrRegistryReadOnly, err)
		}
		r.stamp = fileStamp(r.path)
	}
	r.cur.Store(next)
	r.notify()
	return nil
}

// Reload reads host.json again when it changed since it was last read or
// written here (another host of a cluster on the same data directory
// changed the principals, or tako tokens -data did), and makes it current.
// A file that no longer loads is reported and the current set kept.
func (r *Registry) Reload() (bool, error) {
	if r.path == "" {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := fileStamp(r.path)
	if st == r.stamp || st == (stamp{}) {
		return false, nil
	}
	c, err := Load(r.path)
	if err != nil {
		return false, err
	}
	r.stamp = fileStamp(r.path)
	r.cur.Store(c)
	r.notify()
	return true, nil
}

// stamp identifies a version of a file: its modification time and size
// (host.json is replaced by rename, so a change also changes the inode's
// time).
type stamp struct {
	mod  int64
	size int64
}

func fileStamp(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	return stamp{fi.ModTime().UnixNano(), fi.Size()}
}

// lockFile takes an exclusive flock on path (created if missing).
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func cloneGrants(gs []Grant) []Grant {
	out := make([]Grant, len(gs))
	for i, g := range gs {
		g.Forms = slices.Clone(g.Forms)
		g.Queues = slices.Clone(g.Queues)
		out[i] = g
	}
	return out
}

var spacePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
