package auth

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	formQueue    = "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/"
	formConsumer = "https://edge.forms.takoform.com/forms/QueueConsumer/0.3.0/"
)

func testConfig() *Config {
	return &Config{Principals: []Principal{
		{Name: "admin", TokenSHA256: HashToken("t-admin"), Grants: []Grant{{Space: "*", Role: RoleEditor}}},
		{Name: "viewer", TokenSHA256: HashToken("t-viewer"), Grants: []Grant{{Space: "a", Role: RoleViewer}}},
		{Name: "narrow", TokenSHA256: HashToken("t-narrow"), Grants: []Grant{
			{Space: "a", Role: RoleEditor, Forms: []string{formQueue}},
			{Space: "b", Role: RoleViewer},
		}},
	}}
}

func TestAuthenticate(t *testing.T) {
	c := testConfig()
	for tok, want := range map[string]string{"t-admin": "admin", "t-viewer": "viewer", "t-narrow": "narrow"} {
		p, ok := c.Authenticate(tok)
		if !ok || p.Name != want {
			t.Errorf("Authenticate(%q) = %v, %v; want %s", tok, p, ok, want)
		}
	}
	for _, tok := range []string{"", "t-admin ", "T-ADMIN", "nope"} {
		if p, ok := c.Authenticate(tok); ok {
			t.Errorf("Authenticate(%q) = %v, want no match", tok, p.Name)
		}
	}
	// A malformed digest never matches and does not stop the scan.
	c.Principals = append([]Principal{{Name: "bad", TokenSHA256: "zz"}}, c.Principals...)
	if p, ok := c.Authenticate("t-viewer"); !ok || p.Name != "viewer" {
		t.Fatalf("after a malformed entry: %v %v", p, ok)
	}
}

func TestCan(t *testing.T) {
	c := testConfig()
	get := func(n string) *Principal { p, _ := c.Principal(n); return p }
	cases := []struct {
		who, space, form string
		a                Action
		want             bool
	}{
		{"admin", "anything", formConsumer, Write, true},
		{"viewer", "a", formQueue, Read, true},
		{"viewer", "a", formQueue, Write, false},
		{"viewer", "b", formQueue, Read, false},
		{"narrow", "a", formQueue, Write, true},
		{"narrow", "a", formQueue, Read, true},
		{"narrow", "a", formConsumer, Read, false},
		{"narrow", "a", formConsumer, Write, false},
		{"narrow", "b", formConsumer, Read, true},
		{"narrow", "b", formConsumer, Write, false},
		{"narrow", "c", formQueue, Read, false},
	}
	for _, tc := range cases {
		if got := get(tc.who).Can(tc.space, tc.form, tc.a); got != tc.want {
			t.Errorf("%s.Can(%s, %s, %v) = %v, want %v", tc.who, tc.space, tc.form, tc.a, got, tc.want)
		}
	}
	if !get("narrow").InSpace("b") || get("narrow").InSpace("c") || !get("admin").InSpace("x") {
		t.Error("InSpace")
	}
	if get("viewer").CanAny("a", Write) || !get("narrow").CanAny("a", Write) {
		t.Error("CanAny")
	}
	var nobody *Principal
	if nobody.Can("a", formQueue, Read) || nobody.InSpace("a") {
		t.Error("nil principal")
	}
}

func TestBearerToken(t *testing.T) {
	for h, want := range map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "Bearer   abc": "abc"} {
		if got, ok := BearerToken(h); !ok || got != want {
			t.Errorf("BearerToken(%q) = %q %v", h, got, ok)
		}
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "abc"} {
		if got, ok := BearerToken(h); ok {
			t.Errorf("BearerToken(%q) = %q, want malformed", h, got)
		}
	}
}

