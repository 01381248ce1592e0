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
//	tako send   [-delay S] [-key K] QUEUE BODY|-  publish one message (the Host API's publish route; creates nothing)
//	tako tokens [list|create NAME -grant S:R|revoke NAME] [-data D]  principals (through the host; -data: D/host.json of a stopped host)
//	tako ops    list [-state S] [-resource NAME] [-limit N]  the space's recent Operations, newest first
//	tako ops    wait|get ID             an Operation, waiting for it to finish
//	tako health                         whether the host is live and ready
//
//	tako login [HOST-URL] [-name N] [-token T|-token-file F|-token -] [-space S]  store a context
//	tako context [list|use N|show [N]|delete N]  the stored contexts (config.go)
//	tako version | completion bash|zsh|fish | help [COMMAND]
//
// Common flags: -context (or $TAKO_CONTEXT, default the current context),
// -host (or $TAKO_HOST, else the context's, default http://127.0.0.1:8787),
// -token or -token-file (or $TAKO_TOKEN, $TAKO_TOKEN_FILE, else the
// context's, else ./data/admin-token), -space (default the manifest's,
// else the context's), -output text|json. config.go says how they combine.
//
// Exit codes: 0 done; 1 the host refused a request or an Operation failed
// (the message names the resource and the problem code); 2 a usage or
// manifest error; 3 the host could not be reached. With -output json an
// error is also one JSON object on the last line of stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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

// common is the flags every Host API command takes, and what they
// resolved to.
type common struct {
	context, host, token, tokenFile, space, output, dir string
	// set holds the flags given on the command line.
	set map[string]bool
	// res is where the host and the token came from, once resolved.
	res *resolved
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.context, "context", "", "the context to use ($TAKO_CONTEXT; default: the current one, see tako context)")
	fs.StringVar(&c.host, "host", "", "the host's base URL (default: $TAKO_HOST, else the context's, else "+defaultHost+")")
	fs.StringVar(&c.token, "token", "", "bearer token (default: $TAKO_TOKEN, else the context's)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the token ($TAKO_TOKEN_FILE), such as a host's data/admin-token")
	fs.StringVar(&c.space, "space", "", "the space (default: the manifest's, else the context's, else \"default\")")
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
	if c.res == nil {
		r, err := c.resolve(c.set)
		if err != nil {
			return nil, err
		}
		c.res = r
	}
	space := c.space
	if space == "" && m != nil {
		space = m.Space
	}
	if space == "" {
		if mm, err := LoadManifest(c.dir); err == nil && mm.declaredSpace {
			space = mm.Space
		}
	}
	if space == "" {
		space = orDefault(c.res.contextSpace, "default")
	}
	cl, err := newClient(c.res.host, c.res.token, space)
	if err != nil {
		return nil, usageError{err}
	}
	return cl, nil
}

// cmdOpts are the flags of all commands; each command registers its own.
type cmdOpts struct {
	c      common
	dry    bool
	data   string
	delay  int
	key    string
	grants grantFlags
	of     opsFlags
	qf     queueFlags
	follow bool
	yes    bool
	name   string
}

