package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"golang.org/x/sys/unix"
)

// Contexts, as kubectl and wrangler users know them: a named host, its
// token and a default space, kept in the user's configuration directory
// (os.UserConfigDir()/tako/config.json; the file 0600, its directory 0700,
// since it holds tokens). `tako login` writes one and makes it current;
// `tako context` lists, switches, shows and deletes them; `tako dev`
// registers the host it starts as the context dev.
//
// Where each setting comes from, first match wins:
//
//	host:  -host, $TAKO_HOST, the context, http://127.0.0.1:8787
//	token: -token or -token-file, $TAKO_TOKEN or $TAKO_TOKEN_FILE, the
//	       context (only for its own host), ./data/admin-token
//	space: -space, the manifest's, the context's, "default"
//
// The context is -context NAME, else $TAKO_CONTEXT, else the current one.

// defaultHost is where `make run` listens.
const defaultHost = "http://127.0.0.1:8787"

// legacyTokenFile is where `make run` writes the admin token, relative to
// the current directory: the last resort, from before contexts.
var legacyTokenFile = filepath.Join("data", "admin-token")

// Context is one named host, token and default space.
type Context struct {
	Host  string `json:"host"`
	Token string `json:"token,omitempty"`
	Space string `json:"space,omitempty"`
}

// Config is the user's config.json.
type Config struct {
	Current  string              `json:"current,omitempty"`
	Contexts map[string]*Context `json:"contexts"`
	path     string
}

// configPath is os.UserConfigDir()/tako/config.json.
func configPath() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("the user's configuration directory: %w", err)
	}
	return filepath.Join(d, "tako", "config.json"), nil
}

// loadConfig reads the config; a missing file is an empty config.
func loadConfig() (*Config, error) {
	p, err := configPath()
	if err != nil {
		return nil, err
	}
	cfg := &Config{Contexts: map[string]*Context{}, path: p}
	raw, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return nil, fmt.Errorf("%s is not a tako config (%v); fix or delete it", p, err)
	}
	if cfg.Contexts == nil {
		cfg.Contexts = map[string]*Context{}
	}
	return cfg, nil
}

// save writes the config through a temporary file, 0600 in a 0700
// directory.
func (c *Config) save() error {
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.path)
}

func (c *Config) names() []string {
	var ns []string
	for n := range c.Contexts {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// noSuchContext says which contexts there are.
func (c *Config) noSuchContext(name string) error {
	ns := c.names()
	if len(ns) == 0 {
		return usageError{fmt.Errorf("there is no context %q (there are none yet); create one with `tako login`", name)}
	}
	msg := fmt.Sprintf("there is no context %q in %s", name, c.path)
	if s := suggest(name, ns); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += "; the contexts are " + strings.Join(ns, ", ")
	}
	return usageError{errors.New(msg)}
}

// resolved is where a command's host, token and space came from.
type resolved struct {
	host, hostSource   string
	token, tokenSource string
	context            string // the context used, "" for none
	contextSpace       string
}

// resolve applies the precedence above. set holds the flags given on the
// command line.
func (c *common) resolve(set map[string]bool) (*resolved, error) {
	r := &resolved{}
	name, nameSource := c.context, "-context"
	if name == "" {
		name, nameSource = os.Getenv("TAKO_CONTEXT"), "$TAKO_CONTEXT"
	}
	var ctx *Context
	cfg, err := loadConfig()
	if err != nil {
		if name != "" {
			return nil, usageError{err}
		}
		cfg = &Config{Contexts: map[string]*Context{}}
	}
	if name == "" {
		name, nameSource = cfg.Current, "current"
	}
	if name != "" {
		ctx = cfg.Contexts[name]
		if ctx == nil {
			if nameSource == "current" {
				return nil, usageError{fmt.Errorf("the current context %q is not in %s; pick one with `tako context use NAME` or create it with `tako login`", name, cfg.path)}
			}
			return nil, cfg.noSuchContext(name)
		}
		r.context, r.contextSpace = name, ctx.Space
	}
	switch {
	case set["host"]:
		r.host, r.hostSource = c.host, "flag -host"
	case os.Getenv("TAKO_HOST") != "":
		r.host, r.hostSource = os.Getenv("TAKO_HOST"), "$TAKO_HOST"
	case ctx != nil:
		r.host, r.hostSource = ctx.Host, "context "+name
	default:
		r.host, r.hostSource = defaultHost, "the default"
	}
	readFile := func(path, source string) error {
		raw, err := os.ReadFile(path)
		if err != nil {
			return usageError{fmt.Errorf("cannot read the token from %s (%s): %v", path, source, errors.Unwrap(err))}
		}
		r.token, r.tokenSource = strings.TrimSpace(string(raw)), source+" "+path
		return nil
	}
	switch {
	case set["token"]:
		r.token, r.tokenSource = c.token, "flag -token"
	case set["token-file"]:
		return r, readFile(c.tokenFile, "flag -token-file")
	case os.Getenv("TAKO_TOKEN") != "":
		r.token, r.tokenSource = os.Getenv("TAKO_TOKEN"), "$TAKO_TOKEN"
	case os.Getenv("TAKO_TOKEN_FILE") != "":
		return r, readFile(os.Getenv("TAKO_TOKEN_FILE"), "$TAKO_TOKEN_FILE")
	case ctx != nil && ctx.Token != "" && sameHost(ctx.Host, r.host):
		// A context's token goes only to the context's own host.
		r.token, r.tokenSource = ctx.Token, "context "+name
	default:
		if raw, err := os.ReadFile(legacyTokenFile); err == nil {
			r.token, r.tokenSource = strings.TrimSpace(string(raw)), "file "+legacyTokenFile
		}
	}
	return r, nil
}

func sameHost(a, b string) bool {
	return strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

// authHint is the one sentence added to a 401 or 403: which token was
// used and what to do.
func (r *resolved) authHint(status int) string {
	if r.tokenSource == "" {
		return fmt.Sprintf("no token was given for %s (no -token, $TAKO_TOKEN, context or %s); run `tako login` with the host's token, or pass -token", r.host, legacyTokenFile)
	}
	if status == 403 {
		return fmt.Sprintf("the token from %s is valid but not allowed this; use a token with a grant for it (`tako login` or -token)", r.tokenSource)
	}
	return fmt.Sprintf("the host %s does not accept the token from %s; run `tako login` with a valid token, or pass -token", r.host, r.tokenSource)
}

// runLogin stores a context and makes it current. The token comes from
// -token, from -token-file (the host's admin-token, for instance) or from
// stdin ("-token -" or a pipe); the host is checked before anything is
// written.
func runLogin(ctx context.Context, c *common, set map[string]bool, args []string, name string, stdin io.Reader, stdout io.Writer) error {
	host := c.host
	if len(args) == 1 {
		host = args[0]
	} else if len(args) > 1 {
		return usageError{errors.New("login [HOST-URL] [-name NAME] [-token T | -token-file F | -token - ] [-space S]")}
	}
	if host == "" {
		host = envOr("TAKO_HOST", defaultHost)
	}
	if u, err := url.Parse(host); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("login: %q is not a host URL (http://HOST:PORT)", host)}
	}
	host = strings.TrimRight(host, "/")
	var tok, source string
	switch {
	case set["token"] && c.token != "-":
		tok, source = c.token, "flag -token"
	case set["token-file"]:
		raw, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return usageError{fmt.Errorf("login: cannot read the token from %s: %v", c.tokenFile, errors.Unwrap(err))}
		}
		tok, source = strings.TrimSpace(string(raw)), "file "+c.tokenFile
	case set["token"] || !stdinTerminal():
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return usageError{fmt.Errorf("login: reading the token from stdin: %w", err)}
		}
		tok, source = strings.TrimSpace(line), "stdin"
	default:
		return usageError{errors.New("login: give the token with -token T, -token-file PATH (the host's data/admin-token) or on stdin")}
	}
	if tok == "" {
		return usageError{fmt.Errorf("login: the token from %s is empty", source)}
	}
	if name == "" {
		name = "default"
	}
	if !nameRE.MatchString(name) {
		return usageError{fmt.Errorf("login: context name %q: lowercase letters, digits and '-', at most 63", name)}
	}
	space := c.space
	if space != "" && !nameRE.MatchString(space) {
		return usageError{fmt.Errorf("login: space %q: lowercase letters, digits and '-', at most 63", space)}
	}
	// Check the token with a request any principal may make in the space
	// (or, without a space, its own list of principals refused only as
	// forbidden, not unauthenticated).
	cl, err := newClient(host, tok, orDefault(space, "default"))
	if err != nil {
		return usageError{err}
	}
	if _, err := cl.list(ctx, formQueue); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == 401 {
			return &apiError{What: "login to " + host, Status: 401, Code: ae.Code, Hint: fmt.Sprintf("the host does not accept the token from %s; check it (an admin token is in the host's data/admin-token)", source)}
		}
		if !errors.As(err, &ae) {
			return unreachableError(host, err)
		}
		if ae.Status != 403 && ae.Status != 404 {
			return err
		}
	}
	cfg, err := loadConfig()
	if err != nil {
		return usageError{err}
	}
	cfg.Contexts[name] = &Context{Host: host, Token: tok, Space: space}
	cfg.Current = name
	if err := cfg.save(); err != nil {
		return fmt.Errorf("login: writing %s: %w", cfg.path, err)
	}
	if c.output == "json" {
		return json.NewEncoder(stdout).Encode(map[string]any{"context": name, "host": host, "space": space, "config": cfg.path})
	}
	fmt.Fprintf(stdout, "logged in to %s as context %s (space %s, token from %s); stored in %s\n", host, name, orDefault(space, "from the manifest, else default"), source, cfg.path)
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// runContext is `tako context [list | use NAME | show [NAME] | delete NAME]`.
func runContext(c *common, args []string, stdout io.Writer) error {
	verb := "list"
	if len(args) > 0 {
		verb = args[0]
	}
	cfg, err := loadConfig()
	if err != nil {
		return usageError{err}
	}
	want := func(n int, form string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("context %s", form)}
		}
		return nil
	}
	switch verb {
	case "list":
		if err := want(1, "list takes no argument"); len(args) > 1 {
			return err
		}
		if c.output == "json" {
			rows := []map[string]any{}
			for _, n := range cfg.names() {
				x := cfg.Contexts[n]
				rows = append(rows, map[string]any{"name": n, "host": x.Host, "space": x.Space, "current": n == cfg.Current})
			}
			return json.NewEncoder(stdout).Encode(rows)
		}
		if len(cfg.Contexts) == 0 {
			fmt.Fprintf(stdout, "no contexts found (create one with `tako login`; they are kept in %s)\n", cfg.path)
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CURRENT\tNAME\tHOST\tSPACE")
		for _, n := range cfg.names() {
			cur := ""
			if n == cfg.Current {
				cur = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cur, n, cfg.Contexts[n].Host, orDefault(cfg.Contexts[n].Space, "-"))
		}
		return tw.Flush()
	case "use":
		if err := want(2, "use NAME"); err != nil {
			return err
		}
		if cfg.Contexts[args[1]] == nil {
			return cfg.noSuchContext(args[1])
		}
		cfg.Current = args[1]
		if err := cfg.save(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "current context: %s (%s)\n", args[1], cfg.Contexts[args[1]].Host)
		return nil
	case "show":
		if len(args) > 2 {
			return usageError{errors.New("context show [NAME]")}
		}
		name := cfg.Current
		if c.context != "" {
			name = c.context
		}
		if len(args) == 2 {
			name = args[1]
		}
		if name == "" {
			return usageError{errors.New("there is no current context; create one with `tako login` or pick one with `tako context use NAME`")}
		}
		x := cfg.Contexts[name]
		if x == nil {
			return cfg.noSuchContext(name)
		}
		tok := "(none)"
		if x.Token != "" {
			tok = "(set, " + fmt.Sprint(len(x.Token)) + " characters; never printed)"
		}
		if c.output == "json" {
			return json.NewEncoder(stdout).Encode(map[string]any{"name": name, "host": x.Host, "space": x.Space, "current": name == cfg.Current, "token": x.Token != "", "config": cfg.path})
		}
		fmt.Fprintf(stdout, "context %s\nhost   %s\nspace  %s\ntoken  %s\nconfig %s\n", name, x.Host, orDefault(x.Space, "(the manifest's, else default)"), tok, cfg.path)
		return nil
	case "delete":
		if err := want(2, "delete NAME"); err != nil {
			return err
		}
		if cfg.Contexts[args[1]] == nil {
			return cfg.noSuchContext(args[1])
		}
		delete(cfg.Contexts, args[1])
		if cfg.Current == args[1] {
			cfg.Current = ""
		}
		if err := cfg.save(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted context %s\n", args[1])
		return nil
	}
	return unknownSub("context", verb, []string{"list", "use", "show", "delete"})
}

// registerDevContext records the host `tako dev` started as the context
// dev, current when no other is.
func registerDevContext(host, token, space string) (string, error) {
	cfg, err := loadConfig()
	if err != nil {
		return "", err
	}
	cfg.Contexts["dev"] = &Context{Host: strings.TrimRight(host, "/"), Token: token, Space: space}
	if cfg.Current == "" {
		cfg.Current = "dev"
	}
	return cfg.path, cfg.save()
}

// isTerminalReader reports whether r is a terminal (a character device
// alone is not: /dev/null is one).
func isTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
