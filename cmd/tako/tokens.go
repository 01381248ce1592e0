package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
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
	if role == auth.RolePublisher || role == auth.RoleConsumer {
		// A publisher or consumer grant lists queues (names or UIDs), not
		// Forms.
		if forms != "" {
			gr.Queues = strings.Split(forms, ",")
		}
		*g = append(*g, gr)
		return nil
	}
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

// runTokens manages principals. By default it goes through the host's
// principal routes (/v2/principals, admin only): a change takes effect at
// once and the host writes it to its host.json, so it lasts. With -data DIR
// it changes DIR/host.json itself, as the host does (auth.Registry: under
// the file's lock, starting from the file as it is), for a host that is
// not running or cannot be reached; a host running on that directory
// reloads the file within a second. create prints the new token once;
// only its SHA-256 is stored.
func runTokens(ctx context.Context, c *common, dataDir string, grants grantFlags, args []string, stdout, stderr io.Writer) error {
	if dataDir == "" {
		return runTokensAPI(ctx, c, grants, args, stdout, stderr)
	}
	path := filepath.Join(dataDir, auth.ConfigFile)
	cfg, err := auth.Load(path)
	if err != nil {
		return usageError{fmt.Errorf("tokens: %w", err)}
	}
	reg := auth.NewRegistry(cfg, path)
	verb := "list"
	if len(args) > 0 {
		verb = args[0]
	}
	switch verb {
	case "list":
		return printPrincipals(c, cfg.Principals, stdout)
	case "create":
		if len(args) != 2 {
			return usageError{errors.New("tokens create NAME -grant SPACE:ROLE[:FORM,...] ...")}
		}
		if len(grants) == 0 {
			return usageError{errors.New("tokens create: at least one -grant SPACE:ROLE (viewer, editor, or publisher with SPACE:publisher:QUEUE,...)")}
		}
		// A new ID, never the one of an earlier principal of this name:
		// what that one created does not become this one's.
		p, tok, err := reg.Create(args[1], grants)
		if err != nil {
			return usageError{fmt.Errorf("tokens create %s in %s: %w", args[1], path, err)}
		}
		if c.output == "json" {
			return json.NewEncoder(stdout).Encode(map[string]any{"name": p.Name, "id": p.ID, "token": tok, "grants": p.Grants})
		}
		fmt.Fprintf(stdout, "%s\n", tok)
		fmt.Fprintf(stderr, "tako: principal %s (%s) added to %s; the token above is shown only now; a host on this data directory takes it within a second, or at its start\n", p.Name, p.ID, path)
		return nil
	case "revoke":
		if len(args) != 2 {
			return usageError{errors.New("tokens revoke NAME|ID")}
		}
		p, err := reg.Revoke(args[1])
		if err != nil {
			return usageError{fmt.Errorf("tokens revoke %s in %s: %w", args[1], path, err)}
		}
		fmt.Fprintf(stdout, "revoked %s (%s); a host on this data directory refuses its token within a second, or from its start\n", p.Name, p.ID)
		return nil
	}
	return unknownSub("tokens", verb, findCommand("tokens").subs)
}