func (o *cmdOpts) register(fs *flag.FlagSet, cmd *command) {
	if cmd.common {
		o.c.register(fs)
	}
	o.delay = -1
	switch cmd.name {
	case "apply":
		fs.BoolVar(&o.dry, "dry-run", false, "print the plan, change nothing")
	case "delete":
		fs.BoolVar(&o.dry, "dry-run", false, "print the plan, change nothing")
		fs.BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
		fs.BoolVar(&o.yes, "y", false, "short for -yes")
	case "tail":
		fs.BoolVar(&o.follow, "follow", false, "keep printing new entries until interrupted")
		fs.BoolVar(&o.follow, "f", false, "short for -follow")
	case "fetch":
		fs.StringVar(&o.data, "data", "", "request body; with it the request is a POST, without it a GET")
	case "dev":
		fs.StringVar(&o.data, "data", "", "data directory of the host dev starts when none answers (default DIR/.tako/data)")
	case "send":
		fs.IntVar(&o.delay, "delay", -1, "delaySeconds of the message (default: the queue's deliveryDelaySeconds)")
		fs.StringVar(&o.key, "key", "", "Idempotency-Key: a retry with the same key and body sends nothing again and prints the same ID (for 24 hours)")
	case "tokens":
		fs.StringVar(&o.data, "data", "", "change DIR/host.json itself, for a host that is down (one running on DIR reloads it within a second); default: through the running host, effective at once")
		fs.Var(&o.grants, "grant", "SPACE:ROLE[:FORM,...] for create (repeatable; ROLE viewer or editor; FORM a URL or queue, consumer, worker, version); SPACE:publisher[:QUEUE,...] may only publish to those queues (names or UIDs; every queue of SPACE when none)")
	case "ops":
		fs.StringVar(&o.of.state, "state", "", "list: only Operations in this state (pending, running, succeeded, failed, reconciling)")
		fs.StringVar(&o.of.resource, "resource", "", "list: only the Operations of this resource (its name or UID)")
		fs.IntVar(&o.of.limit, "limit", 20, "list: the most Operations to print, newest first")
	case "queues":
		o.qf.register(fs)
		fs.BoolVar(&o.yes, "yes", false, "purge: do not ask for confirmation (required when stdin is not a terminal)")
		fs.BoolVar(&o.yes, "y", false, "short for -yes")
	case "login":
		fs.StringVar(&o.name, "name", "default", "the context's name")
	case "context":
		fs.StringVar(&o.c.output, "output", "text", "text or json")
		fs.StringVar(&o.c.context, "context", "", "show: the context to show (default: the current one)")
	}
}

// stdin is where login reads a token and purge and delete their
// confirmation; tests replace it.
var stdin io.Reader = os.Stdin

