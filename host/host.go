package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/runtime/broker"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/membudget"
	"github.com/takoform/queuehost/runtime/sandbox"
	"github.com/takoform/queuehost/runtime/startstop"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/server"
	"github.com/takoform/queuehost/telemetry"
)

// MemoryDataDir as Config.DataDir keeps every state in memory.
const MemoryDataDir = ":memory:"

// HTTP server limits (the long-poll wait is at most 60 s, hence the 90 s
// write timeout).
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 60 * time.Second
	WriteTimeout      = 90 * time.Second
	IdleTimeout       = 120 * time.Second
	// MaxHeaderBytes is Go's own cap, above server.MaxHeaderBytes, which
	// answers a problem for header blocks between the two.
	MaxHeaderBytes = server.HardMaxHeaderBytes
)

// Host is one running reference host.
type Host struct {
	cfg        Config
	log        *slog.Logger
	st         store.Store
	brokers    *broker.Store  // the store with broker queues (cfg.Brokers), nil without
	active     *activeStore   // the store on PostgreSQL, when cfg.StoreURL is set (active/standby)
	cluster    *cluster       // the store on PostgreSQL with cfg.ClusterActive (several active hosts)
	principals *auth.Registry // host.json, changed live by the principal routes
	adminToken string
	eng        *delivery.Engine
	rt         Runtime
	versions   *controller.Versions // shared by the fetch route and the engine's resolver
	ctl        *controller.Controller
	forms      *controller.Registry // the Forms served; the controller's, and asked which Forms the engine holds
	srv        *server.Server
	// tracing exports spans over OTLP (Config.Tracing); nil when off.
	tracing *telemetry.Tracing
	metrics *metrics
	// logs keeps the workers' logs: files under DataDir/logs, or memory
	// for ":memory:" (see js.OpenLogBook).
	logs *js.LogBook
	// budget bounds the request and response bodies in flight
	// (Config.MaxMemory).
	budget *membudget.Budget
	// invocations keeps each worker's recent queue handler invocations.
	invocations *invocations
	// history keeps each queue's figures over the last hour (history.go).
	history *history
	// stopping is closed when Shutdown begins, ending log long-polls.
	stopping chan struct{}
	// parts is the host's lifecycle: store, runtime, engine, controller,
	// record expiry, started in that order and stopped in reverse.
	parts lifecycle
	// notReady is why GET /readyz answers 503: set until every part has
	// started (the store recovered, the engine rebuilt), and again from
	// the start of Shutdown; nil while the host is ready.
	notReady atomic.Pointer[string]

	mu       sync.Mutex
	httpSrv  *http.Server
	ln       net.Listener
	metSrv   *http.Server // on cfg.MetricsListen
	metLn    net.Listener
	serveErr chan error
	shutdown bool
}

