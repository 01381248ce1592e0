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
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cucumber/godog"

	"github.com/takoform/queuehost/features"
	"github.com/takoform/queuehost/features/steps"
	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/runtime/sandbox"
)

// The in-process host's brokers and default queue Offering (-broker,
// -queue-offering).
var (
	inProcessBrokers       []host.BrokerConfig
	inProcessQueueOffering string
)

func main() {
	sandbox.Main() // the in-process host's worker sandboxes are this binary
	os.Exit(run())
}

func run() int {
	var (
		hostURL        = flag.String("host", os.Getenv("CONFORM_HOST"), "base URL of the host under test, or several separated by \",\" (requests are spread across them); default: start the reference host in-process")
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
		handlerTimeout = flag.Duration("handler-timeout", 0, "the host's handler time limit (with --host; in-process it is 5s)")
		recListen      = flag.String("recorder-listen", "127.0.0.1:0", "address the kit's recorder listens on")
		recURL         = flag.String("recorder-url", "", "recorder base URL as the host's workers reach it (default http://<recorder-listen>)")
		concurrency    = flag.Int("concurrency", 8, "scenarios run at once (@restart scenarios always run alone)")
		featuresDir    = flag.String("features", "", "read features and workers from this directory instead of the embedded copy")
		storeURL       = flag.String("store", os.Getenv("CONFORM_STORE"), "in-process host only: keep its store in this PostgreSQL database (postgres://...) instead of a journal")
		storeFresh     = flag.Bool("store-fresh", false, "with --store: create a fresh database on that server for the run, and drop it afterwards")
		active         = flag.Int("cluster", 0, "with --store: run this many ACTIVE hosts on the same database (several active hosts, spec/cluster.md); the runner's requests go round-robin across them and a restart restarts one at a time")
		standbys       = flag.Int("standbys", 0, "with --store: run this many standby hosts on the same database beside the active one; a restart is then a failover to a standby")
		capsDoc        = flag.String("capabilities-doc", os.Getenv("CONFORM_CAPABILITIES_DOC"), "the host's capabilities document (features/capabilities.schema.json): a file or an http(s) URL")
		capsList       = flag.String("capabilities", os.Getenv("CONFORM_CAPABILITIES"), "capabilities the host declares, comma-separated: restart, store-faults, handler-limit, observation-control, ext-NAME (added to --capabilities-doc)")
		certify        = flag.Bool("certify", false, "a certified run: every scenario (@slow included, no --tags) of the declared capabilities must run and pass; any skip fails the run")
		bundleDir      = flag.String("bundle", "", "write the results bundle (results.json, junit.xml, coverage.md, host.json) into this directory")
		only           = flag.String("only", "", "run just the scenarios whose name matches this regular expression (the others end before their first step, unreported); not with --certify")
		failFast       = flag.Bool("fail-fast", false, "stop at the first failed scenario (a mutation run wants a verdict, not the whole list); not with --certify")
	)
	flag.Func("broker", "in-process host only: a message broker NAME=URL, as takohost -broker (repeatable)", func(v string) error {
		b, err := host.ParseBroker(v)
		if err == nil {
			inProcessBrokers = append(inProcessBrokers, b)
		}
		return err
	})
	flag.StringVar(&inProcessQueueOffering, "queue-offering", "", "in-process host only: the Offering of every queue created without one, as takohost -queue-offering (a -broker NAME runs the kit with every queue on that broker)")
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

	if *certify && *tags != "" {
		fmt.Fprintln(os.Stderr, "conform: --certify runs every scenario; it takes no --tags")
		return 2
	}
	if *certify && *only != "" {
		fmt.Fprintln(os.Stderr, "conform: --certify runs every scenario; it takes no --only")
		return 2
	}
	if *certify && *failFast {
		fmt.Fprintln(os.Stderr, "conform: --certify runs every scenario; it takes no --fail-fast")
		return 2
	}
	if *certify {
		*slow = true
	}
	declared, hostInfo, docTimeout, err := declaredCapabilities(ctx, *capsDoc, *capsList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conform:", err)
		return 2
	}

	cfg := steps.Config{
		OtherSpace:  *otherSpace,
		Recorder:    rec,
		RecorderURL: *recURL,
		Tokens:      map[string]string{},
	}
	var teardown func(failed bool)
	var hosts []string
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
		if *standbys > 0 && *storeURL == "" {
			fmt.Fprintln(os.Stderr, "conform: --standbys needs --store (hosts share a PostgreSQL database)")
			return 2
		}
		if *active > 1 && (*storeURL == "" || *standbys > 0) {
			fmt.Fprintln(os.Stderr, "conform: --cluster needs --store (hosts share a PostgreSQL database) and no --standbys")
			return 2
		}
		ih, err := startInProcess(ctx, rec.Addr(), *otherSpace, *storeURL, *standbys, *active)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conform: in-process host:", err)
			return 2
		}
		cfg.Base = ih.url
		if *active > 1 {
			cfg.Base = ih.roundRobin
		}
		cfg.Tokens = ih.tokens
		cfg.Restart = ih.restart
		cfg.Fault = ih.fault
		cfg.HandlerTimeout = inProcessHandlerTimeout
		if declared == nil {
			// What the reference host serves at GET /v2/capabilities: with
			// the fault hook the runner gave it, every capability the kit
			// knows.
			declared, hostInfo, _ = servedCapabilities(ctx, ih.url())
		}
		if declared == nil {
			declared = map[string]bool{steps.CapRestart: true, steps.CapStoreFaults: true, steps.CapHandlerLimit: true, steps.CapObservationControl: true}
		}
		if hostInfo == nil {
			hostInfo = &steps.HostInfo{Name: "takoform queuehost (reference host, in-process)"}
		}
		hosts = []string{ih.url()}
		teardown = ih.close
		where := "data " + ih.dir
		if *storeURL != "" {
			where += ", store on PostgreSQL"
		}
		if *standbys > 0 {
			where += fmt.Sprintf(", %d standby hosts (a restart is a failover)", *standbys)
		}
		if *active > 1 {
			where += fmt.Sprintf(", %d active hosts round-robin", *active)
		}
		fmt.Fprintf(os.Stderr, "conform: in-process reference host at %s (%s), recorder %s\n", ih.url(), where, *recURL)
	} else {
		if *storeURL != "" {
			fmt.Fprintln(os.Stderr, "conform: --store is for the in-process host; start the host under test with its own -store")
			return 2
		}
		for _, h := range strings.Split(*hostURL, ",") {
			if h = strings.TrimRight(strings.TrimSpace(h), "/"); h != "" {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) == 0 {
			fmt.Fprintln(os.Stderr, "conform: --host names no URL")
			return 2
		}
		cfg.Base = roundRobin(hosts)
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
		if cfg.HandlerTimeout == 0 && docTimeout > 0 {
			cfg.HandlerTimeout = docTimeout
		}
		if *restartCmd != "" {
			cmd := *restartCmd
			cfg.Restart = func(ctx context.Context) error { return externalRestart(ctx, cmd, hosts) }
		}
		if *faultCmd != "" {
			cmd := *faultCmd
			cfg.Fault = func(ctx context.Context, args []string) error { return externalFault(ctx, cmd, args) }
		}
		if declared == nil {
			var served time.Duration
			if declared, hostInfo, served = servedCapabilities(ctx, hosts[0]); declared != nil {
				fmt.Fprintf(os.Stderr, "conform: capabilities from %s/v2/capabilities\n", hosts[0])
				if cfg.HandlerTimeout == 0 {
					cfg.HandlerTimeout = served
				}
			}
		}
		if declared == nil {
			// No declaration: what the runner was given the means to test.
			declared = map[string]bool{}
			if *restartCmd != "" {
				declared[steps.CapRestart] = true
			}
			if *faultCmd != "" {
				declared[steps.CapStoreFaults] = true
			}
			if cfg.HandlerTimeout > 0 {
				declared[steps.CapHandlerLimit] = true
			}
			fmt.Fprintln(os.Stderr, "conform: no --capabilities-doc or --capabilities: the host is taken to declare only what the given flags can exercise")
		}
		fmt.Fprintf(os.Stderr, "conform: host %s, recorder %s (the host must allow %s for outbound fetch)\n", strings.Join(hosts, ", "), *recURL, rec.Addr())
	}
	cfg.Capabilities = declared
	fmt.Fprintf(os.Stderr, "conform: declared capabilities: %s\n", capList(declared))

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
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintf(os.Stderr, "conform: --only %q: %v\n", *only, err)
			return 2
		}
		cfg.Only = re
	}
	kit := steps.New(cfg)

	expr := *tags
	if !*slow {
		// Through andTags: "@a,@b" + " && ~@slow" would keep @a's slow
		// scenarios (godog's comma binds loosest).
		expr = andTags(expr, "~@slow")
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
	bundleJUnit := ""
	if *bundleDir != "" {
		if err := os.MkdirAll(*bundleDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "conform: --bundle:", err)
			return 2
		}
		bundleJUnit = filepath.Join(*bundleDir, "junit.xml")
	}
	var junits []string
	for _, j := range []string{*junit, bundleJUnit} {
		if j != "" {
			junits = append(junits, j)
		}
	}
	start := time.Now()
	// Two phases: the scenarios that share nothing, concurrently, each in
	// a space of its own; then those that must run alone (a restart, or
	// state of the whole host: steps.AloneTags), one at a time. In one
	// phase, every scenario that must run alone would wait for every
	// scenario already running (the longest of them a minute and more)
	// and hold back every scenario queued behind it meanwhile.
	phases := []struct {
		name        string
		tags        string
		concurrency int
	}{
		{"concurrent", andTags(expr, "~"+strings.ReplaceAll(steps.AloneTags, ",", " && ~")), *concurrency},
		{"alone", andTags(expr, steps.AloneTags), 1},
	}
	if f == "cucumber" {
		// One JSON document on stdout: one phase, the gate keeps the
		// scenarios that must run alone alone.
		phases = phases[:0]
		phases = append(phases, struct {
			name        string
			tags        string
			concurrency int
		}{"all", expr, *concurrency})
	}
	status := 0
	var phaseJUnits [][]string
	for _, ph := range phases {
		pf := f
		var pj []string
		for i, j := range junits {
			part := fmt.Sprintf("%s.%s-%d", j, ph.name, i)
			pj = append(pj, part)
			pf += ",junit:" + part
		}
		phaseJUnits = append(phaseJUnits, pj)
		phStart := time.Now()
		st := godog.TestSuite{
			Name:                "conform",
			ScenarioInitializer: kit.InitializeScenario,
			Options: &godog.Options{
				Format:        pf,
				Paths:         []string{"."},
				FS:            fsys,
				Tags:          ph.tags,
				Strict:        true,
				StopOnFailure: *failFast,
				Concurrency:   ph.concurrency,
				Output:        os.Stdout,
				// Colours only for a person at a terminal: CI logs and files
				// get plain text (NO_COLOR is honoured too).
				NoColors: !isTerminal(os.Stdout) || os.Getenv("NO_COLOR") != "",
			},
		}.Run()
		fmt.Fprintf(os.Stderr, "conform: phase %s (%d at once, tags %q) finished in %s, status %d\n", ph.name, ph.concurrency, ph.tags, time.Since(phStart).Round(time.Second), st)
		status = max(status, st)
		if st != 0 && *failFast {
			break
		}
	}
	for i, j := range junits {
		var parts []string
		for _, pj := range phaseJUnits {
			parts = append(parts, pj[i])
		}
		if err := mergeJUnit(j, parts); err != nil {
			fmt.Fprintln(os.Stderr, "conform: junit:", err)
			status = max(status, 2)
		}
	}
	for _, j := range junits {
		markSkipped(j)
	}
	if na := kit.NotApplicable(); len(na) > 0 {
		fmt.Fprintf(os.Stderr, "conform: %d scenarios not applicable (the host does not declare what they need):\n", len(na))
		for _, s := range na {
			fmt.Fprintln(os.Stderr, "  - "+s)
		}
	}
	sk := kit.Skipped()
	if len(sk) > 0 {
		fmt.Fprintf(os.Stderr, "conform: %d scenarios skipped (applicable, not run, not passed):\n", len(sk))
		for _, s := range sk {
			fmt.Fprintln(os.Stderr, "  - "+s)
		}
	}
	for _, r := range kit.CheckerReports() {
		fmt.Fprintf(os.Stderr, "conform: checker: %s: %s\n", r.Scenario, r)
	}
	if *certify && status == 0 && len(sk) > 0 {
		fmt.Fprintf(os.Stderr, "conform: certification FAILED: %d applicable scenarios did not run\n", len(sk))
		status = 1
	}
	if *bundleDir != "" {
		b := bundle{
			dir: *bundleDir, fsys: fsys, kit: kit, certify: *certify, status: status, tags: expr,
			hosts: hosts, host: hostInfo, declared: declared, started: start, handlerTimeout: cfg.HandlerTimeout,
		}
		if err := b.write(); err != nil {
			fmt.Fprintln(os.Stderr, "conform: --bundle:", err)
			if status == 0 {
				status = 2
			}
		} else {
			fmt.Fprintf(os.Stderr, "conform: wrote the results bundle to %s\n", *bundleDir)
		}
	}
	if *certify && status == 0 {
		fmt.Fprintln(os.Stderr, "conform: certified: every applicable scenario ran and passed")
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

// externalRestart runs the host-control command and waits until every
// host serves the Host API again.
func externalRestart(ctx context.Context, cmd string, hosts []string) error {
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("--restart-cmd %q: %w", cmd, err)
	}
	for _, base := range hosts {
		err := steps.Poll(60*time.Second, func() error {
			r, err := http.Get(base + "/v2/openapi.json")
			if err != nil {
				return err
			}
			r.Body.Close()
			if r.StatusCode != 200 {
				return fmt.Errorf("GET %s/v2/openapi.json answered %d", base, r.StatusCode)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// roundRobin spreads requests across the hosts: each call of the returned
// function is the next base URL.
func roundRobin(hosts []string) func() string {
	var n atomic.Uint64
	return func() string { return hosts[(n.Add(1)-1)%uint64(len(hosts))] }
}

// declaredCapabilities reads the capabilities document (a file or an
// http(s) URL) and the --capabilities list; nil when neither is given.
func declaredCapabilities(ctx context.Context, doc, list string) (map[string]bool, *steps.HostInfo, time.Duration, error) {
	if doc == "" && list == "" {
		return nil, nil, 0, nil
	}
	out := map[string]bool{}
	var info *steps.HostInfo
	var timeout time.Duration
	if doc != "" {
		var b []byte
		var err error
		if strings.HasPrefix(doc, "http://") || strings.HasPrefix(doc, "https://") {
			b, err = fetchDoc(ctx, doc)
		} else {
			b, err = os.ReadFile(doc)
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("--capabilities-doc: %w", err)
		}
		d, err := steps.ParseCapabilitiesDoc(b)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("--capabilities-doc %s: %w", doc, err)
		}
		for _, c := range d.Capabilities {
			out[c] = true
		}
		info = d.Host
		timeout = time.Duration(d.HandlerTimeoutSeconds * float64(time.Second))
	}
	for _, c := range strings.Split(list, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if err := steps.ValidCapability(c); err != nil {
			return nil, nil, 0, fmt.Errorf("--capabilities: %w", err)
		}
		out[c] = true
	}
	return out, info, timeout, nil
}

// servedCapabilities reads the capabilities document a host serves at
// GET /v2/capabilities (the reference host does); nil when it serves none.
func servedCapabilities(ctx context.Context, base string) (map[string]bool, *steps.HostInfo, time.Duration) {
	b, err := fetchDoc(ctx, base+"/v2/capabilities")
	if err != nil {
		return nil, nil, 0
	}
	d, err := steps.ParseCapabilitiesDoc(b)
	if err != nil {
		fmt.Fprintf(os.Stderr, "conform: %s/v2/capabilities is not a capabilities document (%v); ignored\n", base, err)
		return nil, nil, 0
	}
	out := map[string]bool{}
	for _, c := range d.Capabilities {
		out[c] = true
	}
	return out, d.Host, time.Duration(d.HandlerTimeoutSeconds * float64(time.Second))
}

func fetchDoc(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, err
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	if r.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s answered %d", u, r.StatusCode)
	}
	return io.ReadAll(io.LimitReader(r.Body, 1<<20))
}

func capList(m map[string]bool) string {
	var out []string
	for c, ok := range m {
		if ok {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
