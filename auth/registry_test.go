package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Registry's changes are in host.json before they take effect: Load of
// the file gives the same principals; a refused change writes nothing.
func TestRegistryChangesAreDurable(t *testing.T) {
	dir := t.TempDir()
	cfg, adminTok, err := EnsureAdmin(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ConfigFile)
	r := NewRegistry(cfg, path)
	p, tok, err := r.Create("ci", []Grant{{Space: "demo", Role: RoleViewer}})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Authenticate(tok); !ok || got.ID != p.ID {
		t.Fatal("the new token does not authenticate at once")
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), tok) || !strings.Contains(string(raw), HashToken(tok)) {
		t.Fatal("host.json must hold the digest, never the token")
	}
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := again.Authenticate(tok); !ok || got.ID != p.ID || got.Name != "ci" {
		t.Fatal("the created principal is not in host.json")
	}
	before, _ := os.ReadFile(path)
	if _, _, err := r.Create("ci", []Grant{{Space: "demo", Role: RoleViewer}}); !errors.Is(err, ErrPrincipalExists) {
		t.Fatalf("a taken name: %v", err)
	}
	if _, err := r.Revoke(AdminName); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("the last admin: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("a refused change wrote host.json")
	}
	if _, ok := r.Authenticate(adminTok); !ok {
		t.Fatal("a refused revoke removed the admin")
	}
	if _, err := r.Revoke(p.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Authenticate(tok); ok {
		t.Fatal("a revoked token authenticates")
	}
	again, _ = Load(path)
	if _, ok := again.Authenticate(tok); ok {
		t.Fatal("the revoked principal is still in host.json")
	}
}

// Two registries on one host.json (two hosts of a cluster on one data
// directory): each change starts from the file, so neither loses the
// other's principal, and Reload brings the other's changes in.
func TestRegistriesShareAFile(t *testing.T) {
	dir := t.TempDir()
	cfg, _, err := EnsureAdmin(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, ConfigFile)
	a := NewRegistry(cfg, path)
	cfgB, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b := NewRegistry(cfgB, path)
	if changed, err := b.Reload(); changed || err != nil {
		t.Fatalf("reload of an unchanged file: %v %v", changed, err)
	}
	_, tokA, err := a.Create("from-a", []Grant{{Space: "s", Role: RoleViewer}})
	if err != nil {
		t.Fatal(err)
	}
	// b has not reloaded yet; its create must keep a's principal.
	_, tokB, err := b.Create("from-b", []Grant{{Space: "s", Role: RoleViewer}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Authenticate(tokA); !ok {
		t.Fatal("b's change dropped or did not see a's principal")
	}
	if changed, err := a.Reload(); !changed || err != nil {
		t.Fatalf("a's reload after b's change: %v %v", changed, err)
	}
	if _, ok := a.Authenticate(tokB); !ok {
		t.Fatal("a does not know b's principal after Reload")
	}
	if _, err := a.Revoke("from-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Authenticate(tokB); ok {
		t.Fatal("b still accepts a token a revoked")
	}
	if n := len(b.List()); n != 2 {
		t.Fatalf("b lists %d principals, want admin and from-a", n)
	}
}
