// Package auth holds the host's principals, their grants and their hashed
// tokens.
//
// Tokens are bearer secrets, so the host never stores them: host.json keeps
// only SHA-256 digests, and Authenticate compares the digest of a presented
// token against every principal's digest in constant time, visiting all of
// them whatever matches, so that neither the position of a match nor its
// absence shows in the timing. Grants are per space and narrowed by Form URL
// because the Forms say a reference grants no permission: the server asks
// Can for the exact (space, Form, action) of each resource it touches, and
// the producer Binding asks it again at every send, for the version's
// creator and, when a request invoked the worker, for the invoking principal.
//
// Authority is tied to a principal's ID, never to its name: the ID is
// generated when the principal is created, kept in host.json, and is what
// resources record as their creator. A principal revoked and later created
// again under the same name gets another ID, so it does not inherit what
// the old one created. host.json files written before IDs existed are
// migrated on their first load (see Config.Migrate).
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/takoform/queuehost/schemas"
)

// Roles a grant can carry.
const (
	RoleViewer = "viewer" // read
	RoleEditor = "editor" // read, create, update, delete, invoke
	// RolePublisher only publishes messages over the Host API to the
	// AtLeastOnceQueue resources its grant's Queues name (every queue of
	// the space when it names none): it reads nothing, not even the
	// queues it publishes to (spec/peers.md §Publish).
	RolePublisher = "publisher"
	// RoleConsumer only leases, settles and extends leases over the Host
	// API through the PullConsumer resources of the AtLeastOnceQueue
	// resources its grant's Queues name (every queue of the space when it
	// names none): it reads nothing else (spec/peers.md §Pull consumers).
	RoleConsumer = "consumer"
)

// Action is what a request does to a resource of some Form.
type Action int

const (
	// Read covers GET of resources, Operations and logs.
	Read Action = iota + 1
	// Write covers create, update, delete and invoke (the worker fetch
	// route, producer Binding sends).
	Write
	// Publish covers the publish route of an AtLeastOnceQueue
	// (spec/peers.md §Publish): an editor of AtLeastOnceQueue may, and a
	// publisher of the queue may; see CanPublish.
	Publish
	// Consume covers the lease routes of a PullConsumer (spec/peers.md
	// §Pull consumers): an editor of PullConsumer may, and a consumer of
	// its queue may; see CanConsume.
	Consume
)

func (a Action) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case Publish:
		return "publish"
	case Consume:
		return "consume"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// AllSpaces as a grant's space grants every space.
const AllSpaces = "*"

// Grant is one principal's role in one space, optionally narrowed to Forms.
type Grant struct {
	Space string `json:"space"`
	Role  string `json:"role"`
	// Forms, when not empty, lists the Form URLs (matched exactly) the
	// grant applies to.
	Forms []string `json:"forms,omitempty"`
	// Queues, only on a publisher grant and when not empty, lists the
	// UIDs of the AtLeastOnceQueue resources it may publish to. Authority
	// goes by UID: a queue deleted and created again under its name is
	// another queue, which the grant does not cover.
	Queues []string `json:"queues,omitempty"`
}

func (g Grant) inSpace(space string) bool { return g.Space == AllSpaces || g.Space == space }

func (g Grant) allows(a Action) bool {
	switch a {
	case Read:
		return g.Role == RoleViewer || g.Role == RoleEditor
	case Write:
		return g.Role == RoleEditor
	case Publish:
		return g.Role == RoleEditor || g.Role == RolePublisher
	case Consume:
		return g.Role == RoleEditor || g.Role == RoleConsumer
	}
	return false
}

