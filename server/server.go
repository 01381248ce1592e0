package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/console"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/membudget"
)

// Limits the server enforces (spec/host-api.md).
const (
	MaxBodyBytes   = 8 << 20
	MaxJSONDepth   = 64
	MaxWaitSeconds = 60
)

// Workers is what the server needs of the JavaScript runtime: the fetch
// route and the worker's log.
type Workers interface {
	// Fetch invokes v's fetch handler. req is already the Request the
	// worker sees (http://worker.invalid/<path>?<query>, no
	// Authorization). An error means the handler threw or timed out.
	Fetch(ctx context.Context, v *abi.Version, req *http.Request) (*http.Response, error)
	// Logs returns up to limit entries of the worker's log with seq > after.
	// With wait > 0 and no such entry yet, it first waits up to wait for
	// one (or until ctx ends).
	Logs(ctx context.Context, workerUID string, after int64, limit int, wait time.Duration) ([]api.LogEntry, error)
	// Invocations returns up to limit of the worker's most recent queue
	// handler invocations, newest first.
	Invocations(workerUID string, limit int) []api.Invocation
}

// Authenticator maps bearer tokens to principals (*auth.Config is one).
type Authenticator interface {
	Authenticate(token string) (*auth.Principal, bool)
}

// Options configures a Server. Controller, Auth, Principals and Workers are
// required.
type Options struct {
	Controller *controller.Controller
	Auth       Authenticator
	Workers    Workers
	// Principals is what the admin routes (/v2/principals) manage.
	Principals Principals
	// Logger gets the access log and the server's own events; slog.Default
	// when nil.
	Logger *slog.Logger
	// Capabilities is the document GET /v2/capabilities serves (the
	// conformance kit's features/capabilities.schema.json); nil declares
	// none.
	Capabilities map[string]any
	// Ready says whether the host is ready to serve (GET /readyz): nil once
	// the store is recovered and the engine started, an error saying what
	// it waits for before that and during shutdown. Nil Ready is always
	// ready (the server is only built around a started controller).
	Ready func() error
	// ObserveRequest, when set, sees every request once answered: the
	// route's ServeMux pattern ("GET /v2/spaces/{space}/resources", or
	// "unmatched"), the status and the duration (metrics; a bounded set of
	// routes, never a path).
	ObserveRequest func(route string, status int, d time.Duration)
	// TraceURL, when set, is where the operator's trace backend shows a
	// trace, with {traceId} standing for its ID (takohost -trace-url): a
	// traced message's listing links to it (spec/peers.md §Tracing).
	TraceURL string
	// BodyBudget, when set, bounds the memory of the fetch route's request
	// and response bodies in flight (runtime/membudget); nil: no bound.
	BodyBudget *membudget.Budget
}

// Server is the Host API v2 handler.
type Server struct {
	ctl        *controller.Controller
	authn      Authenticator
	principals Principals
	workers    Workers
	log        *slog.Logger

	handler http.Handler
	mux     *http.ServeMux
	openapi map[string]any
	space   *nameRule         // the space path parameter's rule
	params  map[string]string // query parameter name -> schema type
	caps    map[string]any
	ready   func() error
	observe func(route string, status int, d time.Duration)
	budget  *membudget.Budget
	// traceURL: Options.TraceURL.
	traceURL string
	heavy    heavyReads
}

var _ api.StrictServerInterface = (*Server)(nil)

// New builds the server's handler. The controller's lifecycle is the
// caller's: start it before serving.
func New(opts Options) (*Server, error) {
	if opts.Controller == nil || opts.Auth == nil || opts.Principals == nil || opts.Workers == nil {
		return nil, errors.New("server: Controller, Auth, Principals and Workers are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{ctl: opts.Controller, authn: opts.Auth, principals: opts.Principals, workers: opts.Workers, log: opts.Logger, caps: opts.Capabilities, ready: opts.Ready, observe: opts.ObserveRequest, budget: opts.BodyBudget, traceURL: opts.TraceURL, heavy: newHeavyReads(DefaultHeavyReads())}

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

	routes, err := routesFromOpenAPI(s.openapi)
	if err != nil {
		return nil, err
	}
	if s.space, err = paramRule(s.openapi, "space"); err != nil {
		return nil, err
	}
	s.params = paramTypes(s.openapi)
	mux := &guardedMux{ServeMux: http.NewServeMux(), s: s, routes: routes}
	s.mux = mux.ServeMux
	strict := api.NewStrictHandlerWithOptions(s, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeProblem(w, r, invalidRequest("the request body cannot be decoded: %v", err))
		},
		ResponseErrorHandlerFunc: s.writeProblem,
	})
	api.HandlerWithOptions(strict, api.StdHTTPServerOptions{
		BaseRouter: mux,
		ErrorHandlerFunc: func(w http.ResponseWriter, r *http.Request, err error) {
			s.writeProblem(w, r, s.paramProblem(err))
		},
		Middlewares: []api.MiddlewareFunc{s.canonicalIntegers},
	})
	mux.HandleFunc("/v2/spaces/{space}/resources/{uid}/fetch", s.serveFetch)
	mux.HandleFunc("/v2/spaces/{space}/resources/{uid}/fetch/{path...}", s.serveFetch)
	// The web console: static files beside the Host API, public like
	// /healthz (they hold no data; the console calls /v2/ with a token).
	mux.Handle("GET /console/", console.Handler())
	mux.Handle("GET /console", console.Handler())
	if len(mux.missing) > 0 {
		return nil, fmt.Errorf("server: routes without a route guard entry in the OpenAPI document: %s", strings.Join(mux.missing, ", "))
	}

	s.handler = s.requestID(s.accessLog(s.recoverer(s.headerLimit(http.HandlerFunc(s.route)))))
	return s, nil
}

// ServeHTTP serves the Host API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }
