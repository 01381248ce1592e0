package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/takoform/queuehost/auth"
)

// grantFlags collects -grant SPACE:ROLE[:FORM,...] flags.
type grantFlags []auth.Grant

func (g *grantFlags) String() string { return fmt.Sprint(*g) }

var formAliases = map[string]string{"queue": formQueue, "consumer": formConsumer, "worker": formWorker, "version": formVersion}

func (g *grantFlags) Set(s string) error {
	space, rest, ok := strings.Cut(s, ":")
	if !ok || space == "" {
		return fmt.Errorf("grant %q: SPACE:ROLE[:FORM,...] (SPACE may be *)", s)
	}
	role, forms, _ := strings.Cut(rest, ":")
	// A Form URL holds ':' itself; the first "https" starts the list.
	if i := strings.Index(rest, ":https:"); i >= 0 {
		role, forms = rest[:i], rest[i+1:]
	}
	gr := auth.Grant{Space: space, Role: role}
	if forms != "" {
		for _, f := range strings.Split(forms, ",") {
			if u, ok := formAliases[f]; ok {
				f = u
			}
			gr.Forms = append(gr.Forms, f)
		}
	}
	*g = append(*g, gr)
	return nil
}

// runTokens manages the principals of a data directory's host.json: the
// host reads that file when it starts, so a change takes effect at the
// host's next start (the Host API has no route that manages principals).
// create prints the new token once; only its SHA-256 is stored.
func runTokens(c *common, dataDir string, grants grantFlags, args []string, stdout, stderr io.Writer) error {
	if dataDir == "" {
		dataDir = "data"
	}
	path := filepath.Join(dataDir, auth.ConfigFile)
	cfg, err := auth.Load(path)
	if err != nil {
		return usageError{fmt.Errorf("tokens: %w", err)}
	}
	verb := "list"
	if len(args) > 0 {
		verb = args[0]
	}
	switch verb {
	case "list":
		if c.output == "json" {
			type row struct {
				Name   string       `json:"name"`
				ID     string       `json:"id"`
				Grants []auth.Grant `json:"grants"`
			}
			rows := []row{}
			for _, p := range cfg.Principals {
				rows = append(rows, row{p.Name, p.ID, p.Grants})
			}
			return json.NewEncoder(stdout).Encode(rows)
		}
		for _, p := range cfg.Principals {
			var gs []string
			for _, g := range p.Grants {
				s := g.Space + ":" + g.Role
				if len(g.Forms) > 0 {
					s += ":" + strings.Join(g.Forms, ",")
				}
				gs = append(gs, s)
			}
			fmt.Fprintf(stdout, "%s\t%s\n", p.Name, strings.Join(gs, " "))
		}
		return nil
	case "create":
		if len(args) != 2 {
			return usageError{errors.New("tokens create NAME -grant SPACE:ROLE[:FORM,...] ...")}
		}
		if len(grants) == 0 {
			return usageError{errors.New("tokens create: at least one -grant SPACE:ROLE (viewer or editor)")}
		}
		if _, ok := cfg.Principal(args[1]); ok {
			return usageError{fmt.Errorf("tokens create: principal %q already exists in %s (revoke it first)", args[1], path)}
		}
		tok, err := auth.NewToken()
		if err != nil {
			return err
		}
		// A new ID, never the one of an earlier principal of this name:
		// what that one created does not become this one's.
		id, err := auth.NewPrincipalID()
		if err != nil {
			return err
		}
		cfg.Principals = append(cfg.Principals, auth.Principal{ID: id, Name: args[1], TokenSHA256: auth.HashToken(tok), Grants: grants})
		if err := cfg.Validate(); err != nil {
			return usageError{fmt.Errorf("tokens create: %w", err)}
		}
		if err := saveConfig(path, cfg); err != nil {
			return err
		}
		if c.output == "json" {
			return json.NewEncoder(stdout).Encode(map[string]any{"name": args[1], "id": id, "token": tok, "grants": []auth.Grant(grants)})
		}
		fmt.Fprintf(stdout, "%s\n", tok)
		fmt.Fprintf(stderr, "tako: principal %s added to %s; the token above is shown only now; it works from the host's next start\n", args[1], path)
		return nil
	case "revoke":
		if len(args) != 2 {
			return usageError{errors.New("tokens revoke NAME")}
		}
		if args[1] == auth.AdminName {
			return usageError{errors.New("tokens revoke: the admin principal stays (delete admin-token to stop keeping its token on disk)")}
		}
		kept := cfg.Principals[:0]
		found := false
		for _, p := range cfg.Principals {
			if p.Name == args[1] {
				found = true
				continue
			}
			kept = append(kept, p)
		}
		if !found {
			return usageError{fmt.Errorf("tokens revoke: %s has no principal %q", path, args[1])}
		}
		cfg.Principals = kept
		if err := saveConfig(path, cfg); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s; the host refuses its token from its next start\n", args[1])
		return nil
	}
	return usageError{fmt.Errorf("tokens: list, create NAME -grant ..., or revoke NAME, not %q", verb)}
}

// saveConfig replaces host.json atomically (a temporary file renamed over
// it), keeping its 0600 mode.
func saveConfig(path string, cfg *auth.Config) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".host.json.tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(append(b, '\n')); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}