func TestEnsureAdmin(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cfg, tok, err := EnsureAdmin(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 43 { // 32 bytes base64url without padding
		t.Fatalf("token %q has length %d", tok, len(tok))
	}
	p, ok := cfg.Authenticate(tok)
	if !ok || p.Name != AdminName || !p.Can("any", formQueue, Write) {
		t.Fatalf("admin: %v %v", p, ok)
	}
	fi, err := os.Stat(filepath.Join(dir, AdminTokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin-token: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if strings.Contains(string(raw), tok) {
		t.Fatal("host.json holds the token in clear")
	}
	// A second start reuses both.
	cfg2, tok2, err := EnsureAdmin(dir)
	if err != nil || tok2 != tok {
		t.Fatalf("second start: %q %v", tok2, err)
	}
	if _, ok := cfg2.Authenticate(tok); !ok {
		t.Fatal("second start does not accept the token")
	}
}

func TestLoadRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown": `{"principals":[],"extra":1}`,
		"role":    `{"principals":[{"name":"a","tokenSha256":"` + HashToken("x") + `","grants":[{"space":"s","role":"owner"}]}]}`,
		"digest":  `{"principals":[{"name":"a","tokenSha256":"abc","grants":[]}]}`,
		"dup":     `{"principals":[{"name":"a","tokenSha256":"` + HashToken("x") + `"},{"name":"a","tokenSha256":"` + HashToken("y") + `"}]}`,
		"dupid":   `{"principalIds":true,"principals":[{"id":"pr_1","name":"a","tokenSha256":"` + HashToken("x") + `"},{"id":"pr_1","name":"b","tokenSha256":"` + HashToken("y") + `"}]}`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := Load(p); err == nil {
			t.Errorf("%s: Load accepted %s", name, body)
		}
	}
}

// A host.json written before principal IDs is migrated on its first load:
// every principal gets an ID, written back, and keeps its name as
// LegacyName so that the resources it created before (which recorded the
// name) stay its own. A principal added later under a revoked one's name
// gets a new ID and no LegacyName: it inherits nothing.
func TestPrincipalIDsMigrationAndNameReuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), ConfigFile)
	legacy := `{"principals":[` +
		`{"name":"admin","tokenSha256":"` + HashToken("t-admin") + `","grants":[{"space":"*","role":"editor"}]},` +
		`{"name":"alice","tokenSha256":"` + HashToken("t-alice") + `","grants":[{"space":"s","role":"editor"}]}]}`
	if err := os.WriteFile(path, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	alice, ok := cfg.Principal("alice")
	if !ok || !strings.HasPrefix(alice.ID, IDPrefix) || alice.LegacyName != "alice" || !cfg.PrincipalIDs {
		t.Fatalf("migrated alice: %+v (principalIds %v)", alice, cfg.PrincipalIDs)
	}
	// Another host migrating its own copy of the same file (a cluster's
	// hosts share host.json) gives the same IDs.
	copyPath := filepath.Join(t.TempDir(), ConfigFile)
	os.WriteFile(copyPath, []byte(legacy), 0o600)
	other, err := Load(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if oa, _ := other.Principal("alice"); oa.ID != alice.ID {
		t.Fatalf("two migrations of one host.json disagree: %s and %s", alice.ID, oa.ID)
	}
	// Written back: the next load reads the same IDs.
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if a2, _ := again.Principal("alice"); a2.ID != alice.ID {
		t.Fatalf("the ID changed between loads: %s then %s", alice.ID, a2.ID)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host.json after migration: %v %v", fi, err)
	}
	// A record of before the migration names alice; one of after, her ID.
	for _, rec := range []string{"alice", alice.ID} {
		if p, ok := again.Creator(rec); !ok || p.ID != alice.ID {
			t.Errorf("Creator(%q) = %v %v, want alice", rec, p, ok)
		}
	}
	// Revoke alice and add a new "alice" by hand, without an ID.
	kept := again.Principals[:0]
	for _, p := range again.Principals {
		if p.Name != "alice" {
			kept = append(kept, p)
		}
	}
	again.Principals = append(kept, Principal{Name: "alice", TokenSHA256: HashToken("t-alice-2"), Grants: []Grant{{Space: "s", Role: RoleEditor}}})
	b, _ := json.Marshal(again)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	nw, _ := third.Principal("alice")
	if nw.ID == "" || nw.ID == alice.ID || nw.LegacyName != "" {
		t.Fatalf("the new alice: %+v (old ID %s)", nw, alice.ID)
	}
	for _, rec := range []string{"alice", alice.ID} {
		if p, ok := third.Creator(rec); ok {
			t.Errorf("Creator(%q) found %s %s: a new principal of the name revived the old one's authority", rec, p.Name, p.ID)
		}
	}
	if p, ok := third.Creator(nw.ID); !ok || p.Name != "alice" {
		t.Errorf("Creator(new ID) = %v %v", p, ok)
	}
}

func TestNewAdminHasID(t *testing.T) {
	cfg, _, err := NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || !strings.HasPrefix(cfg.Principals[0].ID, IDPrefix) {
		t.Fatalf("%+v %v", cfg.Principals, err)
	}
}

func TestPublisherGrant(t *testing.T) {
	pub := &Principal{Grants: []Grant{{Space: "a", Role: RolePublisher, Queues: []string{"q1"}}}}
	anyQ := &Principal{Grants: []Grant{{Space: "a", Role: RolePublisher}}}
	ed := &Principal{Grants: []Grant{{Space: "a", Role: RoleEditor, Forms: []string{formQueue}}}}
	edOther := &Principal{Grants: []Grant{{Space: "a", Role: RoleEditor, Forms: []string{formConsumer}}}}
	viewer := &Principal{Grants: []Grant{{Space: "a", Role: RoleViewer}}}
	for _, c := range []struct {
		name         string
		p            *Principal
		space, queue string
		want         bool
	}{
		{"publisher of q1", pub, "a", "q1", true},
		{"publisher of q1 on q2", pub, "a", "q2", false},
		{"publisher of q1 in another space", pub, "b", "q1", false},
		{"publisher of every queue", anyQ, "a", "q9", true},
		{"editor of queues", ed, "a", "q2", true},
		{"editor of consumers", edOther, "a", "q1", false},
		{"viewer", viewer, "a", "q1", false},
		{"nil", nil, "a", "q1", false},
	} {
		if got := c.p.CanPublish(c.space, c.queue); got != c.want {
			t.Errorf("%s: CanPublish(%s, %s) = %v, want %v", c.name, c.space, c.queue, got, c.want)
		}
	}
	// A publisher reads nothing and writes nothing.
	for _, a := range []Action{Read, Write} {
		if pub.Can("a", formQueue, a) || anyQ.CanAny("a", a) {
			t.Errorf("a publisher may %s", a)
		}
	}
	if !anyQ.CanAny("a", Publish) || viewer.CanAny("a", Publish) || !ed.CanAny("a", Publish) {
		t.Error("CanAny(Publish): publisher and editor yes, viewer no")
	}
	for _, g := range []Grant{
		{Space: "a", Role: RolePublisher, Forms: []string{formQueue}},
		{Space: "a", Role: RoleEditor, Queues: []string{"q1"}},
		{Space: "a", Role: RoleViewer, Queues: []string{"q1"}},
		{Space: "a", Role: RolePublisher, Queues: []string{""}},
		{Space: "a", Role: "owner"},
	} {
		c := &Config{Principals: []Principal{{ID: "pr_x", Name: "x", TokenSHA256: HashToken("t"), Grants: []Grant{g}}}}
		if err := c.Validate(); err == nil {
			t.Errorf("Validate accepted grant %+v", g)
		}
	}
	c := &Config{Principals: []Principal{{ID: "pr_x", Name: "x", TokenSHA256: HashToken("t"), Grants: pub.Grants}}}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate refused a publisher grant: %v", err)
	}
}
