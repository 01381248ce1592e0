// Package host assembles the reference host: the journaled store, the
// delivery engine, the JavaScript runtime and the Host API server. The
// command in cmd/takohost, the conformance runner's in-process mode and the
// end-to-end tests all start a host through this package.
package host

import (
	"context"
	"log/slog"
	"time"

	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/telemetry"
)

// Config configures one host. The zero value is not usable: DataDir is
// required (":memory:" keeps state in memory only, for tests).
type Config struct {
	// DataDir holds the journal, host.json (principals and hashed tokens)
	// and, on first start, admin-token.
	DataDir string
	// StoreURL, when set, keeps the store in that PostgreSQL database
	// (postgres://user@host:port/db?pool_max_conns=N) instead of the
	// journal in DataDir, which then holds only host.json and the admin
	// token. Several hosts may share one database (spec/cluster.md).
	StoreURL string
	// ClusterTTL is the active lease's ttl on a shared PostgreSQL store
	// (DefaultClusterTTL when zero): how long a standby host on the same
	// database waits after the active host died before it takes over.
	ClusterTTL time.Duration
	// ClusterActive, with StoreURL, makes every host on the database
	// active: each serves the whole Host API and delivers the queues it
	// owns by lease (spec/cluster.md). Without it, one host at a time is
	// active and the others wait as standbys.
	ClusterActive bool
	// Brokers are the host's message brokers (spec/peers.md §Brokers):
	// each is an Offering of AtLeastOnceQueue whose queues keep their
	// messages on it.
	Brokers []BrokerConfig
	// QueueOffering is the Offering of a queue created without one
	// ("embedded" when empty): a broker's name makes every such queue a
	// queue on that broker.
	QueueOffering string
	// HostID names this host in the database's leases and membership;
	// hostname-pid-random when empty.
	HostID string
	// Listen is the TCP address for the Host API, "127.0.0.1:8787" by
	// default. "127.0.0.1:0" picks a free port (see Host.Addr).
	Listen string
	// MaxConns caps the Host API's open connections (when zero, half the
	// file descriptor limit, at most 4096: server.DefaultMaxConns) and
	// MaxConnsPerClient those of one client address (256 when zero); a
	// connection over a cap is answered 503 too_many_connections and
	// closed (server.LimitListener). TrustedProxies lists addresses or
	// prefixes (a reverse proxy's) whose connections count only against
	// MaxConns; X-Forwarded-For is never read (spec/host-api.md
	// §Connections).
	MaxConns          int
	MaxConnsPerClient int
	TrustedProxies    []string
	// HeaderTimeout is how long a client may take to send a request's
	// headers (10 s when zero), IdleTimeout how long an idle keep-alive
	// connection is kept (120 s when zero).
	HeaderTimeout time.Duration
	IdleTimeout   time.Duration
	// MetricsListen is the TCP address GET /metrics (Prometheus text
	// format) is served on, unauthenticated; empty serves none. Keep it on
	// loopback or a private network, like the Host API.
	MetricsListen string
	// AllowedFetchHosts lists host[:port] patterns that workers' outbound
	// fetch may reach, added to those in host.json. Empty denies all.
	AllowedFetchHosts []string
	// HandlerTimeout is the time limit of one handler invocation (queue or
	// fetch); 30 s when zero.
	HandlerTimeout time.Duration
	// FetchTimeout, when set, is the time limit of a fetch handler
	// invocation and of loading a version's modules instead of
	// HandlerTimeout, which then limits queue handlers alone. The
	// conformance runner's in-process host keeps its queue handler limit
	// short for the @handler-limit scenarios, and must not have the kit's
	// own sends through a worker (fetch) cut at that limit on a loaded
	// machine.
	FetchTimeout time.Duration
	// ShutdownGrace is how long Shutdown lets running handlers finish; 10 s
	// when zero.
	ShutdownGrace time.Duration
	// ObserveInterval is how often observed is refreshed; 10 s when zero.
	ObserveInterval time.Duration
	// Logger receives structured logs; JSON to stderr when nil.
	Logger *slog.Logger
	// UnsafeInProcessWorkers runs worker code on goja inside the host
	// process instead of in sandbox processes (runtime/sandbox): one
	// hostile module, message or request can then end the whole host. For
	// trusted code, debugging and the isolation-cost benchmark only.
	UnsafeInProcessWorkers bool
	// MaxMemory is the memory the host process may use (its sandboxes
	// have caps of their own): half of it is the budget of request and
	// response bodies in flight (the fetch route's, outbound fetches',
	// producer sends'; runtime/membudget), a principal's share half that
	// budget and a worker's a quarter. When zero, membudget.DefaultHostMemory:
	// half the memory cgroup's limit, else a quarter of the machine's RAM.
	MaxMemory int64
	// SandboxMemoryLimit is the resident memory of one sandbox (512 MiB
	// when zero), SandboxIdleTimeout how long an idle sandbox is kept (30 s
	// when zero), MaxSandboxes how many may live at once (256 when zero).
	SandboxMemoryLimit int64
	SandboxIdleTimeout time.Duration
	MaxSandboxes       int
	// SandboxesPerWorker lets a busy ModuleWorker's invocations spread
	// over up to this many sandboxes (1 when zero). More than one means
	// module-level state is per sandbox: what one invocation keeps in a
	// module variable may be missing in the next.
	SandboxesPerWorker int
	// SandboxUID and SandboxGID are what sandboxes run as when the host is
	// root (65534 when zero; runtime/sandbox jail_linux.go).
	SandboxUID, SandboxGID int
	// Faults, when not nil, injects store failures on command (see
	// faults.go). For tests and the conformance runner only; nil in
	// production.
	Faults *Faults
	// AfterIntent, when set, runs after an Operation and its intent are
	// journaled and before its effect: a test hook (crash tests pause there
	// and kill the host). nil in production.
	AfterIntent func(ctx context.Context, op store.Operation)
	// Tracing says where OpenTelemetry spans of sends, deliveries and
	// settlements are exported (package telemetry); the zero value, with
	// no OTEL_EXPORTER_OTLP_* endpoint in the environment, traces nothing.
	Tracing telemetry.Config
	// Runtime builds the JavaScript runtime from the options the host
	// gives it; when nil, the sandboxed runtime (NewSandboxRuntime), or the
	// in-process goja runtime (NewGojaRuntime) with UnsafeInProcessWorkers.
	Runtime func(opts RuntimeOptions) (Runtime, error)
}
