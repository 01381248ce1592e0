package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"
)

// command is one of tako's commands, for the usage, its help (-h), "did
// you mean" and the shell completions.
type command struct {
	name     string
	args     string   // the synopsis after the name
	summary  string   // one line, for the list
	desc     string   // a paragraph, for -h
	examples []string // full command lines
	subs     []string // its subcommands, if any
	// common: it takes the flags every Host API command takes.
	common bool
}

var commands = []command{
	{name: "login", args: "[HOST-URL] [-name NAME] [-token T | -token-file F | -token -] [-space S]", common: true,
		summary: "store a host, its token and a default space as a context, and make it current",
		desc: "login checks the token against the host, then stores the host URL, the token and the default space as a context " +
			"in the user's configuration directory (tako/config.json, readable by you only) and makes it the current context. " +
			"The token comes from -token, from -token-file (a host's data/admin-token, for instance) or from stdin (-token -, or a pipe). " +
			"The host defaults to $TAKO_HOST, else " + defaultHost + "; the context's name to default.",
		examples: []string{"tako login -token-file data/admin-token -space demo", "tako login https://queues.example.com -name prod -token - < token.txt"}},
	{name: "context", args: "[list | use NAME | show [NAME] | delete NAME]", subs: []string{"list", "use", "show", "delete"},
		summary: "list, switch, show or delete the stored contexts",
		desc: "A context is a host URL, its token and a default space, stored by `tako login` (and by `tako dev` for the host it starts, as dev). " +
			"Every command uses the current context unless -context NAME or $TAKO_CONTEXT picks another; -host, -token, -space, " +
			"$TAKO_HOST and $TAKO_TOKEN override single settings of it. show never prints the token.",
		examples: []string{"tako context", "tako context use dev", "tako context show", "tako context delete old"}},
	{name: "apply", args: "[-dir DIR] [-dry-run]", common: true,
		summary: "make the host match DIR/tako.yaml (plan with -dry-run)",
		desc: "apply checks everything it can before the first request (the manifest, its references, every module bundled and compiled, " +
			"the handlers the workers declare, the limits the host enforces), then creates or updates queues, workers with their versions, " +
			"and consumers, in dependency order. When the host refuses a step, apply deletes what it created and restores what it updated " +
			"in this run, newest first, so the space is left as it was found.",
		examples: []string{"tako apply -dir examples/hello", "tako apply -dry-run", "tako apply -output json"}},
	{name: "delete", args: "[-dir DIR] [-dry-run] [-yes]", common: true,
		summary: "delete what DIR/tako.yaml names, in dependency order",
		desc: "delete removes the consumers, the workers' versions, the workers and the queues the manifest names (with every message in them). " +
			"On a terminal it shows the plan and asks first; -yes (-y) skips the question, and is required when stdin is not a terminal.",
		examples: []string{"tako delete -dir examples/hello", "tako delete -dry-run", "tako delete -yes"}},
	{name: "dev", args: "[-dir DIR] [-data D]", common: true,
		summary: "apply, re-apply on save, print the workers' new log lines",
		desc: "dev applies the project, re-applies whenever the manifest or a module changes, and prints the workers' log lines " +
			"from now on, with their times. When no host answers it starts one in this process (data in D, default DIR/.tako/data) " +
			"and registers it as the context dev.",
		examples: []string{"tako dev -dir examples/hello"}},
	{name: "tail", args: "[-follow] WORKER", common: true,
		summary: "print a worker's log; -follow keeps printing",
		desc: "tail prints a worker's kept log lines (the newest 1000), each with its time and level; -follow (-f) keeps printing new ones " +
			"until interrupted, across host restarts. Control characters a worker logs are shown escaped (\\x1b, \\n).",
		examples: []string{"tako tail hello", "tako tail -f hello"}},
	{name: "fetch", args: "[-data BODY] WORKER [PATH]", common: true,
		summary:  "call a worker's fetch handler (POST with -data)",
		desc:     "fetch sends one request to the worker's fetch handler through the host, a GET, or a POST with -data as its body, and prints the response body.",
		examples: []string{"tako fetch -data world hello", "tako fetch hello /status"}},
	{name: "queues", args: "[list | stats Q | peek Q | deadletters DLQ | pause Q | resume Q | purge Q | redrive DLQ [-to Q] [-rate N] [-group G] [-dry-run] | cancel ID]", common: true,
		subs:    []string{"list", "stats", "peek", "deadletters", "pause", "resume", "purge", "redrive", "cancel"},
		summary: "list queues; counts, oldest messages, pause, resume, purge, redrive",
		desc: "queues lists the space's queues with their message counts and delivery state. stats counts one queue's messages by state; " +
			"peek shows its oldest messages (with, for a dead-letter queue, where each came from and why, and each message's last attempts " +
			"and how they ended); deadletters groups a dead-letter queue's messages by cause; pause and resume stop and " +
			"restart delivery; purge removes every message (asking first on a terminal; -yes skips the question); redrive moves a " +
			"dead-letter queue's messages back to the queue each came from (or -to Q), at most -rate a second, only one group's with " +
			"-group G, and with -dry-run says how many would move and moves nothing; cancel stops a redrive.",
		examples: []string{"tako queues", "tako queues peek tasks-dead", "tako queues deadletters tasks-dead", "tako queues redrive tasks-dead -group 3f2a9c0d1e4b5a67 -dry-run", "tako queues redrive tasks-dead -rate 10", "tako queues purge tasks -yes"}},
	{name: "send", args: "[-delay S] [-key K] QUEUE BODY|-", common: true,
		summary: "publish one message to a queue (creates nothing)",
		desc: "send publishes one message of 1 to 127000 bytes to a queue through the Host API's publish route (POST …/resources/{uid}/messages), " +
			"durable when it prints the message's ID; it creates nothing. BODY - reads the body's bytes from stdin. -key K sends an Idempotency-Key: " +
			"a retry with the same key and body prints the same ID and sends nothing again (for 24 hours). QUEUE is a name, or a UID for a token " +
			"that may only publish (a publisher, which cannot list queues).",
		examples: []string{"tako send tasks 'a body'", "tako send -delay 30 tasks later", "tako send -key order-42 tasks - < order.json"}},
	{name: "tokens", args: "[list | create NAME -grant SPACE:ROLE[:FORM,...] | revoke NAME|ID] [-data D]", common: true,
		subs:    []string{"list", "create", "revoke"},
		summary: "list, create or revoke principals and their tokens",
		desc: "tokens manages principals through the host (an admin token; effective at once, kept across restarts). create prints the new " +
			"token once. With -data DIR it changes DIR/host.json itself, for a host that is down (one running on DIR reloads it within a second).",
		examples: []string{"tako tokens", "tako tokens create ci -grant demo:viewer", "tako tokens create orders-app -grant demo:publisher:tasks", "tako tokens revoke ci"}},
	{name: "ops", args: "list [-state S] [-resource NAME] [-limit N] | wait ID | get ID", common: true,
		subs:     []string{"list", "wait", "get"},
		summary:  "the space's recent Operations; wait for one",
		desc:     "ops list prints the space's recent Operations, newest first, filtered by -state and -resource; ops get prints one; ops wait waits until it finishes.",
		examples: []string{"tako ops list", "tako ops list -state failed", "tako ops wait op_0123"}},
	{name: "health", common: true,
		summary:  "GET /healthz and /readyz",
		desc:     "health reads the host's liveness (/healthz) and readiness (/readyz) and prints both status codes; a host that is not ready answers exit 1.",
		examples: []string{"tako health", "tako health -context prod"}},
	{name: "version",
		summary:  "print tako's module version and VCS revision",
		desc:     "version prints the version of the module tako was built from and, when built from a checkout, its VCS revision and whether it had local changes.",
		examples: []string{"tako version"}},
	{name: "completion", args: "bash | zsh | fish", subs: []string{"bash", "zsh", "fish"},
		summary:  "print a shell completion script",
		desc:     "completion prints a script that completes tako's commands, subcommands and flags in the shell named.",
		examples: []string{"source <(tako completion bash)", "tako completion zsh > \"${fpath[1]}/_tako\"", "tako completion fish > ~/.config/fish/completions/tako.fish"}},
	{name: "help", args: "[COMMAND]",
		summary:  "this list, or one command's help",
		desc:     "help prints the commands, or one command's description, flags and examples.",
		examples: []string{"tako help apply"}},
}