// New opens the store (the journal in cfg.DataDir, or memory), loads or
// creates host.json and the admin token, and starts the delivery engine,
// the JavaScript runtime and the server (whose Start rebuilds the engine and
// resumes unfinished Operations). It does not listen: see Start and Serve.
func New(ctx context.Context, cfg Config) (*Host, error) {
	if os.Getenv(sandbox.EnvVar) == "1" {
		return nil, errors.New("host: this process is a worker sandbox: the program must call sandbox.Main before anything else")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("host: Config.DataDir is required (\":memory:\" for a host without disk)")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8787"
	}
	if cfg.HandlerTimeout <= 0 {
		cfg.HandlerTimeout = 30 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.ObserveInterval <= 0 {
		cfg.ObserveInterval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.MaxMemory <= 0 {
		cfg.MaxMemory, _ = membudget.DefaultHostMemory()
	}
	h := &Host{cfg: cfg, log: cfg.Logger, stopping: make(chan struct{})}
	tracing, err := telemetry.New(ctx, cfg.Tracing)
	if err != nil {
		return nil, fmt.Errorf("host: tracing: %w", err)
	}
	h.tracing = tracing
	h.budget = membudget.New(membudget.Limits{Total: BodyBudget(cfg.MaxMemory)})
	h.setNotReady("the store, runtime, engine and controller are starting")
	h.metrics = newMetrics(h)

	var pcfg *auth.Config // host.json's principals
	// The hosts of a cluster may share one data directory (they must share
	// host.json): each keeps its workers' logs in a directory of its own,
	// named by its -host-id if given, else by its listen address, both
	// stable across its restarts.
	logsDir := filepath.Join(cfg.DataDir, LogsDir)
	if cfg.StoreURL != "" {
		key := cfg.HostID
		if key == "" {
			key = cfg.Listen
		}
		logsDir = filepath.Join(logsDir, safeName(key))
	}
	if cfg.StoreURL != "" {
		var pg *pgstore.Store
		if pg, err = openPostgres(ctx, cfg); err == nil {
			if cfg.ClusterTTL <= 0 {
				cfg.ClusterTTL = DefaultClusterTTL
			}
			if cfg.HostID == "" {
				cfg.HostID = newHostID()
			}
			if cfg.ClusterActive {
				h.cluster = newCluster(pg, cfg.HostID, cfg.Listen, cfg.ClusterTTL, cfg.Logger)
			} else if h.active, err = becomeActive(ctx, pg, cfg.HostID, cfg.Listen, cfg.ClusterTTL, cfg.Logger); err != nil {
				pg.Close()
			}
		}
		if err == nil {
			if h.cluster != nil {
				h.st = clusterStore{Store: h.cluster.pg, c: h.cluster}
			} else {
				h.st = h.active
			}
			if cfg.DataDir == MemoryDataDir {
				pcfg, h.adminToken, err = auth.NewAdmin()
			} else {
				pcfg, h.adminToken, err = auth.EnsureAdmin(cfg.DataDir)
			}
		}
	} else if cfg.DataDir == MemoryDataDir {
		h.st = store.NewMemory()
		pcfg, h.adminToken, err = auth.NewAdmin()
	} else {
		var journaled *store.Journaled
		var rep store.RecoveryReport
		// Whether the data directory was in use before the store opens
		// it: a new journal then means the old one is gone.
		_, statErr := os.Stat(filepath.Join(cfg.DataDir, auth.ConfigFile))
		hadConfig := statErr == nil
		journaled, rep, err = store.Open(ctx, cfg.DataDir, store.Options{Logger: cfg.Logger, ObserveSync: func(d time.Duration) { h.metrics.fsync.Observe(d.Seconds()) }})
		if err == nil {
			h.st = journaled
			// A cut torn tail is logged by the journal itself, as a warning
			// with file, offset and bytes dropped; this line says what the
			// host started from.
			switch {
			case rep.Created && hadConfig:
				cfg.Logger.Warn("created a new, empty journal in a data directory that already holds "+auth.ConfigFile+": every queue, message and resource of an earlier journal there is gone", "dir", cfg.DataDir)
			case rep.Created:
				cfg.Logger.Info("created a new journal", "dir", cfg.DataDir)
			default:
				cfg.Logger.Info("journal recovered", "dir", cfg.DataDir, "segments", rep.Segments, "frames", rep.Frames, "bytes", rep.Bytes, "duration", rep.Duration.String(), "tailCut", rep.Truncated, "migrated", rep.Migrated)
			}
			pcfg, h.adminToken, err = auth.EnsureAdmin(cfg.DataDir)
		}
	}
	if err != nil {
		h.closeStore()
		return nil, fmt.Errorf("host: %w", err)
	}
	if o := cfg.QueueOffering; o != "" && o != controller.OfferingEmbedded && o != controller.OfferingSerialized && len(cfg.Brokers) == 0 {
		err = fmt.Errorf("-queue-offering %s: no broker of that name (-broker %s=URL)", o, o)
	}
	if err == nil && len(cfg.Brokers) > 0 {
		if h.brokers, err = openBrokers(ctx, cfg, h.st); err == nil {
			h.st = h.brokers
		}
	}
	if err != nil {
		h.closeStore()
		return nil, fmt.Errorf("host: %w", err)
	}
	if cfg.Faults != nil {
		h.st = faultyStore{Store: h.st, f: cfg.Faults}
	}
	if cfg.DataDir == MemoryDataDir {
		h.principals = auth.NewRegistry(pcfg, "")
	} else {
		h.principals = auth.NewRegistry(pcfg, filepath.Join(cfg.DataDir, auth.ConfigFile))
	}

	h.parts.add("store", startstop.Closer(h.st.Close))
	if cfg.DataDir == MemoryDataDir {
		h.logs = js.NewLogBook(0)
	} else if h.logs, err = js.OpenLogBook(logsDir, 0); err != nil {
		h.closeStore()
		return nil, fmt.Errorf("host: worker logs: %w", err)
	}
	h.parts.add("worker logs", &logsPart{h: h})
	if cfg.DataDir != MemoryDataDir {
		h.parts.add("principals reload", &principalsPart{h: h})
	}
	allowed := append(append([]string(nil), cfg.AllowedFetchHosts...), pcfg.AllowedFetchHosts...)
	rtOpts := js.Options{
		Sender:            sender{h},
		AllowedFetchHosts: allowed,
		InvocationTimeout: cmp.Or(cfg.FetchTimeout, cfg.HandlerTimeout),
		Logger:            cfg.Logger,
		Logs:              h.logs,
		BodyBudget:        h.budget,
	}
	switch {
	case cfg.Runtime != nil:
		h.rt, err = cfg.Runtime(rtOpts)
	case cfg.UnsafeInProcessWorkers:
		cfg.Logger.Warn("worker code runs inside the host process (UnsafeInProcessWorkers): one hostile worker can take the host down; for trusted code and benchmarks only")
		h.rt = NewGojaRuntime(rtOpts)
	default:
		h.rt, err = NewSandboxRuntime(sandbox.Options{
			Sender:            rtOpts.Sender,
			AllowedFetchHosts: rtOpts.AllowedFetchHosts,
			InvocationTimeout: rtOpts.InvocationTimeout,
			MemoryLimit:       cfg.SandboxMemoryLimit,
			IdleTimeout:       cfg.SandboxIdleTimeout,
			MaxSandboxes:      cfg.MaxSandboxes,
			Instances:         cfg.SandboxesPerWorker,
			UID:               cfg.SandboxUID,
			GID:               cfg.SandboxGID,
			Logger:            cfg.Logger,
			Logs:              h.logs,
			BodyBudget:        h.budget,
		})
	}
	if err != nil {
		h.closeStore()
		return nil, fmt.Errorf("host: the JavaScript runtime: %w", err)
	}
	h.parts.add("JavaScript runtime", h.rt)
	h.versions = controller.NewVersions(h.st)
	h.forms = controller.BuiltinWith(queueForm(cfg, h.brokers))
	h.invocations = newInvocations(time.Now)
	h.history = newHistory()
	events := newDeliveryEvents(h)
	h.parts.add("delivery events", events)
	engOpts := delivery.Options{HandlerTimeout: cfg.HandlerTimeout, Logger: cfg.Logger, ObserveBatch: func(o delivery.BatchObservation) { h.metrics.observeBatch(o); events.batch(o) }, OnEvent: events.post}
	if h.tracing != nil {
		engOpts.Tracer = h.tracing
	}
	engOpts.HostID = attemptHostID(cfg)
	engStore := h.st
	var ctlEngine controller.Engine
	if h.cluster != nil {
		// Several active hosts: the engine holds the queues this host
		// owns, its delivery writes fenced by their leases.
		engStore, engOpts.Remote = fencedStore{Store: h.cluster.pg, c: h.cluster}, h.cluster
		if cfg.Faults != nil {
			engStore = faultyStore{Store: engStore, f: cfg.Faults}
		}
	}
	h.eng = delivery.New(engStore, resolver{h}, engOpts)
	ctlEngine = h.eng
	if h.brokers != nil {
		h.brokers.SetAdopter(h.eng.Adopt)
	}
	if h.cluster != nil {
		h.cluster.eng = h.eng
		ctlEngine = clusterEngine{h.cluster}
	}
	if h.cluster != nil {
		h.parts.add("cluster leases", clusterLeases{h.cluster})
	}
	if h.tracing != nil {
		// Stopped after the engine: its last spans are exported.
		h.parts.add("tracing", tracingPart{h.tracing})
	}
	h.parts.add("delivery engine", h.eng)
	ctlOpts := controller.Options{
		Store: h.st, Engine: ctlEngine, Workers: workers{h}, Versions: h.versions, Forms: h.forms,
		Logger: cfg.Logger, ObserveInterval: cfg.ObserveInterval, AfterIntent: cfg.AfterIntent,
		ObservationPaused: observationPaused(cfg.Faults), History: h.history.QueueHistory,
		// The publish extension sends as the producer Binding does: the
		// engine's send (sendRemote for a queue another host of a cluster
		// owns).
		Sender: h.eng,
		// The pull extension leases through the engine that holds the
		// pull consumer (spec/peers.md §Pull consumers).
		Puller: h.eng,
	}
	if h.brokers != nil {
		ctlOpts.ExternalQueues = h.brokers
	}
	if h.cluster != nil {
		if h.cluster.locker, err = h.cluster.pg.NewLocker(ctx, 4); err != nil {
			_ = h.rt.Stop(ctx)
			h.closeStore()
			return nil, fmt.Errorf("host: %w", err)
		}
		locker := h.cluster.locker
		h.cluster.plain = h.st
		ctlOpts.SharedLock = func(ctx context.Context, space string) (func(), error) { return locker.Lock(ctx, "space/"+space) }
		ctlOpts.ClaimOperation = h.cluster.claimOperation
		ctlOpts.CancelElsewhere = h.cluster.CancelElsewhere
		ctlOpts.HandOff = func(op store.Operation) { h.cluster.handOver(op.ResourceUID) }
		ctlOpts.Puller = clusterPuller{h}
	}
	h.ctl, err = controller.New(ctlOpts)
	if err == nil {
		h.parts.add("controller", h.ctl)
		if h.cluster != nil {
			h.cluster.reindex = h.ctl.Reindex
			h.cluster.resume = func(ctx context.Context) { h.ctl.ResumeUnfinished(ctx, 2*h.cluster.ttl) }
			h.cluster.resumeQueue = h.ctl.ResumeQueueOps
			h.cluster.cancelOp = h.ctl.CancelQueueOp
			h.parts.add("cluster", h.cluster)
		}
		h.parts.add("record expiry", &expiry{h: h})
		h.parts.add("queue history", &historySampler{h: h})
		h.srv, err = server.New(server.Options{Controller: h.ctl, Auth: h.principals, Principals: h.principals, Workers: workers{h}, Logger: cfg.Logger, Capabilities: capabilities(cfg), Ready: h.ready, ObserveRequest: h.metrics.observeRequest, BodyBudget: h.budget, TraceURL: h.traceURL()})
	}
	if err != nil {
		_ = h.rt.Stop(ctx)
		h.closeStore()
		return nil, fmt.Errorf("host: %w", err)
	}
	if err := h.parts.Start(ctx); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	h.notReady.Store(nil)
	return h, nil
}

func (h *Host) setNotReady(why string) { h.notReady.Store(&why) }

// ready is the server's readiness: nil once New has started every part,
// until Shutdown begins.
func (h *Host) ready() error {
	if why := h.notReady.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}

// expiry removes finished Operations and idempotency records older than
// RecordRetention, at start and every ExpiryInterval, so that the store's
// history stays bounded (see store.Store.ExpireRecords).
type expiry struct {
	h *Host
	startstop.Base
}

func (e *expiry) Start(context.Context) error {
	e.Every(ExpiryInterval, true, e.sweep)
	return nil
}

func (e *expiry) sweep(ctx context.Context) {
	n, err := e.h.st.ExpireRecords(ctx, time.Now().Add(-RecordRetention))
	switch {
	case err != nil && ctx.Err() == nil:
		e.h.log.Warn("expiring finished Operations failed; retrying later", "err", err)
	case n > 0:
		e.h.log.Info("expired finished Operations and idempotency keys", "records", n)
	}
}

// RecordRetention is how long finished Operations and idempotency keys are
// kept (the contract's 24 hours); ExpiryInterval how often they are swept.
const (
	RecordRetention = 24 * time.Hour
	ExpiryInterval  = 10 * time.Minute
)

// BodyBudget is the budget of bodies in flight of a host of maxMemory:
// half of it (Config.MaxMemory).
func BodyBudget(maxMemory int64) int64 { return maxMemory / 2 }

// Budget is the host's budget of request and response bodies in flight
// (tests and metrics read it).
func (h *Host) Budget() *membudget.Budget { return h.budget }

// Handler is the Host API, for in-process use (httptest, the conformance
// runner).
func (h *Host) Handler() http.Handler {
	if h.tracing != nil {
		return h.tracing.Middleware(h.srv)
	}
	return h.srv
}

// AdminToken is the admin principal's token when the data directory still
// holds admin-token (always for ":memory:"), else "".
func (h *Host) AdminToken() string { return h.adminToken }

// AdminTokenPath is where the admin token was written ("" for ":memory:").
func (h *Host) AdminTokenPath() string {
	if h.cfg.DataDir == MemoryDataDir {
		return ""
	}
	return h.cfg.DataDir + string(os.PathSeparator) + auth.AdminTokenFile
}

// Start listens on cfg.Listen and serves in the background.
func (h *Host) Start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return errors.New("host: shut down")
	}
	if h.httpSrv != nil {
		return errors.New("host: already started")
	}
	raw, err := net.Listen("tcp", h.cfg.Listen)
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	lim, err := server.LimitListener(raw, server.ConnLimits{
		MaxConns: h.cfg.MaxConns, MaxConnsPerClient: h.cfg.MaxConnsPerClient,
		TrustedProxies: h.cfg.TrustedProxies, Logger: h.log,
	})
	if err != nil {
		raw.Close()
		return fmt.Errorf("host: %w", err)
	}
	var ln net.Listener = lim
	if h.cfg.MetricsListen != "" {
		rawm, err := net.Listen("tcp", h.cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("host: metrics: %w", err)
		}
		// The same caps as the Host API's, with totals of its own
		// (server.MetricsMaxConns): unauthenticated, it must not take the
		// host's descriptors either (#36).
		perClient := server.MetricsMaxConnsPerClient
		if c := h.cfg.MaxConnsPerClient; c > 0 && c < perClient {
			perClient = c
		}
		mln, err := server.LimitListener(rawm, server.ConnLimits{
			MaxConns: server.MetricsMaxConns, MaxConnsPerClient: perClient,
			TrustedProxies: h.cfg.TrustedProxies, Logger: h.log, Name: "the metrics listener",
		})
		if err != nil {
			rawm.Close()
			ln.Close()
			return fmt.Errorf("host: metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", h.metrics.handler())
		h.metLn = mln
		h.metSrv = &http.Server{Handler: mux, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout,
			IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes, ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelWarn)}
		go func(s *http.Server) { _ = s.Serve(mln) }(h.metSrv)
	}
	h.ln = ln
	if h.cluster != nil {
		// Other hosts forward pull requests here (cluster_pull.go).
		a := raw.Addr().String()
		h.cluster.bound.Store(&a)
	}
	headerTimeout, idleTimeout := ReadHeaderTimeout, IdleTimeout
	if h.cfg.HeaderTimeout > 0 {
		headerTimeout = h.cfg.HeaderTimeout
	}
	if h.cfg.IdleTimeout > 0 {
		idleTimeout = h.cfg.IdleTimeout
	}
	h.httpSrv = &http.Server{
		Handler:           markForwarded(h.Handler()),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	h.serveErr = make(chan error, 1)
	go func(s *http.Server) {
		err := s.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		h.serveErr <- err
	}(h.httpSrv)
	return nil
}

// Serve is Start, then waits until the server stops (Shutdown, or an
// accept error).
func (h *Host) Serve() error {
	if err := h.Start(); err != nil {
		return err
	}
	return <-h.serveErr
}

// Addr is the address the host listens on ("" before Start).
func (h *Host) Addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ln == nil {
		return ""
	}
	return h.ln.Addr().String()
}

