// Command tako is the developer's tool for a Takoform queue host: it
// applies a project directory (a tako.yaml manifest naming queues, workers
// with their module files, and consumers) to a host, deletes it again,
// follows a worker's log and waits for Operations. Every Host API call
// goes through the client generated from the OpenAPI document (gen/api),
// so the tool is also a check that the document is enough to drive the
// host.
//
//	tako apply  [-dir .] [-dry-run]     create or update, in dependency order
//	tako delete [-dir .] [-dry-run]     remove what the manifest names
//	tako dev    [-dir .] [-data D]      apply, then re-apply on every save and print the workers' logs
//	                                    (starts a host in-process on D when none answers at -host)
//	tako tail   [-follow] WORKER        print (and follow) a worker's log
//	tako fetch  [-data BODY] WORKER [PATH]  call a worker's fetch handler
//	tako queues [list|stats Q|peek Q|pause Q|resume Q]  the queues with counts and delivery state;
//	                                    one's counts by state, its oldest messages; pause or resume it
//	tako queues purge Q | redrive DLQ [-to Q] [-rate N] | cancel ID  remove every message; move a
//	                                    dead-letter queue's messages back (progress shown); cancel a redrive
//	tako send   [-delay S] QUEUE BODY   one message, through a helper worker (see send.go)
//	tako tokens [list|create NAME -grant S:R|revoke NAME] [-data D]  principals (through the host; -data: D/host.json of a stopped host)
//	tako ops    list [-state S] [-resource NAME] [-limit N]  the space's recent Operations, newest first
//	tako ops    wait|get ID             an Operation, waiting for it to finish
//	tako health                         whether the host is live and ready
//
// Common flags: -host (or $TAKO_HOST, default http://127.0.0.1:8787),
// -token (or $TAKO_TOKEN) or -token-file (default ./data/admin-token, where
// `make run` writes it), -space (default the manifest's), -output text|json.
//
// Exit codes: 0 done; 1 the host refused a request or an Operation failed
// (the message names the resource and the problem code); 2 a usage or
// manifest error; 3 the host could not be reached. With -output json an
// error is also one JSON object on the last line of stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/sandbox"
)

func main() {
	sandbox.Main() // dev may start a host, whose worker sandboxes are this binary
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitUnreachable = 3
)

type usageError struct{ error }

const usage = `usage: tako <command> [flags]

commands:
  apply  [-dir DIR] [-dry-run]   make the host match DIR/tako.yaml (plan with -dry-run)
  delete [-dir DIR] [-dry-run]   delete what DIR/tako.yaml names, in dependency order
  dev    [-dir DIR] [-data D]    apply, re-apply on save, print the workers' logs; starts a
                                 host in this process (data in D, default DIR/.tako/data) if none answers
  tail   [-follow] WORKER        print a worker's log; -follow keeps printing
  fetch  [-data BODY] WORKER [PATH]  call the worker's fetch handler (POST with -data)
  queues [list | stats Q | peek Q | pause Q | resume Q]
                                 list queues (messages, delivery state); one's counts by state,
                                 its oldest messages, pause or resume it
  queues purge Q | redrive DLQ [-to Q] [-rate N] | cancel ID
                                 remove every message of Q; move DLQ's messages back to the queue
                                 each came from (or -to Q), at most -rate a second; cancel a redrive
  send   [-delay S] QUEUE BODY   send one message (through a helper worker tako-send)
  tokens [list | create NAME -grant SPACE:ROLE[:FORM,...] | revoke NAME|ID]
                                 principals, through the host (admin token; effective at once);
                                 with -data DIR, changes DIR/host.json itself (a host down, or one
                                 running on DIR, which reloads it within a second)
  ops    list [-state S] [-resource NAME] [-limit N]
                                 the space's recent Operations, newest first
  ops    wait|get ID             an Operation (wait: until it finishes)
  health                         GET /healthz and /readyz

flags of every command: -host URL -token T -token-file F -space S -output text|json
`

