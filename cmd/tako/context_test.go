package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/takoform/queuehost/host"
)

// bare runs tako with exactly these arguments (no -host or -token added).
func bare(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// useConfigDir gives the test a configuration directory of its own.
func useConfigDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", d)
	return filepath.Join(d, "tako", "config.json")
}

// login stores the host, its token (from a flag, the admin-token file or
// stdin) and a default space as a context, private to the user, after
// checking the token; commands then need none of it; context lists,
// switches, shows (never the token) and deletes contexts.
func TestLoginAndContexts(t *testing.T) {
	cfgPath := useConfigDir(t)
	h := startHost(t, filepath.Join(t.TempDir(), "data"))
	dir := copyExample(t)

	// A token the host refuses stores nothing.
	code, _, errs := bare(t, "login", h.URL(), "-token", "nope", "-name", "bad")
	if code != exitFailed || !strings.Contains(errs, "the host does not accept the token from flag -token") {
		t.Fatalf("login with a bad token: %d %s", code, errs)
	}
	if _, err := os.Stat(cfgPath); !os.IsNotExist(err) {
		t.Fatalf("a refused login wrote the config: %v", err)
	}

	code, out, errs := bare(t, "login", h.URL(), "-token-file", h.AdminTokenPath(), "-space", "demo", "-name", "local")
	if code != 0 || !strings.Contains(out, "logged in to "+h.URL()+" as context local (space demo, token from file "+h.AdminTokenPath()+")") {
		t.Fatalf("login: %d %s %s", code, out, errs)
	}
	st, err := os.Stat(cfgPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v %v", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Dir(cfgPath)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("config directory: %v %v", st.Mode(), err)
	}
	var cfg Config
	raw, _ := os.ReadFile(cfgPath)
	if json.Unmarshal(raw, &cfg) != nil || cfg.Current != "local" || cfg.Contexts["local"].Token != h.AdminToken() || cfg.Contexts["local"].Space != "demo" {
		t.Fatalf("config: %s", raw)
	}

	// Nothing but the context: host, token and space.
	if code, _, errs := bare(t, "apply", "-dir", dir); code != 0 {
		t.Fatalf("apply through the context: %d %s", code, errs)
	}
	if code, out, errs := bare(t, "queues"); code != 0 || !strings.Contains(out, "tasks-dead") {
		t.Fatalf("queues through the context: %d %s %s", code, out, errs)
	}

	// A token on stdin, as a second context.
	stdin = strings.NewReader(h.AdminToken() + "\n")
	t.Cleanup(func() { stdin = os.Stdin })
	if code, out, errs := bare(t, "login", h.URL(), "-token", "-", "-name", "piped"); code != 0 || !strings.Contains(out, "as context piped (space from the manifest, else default, token from stdin)") {
		t.Fatalf("login from stdin: %d %s %s", code, out, errs)
	}
	code, out, _ = bare(t, "context")
	if code != 0 || !strings.HasPrefix(out, "CURRENT  NAME") || !strings.Contains(out, "*        piped") || !strings.Contains(out, "         local  "+h.URL()+"  demo") {
		t.Fatalf("context list:\n%s", out)
	}
	if code, out, errs := bare(t, "context", "use", "local"); code != 0 || !strings.Contains(out, "current context: local") {
		t.Fatalf("context use: %d %s %s", code, out, errs)
	}
	code, out, _ = bare(t, "context", "show")
	if code != 0 || !strings.Contains(out, "context local\nhost   "+h.URL()+"\nspace  demo\ntoken  (set, ") || strings.Contains(out, h.AdminToken()) {
		t.Fatalf("context show:\n%s", out)
	}
	if code, _, errs := bare(t, "context", "use", "locl"); code != exitUsage || !strings.Contains(errs, `there is no context "locl"`) || !strings.Contains(errs, `did you mean "local"?`) {
		t.Fatalf("context use of a typo: %d %s", code, errs)
	}
	if code, _, errs := bare(t, "queues", "-context", "nope"); code != exitUsage || !strings.Contains(errs, "the contexts are local, piped") {
		t.Fatalf("-context of an unknown one: %d %s", code, errs)
	}
	if code, _, errs := bare(t, "context", "lst"); code != exitUsage || !strings.Contains(errs, `did you mean "list"?`) {
		t.Fatalf("context lst: %d %s", code, errs)
	}
	// -context picks one for one command: piped has no space, so default.
	if code, out, _ := bare(t, "queues", "-context", "piped"); code != 0 || out != "no queues found in space default\n" {
		t.Fatalf("queues -context piped: %d %q", code, out)
	}
	if code, out, errs := bare(t, "context", "delete", "piped"); code != 0 || !strings.Contains(out, "deleted context piped") {
		t.Fatalf("context delete: %d %s %s", code, out, errs)
	}
	if _, out, _ := bare(t, "context", "list"); strings.Contains(out, "piped") {
		t.Fatalf("after delete:\n%s", out)
	}
}

