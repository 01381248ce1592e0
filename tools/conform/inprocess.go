package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/features/steps"
	"github.com/takoform/queuehost/host"
)

// inProcessHandlerTimeout is the queue handler time limit of the in-process
// host: short, so that @handler-limit scenarios finish quickly, and long
// enough that on a loaded 2-core machine an ordinary handler (a settlement
// and two reports to the recorder) is not cut (at 2 s, with load averages
// around 30, it was). Its fetch handlers and module loads (the kit's sends
// through a worker, every version's creation) keep the host's default
// limit, inProcessFetchTimeout: the kit does not test that limit.
const (
	inProcessHandlerTimeout = 5 * time.Second
	inProcessFetchTimeout   = 30 * time.Second
)

// inProcess is the reference host started by the runner, with the
// host-control contract implemented directly: restart is Shutdown then
// host.New on the same data directory and, if it is free, the same port.
type inProcess struct {
	mu     sync.Mutex
	dir    string
	cfg    host.Config
	h      *host.Host
	base   string
	tokens map[string]string
	logf   *os.File

	// With standbys (a PostgreSQL store only), that many more hosts wait
	// on the same database, configured to listen on the active host's
	// address: a restart is then a failover (the active host shuts down,
	// releasing its lease, and a standby takes over on the same address),
	// after which a new standby is started.
	standbys    int
	failovers   int
	pending     int // standbys started and not yet collected
	promoted    chan standbyResult
	standbyCtx  context.Context
	stopStandby context.CancelFunc

	// With active > 1 (a PostgreSQL store only), that many hosts serve
	// at once on the same database (host.Config.ClusterActive), and the
	// runner's requests go round-robin across them (next); a restart
	// restarts one of them, in turn (restarts).
	active   int
	hosts    []*host.Host
	bases    []string
	next     int
	restarts int
}

type standbyResult struct {
	h   *host.Host
	err error
}

func newToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startInProcess writes host.json with the kit's principals (see
// features/README.md) before the host's first start, then starts it: on
// a journal in its data directory, or with storeURL on that PostgreSQL
// database (which must be empty, or the kit's own from an earlier run).
func startInProcess(ctx context.Context, recorderAddr, otherSpace, storeURL string, standbys, active int) (*inProcess, error) {
	dir, err := os.MkdirTemp("", "conform-*")
	if err != nil {
		return nil, err
	}
	ip := &inProcess{dir: dir, tokens: map[string]string{}}
	for _, p := range []string{steps.PrincipalAdmin, steps.PrincipalViewer, steps.PrincipalNarrow, steps.PrincipalSender, steps.PrincipalOther} {
		ip.tokens[p] = newToken()
	}
	all := auth.AllSpaces
	hc := auth.Config{
		Principals: []auth.Principal{
			{Name: "kit-admin", TokenSHA256: auth.HashToken(ip.tokens[steps.PrincipalAdmin]), Grants: []auth.Grant{{Space: all, Role: auth.RoleEditor}}},
			{Name: "kit-viewer", TokenSHA256: auth.HashToken(ip.tokens[steps.PrincipalViewer]), Grants: []auth.Grant{{Space: all, Role: auth.RoleViewer}}},
			{Name: "kit-narrow", TokenSHA256: auth.HashToken(ip.tokens[steps.PrincipalNarrow]), Grants: []auth.Grant{{Space: all, Role: auth.RoleEditor, Forms: []string{steps.FormConsumer, steps.FormWorker, steps.FormVersion}}}},
			{Name: "kit-sender", TokenSHA256: auth.HashToken(ip.tokens[steps.PrincipalSender]), Grants: []auth.Grant{
				{Space: all, Role: auth.RoleEditor, Forms: []string{steps.FormWorker, steps.FormVersion}},
				{Space: all, Role: auth.RoleViewer, Forms: []string{steps.FormQueue}},
			}},
			{Name: "kit-other", TokenSHA256: auth.HashToken(ip.tokens[steps.PrincipalOther]), Grants: []auth.Grant{{Space: otherSpace, Role: auth.RoleEditor}}},
		},
		AllowedFetchHosts: []string{recorderAddr},
	}
	b, err := json.MarshalIndent(hc, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "host.json"), b, 0o600); err != nil {
		return nil, err
	}
	ip.logf, err = os.Create(filepath.Join(dir, "host.log"))
	if err != nil {
		return nil, err
	}
	ip.cfg = host.Config{
		DataDir:           dir,
		StoreURL:          storeURL,
		Listen:            "127.0.0.1:0",
		AllowedFetchHosts: []string{recorderAddr},
		HandlerTimeout:    inProcessHandlerTimeout,
		FetchTimeout:      inProcessFetchTimeout,
		ShutdownGrace:     2 * time.Second,
		ObserveInterval:   time.Second,
		Logger:            slog.New(slog.NewJSONHandler(ip.logf, nil)),
		// The fault-control contract in-process: the runner calls the
		// host's fault hook directly. The same Faults survive a restart.
		Faults: &host.Faults{},
	}
	ip.cfg.Brokers, ip.cfg.QueueOffering = inProcessBrokers, inProcessQueueOffering
	if active > 1 {
		ip.cfg.ClusterActive = true
		ip.cfg.ClusterTTL = 2 * time.Second
		ip.active = active
		for range active {
			h, err := host.New(ctx, ip.cfg)
			if err == nil {
				err = h.Start()
			}
			if err != nil {
				ip.close(true)
				return nil, err
			}
			ip.hosts = append(ip.hosts, h)
			ip.bases = append(ip.bases, h.URL())
		}
		ip.h, ip.base = ip.hosts[0], ip.bases[0]
		return ip, nil
	}
	if err := ip.start(ctx); err != nil {
		return nil, err
	}
	if standbys > 0 {
		// The standbys will serve where the active host serves now.
		ip.cfg.Listen = strings.TrimPrefix(ip.base, "http://")
		ip.standbys = standbys
		ip.promoted = make(chan standbyResult, standbys+1)
		ip.standbyCtx, ip.stopStandby = context.WithCancel(context.Background())
		for range standbys {
			ip.spawnStandby()
		}
	}
	return ip, nil
}