// common is the flags every command takes.
type common struct {
	host, token, tokenFile, space, output, dir string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.host, "host", envOr("TAKO_HOST", "http://127.0.0.1:8787"), "the host's base URL ($TAKO_HOST)")
	fs.StringVar(&c.token, "token", os.Getenv("TAKO_TOKEN"), "bearer token ($TAKO_TOKEN); else read from -token-file")
	fs.StringVar(&c.tokenFile, "token-file", envOr("TAKO_TOKEN_FILE", filepath.Join("data", "admin-token")), "file holding the token ($TAKO_TOKEN_FILE)")
	fs.StringVar(&c.space, "space", "", "the space (default: the manifest's, else \"default\")")
	fs.StringVar(&c.output, "output", "text", "text or json")
	fs.StringVar(&c.dir, "dir", ".", "the project directory (or its manifest file)")
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func (c *common) client(m *Manifest) (*client, error) {
	tok := c.token
	if tok == "" && c.tokenFile != "" {
		raw, err := os.ReadFile(c.tokenFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, usageError{fmt.Errorf("token file: %w", err)}
		}
		tok = strings.TrimSpace(string(raw))
	}
	space := c.space
	if space == "" && m != nil {
		space = m.Space
	}
	if space == "" {
		if mm, err := LoadManifest(c.dir); err == nil {
			space = mm.Space
		} else {
			space = "default"
		}
	}
	cl, err := newClient(c.host, tok, space)
	if err != nil {
		return nil, usageError{err}
	}
	return cl, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("tako "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	dry := false
	data := ""
	delay := -1
	var grants grantFlags
	var of opsFlags
	var qf queueFlags
	follow := false
	switch cmd {
	case "apply", "delete":
		fs.BoolVar(&dry, "dry-run", false, "print the plan, change nothing")
	case "tail":
		fs.BoolVar(&follow, "follow", false, "keep printing new entries until interrupted")
		fs.BoolVar(&follow, "f", false, "short for -follow")
	case "fetch":
		fs.StringVar(&data, "data", "", "request body; with it the request is a POST, without it a GET")
	case "dev":
		fs.StringVar(&data, "data", "", "data directory of the host dev starts when none answers (default DIR/.tako/data)")
	case "send":
		fs.IntVar(&delay, "delay", -1, "delaySeconds of the message (default: the queue's deliveryDelaySeconds)")
	case "tokens":
		fs.StringVar(&data, "data", "", "change DIR/host.json itself, for a host that is down (one running on DIR reloads it within a second); default: through the running host, effective at once")
		fs.Var(&grants, "grant", "SPACE:ROLE[:FORM,...] for create (repeatable; ROLE viewer or editor; FORM a URL or queue, consumer, worker, version)")
	case "ops":
		fs.StringVar(&of.state, "state", "", "list: only Operations in this state (pending, running, succeeded, failed, reconciling)")
		fs.StringVar(&of.resource, "resource", "", "list: only the Operations of this resource (its name or UID)")
		fs.IntVar(&of.limit, "limit", 20, "list: the most Operations to print, newest first")
	case "queues":
		qf.register(fs)
	case "health":
	default:
		fmt.Fprintf(stderr, "tako: unknown command %q\n%s", cmd, usage)
		return exitUsage
	}
	// Flags may come before or after the arguments (tako tail hello -f).
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if c.output != "text" && c.output != "json" {
		fmt.Fprintf(stderr, "tako: -output %q: text or json\n", c.output)
		return exitUsage
	}
	var err error
	switch cmd {
	case "apply", "delete":
		err = runApply(ctx, &c, cmd, dry, stdout)
	case "tail":
		err = runTail(ctx, &c, pos, follow, stdout)
	case "ops":
		err = runOps(ctx, &c, pos, of, stdout)
	case "fetch":
		err = runFetch(ctx, &c, pos, data, stdout)
	case "dev":
		err = runDev(ctx, &c, data, stdout)
	case "queues":
		err = runQueues(ctx, &c, pos, qf, stdout)
	case "send":
		err = runSend(ctx, &c, pos, delay, stdout)
	case "tokens":
		err = runTokens(ctx, &c, data, grants, pos, stdout, stderr)
	case "health":
		err = runHealth(ctx, &c, stdout)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "tako:", err)
	var ue usageError
	var ae *apiError
	if c.output == "json" {
		// With -output json the error is also one JSON object on stderr's
		// last line, for scripts: message, and for a Host API refusal the
		// resource step, status, problem code and detail.
		doc := map[string]any{"error": err.Error()}
		if errors.As(err, &ae) {
			doc = map[string]any{"error": err.Error(), "what": ae.What, "status": ae.Status, "code": ae.Code, "detail": ae.Detail}
		}
		_ = json.NewEncoder(stderr).Encode(doc)
	}
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ae):
		return exitFailed
	case ctx.Err() != nil:
		return exitFailed
	default:
		return exitUnreachable
	}
}

