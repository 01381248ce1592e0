package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// Limits the server enforces (spec/host-api.md).
const (
	MaxBodyBytes         = 8 << 20
	MaxJSONDepth         = 64
	MaxResourcesPerSpace = 10000
	// MaxModuleBytes is the runtime's limit on a WorkerVersion's modules
	// (spec/runtime-abi.md §WorkerVersion).
	MaxModuleBytes = 4 << 20
	MaxWaitSeconds = 60
	// OfferingEmbedded is the one offering of the reference host.
	OfferingEmbedded = "embedded"
)

// Engine is what the server needs of the delivery engine
// (runtime/delivery.Engine implements it).
type Engine interface {
	AddQueue(ctx context.Context, q delivery.QueueConfig) error
	UpdateQueue(ctx context.Context, q delivery.QueueConfig) error
	// RemoveQueue forgets the queue and deletes its messages.
	RemoveQueue(ctx context.Context, uid string) error
	// QueueStats is the number of messages the queue holds;
	// abi.ErrUnknownQueue when the engine does not hold it.
	QueueStats(ctx context.Context, uid string) (int, error)
	Attach(ctx context.Context, c delivery.ConsumerConfig) error
	UpdateConsumer(ctx context.Context, c delivery.ConsumerConfig) error
	// Detach returns nil only once no handler of the consumer runs and
	// everything unsettled was left for redelivery.
	Detach(ctx context.Context, consumerUID string) error
}

// AttachedReporter is optionally implemented by an Engine that can say
// whether it has a consumer attached. Without it, observed.consumerAttached
// reports what the server itself attached and detached.
type AttachedReporter interface {
	ConsumerAttached(ctx context.Context, consumerUID string) (bool, error)
}

// Workers is what the server needs of the JavaScript runtime.
type Workers interface {
	// Compile loads v's modules and returns the handlers its default
	// export provides ("fetch", "queue"). A *CompileError reports
	// modules that do not load.
	Compile(ctx context.Context, v *abi.Version) ([]string, error)
	// Fetch invokes v's fetch handler. req is already the Request the
	// worker sees (http://worker.invalid/<path>?<query>, no
	// Authorization). An error means the handler threw or timed out.
	Fetch(ctx context.Context, v *abi.Version, req *http.Request) (*http.Response, error)
	// Logs returns up to limit entries of the worker's log with seq > after.
	Logs(ctx context.Context, workerUID string, after int64, limit int) ([]api.LogEntry, error)
	// Evict drops whatever the runtime caches for a deleted version.
	Evict(versionUID string)
}

// Authenticator maps bearer tokens to principals (*auth.Config is one).
type Authenticator interface {
	Authenticate(token string) (*auth.Principal, bool)
}

// Options configures a Server. Store, Auth, Engine and Workers are required.
type Options struct {
	Store   store.Store
	Auth    Authenticator
	Engine  Engine
	Workers Workers
	// Logger gets the access log and the server's own events; slog.Default
	// when nil.
	Logger *slog.Logger
	// ObserveInterval is how often observed is refreshed and unsettled
	// Operations are retried; 10 s when zero.
	ObserveInterval time.Duration
	// SyncWait is how long a create, update or delete waits for its
	// Operation before answering 202 with it unfinished; 2 s when zero.
	SyncWait time.Duration
	// Versions resolves workers to their selected versions; a new one over
	// Store when nil. The host shares it with the delivery engine's
	// resolver, so that both reuse the decoded versions.
	Versions *Versions
	// MaxResourcesPerSpace is 10 000 when zero.
	MaxResourcesPerSpace int
	// AfterIntent, when set, runs after an Operation and its intent are
	// journaled and before its effect: a test hook (the crash tests pause
	// here and kill the host).
	AfterIntent func(ctx context.Context, op store.Operation)
	// Now is time.Now when nil.
	Now func() time.Time
}

// Server is the Host API v2 handler.
type Server struct {
	st       store.Store
	authn    Authenticator
	eng      Engine
	workers  Workers
	versions *Versions
	log      *slog.Logger
	opts     Options
	now      func() time.Time

	handler http.Handler
	mux     *http.ServeMux
	openapi map[string]any

	// mu serialises admission and every read-modify-write of a resource
	// record (see the package documentation).
	mu sync.Mutex
	// inflight maps a resource UID to its unresolved Operation.
	inflight map[string]inflightOp
	// attached records the consumers this server attached.
	attached map[string]bool

	opMu    sync.Mutex
	watches map[string]chan struct{} // Operation ID -> closed on its next change
	driving map[string]bool          // Operation IDs being driven now
	retry   map[string]bool          // Operation IDs the reconciler re-drives

	obs observer // see observe.go

	baseCtx context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
}

var _ api.StrictServerInterface = (*Server)(nil)

// New builds the server's handler. Call Start before serving, so that the
// engine holds the stored queues and consumers and unfinished Operations
// resume.
func New(opts Options) (*Server, error) {
	if opts.Store == nil || opts.Auth == nil || opts.Engine == nil || opts.Workers == nil {
		return nil, errors.New("server: Store, Auth, Engine and Workers are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ObserveInterval <= 0 {
		opts.ObserveInterval = 10 * time.Second
	}
	if opts.SyncWait <= 0 {
		opts.SyncWait = 2 * time.Second
	}
	if opts.MaxResourcesPerSpace <= 0 {
		opts.MaxResourcesPerSpace = MaxResourcesPerSpace
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Versions == nil {
		opts.Versions = NewVersions(opts.Store)
	}
	s := &Server{
		st: opts.Store, authn: opts.Auth, eng: opts.Engine, workers: opts.Workers, versions: opts.Versions,
		log: opts.Logger, opts: opts, now: opts.Now,
		inflight: map[string]inflightOp{}, attached: map[string]bool{},
		watches: map[string]chan struct{}{}, driving: map[string]bool{}, retry: map[string]bool{},
	}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())

	sw, err := api.GetSwagger()
	if err != nil {
		return nil, fmt.Errorf("server: embedded OpenAPI document: %w", err)
	}
	b, err := json.Marshal(sw)
	if err != nil {
		return nil, fmt.Errorf("server: embedded OpenAPI document: %w", err)
	}
	if err := json.Unmarshal(b, &s.openapi); err != nil {
		return nil, fmt.Errorf("server: embedded OpenAPI document: %w", err)
	}

	s.mux = http.NewServeMux()
	strict := api.NewStrictHandlerWithOptions(s, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeProblem(w, r, invalidRequest("the request body cannot be decoded: %v", err))
		},
		ResponseErrorHandlerFunc: s.writeProblem,
	})
	api.HandlerWithOptions(strict, api.StdHTTPServerOptions{
		BaseRouter:  s.mux,
		Middlewares: []api.MiddlewareFunc{s.routeGuard},
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeProblem(w, r, invalidRequest("%v", err))
		},
	})
	fetch := s.routeGuard(http.HandlerFunc(s.serveFetch))
	s.mux.Handle("/v2/spaces/{space}/resources/{uid}/fetch", fetch)
	s.mux.Handle("/v2/spaces/{space}/resources/{uid}/fetch/{path...}", fetch)

	s.handler = s.requestID(s.accessLog(s.recoverer(s.headerLimit(http.HandlerFunc(s.route)))))
	return s, nil
}

// ServeHTTP serves the Host API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close stops the observer and the reconciler and waits for Operations
// being driven to return (an Operation cut short stays journaled and
// resumes on the next start).
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

func (s *Server) go_(f func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.baseCtx)
	}()
}