// check is what a grant's role allows it to hold: viewer, editor or
// publisher; Queues only on a publisher, which has no Forms (it is about
// AtLeastOnceQueue).
func (g Grant) check() error {
	switch g.Role {
	case RoleViewer, RoleEditor:
		if len(g.Queues) > 0 {
			return fmt.Errorf("queues narrow only a %q or %q grant, not %q", RolePublisher, RoleConsumer, g.Role)
		}
	case RolePublisher, RoleConsumer:
		if len(g.Forms) > 0 {
			return fmt.Errorf("a %q grant has no forms: it is about AtLeastOnceQueue resources only (name them in queues)", g.Role)
		}
		for _, q := range g.Queues {
			if q == "" || len(q) > 256 {
				return fmt.Errorf("queues holds resource UIDs of 1 to 256 characters")
			}
		}
	default:
		return fmt.Errorf("role %q must be %q, %q, %q or %q", g.Role, RoleViewer, RoleEditor, RolePublisher, RoleConsumer)
	}
	return nil
}

func (g Grant) coversForm(formURL string) bool {
	return len(g.Forms) == 0 || slices.Contains(g.Forms, formURL)
}

// Principal is one identity of host.json.
type Principal struct {
	// ID is immutable and never reused: what resources record as their
	// creator and what authority is tied to.
	ID   string `json:"id"`
	Name string `json:"name"`
	// LegacyName is set only on principals that existed when host.json was
	// migrated to IDs: resources created before that record their creator
	// by name, and that name means this principal (and no later one).
	LegacyName string `json:"legacyName,omitempty"`
	// TokenSHA256 is the lower-case hex SHA-256 of the bearer token.
	TokenSHA256 string  `json:"tokenSha256"`
	Grants      []Grant `json:"grants"`
}

// InSpace reports whether p holds any grant in space. A principal without
// one is told that nothing in the space exists (404), so that another
// space's existence never leaks.
func (p *Principal) InSpace(space string) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.inSpace(space) {
			return true
		}
	}
	return false
}

// Can reports whether p may do a to resources of formURL in space.
func (p *Principal) Can(space, formURL string, a Action) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.inSpace(space) && g.allows(a) && g.coversForm(formURL) {
			return true
		}
	}
	return false
}

// CanPublish reports whether p may publish to the AtLeastOnceQueue of UID
// queueUID in space over the Host API: an editor grant covering
// AtLeastOnceQueue, or a publisher grant that names the queue (or names
// none).
func (p *Principal) CanPublish(space, queueUID string) bool {
	return p.canUseQueue(space, queueUID, RolePublisher, schemas.FormAtLeastOnceQueue)
}

// CanConsume reports whether p may lease, settle and extend leases of the
// queue queueUID through its PullConsumer in space: an editor grant
// covering PullConsumer, or a consumer grant that names the queue (or
// names none).
func (p *Principal) CanConsume(space, queueUID string) bool {
	return p.canUseQueue(space, queueUID, RoleConsumer, schemas.FormPullConsumer)
}

// canUseQueue: an editor grant covering editorForm, or a grant of role
// that names the queue (or names none), in space.
func (p *Principal) canUseQueue(space, queueUID, role, editorForm string) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if !g.inSpace(space) {
			continue
		}
		switch g.Role {
		case RoleEditor:
			if g.coversForm(editorForm) {
				return true
			}
		case role:
			if len(g.Queues) == 0 || slices.Contains(g.Queues, queueUID) {
				return true
			}
		}
	}
	return false
}

// CanAny reports whether p may do a to resources of at least one Form in
// space: the route-level check made before the request names its Form.
func (p *Principal) CanAny(space string, a Action) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.inSpace(space) && g.allows(a) {
			return true
		}
	}
	return false
}

// Config is the content of host.json.
type Config struct {
	// PrincipalIDs is true once every principal has an ID: from then on a
	// principal without one (added by hand) gets a new ID and no
	// LegacyName, so it cannot claim what an earlier principal of its name
	// created.
	PrincipalIDs bool        `json:"principalIds"`
	Principals   []Principal `json:"principals"`
	// AllowedFetchHosts lists host[:port] patterns workers' outbound fetch
	// may reach.
	AllowedFetchHosts []string `json:"allowedFetchHosts,omitempty"`
}