func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func commandNames() []string {
	var ns []string
	for _, c := range commands {
		ns = append(ns, c.name)
	}
	return ns
}

// usageText is the list of commands.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage: tako <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.summary)
	}
	b.WriteString(`
flags of the Host API commands: -context NAME -host URL -token T -token-file F -space S -output text|json
(-h after a command prints its description, flags and examples)

exit codes: 0 done; 1 the host refused a request or an Operation failed; 2 a usage or
manifest error; 3 the host could not be reached
`)
	return b.String()
}

// setUsage makes `tako CMD -h` print the command's description, flags
// and examples.
func setUsage(fs *flag.FlagSet, c *command, w io.Writer) {
	fs.Usage = func() {
		fmt.Fprintf(w, "usage: tako %s %s\n\n%s\n", c.name, c.args, wrap(c.desc, 78))
		if len(c.examples) > 0 {
			fmt.Fprintf(w, "\nexamples:\n")
			for _, e := range c.examples {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(w, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
}

// wrap breaks s into lines of at most width.
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		if n > 0 && n+1+len(w) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// suggest is the candidate closest to s by edit distance, if one is close
// enough to be a likely typo (or s is a prefix of exactly it).
func suggest(s string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(1, min(3, len(s)/3+1))
	if bestD <= limit {
		return best
	}
	var prefixed []string
	for _, c := range candidates {
		if len(s) >= 2 && strings.HasPrefix(c, s) || len(c) >= 3 && strings.HasPrefix(s, c) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, a transposition of
// neighbours counting as one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// unknownSub is the usage error for an unknown subcommand.
func unknownSub(cmd, sub string, subs []string) error {
	msg := fmt.Sprintf("%s: unknown subcommand %q", cmd, sub)
	if s := suggest(sub, subs); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += "; one of " + strings.Join(subs, ", ")
	}
	return usageError{errors.New(msg)}
}

// versionText is tako's module version and VCS revision, from the build
// information the Go toolchain embeds.
func versionText() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "tako (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	s := fmt.Sprintf("tako %s %s", bi.Main.Path, v)
	settings := map[string]string{}
	for _, kv := range bi.Settings {
		settings[kv.Key] = kv.Value
	}
	if r := settings["vcs.revision"]; r != "" {
		s += " revision " + r
		if settings["vcs.modified"] == "true" {
			s += " (modified)"
		}
		if t := settings["vcs.time"]; t != "" {
			s += " of " + t
		}
	}
	return s + " " + bi.GoVersion
}

// flagNames lists a command's flags, for the completions.
func flagNames(name string) []string {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var o cmdOpts
	if c := findCommand(name); c != nil {
		o.register(fs, c)
	}
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, "-"+f.Name) })
	sort.Strings(out)
	return out
}

func completionScript(shell string) (string, error) {
	var b strings.Builder
	switch shell {
	case "bash":
		b.WriteString("# bash completion for tako: source <(tako completion bash)\n_tako() {\n  local cur=${COMP_WORDS[COMP_CWORD]}\n")
		fmt.Fprintf(&b, "  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(commandNames(), " "))
		b.WriteString("  case \"${COMP_WORDS[1]}\" in\n")
		for _, c := range commands {
			words := flagNames(c.name)
			fmt.Fprintf(&b, "    %s)\n", c.name)
			if len(c.subs) > 0 {
				fmt.Fprintf(&b, "      if [ \"$COMP_CWORD\" -eq 2 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(c.subs, " "))
			}
			fmt.Fprintf(&b, "      COMPREPLY=($(compgen -W %q -- \"$cur\"));;\n", strings.Join(words, " "))
		}
		b.WriteString("  esac\n}\ncomplete -o default -F _tako tako\n")
	case "zsh":
		b.WriteString("#compdef tako\n# zsh completion for tako: tako completion zsh > \"${fpath[1]}/_tako\"\n_tako() {\n  local -a cmds\n  cmds=(\n")
		for _, c := range commands {
			fmt.Fprintf(&b, "    %s\n", zshQuote(c.name+":"+c.summary))
		}
		b.WriteString("  )\n  if (( CURRENT == 2 )); then _describe 'command' cmds; return; fi\n  case $words[2] in\n")
		for _, c := range commands {
			fmt.Fprintf(&b, "    %s)\n", c.name)
			if len(c.subs) > 0 {
				fmt.Fprintf(&b, "      if (( CURRENT == 3 )); then compadd -- %s; return; fi\n", strings.Join(c.subs, " "))
			}
			if fl := flagNames(c.name); len(fl) > 0 {
				fmt.Fprintf(&b, "      compadd -- %s; _files;;\n", strings.Join(fl, " "))
			} else {
				b.WriteString("      ;;\n")
			}
		}
		b.WriteString("  esac\n}\ncompdef _tako tako\n")
	case "fish":
		b.WriteString("# fish completion for tako: tako completion fish > ~/.config/fish/completions/tako.fish\n")
		for _, c := range commands {
			fmt.Fprintf(&b, "complete -c tako -f -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
			for _, s := range c.subs {
				fmt.Fprintf(&b, "complete -c tako -f -n '__fish_seen_subcommand_from %s' -a %s\n", c.name, s)
			}
			for _, f := range flagNames(c.name) {
				fmt.Fprintf(&b, "complete -c tako -n '__fish_seen_subcommand_from %s' -o %s\n", c.name, strings.TrimPrefix(f, "-"))
			}
		}
	default:
		return "", usageError{fmt.Errorf("completion: bash, zsh or fish, not %q", shell)}
	}
	return b.String(), nil
}

func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
