package host

import (
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
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/runtime/store/pgstore"
	"github.com/takoform/queuehost/server"
)

// MemoryDataDir as Config.DataDir keeps every state in memory.
const MemoryDataDir = ":memory:"

// PauseAfterIntentEnv, when set in the environment, makes every Operation
// stop after its intent is journaled (never reaching its effect), so that
// crash tests can kill the host at that point. Never set it in production.
const PauseAfterIntentEnv = "TAKOHOST_TEST_PAUSE_AFTER_INTENT"

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
	principals *auth.Config
	adminToken string
	eng        *delivery.Engine
	rt         *js.Runtime
	versions   *server.Versions // shared by the fetch route and the engine's resolver
	srv        *server.Server

	stopExpiry context.CancelFunc
	expiryDone chan struct{}

	mu       sync.Mutex
	httpSrv  *http.Server
	ln       net.Listener
	serveErr chan error
	shutdown bool
}

// New opens the store (the journal in cfg.DataDir, or memory), loads or
// creates host.json and the admin token, and starts the delivery engine,
// the JavaScript runtime and the server (whose Start rebuilds the engine and
// resumes unfinished Operations). It does not listen: see Start and Serve.
func New(ctx context.Context, cfg Config) (*Host, error) {
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
	h := &Host{cfg: cfg, log: cfg.Logger}

	var err error
	if cfg.StoreURL != "" {
		var pg *pgstore.Store
		if pg, err = openPostgres(ctx, cfg); err == nil {
			h.st = pg
			if cfg.DataDir == MemoryDataDir {
				h.principals, h.adminToken, err = auth.NewAdmin()
			} else {
				h.principals, h.adminToken, err = auth.EnsureAdmin(cfg.DataDir)
			}
		}
	} else if cfg.DataDir == MemoryDataDir {
		h.st = store.NewMemory()
		h.principals, h.adminToken, err = auth.NewAdmin()
	} else {
		var journaled *store.Journaled
		var rep store.RecoveryReport
		// Whether the data directory was in use before the store opens
		// it: a new journal then means the old one is gone.
		_, statErr := os.Stat(filepath.Join(cfg.DataDir, auth.ConfigFile))
		hadConfig := statErr == nil
		journaled, rep, err = store.Open(ctx, cfg.DataDir, store.Options{Logger: cfg.Logger})
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
			h.principals, h.adminToken, err = auth.EnsureAdmin(cfg.DataDir)
		}
	}
	if err != nil {
		h.closeStore()
		return nil, fmt.Errorf("host: %w", err)
	}
	if cfg.Faults != nil {
		h.st = faultyStore{Store: h.st, f: cfg.Faults}
	}

	allowed := append(append([]string(nil), cfg.AllowedFetchHosts...), h.principals.AllowedFetchHosts...)
	h.rt = js.New(js.Options{
		Sender:            sender{h},
		AllowedFetchHosts: allowed,
		InvocationTimeout: cfg.HandlerTimeout,
		Logger:            cfg.Logger,
	})
	h.versions = server.NewVersions(h.st)
	h.eng = delivery.New(h.st, resolver{h}, delivery.Options{HandlerTimeout: cfg.HandlerTimeout, Logger: cfg.Logger})
	opts := server.Options{
		Store: h.st, Auth: h.principals, Engine: h.eng, Workers: workers{h}, Versions: h.versions,
		Logger: cfg.Logger, ObserveInterval: cfg.ObserveInterval,
	}
	if os.Getenv(PauseAfterIntentEnv) != "" {
		opts.AfterIntent = func(ctx context.Context, op store.Operation) {
			cfg.Logger.Warn("paused after journaling the intent ("+PauseAfterIntentEnv+")", "operation", op.ID)
			<-ctx.Done()
		}
	}
	if h.srv, err = server.New(opts); err != nil {
		h.close()
		return nil, fmt.Errorf("host: %w", err)
	}
	if err := h.eng.Start(ctx); err != nil {
		h.close()
		return nil, fmt.Errorf("host: starting the delivery engine: %w", err)
	}
	if err := h.srv.Start(ctx); err != nil {
		h.close()
		return nil, fmt.Errorf("host: starting the server: %w", err)
	}
	ectx, cancel := context.WithCancel(context.Background())
	h.stopExpiry, h.expiryDone = cancel, make(chan struct{})
	go h.expireLoop(ectx)
	return h, nil
}

// RecordRetention is how long finished Operations and idempotency keys are
// kept (the contract's 24 hours); ExpiryInterval how often they are swept.
const (
	RecordRetention = 24 * time.Hour
	ExpiryInterval  = 10 * time.Minute
)

// expireLoop removes finished Operations and idempotency records older
// than RecordRetention, at start and every ExpiryInterval, so that the
// store's history stays bounded (see store.Store.ExpireRecords).
func (h *Host) expireLoop(ctx context.Context) {
	defer close(h.expiryDone)
	t := time.NewTicker(ExpiryInterval)
	defer t.Stop()
	for {
		n, err := h.st.ExpireRecords(ctx, time.Now().Add(-RecordRetention))
		switch {
		case err != nil && ctx.Err() == nil:
			h.log.Warn("expiring finished Operations failed; retrying later", "err", err)
		case n > 0:
			h.log.Info("expired finished Operations and idempotency keys", "records", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *Host) stopExpiryLoop() {
	if h.stopExpiry != nil {
		h.stopExpiry()
		<-h.expiryDone
		h.stopExpiry = nil
	}
}

// Handler is the Host API, for in-process use (httptest, the conformance
// runner).
func (h *Host) Handler() http.Handler { return h.srv }

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
	ln, err := net.Listen("tcp", h.cfg.Listen)
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	h.ln = ln
	h.httpSrv = &http.Server{
		Handler:           h.srv,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
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
	hs := h.httpSrv
	h.mu.Unlock()

	grace, cancel := context.WithTimeout(ctx, h.cfg.ShutdownGrace)
	defer cancel()
	var errs []error
	if hs != nil {
		if err := hs.Shutdown(grace); err != nil {
			errs = append(errs, fmt.Errorf("http: %w", err))
			_ = hs.Close()
		}
	}
	h.srv.Close()
	h.stopExpiryLoop()
	if err := h.eng.Shutdown(grace); err != nil {
		errs = append(errs, fmt.Errorf("engine: %w", err))
	}
	h.rt.Close()
	if err := h.st.Close(); err != nil {
		errs = append(errs, fmt.Errorf("store: %w", err))
	}
	return errors.Join(errs...)
}

func (h *Host) close() {
	if h.srv != nil {
		h.srv.Close()
	}
	if h.eng != nil {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.ShutdownGrace)
		_ = h.eng.Shutdown(ctx)
		cancel()
	}
	if h.rt != nil {
		h.rt.Close()
	}
	h.closeStore()
}

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
