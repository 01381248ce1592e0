// Package steps holds the conformance kit's step definitions. Steps talk to
// the host only over HTTP: the Host API v2 and the test workers' fetch
// handlers. Test workers report what they see to the kit's Recorder.
//
// One place each: client.go (HTTP, auth header, problem decoding), ops.go
// (Operation waiting), recorder.go (worker callbacks and bounded polling).
package steps

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cucumber/godog"

	"github.com/takoform/queuehost/gen/api"
)

// Form URLs, matched exactly by hosts.
const (
	FormQueue    = api.FormAtLeastOnceQueue
	FormConsumer = api.FormQueueConsumer
	FormWorker   = api.FormModuleWorker
	FormVersion  = api.FormWorkerVersion
)

var formsByShortName = map[string]string{
	"AtLeastOnceQueue": FormQueue,
	"QueueConsumer":    FormConsumer,
	"ModuleWorker":     FormWorker,
	"WorkerVersion":    FormVersion,
}

// Principal names the kit knows; the README says which grants each needs.
const (
	PrincipalAdmin  = "admin"  // editor in every space
	PrincipalViewer = "viewer" // viewer in every space
	PrincipalNarrow = "narrow" // editor on QueueConsumer, ModuleWorker, WorkerVersion only
	PrincipalSender = "sender" // editor on ModuleWorker, WorkerVersion; viewer on AtLeastOnceQueue
	PrincipalOther  = "other"  // editor only in Config.OtherSpace
)

// Config is what the runner gives the kit.
type Config struct {
	Base        func() string     // the host's base URL, e.g. http://127.0.0.1:8787
	Tokens      map[string]string // principal name -> bearer token
	OtherSpace  string            // the only space PrincipalOther has grants in
	Recorder    *Recorder
	RecorderURL string // the recorder's base URL as the host's workers reach it
	// Capabilities are the capabilities the host declares (see
	// capabilities.go); a scenario tagged with one it lacks is not
	// applicable.
	Capabilities map[string]bool
	// Restart restarts the host and returns once it serves again; nil when
	// the runner has no host control (then @restart scenarios are skipped).
	Restart func(ctx context.Context) error
	// Fault runs one verb of the fault vocabulary (features/README.md
	// §fault control: "fail-writes N [TARGETS] [scope=S] [skip=M]",
	// "unknown-outcome ...", "clear [scope=S]"); nil when the runner has no
	// fault control (then @store-faults scenarios are skipped).
	Fault func(ctx context.Context, args []string) error
	// HandlerTimeout is the host's handler time limit, 0 when unknown (then
	// @handler-limit scenarios are skipped).
	HandlerTimeout time.Duration
	// Workers holds the test workers' sources (kit.js, fetch-only.js).
	Workers fs.FS
	// Log receives one progress line per scenario.
	Log func(format string, args ...any)
	// Only, when set, runs just the scenarios whose name it matches; the
	// others end before their first step and are not reported (a mutation
	// run confirming one failure).
	Only *regexp.Regexp
}

// Kit is one run of the conformance kit.
type Kit struct {
	cfg   Config
	run   string
	n     atomic.Int64
	gate  sync.RWMutex // @restart and @serial scenarios run alone (RunsAlone)
	httpc *http.Client
	lat   *latencies // the host's answer times, for the measured slack (slack.go)

	mu            sync.Mutex
	skipped       map[string]string // scenario -> reason
	notApplicable map[string]string // scenario -> reason
	results       []ScenarioResult
	checks        []CheckerReport
	done          int
}