// HashToken returns the digest host.json stores for token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Authenticate finds the principal whose token is token. It compares
// against every principal, in constant time per comparison, and does not
// stop at a match.
func (c *Config) Authenticate(token string) (*Principal, bool) {
	if c == nil || token == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	var found *Principal
	for i := range c.Principals {
		want, err := hex.DecodeString(c.Principals[i].TokenSHA256)
		if err != nil || len(want) != sha256.Size {
			// Compare anyway so that a malformed entry costs the same.
			want = make([]byte, sha256.Size)
			subtle.ConstantTimeCompare(sum[:], want)
			continue
		}
		if subtle.ConstantTimeCompare(sum[:], want) == 1 && found == nil {
			found = &c.Principals[i]
		}
	}
	return found, found != nil
}

// ByID finds a principal by its ID.
func (c *Config) ByID(id string) (*Principal, bool) {
	if c == nil || id == "" {
		return nil, false
	}
	for i := range c.Principals {
		if c.Principals[i].ID == id {
			return &c.Principals[i], true
		}
	}
	return nil, false
}

// Creator finds the principal a resource's recorded creator means: the
// principal of that ID, or, for a record written before principal IDs (it
// holds a name), the principal that had that name when host.json was
// migrated. A principal created later under the same name is never found.
func (c *Config) Creator(recorded string) (*Principal, bool) {
	if p, ok := c.ByID(recorded); ok {
		return p, true
	}
	if c == nil || recorded == "" {
		return nil, false
	}
	for i := range c.Principals {
		if c.Principals[i].LegacyName == recorded {
			return &c.Principals[i], true
		}
	}
	return nil, false
}

// Principal finds a principal by name (tako tokens; authority never goes
// by name: see ByID and Creator).
func (c *Config) Principal(name string) (*Principal, bool) {
	if c == nil {
		return nil, false
	}
	for i := range c.Principals {
		if c.Principals[i].Name == name {
			return &c.Principals[i], true
		}
	}
	return nil, false
}

// IDPrefix starts every principal ID.
const IDPrefix = "pr_"

// NewPrincipalID returns a fresh principal ID: IDPrefix and 26 characters
// of base32 (128 random bits).
func NewPrincipalID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return IDPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// Migrate gives every principal without an ID one, and reports whether it
// changed c. On a host.json written before IDs existed (PrincipalIDs
// false), each principal also keeps its name as LegacyName, so that the
// resources it created before (which name it) stay its own; afterwards
// PrincipalIDs is true and a principal without an ID is a new one, which
// gets no LegacyName.
//
// The ID given here is derived from the principal's name and token digest
// (derivedID), so that the hosts of a cluster, each migrating its own copy
// of one host.json, agree on it. A principal created again under an old
// name has another token, hence another ID; tako tokens create gives new
// principals random IDs anyway.
func (c *Config) Migrate() (bool, error) {
	changed := false
	for i := range c.Principals {
		p := &c.Principals[i]
		if p.ID != "" {
			continue
		}
		p.ID, changed = derivedID(p.Name, p.TokenSHA256), true
		if !c.PrincipalIDs {
			p.LegacyName = p.Name
		}
	}
	if !c.PrincipalIDs {
		c.PrincipalIDs, changed = true, true
	}
	return changed, nil
}

// derivedID is the ID Migrate gives a principal of host.json that has
// none: IDPrefix and 26 base32 characters of SHA-256 over its name and
// token digest.
func derivedID(name, tokenSHA256 string) string {
	sum := sha256.Sum256([]byte("takohost principal\x00" + name + "\x00" + strings.ToLower(tokenSHA256)))
	return IDPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// Validate checks host.json's invariants: unique non-empty names and IDs,
// unique legacy names, 64-hex digests, known roles, non-empty spaces.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	ids := map[string]bool{}
	legacy := map[string]bool{}
	for i, p := range c.Principals {
		if p.Name == "" {
			return fmt.Errorf("principals[%d]: name is empty", i)
		}
		if seen[p.Name] {
			return fmt.Errorf("principals[%d]: duplicate name %q", i, p.Name)
		}
		seen[p.Name] = true
		if p.ID == "" {
			return fmt.Errorf("principal %q: id is empty", p.Name)
		}
		if ids[p.ID] {
			return fmt.Errorf("principal %q: duplicate id %q", p.Name, p.ID)
		}
		ids[p.ID] = true
		if p.LegacyName != "" {
			if legacy[p.LegacyName] {
				return fmt.Errorf("principal %q: duplicate legacyName %q", p.Name, p.LegacyName)
			}
			legacy[p.LegacyName] = true
		}
		if b, err := hex.DecodeString(p.TokenSHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("principal %q: tokenSha256 must be 64 hex digits", p.Name)
		}
		for j, g := range p.Grants {
			if g.Space == "" {
				return fmt.Errorf("principal %q grants[%d]: space is empty", p.Name, j)
			}
			if err := g.check(); err != nil {
				return fmt.Errorf("principal %q grants[%d]: %w", p.Name, j, err)
			}
		}
	}
	return nil
}