// printPrincipals prints principals as NAME ID GRANTS lines, or JSON.
func printPrincipals(c *common, ps []auth.Principal, stdout io.Writer) error {
	if c.output == "json" {
		type row struct {
			Name   string       `json:"name"`
			ID     string       `json:"id"`
			Grants []auth.Grant `json:"grants"`
		}
		rows := []row{}
		for _, p := range ps {
			rows = append(rows, row{p.Name, p.ID, p.Grants})
		}
		return json.NewEncoder(stdout).Encode(rows)
	}
	if len(ps) == 0 {
		fmt.Fprintln(stdout, "no tokens found")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tGRANTS")
	for _, p := range ps {
		var gs []string
		for _, g := range p.Grants {
			s := g.Space + ":" + g.Role
			if len(g.Forms) > 0 {
				s += ":" + strings.Join(g.Forms, ",")
			}
			if len(g.Queues) > 0 {
				s += ":" + strings.Join(g.Queues, ",")
			}
			gs = append(gs, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, p.ID, strings.Join(gs, " "))
	}
	return tw.Flush()
}

// runTokensAPI is runTokens through the host's principal routes.
func runTokensAPI(ctx context.Context, c *common, grants grantFlags, args []string, stdout, stderr io.Writer) error {
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	verb := "list"
	if len(args) > 0 {
		verb = args[0]
	}
	switch verb {
	case "list":
		if len(args) > 1 {
			return usageError{errors.New("tokens list takes no argument")}
		}
		r, err := cl.api.ListPrincipalsWithResponse(ctx)
		if err != nil {
			return err
		}
		if r.JSON200 == nil {
			return problemError("list principals", r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		var ps []auth.Principal
		for _, p := range r.JSON200.Items {
			ps = append(ps, fromAPIPrincipal(p))
		}
		return printPrincipals(c, ps, stdout)
	case "create":
		if len(args) != 2 {
			return usageError{errors.New("tokens create NAME -grant SPACE:ROLE[:FORM,...] ...")}
		}
		if len(grants) == 0 {
			return usageError{errors.New("tokens create: at least one -grant SPACE:ROLE (viewer, editor, or publisher with SPACE:publisher:QUEUE,...)")}
		}
		body := api.PrincipalCreateRequest{Name: args[1], Grants: []api.Grant{}}
		for _, g := range grants {
			ag := api.Grant{Space: g.Space, Role: api.GrantRole(g.Role)}
			if len(g.Forms) > 0 {
				forms := append([]string(nil), g.Forms...)
				ag.Forms = &forms
			}
			if len(g.Queues) > 0 {
				queues, err := queueUIDs(ctx, c, g)
				if err != nil {
					return err
				}
				ag.Queues = &queues
			}
			body.Grants = append(body.Grants, ag)
		}
		r, err := cl.api.CreatePrincipalWithResponse(ctx, body)
		if err != nil {
			return err
		}
		if r.JSON201 == nil {
			return problemError("create principal "+args[1], r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		p := fromAPIPrincipal(r.JSON201.Principal)
		if c.output == "json" {
			return json.NewEncoder(stdout).Encode(map[string]any{"name": p.Name, "id": p.ID, "token": r.JSON201.Token, "grants": p.Grants})
		}
		fmt.Fprintf(stdout, "%s\n", r.JSON201.Token)
		fmt.Fprintf(stderr, "tako: principal %s (%s) created; it works now; the token above is shown only this once\n", p.Name, p.ID)
		return nil
	case "revoke":
		if len(args) != 2 {
			return usageError{errors.New("tokens revoke NAME|ID")}
		}
		r, err := cl.api.RevokePrincipalWithResponse(ctx, args[1])
		if err != nil {
			return err
		}
		if r.JSON200 == nil {
			return problemError("revoke principal "+args[1], r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		if c.output == "json" {
			return json.NewEncoder(stdout).Encode(map[string]any{"revoked": r.JSON200.Name, "id": r.JSON200.Id})
		}
		fmt.Fprintf(stdout, "revoked %s (%s); the host refuses its token from now on\n", r.JSON200.Name, r.JSON200.Id)
		return nil
	}
	return unknownSub("tokens", verb, findCommand("tokens").subs)
}

func fromAPIPrincipal(p api.Principal) auth.Principal {
	out := auth.Principal{ID: p.Id, Name: p.Name}
	for _, g := range p.Grants {
		gr := auth.Grant{Space: g.Space, Role: string(g.Role)}
		if g.Forms != nil {
			gr.Forms = *g.Forms
		}
		if g.Queues != nil {
			gr.Queues = *g.Queues
		}
		out.Grants = append(out.Grants, gr)
	}
	return out
}

// queueUIDs is what a publisher grant's queues name: the UID of the queue
// of that name in the grant's space, or the item itself, taken as a UID,
// when the space has no queue of that name (a grant holds UIDs, so that a
// queue deleted and created again under its name is not covered).
func queueUIDs(ctx context.Context, c *common, g auth.Grant) ([]string, error) {
	if g.Space == auth.AllSpaces {
		return g.Queues, nil
	}
	cl, err := c.client(nil)
	if err != nil {
		return nil, err
	}
	cl.space = g.Space
	qs, err := cl.list(ctx, formQueue)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(g.Queues))
	for i, q := range g.Queues {
		out[i] = q
		if r, ok := qs[q]; ok {
			out[i] = r.Uid
		}
	}
	return out, nil
}
