// Command takohost runs the reference host for the Takoform queue Forms on
// one machine: the journal and host.json live in -data, the Host API on
// -listen. With -store postgres://... the store is that PostgreSQL
// database instead of the journal (spec/cluster.md): one host at a time is
// active on a database; another started on it waits as a standby and takes
// over within -cluster-ttl of the active host's death. A host that lost
// its lease exits 1. On first start it creates an admin principal and writes its token
// to <data>/admin-token; it prints that path, never the token.
//
// SIGINT or SIGTERM shut it down gracefully: it stops accepting requests,
// lets running handlers finish within -shutdown-grace, leaves anything
// unsettled to be redelivered on the next start, and exits 0.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"github.com/takoform/queuehost/runtime/sandbox"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/takoform/queuehost/host"
	"github.com/takoform/queuehost/runtime/membudget"
	"github.com/takoform/queuehost/server"
	"github.com/takoform/queuehost/telemetry"
)

func main() {
	sandbox.Main() // a worker sandbox is this binary started with sandbox.EnvVar
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("takohost", flag.ContinueOnError)
	data := fs.String("data", "./data", `data directory (journal, host.json, admin-token); ":memory:" keeps nothing`)
	storeURL := fs.String("store", "", "PostgreSQL connection string (postgres://user@host:5432/db?pool_max_conns=N) to keep the store in, shared by every host on it; empty: the journal in -data")
	clusterTTL := fs.Duration("cluster-ttl", host.DefaultClusterTTL, "with -store: the active host's lease; a standby host on the same database takes over this long after the active one died")
	clusterActive := fs.Bool("cluster-active", false, "with -store: every host on the database is active and delivers its share of the queues (leases per queue, spec/cluster.md); without it one host is active and the others wait as standbys")
	listen := fs.String("listen", "127.0.0.1:8787", "TCP address of the Host API")
	metricsListen := fs.String("metrics-listen", "", "TCP address to serve GET /metrics (Prometheus) on, unauthenticated (e.g. 127.0.0.1:9187); empty: none")
	allow := fs.String("allow-fetch", "", "comma-separated host[:port] patterns workers' outbound fetch may reach")
	handlerTimeout := fs.Duration("handler-timeout", 30*time.Second, "time limit of one handler invocation")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "how long shutdown lets running handlers finish")
	unsafeWorkers := fs.Bool("unsafe-in-process-workers", false, "run worker code inside the host process instead of sandbox processes (UNSAFE: one hostile worker can end the host; trusted code and benchmarks only)")
	maxConns := fs.Int("max-conns", 0, "most connections the Host API keeps open at once; more are answered 503 too_many_connections and closed (0: half the file descriptor limit, at most 4096)")
	maxConnsPerClient := fs.Int("max-conns-per-client", server.DefaultMaxConnsPerClient, "most connections one client address may hold open (not applied to -trusted-proxies)")
	trustedProxies := fs.String("trusted-proxies", "", "comma-separated addresses or prefixes of reverse proxies in front of the host (10.0.0.5,10.1.0.0/16): their connections count only against -max-conns; X-Forwarded-For is never read")
	headerTimeout := fs.Duration("header-timeout", host.ReadHeaderTimeout, "how long a client may take to send a request's headers")
	idleTimeout := fs.Duration("idle-timeout", host.IdleTimeout, "how long an idle keep-alive connection is kept")
	maxMemory := fs.String("max-memory", "", "memory the host process may use (e.g. 512MiB, 2GiB; sandboxes have caps of their own): half of it bounds request and response bodies in flight, a principal gets half of that and a worker a quarter (empty: half the memory cgroup's limit, else a quarter of RAM); also the Go runtime's soft memory limit unless GOMEMLIMIT is set")
	logFormat := fs.String("log-format", "text", "the log on stderr: text (one line a person reads per event) or json (one JSON object per line, for a log collector); request logs and the host's events alike")
	otlpEndpoint := fs.String("otlp-endpoint", "", "OpenTelemetry collector to export traces of sends, deliveries and settlements to, over OTLP/HTTP (http://127.0.0.1:4318); empty: the OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variable, and without either no tracing (spec/peers.md §Tracing)")
	traceURL := fs.String("trace-url", "", "where your trace backend shows a trace, with {traceId} for its ID (Jaeger: http://127.0.0.1:16686/trace/{traceId}): the message listing and the console link each traced message to its trace; needs tracing on (-otlp-endpoint)")
	var brokers []host.BrokerConfig
	fs.Func("broker", "a message broker as NAME=URL (repeatable): an Offering NAME of AtLeastOnceQueue whose queues keep their messages on it; amqp[s]://user:password@host:5672/vhost (RabbitMQ), with optional query options prefetch, password_file, password_env, ca_file, min_backoff, max_backoff (spec/peers.md §Brokers)", func(v string) error {
		b, err := host.ParseBroker(v)
		if err == nil {
			brokers = append(brokers, b)
		}
		return err
	})
	queueOffering := fs.String("queue-offering", "", "the Offering of a queue created without one: embedded (the default), serialized, or a -broker NAME")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger, err := newLogger(os.Stderr, *logFormat, slog.LevelInfo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "takohost:", err)
		return 2
	}
	cfg := host.Config{
		DataDir: *data, StoreURL: *storeURL, ClusterTTL: *clusterTTL, ClusterActive: *clusterActive, Listen: *listen, MetricsListen: *metricsListen, HandlerTimeout: *handlerTimeout,
		ShutdownGrace: *grace, Logger: logger, UnsafeInProcessWorkers: *unsafeWorkers,
		Brokers: brokers, QueueOffering: *queueOffering,
	}
	cfg.MaxConns, cfg.MaxConnsPerClient = *maxConns, *maxConnsPerClient
	cfg.Tracing.Endpoint, cfg.Tracing.ViewURL = *otlpEndpoint, *traceURL
	if err := telemetry.Check(cfg.Tracing); err != nil {
		fmt.Fprintln(os.Stderr, "takohost: tracing:", err)
		return 2
	}
	cfg.HeaderTimeout, cfg.IdleTimeout = *headerTimeout, *idleTimeout
	memWhere := "-max-memory"
	if *maxMemory != "" {
		n, err := parseSize(*maxMemory)
		if err != nil || n < 64<<20 {
			fmt.Fprintf(os.Stderr, "takohost: -max-memory %q: give a size of at least 64MiB, like 512MiB or 2GiB\n", *maxMemory)
			return 2
		}
		cfg.MaxMemory = n
	} else {
		cfg.MaxMemory, memWhere = membudget.DefaultHostMemory()
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The garbage collector works harder as the heap nears the limit
		// instead of letting it grow to twice what is live.
		debug.SetMemoryLimit(cfg.MaxMemory)
	}
	if *trustedProxies != "" {
		cfg.TrustedProxies = strings.Split(*trustedProxies, ",")
		if _, err := server.ParseTrustedProxies(cfg.TrustedProxies); err != nil {
			fmt.Fprintln(os.Stderr, "takohost: -trusted-proxies:", err)
			return 2
		}
	}
	for _, h := range strings.Split(*allow, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.AllowedFetchHosts = append(cfg.AllowedFetchHosts, h)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	h, err := host.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "takohost:", err)
		return 1
	}
	if err := h.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "takohost:", err)
		_ = h.Shutdown(context.Background())
		return 1
	}
	fmt.Printf("takohost listening on %s\n", h.URL())
	logger.Info("memory", "maxMemory", cfg.MaxMemory, "from", memWhere, "bodyBudget", host.BodyBudget(cfg.MaxMemory))
	if telemetry.Enabled(cfg.Tracing) {
		logger.Info("tracing", "otlpEndpoint", cmp.Or(cfg.Tracing.Endpoint, os.Getenv(telemetry.EnvTracesEndpoint), os.Getenv(telemetry.EnvEndpoint)))
	}
	if a := h.MetricsAddr(); a != "" {
		fmt.Printf("metrics on http://%s/metrics\n", a)
	}
	tokenRef := "$TOKEN"
	if p := h.AdminTokenPath(); p != "" {
		fmt.Printf("admin token written to %s\n", p)
		tokenRef = "$(cat " + p + ")"
	} else {
		fmt.Println("in-memory host: the admin token is not kept anywhere")
	}
	fmt.Printf("try: curl -s -H \"Authorization: Bearer %s\" %s/v2/spaces/demo/resources\n", tokenRef, h.URL())

	code := 0
	select {
	case <-ctx.Done():
	case <-h.Lost():
		// Another host took over the database: nothing this one writes
		// can land any more.
		fmt.Fprintln(os.Stderr, "takohost: lost the active lease on the database to another host; exiting")
		code = 1
	}
	stop()
	logger.Info("shutting down", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), *grace+5*time.Second)
	defer cancel()
	if err := h.Shutdown(sctx); err != nil {
		logger.Warn("shutdown", "err", err)
	}
	return code
}

// parseSize reads a byte size: digits with an optional unit K, M, G, T
// (KiB, MiB, GiB, TiB, KB, MB...: all powers of 1024) or B.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i == 0 {
		return 0, fmt.Errorf("no number")
	}
	num, unit := s, ""
	if i > 0 {
		num, unit = s[:i], strings.ToUpper(strings.TrimSpace(s[i:]))
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, err
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	if !ok || n > (1<<62)>>sh {
		return 0, fmt.Errorf("unknown unit or too large")
	}
	return n << sh, nil
}
