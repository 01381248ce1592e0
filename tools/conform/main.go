// Command conform runs the conformance kit for the Takoform queue Forms
// against a host.
//
//	go run ./tools/conform                          # an in-process reference host
//	go run ./tools/conform --host URL --token T     # any host
//
// The kit talks to the host only over HTTP (Host API v2 and the test
// workers' fetch handlers); test workers report what they see to a recorder
// the runner starts, which the host must allow for outbound fetch. See
// features/README.md for flags, tags, principals and the host-control
// contract.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/cucumber/godog"

	"github.com/takoform/queuehost/features"
	"github.com/takoform/queuehost/features/steps"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		hostURL        = flag.String("host", os.Getenv("CONFORM_HOST"), "base URL of the host under test (default: start the reference host in-process)")
		token          = flag.String("token", os.Getenv("CONFORM_TOKEN"), "bearer token of a principal with editor in every space (with --host)")
		viewerToken    = flag.String("viewer-token", os.Getenv("CONFORM_VIEWER_TOKEN"), "token of a principal with viewer in every space")
		narrowToken    = flag.String("narrow-token", os.Getenv("CONFORM_NARROW_TOKEN"), "token of a principal with editor on QueueConsumer, ModuleWorker and WorkerVersion only, in every space")
		senderToken    = flag.String("sender-token", os.Getenv("CONFORM_SENDER_TOKEN"), "token of a principal with editor on ModuleWorker and WorkerVersion and viewer on AtLeastOnceQueue, in every space")
		otherToken     = flag.String("other-token", os.Getenv("CONFORM_OTHER_TOKEN"), "token of a principal with editor only in --other-space")
		otherSpace     = flag.String("other-space", envDefault("CONFORM_OTHER_SPACE", "kit-elsewhere"), "the only space the --other-token principal has grants in")
		tags           = flag.String("tags", "", "godog tag expression, e.g. '@QueueConsumer-0.3.0 && ~@restart'")
		slow           = flag.Bool("slow", false, "include @slow scenarios (excluded by default)")
		format         = flag.String("format", "pretty", "output format: pretty, progress, junit or cucumber-json")
		junit          = flag.String("junit", "", "also write a JUnit XML report to this file")
		restartCmd     = flag.String("restart-cmd", os.Getenv("CONFORM_RESTART_CMD"), "shell command that restarts the host and returns once it serves again (with --host)")
		faultCmd       = flag.String("fault-cmd", os.Getenv("CONFORM_FAULT_CMD"), "command run as CMD <verb> [args] to inject store faults (with --host); see features/README.md")
		handlerTimeout = flag.Duration("handler-timeout", 0, "the host's handler time limit (with --host; in-process it is 2s)")
		recListen      = flag.String("recorder-listen", "127.0.0.1:0", "address the kit's recorder listens on")
		recURL         = flag.String("recorder-url", "", "recorder base URL as the host's workers reach it (default http://<recorder-listen>)")
		concurrency    = flag.Int("concurrency", 8, "scenarios run at once (@restart scenarios always run alone)")
		featuresDir    = flag.String("features", "", "read features and workers from this directory instead of the embedded copy")
		storeURL       = flag.String("store", os.Getenv("CONFORM_STORE"), "in-process host only: keep its store in this PostgreSQL database (postgres://...) instead of a journal")
		storeFresh     = flag.Bool("store-fresh", false, "with --store: create a fresh database on that server for the run, and drop it afterwards")
	)
	flag.Parse()

	rec, err := steps.StartRecorder(*recListen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conform: recorder:", err)
		return 2
	}
	defer rec.Close()
	if *recURL == "" {
		*recURL = "http://" + rec.Addr()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg := steps.Config{
		OtherSpace:  *otherSpace,
		Recorder:    rec,
		RecorderURL: *recURL,
		Tokens:      map[string]string{},
	}
	var teardown func(failed bool)
	if *hostURL == "" {
		if *storeFresh {
			if *storeURL == "" {
				fmt.Fprintln(os.Stderr, "conform: --store-fresh needs --store (the server to create the database on)")
				return 2
			}
			fresh, drop, err := freshDatabase(ctx, *storeURL)
			if err != nil {
				fmt.Fprintln(os.Stderr, "conform: fresh database:", err)
				return 2
			}
			defer drop()
			*storeURL = fresh
		}
		ih, err := startInProcess(ctx, rec.Addr(), *otherSpace, *storeURL)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conform: in-process host:", err)
			return 2
		}
		cfg.Base = ih.url
		cfg.Tokens = ih.tokens
		cfg.Restart = ih.restart
		cfg.Fault = ih.fault
		cfg.HandlerTimeout = inProcessHandlerTimeout
		teardown = ih.close
		where := "data " + ih.dir
		if *storeURL != "" {
			where += ", store on PostgreSQL"
		}
		fmt.Fprintf(os.Stderr, "conform: in-process reference host at %s (%s), recorder %s\n", ih.url(), where, *recURL)
	} else {
		if *storeURL != "" {
			fmt.Fprintln(os.Stderr, "conform: --store is for the in-process host; start the host under test with its own -store")
			return 2
		}
		base := strings.TrimRight(*hostURL, "/")
		cfg.Base = func() string { return base }
		if *token == "" {
			fmt.Fprintln(os.Stderr, "conform: --host needs --token (or CONFORM_TOKEN)")
			return 2
		}
		for name, t := range map[string]string{
			steps.PrincipalAdmin: *token, steps.PrincipalViewer: *viewerToken, steps.PrincipalNarrow: *narrowToken,
			steps.PrincipalSender: *senderToken, steps.PrincipalOther: *otherToken,
		} {
			if t != "" {
				cfg.Tokens[name] = t
			}
		}
		cfg.HandlerTimeout = *handlerTimeout
		if *restartCmd != "" {
			cmd := *restartCmd
			cfg.Restart = func(ctx context.Context) error { return externalRestart(ctx, cmd, base) }
		}
		if *faultCmd != "" {
			cmd := *faultCmd
			cfg.Fault = func(ctx context.Context, args []string) error { return externalFault(ctx, cmd, args) }
		}
		fmt.Fprintf(os.Stderr, "conform: host %s, recorder %s (the host must allow %s for outbound fetch)\n", base, *recURL, rec.Addr())
	}

	var fsys fs.FS = features.FS
	if *featuresDir != "" {
		fsys = os.DirFS(*featuresDir)
	}
	wfs, err := fs.Sub(fsys, "workers")
	if err != nil {
		fmt.Fprintln(os.Stderr, "conform:", err)
		return 2
	}
	cfg.Workers = wfs
	var logMu sync.Mutex
	cfg.Log = func(f string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(os.Stderr, "conform: "+f+"\n", a...)
	}
	kit := steps.New(cfg)

	expr := *tags
	if !*slow {
		if expr == "" {
			expr = "~@slow"
		} else {
			expr = expr + " && ~@slow"
		}
	}
	f := *format
	switch f {
	case "cucumber-json":
		f = "cucumber"
	case "pretty", "progress", "junit", "cucumber":
	default:
		fmt.Fprintf(os.Stderr, "conform: unknown --format %q\n", f)
		return 2
	}
	if *junit != "" {
		f += ",junit:" + *junit
	}
	start := time.Now()
	status := godog.TestSuite{
		Name:                "conform",
		ScenarioInitializer: kit.InitializeScenario,
		Options: &godog.Options{
			Format:      f,
			Paths:       []string{"."},
			FS:          fsys,
			Tags:        expr,
			Strict:      true,
			Concurrency: *concurrency,
			Output:      os.Stdout,
			// Colours only for a person at a terminal: CI logs and files
			// get plain text (NO_COLOR is honoured too).
			NoColors: !isTerminal(os.Stdout) || os.Getenv("NO_COLOR") != "",
		},
	}.Run()
	if *junit != "" {
		markSkipped(*junit)
	}
	if sk := kit.Skipped(); len(sk) > 0 {
		fmt.Fprintf(os.Stderr, "conform: %d scenarios skipped (not passed):\n", len(sk))
		for _, s := range sk {
			fmt.Fprintln(os.Stderr, "  - "+s)
		}
	}
	fmt.Fprintf(os.Stderr, "conform: finished in %s, status %d (tags %q)\n", time.Since(start).Round(time.Second), status, expr)
	if teardown != nil {
		teardown(status != 0)
	}
	return status
}

// markSkipped gives the test cases godog's JUnit formatter leaves without a
// status (every step skipped: a missing principal, host control or time
// limit) the status "skipped", so that no report reads them as passed.
func markSkipped(file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	b = bytes.ReplaceAll(b, []byte(`status=""`), []byte(`status="skipped"`))
	os.WriteFile(file, b, 0o644)
}

func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// externalFault runs the fault-control command as `sh -c 'CMD "$@"' sh
// VERB ARGS...`, so that CMD may itself carry arguments.
func externalFault(ctx context.Context, cmd string, args []string) error {
	c := exec.CommandContext(ctx, "sh", append([]string{"-c", cmd + ` "$@"`, "sh"}, args...)...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("--fault-cmd %q %q: %w", cmd, args, err)
	}
	return nil
}

// externalRestart runs the host-control command and waits until the host
// serves the Host API again.
func externalRestart(ctx context.Context, cmd, base string) error {
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("--restart-cmd %q: %w", cmd, err)
	}
	return steps.Poll(60*time.Second, func() error {
		r, err := http.Get(base + "/v2/openapi.json")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			return fmt.Errorf("GET /v2/openapi.json answered %d", r.StatusCode)
		}
		return nil
	})
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