// MetricsAddr is the address /metrics is served on ("" without
// Config.MetricsListen or before Start).
func (h *Host) MetricsAddr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.metLn == nil {
		return ""
	}
	return h.metLn.Addr().String()
}

// URL is the base URL of the Host API ("" before Start).
func (h *Host) URL() string {
	if a := h.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// Shutdown stops accepting requests and lets those running finish, stops
// the server's background work, shuts the engine down within
// cfg.ShutdownGrace (running handlers may finish; nothing unsettled is
// acknowledged) and closes the runtime and the store. ctx bounds it all.
func (h *Host) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	if h.shutdown {
		h.mu.Unlock()
		return nil
	}
	h.shutdown = true
	close(h.stopping)
	h.setNotReady("the host is shutting down")
	hs := h.httpSrv
	ms := h.metSrv
	h.mu.Unlock()
	if ms != nil {
		_ = ms.Close()
	}

	grace, cancel := context.WithTimeout(ctx, h.cfg.ShutdownGrace)
	defer cancel()
	var errs []error
	if hs != nil {
		if err := hs.Shutdown(grace); err != nil {
			errs = append(errs, fmt.Errorf("http: %w", err))
			_ = hs.Close()
		}
	}
	// Record expiry, the controller, the engine (running handlers may
	// finish within the grace; nothing unsettled is acknowledged), the
	// runtime, the store.
	if err := h.parts.Stop(grace); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// tracingPart flushes and stops the exporter when the host stops.
type tracingPart struct{ t *telemetry.Tracing }

func (tracingPart) Start(context.Context) error      { return nil }
func (p tracingPart) Stop(ctx context.Context) error { return p.t.Shutdown(ctx) }

func (h *Host) closeStore() {
	if h.st != nil {
		_ = h.st.Close()
	}
}

// openPostgres opens the PostgreSQL store of cfg.StoreURL, refusing any
// other scheme with a message that says what is accepted.
func openPostgres(ctx context.Context, cfg Config) (*pgstore.Store, error) {
	u := cfg.StoreURL
	if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		return nil, fmt.Errorf("store %q: only PostgreSQL connection strings (postgres://user@host:5432/db) are supported", redactURL(u))
	}
	st, err := pgstore.Open(ctx, pgstore.Config{URL: u, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("store on PostgreSQL", "database", redactURL(u), "schema", pgstore.SchemaVersion())
	return st, nil
}

// redactURL drops a password from a connection string for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// Lost is closed when a host on a shared PostgreSQL store lost its active
// lease to another host: it can no longer write anything, and should shut
// down and exit. Never closed for the journal or memory stores.
func (h *Host) Lost() <-chan struct{} {
	if h.active == nil {
		return nil
	}
	return h.active.lost
}

// traceURL is where a traced message's listing links to: the operator's
// trace view, only while the host traces (Config.Tracing.ViewURL).
func (h *Host) traceURL() string {
	if h.tracing == nil {
		return ""
	}
	return h.cfg.Tracing.ViewURL
}