// spawnStandby starts a host that waits (in host.New) until it holds the
// database's active lease. The caller holds ip.mu, or is the constructor.
func (ip *inProcess) spawnStandby() {
	cfg := ip.cfg
	ip.pending++
	go func() {
		h, err := host.New(ip.standbyCtx, cfg)
		ip.promoted <- standbyResult{h, err}
	}()
}

// failover shuts the active host down and serves from the standby that
// takes over, then starts a new standby.
func (ip *inProcess) failover(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ip.h.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "conform: failover: the active host's shutdown reported: %v\n", err)
	}
	var r standbyResult
	select {
	case r = <-ip.promoted:
		ip.pending--
	case <-sctx.Done():
		return fmt.Errorf("failover: no standby took over within 30s")
	}
	if r.err != nil {
		return fmt.Errorf("failover: the standby: %w", r.err)
	}
	if err := r.h.Start(); err != nil {
		return fmt.Errorf("failover: the standby that took over: %w", err)
	}
	ip.h, ip.base = r.h, r.h.URL()
	ip.failovers++
	ip.spawnStandby()
	return nil
}

func (ip *inProcess) start(ctx context.Context) error {
	h, err := host.New(ctx, ip.cfg)
	if err != nil {
		return err
	}
	if err := h.Start(); err != nil {
		return err
	}
	ip.h = h
	ip.base = h.URL()
	return nil
}

// fault runs one verb of the fault-control contract on the host's hook.
func (ip *inProcess) fault(_ context.Context, args []string) error {
	return ip.cfg.Faults.Command(args)
}

func (ip *inProcess) url() string {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	return ip.base
}

// roundRobin is the base URL of the next request: the hosts in turn when
// several are active, else the one host.
func (ip *inProcess) roundRobin() string {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	if len(ip.bases) == 0 {
		return ip.base
	}
	b := ip.bases[ip.next%len(ip.bases)]
	ip.next++
	return b
}

// restartAll restarts every active host, one at a time (a rolling
// restart): the others go on serving meanwhile, and the queues each
// delivered move to them and back.
func (ip *inProcess) restartAll(ctx context.Context) error {
	for i := range ip.hosts {
		if err := ip.restartOne(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// restartOne shuts active host i down and starts it again on the same
// port.
func (ip *inProcess) restartOne(ctx context.Context, i int) error {
	ip.restarts++
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ip.hosts[i].Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "conform: restart: host %d's shutdown reported: %v\n", i, err)
	}
	cfg := ip.cfg
	if u, err := url.Parse(ip.bases[i]); err == nil {
		cfg.Listen = u.Host
	}
	h, err := host.New(ctx, cfg)
	if err == nil {
		if err = h.Start(); err != nil {
			h.Shutdown(sctx)
		}
	}
	if err != nil {
		return fmt.Errorf("restart of host %d: %w", i, err)
	}
	ip.hosts[i], ip.bases[i] = h, h.URL()
	ip.h, ip.base = ip.hosts[0], ip.bases[0]
	return nil
}

// restart shuts the host down and starts it again on the same data
// directory, on the same port when it is free.
func (ip *inProcess) restart(ctx context.Context) error {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	if ip.standbys > 0 {
		return ip.failover(ctx)
	}
	if ip.active > 1 {
		return ip.restartAll(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A shutdown that had to close batches still running when its grace
	// period ended reports it as an error; that is a normal stop (nothing
	// unsettled is acknowledged), and the host is stopped either way. If
	// the stop really failed, starting on the same directory says so.
	if err := ip.h.Shutdown(sctx); err != nil {
		fmt.Fprintf(os.Stderr, "conform: restart: the host's shutdown reported: %v\n", err)
	}
	if u, err := url.Parse(ip.base); err == nil {
		ip.cfg.Listen = u.Host
	}
	if err := ip.start(ctx); err != nil {
		ip.cfg.Listen = "127.0.0.1:0"
		if err2 := ip.start(ctx); err2 != nil {
			return fmt.Errorf("restart: %v (on a new port: %v)", err, err2)
		}
	}
	return nil
}

func (ip *inProcess) close(failed bool) {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ip.stopStandby != nil {
		ip.stopStandby()
	}
	if ip.active > 1 {
		for _, h := range ip.hosts {
			h.Shutdown(ctx)
		}
		fmt.Fprintf(os.Stderr, "conform: %d active hosts on one database, requests round-robin; %d restarts of one host at a time (every restart of the kit restarts each host in turn)\n", ip.active, ip.restarts)
	} else if ip.h != nil {
		ip.h.Shutdown(ctx)
	}
	// A standby may have taken over as the active host shut down.
	for ; ip.pending > 0; ip.pending-- {
		if r := <-ip.promoted; r.h != nil {
			r.h.Shutdown(ctx)
		}
	}
	if ip.standbys > 0 {
		fmt.Fprintf(os.Stderr, "conform: %d restarts were failovers to a standby host\n", ip.failovers)
	}
	ip.logf.Close()
	if failed {
		fmt.Fprintf(os.Stderr, "conform: kept the in-process host's data and log in %s\n", ip.dir)
		return
	}
	os.RemoveAll(ip.dir)
}