// stdinTerminal reports whether stdin is a terminal (someone to ask).
var stdinTerminal = func() bool { return isTerminalReader(stdin) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprint(stderr, usageText())
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name, args := args[0], args[1:]
	if name == "help" {
		if len(args) == 0 {
			fmt.Fprint(stdout, usageText())
			return exitOK
		}
		if !strings.HasPrefix(args[0], "-") {
			name, args = args[0], []string{"-h"}
		}
	}
	cmd := findCommand(name)
	if cmd == nil {
		msg := fmt.Sprintf("tako: unknown command %q", name)
		if s := suggest(name, commandNames()); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintf(stderr, "%s\n(tako help lists the commands)\n", msg)
		return exitUsage
	}
	fs := flag.NewFlagSet("tako "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o cmdOpts
	o.c.output = "text"
	o.register(fs, cmd)
	setUsage(fs, cmd, stderr)
	c := &o.c
	// Flags may come before or after the arguments (tako tail hello -f).
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if c.output != "text" && c.output != "json" {
		fmt.Fprintf(stderr, "tako: -output %q: text or json\n", c.output)
		return exitUsage
	}
	var err error
	switch name {
	case "apply", "delete":
		err = runApply(ctx, c, name, o.dry, o.yes, stdout, stderr)
	case "tail":
		err = runTail(ctx, c, pos, o.follow, stdout)
	case "ops":
		err = runOps(ctx, c, pos, o.of, stdout)
	case "fetch":
		err = runFetch(ctx, c, pos, o.data, stdout)
	case "dev":
		err = runDev(ctx, c, o.data, stdout)
	case "queues":
		err = runQueues(ctx, c, pos, o.qf, o.yes, stdout, stderr)
	case "send":
		err = runSend(ctx, c, pos, o.delay, o.key, stdout)
	case "tokens":
		err = runTokens(ctx, c, o.data, o.grants, pos, stdout, stderr)
	case "health":
		err = runHealth(ctx, c, stdout)
	case "login":
		err = runLogin(ctx, c, c.set, pos, o.name, stdin, stdout)
	case "context":
		err = runContext(c, pos, stdout)
	case "version":
		if len(pos) > 0 {
			err = usageError{errors.New("version takes no argument")}
		} else {
			fmt.Fprintln(stdout, versionText())
		}
	case "completion":
		if len(pos) != 1 {
			err = usageError{errors.New("completion bash|zsh|fish")}
		} else {
			var s string
			if s, err = completionScript(pos[0]); err == nil {
				fmt.Fprint(stdout, s)
			}
		}
	}
	if err == nil {
		return exitOK
	}
	var ue usageError
	var ae *apiError
	unreachable := false
	switch {
	case errors.As(err, &ue):
	case errors.As(err, &ae):
		if (ae.Status == 401 || ae.Status == 403) && ae.Hint == "" && c.res != nil {
			ae.Hint = c.res.authHint(ae.Status)
		}
	case ctx.Err() != nil:
	default:
		unreachable = true
		if c.res != nil {
			err = unreachableError(c.res.host, err)
		}
	}
	fmt.Fprintln(stderr, "tako:", err)
	if c.output == "json" {
		// With -output json the error is also one JSON object on stderr's
		// last line, for scripts: message, and for a Host API refusal the
		// resource step, status, problem code and detail.
		doc := map[string]any{"error": err.Error()}
		if ae != nil {
			doc = map[string]any{"error": err.Error(), "what": ae.What, "status": ae.Status, "code": ae.Code, "detail": ae.Detail}
		}
		_ = json.NewEncoder(stderr).Encode(doc)
	}
	switch {
	case ue.error != nil:
		return exitUsage
	case ae != nil:
		return exitFailed
	case !unreachable:
		return exitFailed
	default:
		return exitUnreachable
	}
}

func runApply(ctx context.Context, c *common, cmd string, dry, yes bool, stdout, stderr io.Writer) error {
	m, err := LoadManifest(c.dir)
	if err != nil {
		return usageError{err}
	}
	cl, err := c.client(m)
	if err != nil {
		return err
	}
	m.Space = cl.space
	var progress io.Writer
	if c.output == "text" {
		progress = stdout
	}
	var res *Result
	if cmd == "delete" {
		if !dry && !yes {
			// Show what would go, then ask.
			plan, err := Delete(ctx, cl, m, true, nil, false)
			if err != nil {
				return err
			}
			if len(plan.Changes) == 0 {
				fmt.Fprintf(stdout, "delete in space %s: nothing to delete\n", m.Space)
				return nil
			}
			var what []string
			for _, ch := range plan.Changes {
				if ch.Action == "delete" {
					what = append(what, ch.Kind+" "+ch.Name)
				}
			}
			q := fmt.Sprintf("delete %s from space %s at %s, with every message in its queues?", strings.Join(what, ", "), m.Space, cl.base)
			if err := confirm(q, "delete", stderr); err != nil {
				return err
			}
		}
		res, err = Delete(ctx, cl, m, dry, progress, isTerminal(stdout))
	} else {
		res, err = Apply(ctx, cl, m, dry, progress, isTerminal(stdout))
	}
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

// confirm asks the question on a terminal and answers nil for yes; off a
// terminal it refuses, naming -yes.
func confirm(question, verb string, stderr io.Writer) error {
	if !stdinTerminal() {
		return usageError{fmt.Errorf("%s asks for confirmation, and stdin is not a terminal; add -yes (or -y) to %s without asking", verb, verb)}
	}
	fmt.Fprintf(stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return usageError{fmt.Errorf("%s cancelled; nothing changed", verb)}
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
				fmt.Fprintf(stdout, "%s %-5s %s\n", time.UnixMilli(e.TimeMillis).UTC().Format(time.RFC3339Nano), e.Level, escapeControl(e.Message))
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
	if len(args) == 0 {
		return usageError{errors.New("ops: list [-state S] [-resource NAME] [-limit N], wait ID or get ID")}
	}
	if args[0] != "wait" && args[0] != "get" && args[0] != "list" {
		return unknownSub("ops", args[0], findCommand("ops").subs)
	}
	if len(args) != 2 || args[0] == "list" {
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