// File names inside the data directory.
const (
	ConfigFile     = "host.json"
	AdminTokenFile = "admin-token"
	AdminName      = "admin"
)

// Load reads and validates a host.json. A file with principals that have
// no ID is migrated (Migrate) and written back before Load returns, so
// that the IDs it hands out are the ones every later start reads.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	changed, err := c.Migrate()
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if changed {
		if err := Save(path, &c); err != nil {
			return nil, fmt.Errorf("%s: writing the principals' new IDs: %w", path, err)
		}
	}
	return &c, nil
}

// Save replaces host.json atomically (0600).
func Save(path string, c *Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o600)
}

// NewToken returns a fresh random bearer token: 32 bytes, base64url
// without padding.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// NewAdmin returns a Config holding only a fresh admin principal (editor in
// every space) and its token; for hosts that keep nothing on disk.
func NewAdmin() (*Config, string, error) {
	tok, err := NewToken()
	if err != nil {
		return nil, "", err
	}
	p, err := adminPrincipal(tok)
	if err != nil {
		return nil, "", err
	}
	return &Config{PrincipalIDs: true, Principals: []Principal{p}}, tok, nil
}

func adminPrincipal(token string) (Principal, error) {
	id, err := NewPrincipalID()
	return Principal{
		ID:          id,
		Name:        AdminName,
		TokenSHA256: HashToken(token),
		Grants:      []Grant{{Space: AllSpaces, Role: RoleEditor}},
	}, err
}

// EnsureAdmin loads <dataDir>/host.json, creating it on first start with an
// admin principal whose token it writes to <dataDir>/admin-token (0600).
// Later starts reuse both. It returns the admin token when the admin-token
// file is present (an operator may delete it once the token is stored
// elsewhere), "" otherwise.
func EnsureAdmin(dataDir string) (*Config, string, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, "", err
	}
	cfgPath := filepath.Join(dataDir, ConfigFile)
	tokPath := filepath.Join(dataDir, AdminTokenFile)
	if _, err := os.Stat(cfgPath); errors.Is(err, os.ErrNotExist) {
		tok, err := NewToken()
		if err != nil {
			return nil, "", err
		}
		// The token first: a crash between the two writes leaves a token
		// file that the next start overwrites, never a host.json whose
		// token nobody knows.
		if err := writeFileAtomic(tokPath, []byte(tok+"\n"), 0o600); err != nil {
			return nil, "", err
		}
		admin, err := adminPrincipal(tok)
		if err != nil {
			return nil, "", err
		}
		cfg := &Config{PrincipalIDs: true, Principals: []Principal{admin}, AllowedFetchHosts: []string{}}
		if err := Save(cfgPath, cfg); err != nil {
			return nil, "", err
		}
	} else if err != nil {
		return nil, "", err
	}
	cfg, err := Load(cfgPath)
	if err != nil {
		return nil, "", err
	}
	tok := ""
	if b, err := os.ReadFile(tokPath); err == nil {
		tok = strings.TrimSpace(string(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, "", err
	}
	return cfg, tok, nil
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// BearerToken extracts the token of an "Authorization: Bearer <token>"
// header value (scheme case-insensitive, RFC 9110 §11.1). ok is false for
// a missing or malformed value.
func BearerToken(header string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok := strings.TrimLeft(rest, " ")
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", false
	}
	return tok, true
}