// ScenarioResult is one scenario's outcome, for the results bundle.
type ScenarioResult struct {
	Feature string   `json:"feature"`
	Name    string   `json:"name"`
	Tags    []string `json:"tags"`
	// Status is passed, failed, skipped (applicable but not run: a missing
	// token, hook or time limit) or not-applicable (needs a capability the
	// host does not declare).
	Status  string  `json:"status"`
	Reason  string  `json:"reason,omitempty"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Results lists every finished scenario's outcome, in finishing order.
func (k *Kit) Results() []ScenarioResult {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.results)
}

// NotApplicable lists the scenarios that need a capability the host does
// not declare, with the reason, sorted.
func (k *Kit) NotApplicable() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n, r := range k.notApplicable {
		out = append(out, n+": "+r)
	}
	sort.Strings(out)
	return out
}

// New makes a Kit for one run.
func New(cfg Config) *Kit {
	b := make([]byte, 3)
	rand.Read(b)
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	lat := &latencies{}
	return &Kit{
		cfg:           cfg,
		run:           hex.EncodeToString(b),
		lat:           lat,
		httpc:         &http.Client{Transport: &timedTransport{next: &http.Transport{MaxIdleConnsPerHost: 64}, lat: lat}},
		skipped:       map[string]string{},
		notApplicable: map[string]string{},
	}
}

// Skipped lists the skipped scenarios with their reasons, sorted.
func (k *Kit) Skipped() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n, r := range k.skipped {
		out = append(out, n+": "+r)
	}
	sort.Strings(out)
	return out
}

func (k *Kit) skip(ctx context.Context, reason string) error {
	w := get(ctx)
	if w != nil {
		k.mu.Lock()
		k.skipped[w.scenario] = reason
		k.mu.Unlock()
		w.skipped = reason
	}
	return fmt.Errorf("%w: %s", godog.ErrSkip, reason)
}

type ctxKey struct{}

func get(ctx context.Context) *world { w, _ := ctx.Value(ctxKey{}).(*world); return w }

// resource is one resource the scenario created, by alias.
type resource struct {
	alias, uid, name, form, space string
	spec                          map[string]any
	handlers                      []string
}

// sent is one message a scenario sent, by tag.
type sent struct {
	id              string
	before, after   time.Time // kit clock around the send call
	deliverAfterMin time.Duration
}

// world is one scenario's state.
type world struct {
	k        *Kit
	scenario string
	skipped  string // why the scenario was skipped (k.skip), or ""
	tags     map[string]bool
	space    string
	space2   string
	scope    string
	as       string // principal of the next requests
	res      map[string]*resource
	etags    map[string]string
	sent     map[string]*sent
	header   http.Header // for the next request only
	last     *Response
	prev     *Response
	lastOp   *Operation
	call     *callResult
	bg       chan *Response
	faults   map[string]bool // scopes this scenario armed faults in
	// confirmed is, per tag, how many deliveries earlier steps established
	// (the most "is not delivered again" allows).
	confirmed map[string]int
	checker   *checker   // the checker scenario's messages
	sentMu    sync.Mutex // guards sent while the checker sends concurrently

	locked        bool      // holds the gate (a read lock, or the write lock for @restart)
	started       time.Time // when the scenario's steps began
	notApplicable string    // why the scenario does not apply to the host, if it does not

	// @ext-publish (ext_publish.go): the tokens of the principals the
	// scenario created, by the name steps use; their IDs, revoked when it
	// ends; the bytes published per tag (base64).
	tokens    map[string]string
	created   []string
	published map[string]string
	// @ext-pull (ext_pull.go): the leases taken, by the name steps give
	// them; how often each message was leased by concurrent pullers.
	leases   map[string]*kitLease
	pullHeld map[string]int
}

func (k *Kit) newSpace() string {
	return fmt.Sprintf("kit-%s-%d", k.run, k.n.Add(1))
}

// InitializeScenario registers every step and the per-scenario hooks.
func (k *Kit) InitializeScenario(sc *godog.ScenarioContext) {
	sc.Before(func(ctx context.Context, s *godog.Scenario) (context.Context, error) {
		if k.cfg.Only != nil && !k.cfg.Only.MatchString(s.Name) {
			return ctx, godog.ErrSkip
		}
		w := &world{k: k, scenario: s.Name, tags: map[string]bool{}, as: PrincipalAdmin,
			res: map[string]*resource{}, etags: map[string]string{}, sent: map[string]*sent{}}
		for _, t := range s.Tags {
			w.tags[t.Name] = true
		}
		w.space = k.newSpace()
		w.scope = w.space
		ctx = context.WithValue(ctx, ctxKey{}, w)
		// Not applicable: a capability the host does not declare. Skipped:
		// the host declares it (or it is core) but the run lacks a token,
		// a hook or the time limit. Both are decided before the gate.
		for _, c := range requiredCapabilities(w.tags) {
			if !k.cfg.Capabilities[c] {
				w.notApplicable = "the host does not declare the capability " + c
				k.mu.Lock()
				k.notApplicable[w.scenario] = w.notApplicable
				k.mu.Unlock()
				return ctx, fmt.Errorf("%w: not applicable: %s", godog.ErrSkip, w.notApplicable)
			}
			if why := k.hookMissing(c); why != "" {
				return ctx, k.skip(ctx, why)
			}
		}
		for _, p := range []string{PrincipalViewer, PrincipalNarrow, PrincipalSender, PrincipalOther} {
			if w.tags["@needs-"+p] && k.cfg.Tokens[p] == "" {
				return ctx, k.skip(ctx, fmt.Sprintf("needs a token for the %q principal: pass --%s-token", p, p))
			}
		}
		if RunsAlone(w.tags) {
			k.gate.Lock()
		} else {
			k.gate.RLock()
		}
		w.locked = true
		w.started = time.Now()
		return ctx, nil
	})
	sc.After(func(ctx context.Context, s *godog.Scenario, err error) (context.Context, error) {
		w := get(ctx)
		if w == nil {
			return ctx, nil
		}
		if err := w.clearFaults(context.WithoutCancel(ctx)); err != nil {
			k.cfg.Log("%s: clearing its faults failed: %v", s.Name, err)
		}
		if w.locked {
			w.unlock()
		}
		res := ScenarioResult{Feature: s.Uri, Name: s.Name, Status: "passed"}
		for _, t := range s.Tags {
			res.Tags = append(res.Tags, t.Name)
		}
		if !w.started.IsZero() {
			res.Seconds = time.Since(w.started).Seconds()
		}
		// A scenario the Before hook skipped reaches here with no error
		// (godog does not pass that hook's ErrSkip on), so w.skipped, not
		// err, says it was skipped.
		switch {
		case w.notApplicable != "":
			res.Status, res.Reason = "not-applicable", w.notApplicable
		case w.skipped != "" || err != nil && errors.Is(err, godog.ErrSkip):
			k.mu.Lock()
			res.Status, res.Reason = "skipped", k.skipped[w.scenario]
			k.mu.Unlock()
		case err != nil:
			res.Status, res.Error = "failed", err.Error()
		}
		k.mu.Lock()
		k.done++
		n := k.done
		k.results = append(k.results, res)
		k.mu.Unlock()
		k.cfg.Log("[%d] %s: %s", n, res.Status, s.Name)
		k.cfg.Recorder.Forget(w.scope)
		return ctx, nil
	})
	registerResourceSteps(sc)
	registerDeliverySteps(sc)
	registerProducerSteps(sc)
	registerFaultSteps(sc)
	registerCheckerSteps(sc)
	registerExtSteps(sc)
	registerInspectSteps(sc)
	registerSerialSteps(sc)
	registerQueueOpSteps(sc)
	registerCoverageSteps(sc)
	registerPublishSteps(sc)
	registerPullSteps(sc)
	registerForensicsSteps(sc)
}

// AloneTags is the godog tag expression of the scenarios that must run
// alone: a restart stops the host under every other scenario, and a
// @serial scenario depends on or changes state of the whole host. The
// runner runs them one at a time in a phase of their own (tools/conform);
// the gate keeps them alone anyway when another runner mixes them in.
const AloneTags = "@restart,@serial"

// RunsAlone reports whether a scenario with these tags must run alone.
func RunsAlone(tags map[string]bool) bool { return tags["@restart"] || tags["@serial"] }

func (w *world) unlock() {
	if RunsAlone(w.tags) {
		w.k.gate.Unlock()
	} else {
		w.k.gate.RUnlock()
	}
}

// client is the HTTP client for the current principal.
func (w *world) client(ctx context.Context) (*Client, error) {
	tok := ""
	switch w.as {
	case "nobody":
	case "bogus":
		tok = "kit-not-a-token-" + w.k.run
	default:
		tok = w.k.cfg.Tokens[w.as]
		if t, ok := w.tokens[w.as]; ok {
			tok = t
		}
		if tok == "" {
			return nil, w.k.skip(ctx, fmt.Sprintf("needs a token for the %q principal: pass --%s-token", w.as, w.as))
		}
	}
	return &Client{Base: w.k.cfg.Base, Token: tok, HTTP: w.k.httpc}, nil
}

// admin is the admin client, for setup and checks whatever w.as is.
func (w *world) admin() *Client {
	return &Client{Base: w.k.cfg.Base, Token: w.k.cfg.Tokens[PrincipalAdmin], HTTP: w.k.httpc}
}

// do sends a request as the current principal with the one-shot headers.
func (w *world) do(ctx context.Context, method, path string, body any) (*Response, error) {
	return w.api(ctx, func(c *Client, h http.Header) (*Response, error) { return c.Do(ctx, method, path, body, h) })
}

// api makes one Host API call as the current principal with the one-shot
// headers, and remembers its answer as the last one.
func (w *world) api(ctx context.Context, f func(c *Client, h http.Header) (*Response, error)) (*Response, error) {
	c, err := w.client(ctx)
	if err != nil {
		return nil, err
	}
	h := w.header
	w.header = nil
	r, err := f(c, h)
	if err != nil {
		return nil, err
	}
	w.prev, w.last = w.last, r
	w.lastOp = nil
	return r, nil
}

// expand replaces the placeholders of feature text: {{uid:a}}, {{name:a}},
// {{space}}, {{space2}}, {{nouid}}, {{etag:a}}, {{recorder}}.
func (w *world) expand(s string) (string, error) {
	var err error
	out := placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		inner := m[2 : len(m)-2]
		kind, arg, _ := strings.Cut(inner, ":")
		switch kind {
		case "space":
			return w.space
		case "space2":
			return w.secondSpace()
		case "nouid":
			return "kit-no-such-uid-" + w.k.run
		case "recorder":
			return w.k.cfg.RecorderURL
		case "uid", "name":
			r := w.res[arg]
			if r == nil {
				err = fmt.Errorf("no resource %q in this scenario", arg)
				return m
			}
			if kind == "uid" {
				return r.uid
			}
			return r.name
		case "etag":
			e, ok := w.etags[arg]
			if !ok {
				err = fmt.Errorf("no remembered etag of %q", arg)
			}
			return e
		}
		err = fmt.Errorf("unknown placeholder %s", m)
		return m
	})
	return out, err
}

func (w *world) secondSpace() string {
	if w.space2 == "" {
		w.space2 = w.k.newSpace()
	}
	return w.space2
}

func (w *world) resource(alias string) (*resource, error) {
	r := w.res[alias]
	if r == nil {
		return nil, fmt.Errorf("no resource %q in this scenario", alias)
	}
	return r, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