// Flags win over $TAKO_HOST/$TAKO_TOKEN, which win over the context; a
// context's token never goes to another host; every refused token names
// where it came from and what to do, in one sentence.
func TestTokenPrecedenceAndAuthErrors(t *testing.T) {
	useConfigDir(t)
	h := startHost(t, filepath.Join(t.TempDir(), "data"))
	other := startHost(t, host.MemoryDataDir)
	if code, _, errs := bare(t, "login", h.URL(), "-token", h.AdminToken(), "-space", "demo", "-name", "local"); code != 0 {
		t.Fatalf("login: %s", errs)
	}
	if code, _, errs := bare(t, "queues"); code != 0 {
		t.Fatalf("queues: %s", errs)
	}
	t.Setenv("TAKO_TOKEN", "from-env")
	code, _, errs := bare(t, "queues")
	if code != exitFailed || !strings.Contains(errs, "unauthenticated, HTTP 401); the host "+h.URL()+" does not accept the token from $TAKO_TOKEN; run `tako login` with a valid token, or pass -token\n") {
		t.Fatalf("a bad $TAKO_TOKEN: %d %s", code, errs)
	}
	if code, _, errs := bare(t, "queues", "-token", h.AdminToken()); code != 0 {
		t.Fatalf("-token over $TAKO_TOKEN: %d %s", code, errs)
	}
	t.Setenv("TAKO_TOKEN", "")
	// Another host by flag: the context's token is not sent to it.
	code, _, errs = bare(t, "queues", "-host", other.URL())
	if code != exitFailed || !strings.Contains(errs, "no token was given for "+other.URL()) || !strings.Contains(errs, "run `tako login`") {
		t.Fatalf("the context's token to another host: %d %s", code, errs)
	}
	t.Setenv("TAKO_HOST", other.URL())
	if code, _, errs := bare(t, "queues", "-token", other.AdminToken(), "-space", "demo"); code != 0 {
		t.Fatalf("$TAKO_HOST with -token: %d %s", code, errs)
	}
	t.Setenv("TAKO_HOST", "")
	// A context whose token was revoked says so, naming the context.
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts["stale"] = &Context{Host: h.URL(), Token: "revoked", Space: "demo"}
	if err := cfg.save(); err != nil {
		t.Fatal(err)
	}
	code, _, errs = bare(t, "queues", "-context", "stale")
	if code != exitFailed || !strings.Contains(errs, "does not accept the token from context stale; run `tako login`") {
		t.Fatalf("a stale context: %d %s", code, errs)
	}
	tf := filepath.Join(t.TempDir(), "tok")
	write(t, tf, "also-bad\n")
	code, _, errs = bare(t, "queues", "-token-file", tf)
	if code != exitFailed || !strings.Contains(errs, "the token from flag -token-file "+tf) {
		t.Fatalf("a bad -token-file: %d %s", code, errs)
	}
	if code, _, errs := bare(t, "queues", "-token-file", tf+".missing"); code != exitUsage || !strings.Contains(errs, "cannot read the token from "+tf+".missing (flag -token-file)") {
		t.Fatalf("a missing -token-file: %d %s", code, errs)
	}
}

// dev registers the host it starts as the context dev, current when none
// is, so that other terminals reach it with nothing to configure.
func TestDevRegistersItsContext(t *testing.T) {
	useConfigDir(t)
	path, err := registerDevContext("http://127.0.0.1:9/", "tok", "demo")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig()
	if err != nil || cfg.path != path || cfg.Current != "dev" || *cfg.Contexts["dev"] != (Context{Host: "http://127.0.0.1:9", Token: "tok", Space: "demo"}) {
		t.Fatalf("%+v %v", cfg, err)
	}
	cfg.Contexts["prod"] = &Context{Host: "https://example.com"}
	cfg.Current = "prod"
	if err := cfg.save(); err != nil {
		t.Fatal(err)
	}
	if _, err := registerDevContext("http://127.0.0.1:10", "tok2", "demo"); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := loadConfig(); cfg.Current != "prod" || cfg.Contexts["dev"].Token != "tok2" {
		t.Fatalf("dev replaced the current context: %+v", cfg)
	}
}