func runApply(ctx context.Context, c *common, cmd string, dry bool, stdout io.Writer) error {
	m, err := LoadManifest(c.dir)
	if err != nil {
		return usageError{err}
	}
	if c.space != "" {
		m.Space = c.space
	}
	cl, err := c.client(m)
	if err != nil {
		return err
	}
	var progress io.Writer
	if c.output == "text" {
		progress = stdout
	}
	f := Apply
	if cmd == "delete" {
		f = Delete
	}
	res, err := f(ctx, cl, m, dry, progress, isTerminal(stdout))
	if res != nil {
		if c.output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(res)
		} else if err == nil {
			verb := cmd
			if dry {
				verb += " (dry run, nothing changed)"
			}
			s := res.Summary
			fmt.Fprintf(stdout, "%s in space %s: %d created, %d updated, %d deleted, %d unchanged\n", verb, m.Space, s.Created, s.Updated, s.Deleted, s.Unchanged)
		}
	}
	return err
}

func runTail(ctx context.Context, c *common, args []string, follow bool, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{errors.New("tail: name one worker")}
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	w, err := cl.worker(ctx, args[0])
	if err != nil {
		return err
	}
	var after int64
	enc := json.NewEncoder(stdout)
	wait := 0
	if follow {
		// The host answers as soon as a line is logged (a long poll).
		wait = 25
	}
	for {
		items, err := cl.logs(ctx, w.Uid, after, wait)
		var ae *apiError
		switch {
		case err != nil && follow && ctx.Err() != nil:
			return nil
		case err != nil && follow && !errors.As(err, &ae):
			// The host is restarting (or the network hiccuped): keep the
			// cursor and ask again; seq goes on above it after a restart.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(500 * time.Millisecond):
			}
			continue
		case err != nil:
			return err
		}
		for _, e := range items {
			if c.output == "json" {
				_ = enc.Encode(e)
			} else {
				fmt.Fprintf(stdout, "%s %-5s %s\n", time.UnixMilli(e.TimeMillis).UTC().Format(time.RFC3339Nano), e.Level, e.Message)
			}
			after = e.Seq
		}
		if !follow {
			return nil
		}
	}
}

func runOps(ctx context.Context, c *common, args []string, of opsFlags, stdout io.Writer) error {
	if len(args) == 1 && args[0] == "list" {
		return runOpsList(ctx, c, of, stdout)
	}
	if len(args) != 2 || (args[0] != "wait" && args[0] != "get") {
		return usageError{errors.New("ops: list [-state S] [-resource NAME] [-limit N], wait ID or get ID")}
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	op, err := cl.operation(ctx, args[1], 0)
	if err != nil {
		return err
	}
	if args[0] == "wait" {
		op, err = cl.waitOp(ctx, "Operation "+args[1], op)
	}
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(op)
	} else {
		fmt.Fprintf(stdout, "%s %s %s resource %s: %s/%s\n", op.Id, op.Kind, cl.space, op.ResourceUid, op.State, op.Effect)
	}
	return err
}

func runHealth(ctx context.Context, c *common, stdout io.Writer) error {
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	h, err := cl.api.GetHealthWithResponse(ctx)
	if err != nil {
		return err
	}
	r, err := cl.api.GetReadinessWithResponse(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "healthz %d\nreadyz %d\n", h.StatusCode(), r.StatusCode())
	if r.JSON200 == nil {
		return problemError("readyz", r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	return nil
}

// runFetch calls a worker's fetch route. That route is outside the OpenAPI
// document (OpenAPI 3.0 cannot express its multi-segment path), so it is
// the one request made without the generated client.
func runFetch(ctx context.Context, c *common, args []string, data string, stdout io.Writer) error {
	if len(args) < 1 || len(args) > 2 {
		return usageError{errors.New("fetch: WORKER [PATH]")}
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	w, err := cl.worker(ctx, args[0])
	if err != nil {
		return err
	}
	path := ""
	if len(args) == 2 {
		path = "/" + strings.TrimLeft(args[1], "/")
	}
	status, body, err := cl.fetch(ctx, w.Uid, path, data)
	if err != nil {
		return err
	}
	if status >= 400 {
		var p api.Problem
		if json.Unmarshal(body, &p) == nil && p.Code != "" {
			return problemError("fetch "+args[0], status, &p, nil)
		}
		return problemError("fetch "+args[0], status, nil, body)
	}
	_, err = stdout.Write(body)
	return err
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
