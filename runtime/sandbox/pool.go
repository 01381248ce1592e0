package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/membudget"
)

// Defaults of Options.
const (
	DefaultInvocationTimeout = js.DefaultInvocationTimeout
	DefaultKillGrace         = time.Second
	DefaultMemoryLimit       = 512 << 20
	DefaultAddressSpace      = 4 << 30
	DefaultMaxStack          = 64 << 20
	DefaultGCPercent         = 400
	DefaultIdleTimeout       = 30 * time.Second
	DefaultMaxSandboxes      = 256
	DefaultLogRate           = 200 // lines per second per worker, burst ten times that
	DefaultFetchPerCall      = 6   // concurrent outbound fetches per invocation, as Cloudflare allows
	DefaultFetchPerHost      = 16  // connections per destination
	DefaultFetchTotal        = 256 // concurrent outbound fetches of the whole host
	DefaultLanes             = 8   // lanes per sandbox (lane.go)
	DefaultMaxLaneCalls      = 64  // invocations over lanes at once, host-wide

	maxLanes = 24 // the sandbox's descriptors stay under sandboxNoFile
)

// Errors of the pool.
var (
	// ErrClosed: the pool is closed.
	ErrClosed = errors.New("sandbox: the pool is closed")
	// ErrSandboxEnded wraps the error of every invocation a sandbox was
	// running when it ended; the text says why (memory cap, time limit,
	// stack overflow, crash).
	ErrSandboxEnded = errors.New("the worker's sandbox ended")
	// ErrTooManySandboxes: MaxSandboxes are busy.
	ErrTooManySandboxes = errors.New("sandbox: every sandbox is busy")
)

// Options configure a Pool. Zero values take the defaults.
type Options struct {
	// Sender performs producer Binding sends (authorised by the host).
	Sender abi.Sender
	// AllowedFetchHosts as in js.Options; checked by the sandbox and
	// again by the host, which performs the request.
	AllowedFetchHosts []string
	// InvocationTimeout is the time limit of one invocation (default 30
	// s); the sandbox running an invocation that has not answered
	// KillGrace (default 1 s) after its deadline is killed.
	InvocationTimeout time.Duration
	KillGrace         time.Duration
	// StartupTimeout bounds the modules' top-level code (js default 5 s).
	StartupTimeout time.Duration
	// MemoryLimit is the resident memory a sandbox may use (default 512
	// MiB): the host kills it beyond, and its Go runtime's soft limit is
	// three quarters of it. AddressSpace is its RLIMIT_AS (default 4 GiB)
	// and MaxStack its goroutine stack limit (default 64 MiB).
	MemoryLimit  int64
	AddressSpace int64
	MaxStack     int
	// IdleTimeout: a sandbox with no invocation for this long is stopped
	// (default 30 s). MaxSandboxes bounds the live ones (default 256).
	IdleTimeout  time.Duration
	MaxSandboxes int
	// Procs is each sandbox's GOMAXPROCS (default the host's): a worker's
	// invocations share one sandbox and so one module state, as they
	// share one isolate in workerd and did in process, and its
	// JavaScript may use as many cores as in-process goja did.
	Procs int
	// Instances is how many sandboxes one ModuleWorker's invocations may
	// spread over (default 1), and SpreadAt how many invocations each of a
	// worker's sandboxes must be running before the next one starts
	// (default 1). An invocation goes to the worker's sandbox running the
	// fewest; idle ones are reaped like any other; the blast radius stays
	// the worker. More than one changes what workers observe: module-level
	// state is then per sandbox, so a value one invocation keeps may be
	// missing in the next (the conformance kit keeps a batch that way).
	Instances int
	SpreadAt  int
	// Lanes is how many invocations of a sandbox run over lanes of their
	// own (lane.go) rather than over its shared connection (default
	// DefaultLanes; negative: none; at most maxLanes). Each lane is two
	// pipes, so two descriptors in the host and two in the sandbox.
	// MaxLaneCalls bounds the invocations over lanes at once in the whole
	// host (default DefaultMaxLaneCalls).
	Lanes        int
	MaxLaneCalls int
	// GCPercent is each sandbox's GOGC (default 400). A sandbox's live
	// heap is small (its runtimes and the invocations in flight) and
	// every invocation allocates, so at the Go default it collects every
	// few hundred invocations, each time on the processor its
	// invocations need; its memory stays bounded by the soft limit
	// (three quarters of MemoryLimit), which makes it collect earlier,
	// and by the host's kill at MemoryLimit.
	GCPercent int
	// LogEntries is the size of each worker's log ring; LogRate the lines
	// per second a worker may log (burst ten times that), beyond which
	// lines are dropped and counted.
	LogEntries int
	LogRate    int
	// Logs, when set, is the LogBook worker logs are kept in (a host
	// passes a durable one, js.OpenLogBook); a new in-memory book when nil.
	Logs *js.LogBook
	// FetchPerCall, FetchPerHost and FetchTotal cap outbound fetches: per
	// invocation (concurrent; more wait), per destination host:port
	// (connections) and for the whole host (concurrent).
	FetchPerCall, FetchPerHost, FetchTotal int
	// Transport replaces the host's outbound transport (tests).
	Transport http.RoundTripper
	// BodyBudget bounds the outbound fetches' request and response bodies
	// the host holds at once (runtime/membudget); nil: no bound.
	BodyBudget *membudget.Budget
	// Executable is the program started as a sandbox (os.Executable()
	// by default); it must call Main first.
	Executable string
	// Logger receives the host-side events.
	Logger *slog.Logger
	// MaxTasks is each sandbox's pids cap where the host can make cgroups
	// (default DefaultMaxTasks); its memory cap there is MemoryLimit.
	MaxTasks int
	// UID and GID are what a sandbox runs as when the host is root
	// (default DefaultSandboxID, 65534; jail_linux.go).
	UID, GID int

	// Tests only: containment layers off, the sandbox's opSelfTest on,
	// the RSS watchdog off, the user namespace of an unprivileged host
	// (userNS) while root, another /proc/self for the cgroup detection.
	noSeccomp, noCgroup, noNetNS, noJail, selfTest, noWatchdog, userNS bool
	cgroupProc                                                         string
}

func (o Options) withDefaults() Options {
	if o.InvocationTimeout <= 0 {
		o.InvocationTimeout = DefaultInvocationTimeout
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = js.DefaultStartupTimeout
	}
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.AddressSpace <= 0 {
		o.AddressSpace = DefaultAddressSpace
	}
	if o.MaxStack <= 0 {
		o.MaxStack = DefaultMaxStack
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.GCPercent <= 0 {
		o.GCPercent = DefaultGCPercent
	}
	if o.Procs <= 0 {
		o.Procs = runtime.GOMAXPROCS(0)
	}
	if o.Instances <= 0 {
		o.Instances = 1
	}
	if o.SpreadAt <= 0 {
		o.SpreadAt = 1
	}
	if o.MaxSandboxes <= 0 {
		o.MaxSandboxes = DefaultMaxSandboxes
	}
	if o.LogRate <= 0 {
		o.LogRate = DefaultLogRate
	}
	if o.FetchPerCall <= 0 {
		o.FetchPerCall = DefaultFetchPerCall
	}
	if o.FetchPerHost <= 0 {
		o.FetchPerHost = DefaultFetchPerHost
	}
	if o.FetchTotal <= 0 {
		o.FetchTotal = DefaultFetchTotal
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxTasks <= 0 {
		o.MaxTasks = DefaultMaxTasks
	}
	if o.UID <= 0 {
		o.UID = DefaultSandboxID
	}
	if o.GID <= 0 {
		o.GID = DefaultSandboxID
	}
	switch {
	case o.Lanes == 0:
		o.Lanes = DefaultLanes
	case o.Lanes < 0:
		o.Lanes = 0
	case o.Lanes > maxLanes:
		o.Lanes = maxLanes
	}
	if o.MaxLaneCalls <= 0 {
		o.MaxLaneCalls = DefaultMaxLaneCalls
	}
	return o
}

// Pool runs worker code in sandbox processes: one per ModuleWorker for
// invocations, one per space for admission probes. It keeps the workers'
// logs, performs what the sandboxes ask (sends, settlements, outbound
// fetch) and enforces the limits from outside.
type Pool struct {
	opts     Options
	exe      string
	logs     *js.LogBook
	limiter  *logLimiter
	out      *outbound
	stopReap chan struct{}
	reapDone chan struct{}
	contain  *containment

	endsMu sync.Mutex
	ends   map[string]int64 // Ends

	laneCalls atomic.Int64 // invocations over lanes now (MaxLaneCalls)
	laneTotal atomic.Int64 // invocations that went over a lane (tests)

	mu       sync.Mutex
	closed   bool
	procs    map[string]*proc // by key: "w:"+workerUID (instanceKey for its further ones; "!alone-n" for runAlone's) or "a:"+space
	aloneSeq uint64           // runAlone's keys

	quarantine quarantine          // blame.go
	handlers   map[string][]string // by version UID, from the first load
}

// New makes a Pool. No process starts until the first invocation.
func New(opts Options) (*Pool, error) {
	opts = opts.withDefaults()
	exe := opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("sandbox: finding the host's executable: %w", err)
		}
	}
	logs := opts.Logs
	if logs == nil {
		logs = js.NewLogBook(opts.LogEntries)
	}
	p := &Pool{
		opts: opts, exe: exe, logs: logs, limiter: newLogLimiter(opts.LogRate),
		out:      newOutbound(opts),
		procs:    map[string]*proc{},
		handlers: map[string][]string{},
		stopReap: make(chan struct{}), reapDone: make(chan struct{}),
		contain: newContainment(opts, exe),
	}
	p.logContainment()
	go p.reapLoop()
	return p, nil
}

// Close stops every sandbox; running invocations fail.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	procs := p.procs
	p.procs = map[string]*proc{}
	p.mu.Unlock()
	close(p.stopReap)
	<-p.reapDone
	for _, pr := range procs {
		pr.kill(EndShutdown, "the host is shutting down")
	}
	for _, pr := range procs {
		<-pr.done
	}
	p.contain.close()
}

// Logs returns the worker's log entries with Seq > after (js.Runtime.Logs).
func (p *Pool) Logs(workerUID string, after int64, limit int) []js.LogEntry {
	return p.logs.List(workerUID, after, limit)
}

// Log adds a line to a worker's log on behalf of the host (delivery
// events such as messages dead-lettered).
func (p *Pool) Log(workerUID, versionUID, level, msg string) {
	p.logs.Add(workerUID, versionUID, level, msg)
}

// Evict forgets a version in every sandbox.
func (p *Pool) Evict(versionUID string) {
	p.mu.Lock()
	delete(p.handlers, versionUID)
	procs := make([]*proc, 0, len(p.procs))
	for _, pr := range p.procs {
		procs = append(procs, pr)
	}
	p.mu.Unlock()
	for _, pr := range procs {
		pr.evict(versionUID)
	}
}

// ForgetWorker drops the log ring and the log rate bucket of a deleted
// ModuleWorker. Its sandbox, idle from now on, is reaped like any other.
func (p *Pool) ForgetWorker(workerUID string) {
	p.logs.Forget(workerUID)
	p.limiter.mu.Lock()
	delete(p.limiter.b, workerUID)
	p.limiter.mu.Unlock()
}

// countEnd counts a sandbox that ended for kind (an End constant).
func (p *Pool) countEnd(kind string) {
	p.endsMu.Lock()
	if p.ends == nil {
		p.ends = map[string]int64{}
	}
	p.ends[kind]++
	p.endsMu.Unlock()
}

// Ends counts the sandboxes that ended other than by going idle, by why
// (the End constants), since the pool started.
func (p *Pool) Ends() map[string]int64 {
	p.endsMu.Lock()
	defer p.endsMu.Unlock()
	out := make(map[string]int64, len(p.ends))
	for k, v := range p.ends {
		out[k] = v
	}
	return out
}

// Stats counts the live sandboxes (for tests and metrics).
func (p *Pool) Stats() (live int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.procs)
}

// Probe compiles v in its space's admission sandbox (uncached) and
// returns the handlers its default export provides. Anything that ends the
// sandbox (a bundler stack overflow, the memory cap, the time limit) is a
// *abi.CompileError: the version is refused, the host is untouched.
func (p *Pool) Probe(ctx context.Context, v *abi.Version) ([]string, error) {
	r, err := p.invoke(ctx, keyAdmission+v.Space, v, &frame{Op: opProbe}, p.loadLimit())
	if err != nil {
		if errors.Is(err, ErrSandboxEnded) {
			return nil, &abi.CompileError{Message: "the modules could not be loaded: " + err.Error()}
		}
		return nil, err
	}
	return r.Handlers, nil
}

// QueueHandler returns v's queue handler, each batch run in the worker's
// sandbox. The first call for a version loads it there (a *CompileError or
// js.ErrNoQueueHandler is returned then, as js.Runtime.QueueHandler does).
func (p *Pool) QueueHandler(ctx context.Context, v *abi.Version) (abi.Handler, error) {
	hs, err := p.load(ctx, v)
	if err != nil {
		return nil, err
	}
	if !hasHandler(hs, js.HandlerQueue) {
		return nil, js.ErrNoQueueHandler
	}
	v = copyVersion(v)
	return abi.HandlerFunc(func(ctx context.Context, b *abi.Batch) error {
		return p.runBatch(ctx, v, b)
	}), nil
}

func (p *Pool) load(ctx context.Context, v *abi.Version) ([]string, error) {
	p.mu.Lock()
	hs, ok := p.handlers[v.UID]
	p.mu.Unlock()
	if ok {
		return hs, nil
	}
	r, err := p.invoke(ctx, keyWorker+v.WorkerUID, v, &frame{Op: opLoad}, p.loadLimit())
	if err != nil {
		// Admission loaded this version; if it no longer loads, say so
		// where the worker's owner looks (deliveries wait and retry).
		var ce *abi.CompileError
		if errors.As(err, &ce) || errors.Is(err, ErrSandboxEnded) {
			p.logs.Add(v.WorkerUID, v.UID, "error", "the version does not load: "+err.Error())
		}
		return nil, err
	}
	p.mu.Lock()
	p.handlers[v.UID] = r.Handlers
	p.mu.Unlock()
	return r.Handlers, nil
}

// loadLimit bounds bundling and the top-level code together: the startup
// limit stops the code in the sandbox; twice it is left for bundling.
func (p *Pool) loadLimit() time.Duration { return 2 * p.opts.StartupTimeout }

func hasHandler(hs []string, name string) bool {
	for _, h := range hs {
		if h == name {
			return true
		}
	}
	return false
}

// Fetch runs v's fetch handler for r in the worker's sandbox and returns
// its Response with a buffered body, as js.Runtime.Fetch does. A sandbox
// that ends during the invocation returns an error wrapping
// ErrSandboxEnded (the reason is in the worker's log).
func (p *Pool) Fetch(ctx context.Context, v *abi.Version, r *http.Request, path string) (*http.Response, error) {
	hs, err := p.load(ctx, v)
	if err != nil {
		return nil, err
	}
	if !hasHandler(hs, js.HandlerFetch) {
		return nil, js.ErrNoFetchHandler
	}
	body, err := js.RequestBody(r, js.DefaultMaxBodyBytes)
	if err != nil {
		return nil, err
	}
	m := &httpMsg{Method: r.Method, URL: r.URL.String(), Host: r.Host, TLS: r.TLS != nil, Header: r.Header, Body: body}
	res, err := p.invoke(ctx, keyWorker+v.WorkerUID, v, &frame{Op: opFetch, HTTP: m, Path: path}, 0)
	if err != nil {
		return nil, err
	}
	h := res.HTTP
	return &http.Response{
		Status: h.StatusText, StatusCode: h.Status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header(h.Header), Body: io.NopCloser(bytes.NewReader(h.Body)), ContentLength: int64(len(h.Body)),
	}, nil
}

// invoke runs one request in the sandbox of key: the deadline is the
// earlier of ctx's and limit (InvocationTimeout when 0); the sandbox is
// killed KillGrace after it, or KillGrace after ctx ends, when it has not
// answered by then.
func (p *Pool) invoke(ctx context.Context, key string, v *abi.Version, f *frame, limit time.Duration) (*frame, error) {
	deadline := p.deadline(ctx, limit)
	n := 1
	if strings.HasPrefix(key, keyWorker) {
		n = p.opts.Instances
	}
	pr, err := p.get(key, n)
	if err != nil {
		return nil, err
	}
	defer pr.release()
	r, err := pr.invoke(ctx, v, f, deadline)
	if f.Op != opQueue && errors.Is(err, ErrSandboxEnded) {
		p.logs.Add(v.WorkerUID, v.UID, "error", "Uncaught (in sandbox) "+err.Error()+"; the invocation failed and the next one gets a fresh sandbox")
	}
	return r, err
}

// deadline is the earlier of ctx's deadline and now + limit
// (InvocationTimeout when 0).
func (p *Pool) deadline(ctx context.Context, limit time.Duration) time.Time {
	if limit <= 0 {
		limit = p.opts.InvocationTimeout
	}
	deadline := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// Key prefixes of the pool's sandboxes: a ModuleWorker's invocations, a
// space's admission probes.
const (
	keyWorker    = "w:"
	keyAdmission = "a:"
)

// instanceKey is the key of the i-th sandbox of key: key itself for the
// first, key#i for the others.
func instanceKey(key string, i int) string {
	if i == 0 {
		return key
	}
	return key + "#" + strconv.Itoa(i)
}

// get returns a live sandbox of key (one of up to n instances: the one
// running the fewest invocations, or a new one when each runs SpreadAt or
// more and fewer than n live), starting one when there is none, and counts
// the caller as using it (release when done).
func (p *Pool) get(key string, n int) (*proc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	var best *proc
	free := ""
	for i := 0; i < n; i++ {
		k := instanceKey(key, i)
		pr := p.procs[k]
		if pr != nil && pr.ended() {
			delete(p.procs, k)
			pr = nil
		}
		switch {
		case pr == nil:
			if free == "" {
				free = k
			}
		case best == nil || pr.users < best.users:
			best = pr
		}
	}
	if best == nil || free != "" && best.users >= p.opts.SpreadAt {
		pr, err := p.startLocked(free)
		switch {
		case err == nil:
			best = pr
		case best == nil || !errors.Is(err, ErrTooManySandboxes):
			return nil, err
		}
	}
	best.users++
	best.lastUsed = time.Now()
	return best, nil
}

// startLocked starts the sandbox of key, stopping the least recently used
// idle one first when MaxSandboxes are live.
func (p *Pool) startLocked(key string) (*proc, error) {
	if len(p.procs) >= p.opts.MaxSandboxes && !p.evictIdleLocked() {
		return nil, fmt.Errorf("%w: %d sandboxes are running invocations", ErrTooManySandboxes, len(p.procs))
	}
	pr, err := p.start(key)
	if err != nil {
		return nil, err
	}
	p.procs[key] = pr
	return pr, nil
}

// evictIdleLocked stops the least recently used idle sandbox.
func (p *Pool) evictIdleLocked() bool {
	var oldest *proc
	var oldestKey string
	for k, pr := range p.procs {
		if pr.users == 0 && (oldest == nil || pr.lastUsed.Before(oldest.lastUsed)) {
			oldest, oldestKey = pr, k
		}
	}
	if oldest == nil {
		return false
	}
	delete(p.procs, oldestKey)
	go oldest.stop()
	return true
}

func (p *Pool) reapLoop() {
	defer close(p.reapDone)
	tick := time.NewTicker(p.opts.IdleTimeout / 6)
	defer tick.Stop()
	for {
		select {
		case <-p.stopReap:
			return
		case <-tick.C:
		}
		p.reapIdle(time.Now())
	}
}

// reapIdle stops the sandboxes idle since before now - IdleTimeout.
func (p *Pool) reapIdle(now time.Time) {
	var stop []*proc
	p.mu.Lock()
	for k, pr := range p.procs {
		if pr.users == 0 && now.Sub(pr.lastUsed) >= p.opts.IdleTimeout || pr.ended() {
			delete(p.procs, k)
			stop = append(stop, pr)
		}
	}
	p.mu.Unlock()
	for _, pr := range stop {
		go pr.stop()
	}
}

// start runs a sandbox process for key and sends it the limits.
func (p *Pool) start(key string) (*proc, error) {
	// Two pipes, one each way, rather than a Unix socketpair: a 64-byte
	// round trip between two Go processes measured 16-36 µs over pipes
	// and 29-66 µs over a socketpair on this project's 2-core machines,
	// and an invocation that sends is two round trips.
	toChildR, toChildW, err := newPipe()
	if err != nil {
		return nil, err
	}
	fromChildR, fromChildW, err := newPipe()
	if err != nil {
		toChildR.Close()
		toChildW.Close()
		return nil, err
	}
	defer toChildR.Close()
	defer fromChildW.Close()
	hostEnd, err := newPipeConn(fromChildR, toChildW)
	if err != nil {
		fromChildR.Close()
		toChildW.Close()
		return nil, err
	}
	lanes, laneFiles, err := hostLanes(p.opts.Lanes)
	if err != nil {
		hostEnd.Close()
		return nil, err
	}
	defer closeLanes(nil, laneFiles, nil)
	cmd := exec.Command(p.exe)
	cmd.Dir = "/"
	// The environment is built from nothing: the host's may hold secrets.
	cmd.Env = []string{EnvVar + "=1", "GOTRACEBACK=none", "GOMAXPROCS=" + strconv.Itoa(p.opts.Procs), "GOGC=" + strconv.Itoa(p.opts.GCPercent)}
	cmd.ExtraFiles = append([]*os.File{toChildR, fromChildW}, laneFiles...) // the child's fds 3 and 4, then laneFD(i)
	// Any other descriptor the child inherits it closes (closeInherited).
	cmd.Env = append(cmd.Env, envFDs+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
	stderr := &headBuffer{max: 4096}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cg := p.contain.prepare(p, cmd) // cgroup_linux.go
	if cmd, err = p.contain.start(p, cmd); err != nil {
		hostEnd.Close()
		closeLanes(lanes, nil, nil)
		cg.remove()
		return nil, fmt.Errorf("sandbox: starting %s: %w", p.exe, err)
	}
	cg = p.contain.enter(p, cg, cmd.Process.Pid)
	pr := &proc{pool: p, key: key, cmd: cmd, c: newConn(hostEnd), stderr: stderr, sent: map[string]bool{},
		calls: map[uint64]*call{}, exited: make(chan struct{}), done: make(chan struct{}), lastUsed: time.Now(), cg: cg,
		lanes: lanes}
	pr.ending, pr.end = context.WithCancelCause(context.Background())
	go func() {
		_ = cmd.Wait()
		pr.cgOOM = cg.oomKills() > 0
		cg.remove()
		close(pr.exited)
	}()
	go pr.readLoop()
	go pr.watch()
	err = pr.c.write(&frame{Op: opInit, Init: &initMsg{
		InvocationTimeout: p.opts.InvocationTimeout, StartupTimeout: p.opts.StartupTimeout,
		AllowedFetchHosts: p.opts.AllowedFetchHosts, MemoryLimit: p.opts.MemoryLimit,
		AddressSpace: p.opts.AddressSpace, MaxStack: p.opts.MaxStack, Lanes: len(lanes),
	}})
	if err != nil {
		pr.kill(EndInit, "it could not be initialised")
		return nil, fmt.Errorf("sandbox: initialising: %w", err)
	}
	return pr, nil
}

// headBuffer keeps the first max bytes written (the fatal error line).
type headBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (h *headBuffer) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.max - len(h.buf); n > 0 {
		if len(b) < n {
			n = len(b)
		}
		h.buf = append(h.buf, b[:n]...)
	}
	return len(b), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.buf)
}

// proc is one sandbox process.
type proc struct {
	pool   *Pool
	key    string
	cmd    *exec.Cmd
	c      *conn
	stderr *headBuffer
	exited chan struct{}   // closed once the process has been waited for
	done   chan struct{}   // closed once the connection is drained and calls failed
	ending context.Context // cancelled once the sandbox is killed, stopped or its connection ended (it is going)
	end    context.CancelCauseFunc

	mu         sync.Mutex      // guards the fields below; users and lastUsed are the pool's
	sent       map[string]bool // versions the sandbox has confirmed holding
	calls      map[uint64]*call
	lanes      []*laneEnd // the free lanes
	lanesShut  bool       // the sandbox ended: a lane given back is closed
	killReason string
	killKind   string // an End constant, set with killReason by kill
	// culprit is the invocation whose time limit the kill was for (0: the
	// end is not one invocation's by what the host knows); running is how
	// many invocations the sandbox was running when it ended (set with
	// endErr). Together they say whom an end is charged to (blameOf).
	culprit uint64
	running int
	endErr  error
	// served counts the queue and fetch invocations the sandbox started:
	// an end with one running is that one's only if it is the only one
	// the sandbox ever ran (otherwise module state the others left, a
	// cache grown batch after batch, may be what ended it).
	served int

	users    int
	lastUsed time.Time

	cg    *sandboxCgroup // nil without one
	cgOOM bool           // the kernel killed it at its cgroup's memory cap (set before exited is closed)
}

// call is one invocation running in the sandbox.
type call struct {
	id      uint64 // its request ID, once it has one
	ctx     context.Context
	v       *abi.Version
	batch   *abi.Batch
	fetches chan struct{}
}

// ended reports whether the sandbox is gone or going: killed, stopped or
// its socket ended (a new invocation must start another).
func (pr *proc) ended() bool { return pr.ending.Err() != nil }

func (pr *proc) release() {
	pr.pool.mu.Lock()
	pr.users--
	pr.lastUsed = time.Now()
	pr.pool.mu.Unlock()
}

// Why a sandbox ended other than by going idle: the label of the pool's
// end counts (Pool.Ends, the host's takohost_sandbox_kills_total).
const (
	EndMemory   = "memory"   // killed: its resident memory passed the limit
	EndTime     = "time"     // killed: an invocation ran past its deadline and grace
	EndInit     = "init"     // killed: it could not be initialised
	EndShutdown = "shutdown" // killed: the host is shutting down
	EndCrash    = "crash"    // it exited on its own (a fatal error, a stack overflow, out of memory)
)

// kill ends the process at once; reason is what the invocations it was
// running fail with, kind one of the End constants.
func (pr *proc) kill(kind, reason string) { pr.killFor(0, kind, reason) }

// killFor is kill on account of the invocation culprit (0: none), which is
// then charged with the end and the others it was running are not.
func (pr *proc) killFor(culprit uint64, kind, reason string) {
	pr.end(ErrSandboxEnded)
	pr.mu.Lock()
	if pr.killReason == "" {
		pr.killReason = reason
		pr.killKind = kind
		pr.culprit = culprit
	}
	pr.mu.Unlock()
	if pr.cmd.Process != nil {
		_ = pr.cmd.Process.Kill()
	}
	pr.c.c.Close()
}

// stop ends an idle sandbox: closing its pipes makes it exit.
func (pr *proc) stop() {
	pr.end(ErrSandboxEnded)
	pr.mu.Lock()
	if pr.killReason == "" {
		pr.killReason = "idle"
	}
	pr.mu.Unlock()
	pr.c.c.Close()
	select {
	case <-pr.exited:
	case <-time.After(5 * time.Second):
		_ = pr.cmd.Process.Kill()
	}
	<-pr.done
}

func (pr *proc) evict(versionUID string) {
	pr.mu.Lock()
	had := pr.sent[versionUID]
	delete(pr.sent, versionUID)
	pr.mu.Unlock()
	if had {
		_ = pr.c.write(&frame{Op: opEvict, VersionUID: versionUID})
	}
}

// readLoop serves the sandbox's requests until the connection ends, then
// waits for the process and fails the running invocations with why it
// ended.
func (pr *proc) readLoop() {
	defer close(pr.done)
	_ = pr.c.readLoop(pr.handle, func(error) error {
		pr.end(ErrSandboxEnded)
		select {
		case <-pr.exited:
		case <-time.After(2 * time.Second):
			_ = pr.cmd.Process.Kill()
			<-pr.exited
		}
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.running = len(pr.calls)
		reason, kind := pr.killReason, pr.killKind
		if reason == "" && pr.cgOOM {
			reason, kind = pr.cgroupMemoryReason(), EndMemory
		}
		if reason == "" {
			reason, kind = classify(pr.stderr.String()), EndCrash
		}
		if kind != "" {
			pr.pool.countEnd(kind)
		}
		if reason == "" {
			reason = "it exited (" + pr.cmd.ProcessState.String() + ")"
		}
		pr.endErr = fmt.Errorf("%w: %s", ErrSandboxEnded, reason)
		return pr.endErr
	})
	pr.c.c.Close()
	pr.shutLanes()
	pr.pool.mu.Lock()
	if pr.pool.procs[pr.key] == pr {
		delete(pr.pool.procs, pr.key)
	}
	pr.pool.mu.Unlock()
}

// watch kills the sandbox when its resident memory passes the limit.
func (pr *proc) watch() {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	limit := pr.pool.opts.MemoryLimit
	if pr.pool.opts.noWatchdog {
		return
	}
	for {
		select {
		case <-pr.done:
			return
		case <-tick.C:
		}
		if rss := processRSS(pr.cmd.Process.Pid); rss > limit {
			pr.kill(EndMemory, fmt.Sprintf("memory cap: its resident memory reached %d MiB, more than the limit of %d MiB", rss>>20, limit>>20))
			return
		}
	}
}

// processRSS reads a process's resident set size from /proc (0 when it
// cannot be read).
func processRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// invoke sends f for v and waits for the reply, killing the sandbox when
// it does not answer in time. The version itself goes with f until the
// sandbox has confirmed holding it (several invocations may carry it at
// first); one that the sandbox no longer holds (an Evict crossed f) is
// sent again with f.
func (pr *proc) invoke(ctx context.Context, v *abi.Version, f *frame, deadline time.Time) (*frame, error) {
	f.VersionUID, f.Deadline = v.UID, deadline
	pr.mu.Lock()
	if f.Op == opQueue || f.Op == opFetch {
		pr.served++
	}
	if !pr.sent[v.UID] {
		f.Version = v
	}
	pr.mu.Unlock()
	r, err := pr.invokeOnce(ctx, v, f, deadline)
	if errors.Is(err, errVersionNotSent) && f.Version == nil {
		f.Version = v
		r, err = pr.invokeOnce(ctx, v, f, deadline)
	}
	if r != nil && f.Version != nil && f.Op != opProbe {
		pr.mu.Lock()
		pr.sent[v.UID] = true
		pr.mu.Unlock()
	}
	return r, err
}

// invokeOnce runs f over a free lane, or over the connection when there is
// none. The reply is nil when the sandbox did not answer.
func (pr *proc) invokeOnce(ctx context.Context, v *abi.Version, f *frame, deadline time.Time) (*frame, error) {
	// What the host performs for the invocation (sends, settlements,
	// outbound fetches) stops when the caller gives up or the sandbox ends.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopEnd := context.AfterFunc(pr.ending, func() { cancel(context.Cause(pr.ending)) })
	defer stopEnd()
	cl := &call{ctx: cctx, v: v, batch: f.batch, fetches: make(chan struct{}, pr.pool.opts.FetchPerCall)}
	if l := pr.takeLane(); l != nil {
		r, ok, err := pr.invokeLane(ctx, l, cl, f, deadline)
		pr.giveLane(l, ok)
		return r, err
	}
	id, ch, err := pr.c.start(f, func(id uint64) {
		pr.mu.Lock()
		cl.id = id
		pr.calls[id] = cl
		pr.mu.Unlock()
	})
	defer pr.forgetCall(f.ID)
	if err != nil {
		return nil, pr.failure(cl, err)
	}
	killTimer := pr.killTimer(deadline, id)
	defer killTimer.Stop()
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, pr.failure(cl, pr.c.err())
		}
		return r, r.Err.err()
	case <-ctx.Done():
	}
	// The caller gave up: ask the sandbox to stop the invocation and give
	// it the grace to do so.
	pr.cancel(id, killTimer)
	r, ok := <-ch
	if !ok {
		return nil, pr.failure(cl, pr.c.err())
	}
	return r, cancelled(ctx, r)
}

// invokeLane runs f over the lane l, performing the sandbox's requests that
// come on it until the reply; ok is false when the lane can no longer be
// used (the sandbox ended).
func (pr *proc) invokeLane(ctx context.Context, l *laneEnd, cl *call, f *frame, deadline time.Time) (r *frame, ok bool, err error) {
	f.ID = pr.c.newID()
	pr.mu.Lock()
	cl.id = f.ID
	pr.calls[f.ID] = cl
	pr.mu.Unlock()
	defer pr.forgetCall(f.ID)
	killTimer := pr.killTimer(deadline, f.ID)
	defer killTimer.Stop()
	// The lane is read on this goroutine: a caller that gives up asks the
	// sandbox to stop over the connection, and reads on.
	stop := context.AfterFunc(ctx, func() { pr.cancel(f.ID, killTimer) })
	defer stop()
	if err := l.write(f); err != nil {
		return nil, false, pr.laneFailure(cl, err)
	}
	for {
		g, err := l.read()
		if err != nil {
			return nil, false, pr.laneFailure(cl, err)
		}
		if g.Reply {
			if g.ID != f.ID {
				continue // no reply but the invocation's comes over a lane
			}
			if ctx.Err() != nil {
				return g, true, cancelled(ctx, g)
			}
			return g, true, g.Err.err()
		}
		if g.Op == opLog {
			pr.log(g)
			continue
		}
		// A request behind which more wait, or an outbound fetch (slow by
		// nature), is performed on a goroutine of its own; the others here.
		if g.Op == opOutbound || l.br.Buffered() > 0 {
			go func() { _ = l.write(pr.answer(g)) }()
		} else {
			_ = l.write(pr.answer(g))
		}
	}
}

// cancelled is the outcome of an invocation whose caller gave up: the
// sandbox's error if it failed, else why the caller gave up.
func cancelled(ctx context.Context, r *frame) error {
	if r.Err != nil {
		return r.Err.err()
	}
	return context.Cause(ctx)
}

// killTimer kills the sandbox KillGrace after deadline, on account of the
// invocation id.
func (pr *proc) killTimer(deadline time.Time, id uint64) *time.Timer {
	grace := pr.pool.opts.KillGrace
	return time.AfterFunc(time.Until(deadline)+grace, func() {
		pr.killFor(id, EndTime, fmt.Sprintf("time limit: an invocation ran past its deadline and did not stop within %s", grace))
	})
}

// cancel asks the sandbox to stop the invocation id and gives it
// KillGrace to do so.
func (pr *proc) cancel(id uint64, killTimer *time.Timer) {
	_ = pr.c.write(&frame{Op: opCancel, Inv: id})
	killTimer.Reset(pr.pool.opts.KillGrace)
}

func (pr *proc) forgetCall(id uint64) {
	pr.mu.Lock()
	delete(pr.calls, id)
	pr.mu.Unlock()
}

// laneFailure is the error of an invocation whose lane broke: the sandbox
// ended (why is known once its connection is drained), or, if it has not
// within a few seconds, it is killed as broken.
func (pr *proc) laneFailure(cl *call, err error) error {
	select {
	case <-pr.done:
	case <-time.After(3 * time.Second):
		pr.kill(EndCrash, fmt.Sprintf("crash (its lane to the host broke: %v)", err))
		<-pr.done
	}
	return pr.failure(cl, pr.c.err())
}

// takeLane returns a free lane of the sandbox, nil when none is free or
// the host's MaxLaneCalls are running.
func (pr *proc) takeLane() *laneEnd {
	p := pr.pool
	if p.laneCalls.Add(1) > int64(p.opts.MaxLaneCalls) {
		p.laneCalls.Add(-1)
		return nil
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	n := len(pr.lanes)
	if n == 0 || pr.lanesShut {
		p.laneCalls.Add(-1)
		return nil
	}
	l := pr.lanes[n-1]
	pr.lanes = pr.lanes[:n-1]
	p.laneTotal.Add(1)
	return l
}

// giveLane returns l to the free lanes, or closes it when it broke or the
// sandbox ended.
func (pr *proc) giveLane(l *laneEnd, ok bool) {
	pr.pool.laneCalls.Add(-1)
	pr.mu.Lock()
	if ok && !pr.lanesShut {
		pr.lanes = append(pr.lanes, l)
		l = nil
	}
	pr.mu.Unlock()
	if l != nil {
		l.close()
	}
}

// shutLanes closes the free lanes once the sandbox has ended (the busy
// ones are closed as they are given back).
func (pr *proc) shutLanes() {
	pr.mu.Lock()
	free := pr.lanes
	pr.lanes, pr.lanesShut = nil, true
	pr.mu.Unlock()
	closeLanes(free, nil, nil)
}

// failure is the error of the invocation cl when the sandbox ended under
// it: an *endedError that says whom the end is charged to (blameOf).
func (pr *proc) failure(cl *call, err error) error {
	if !errors.Is(err, ErrSandboxEnded) {
		return err
	}
	<-pr.done // the end's reason, culprit and count are known
	b := pr.blameOf(cl.id)
	pr.pool.opts.Logger.Warn("sandbox: ended with invocations running", "sandbox", pr.key, "worker", cl.v.WorkerUID, "version", cl.v.UID, "err", err, "charged", b == blameCause)
	return &endedError{err: err, blame: b}
}

// blameOf says whom the sandbox's end is charged to, for the invocation
// id it was running: the invocation whose time limit the host killed it
// for; else, when it was running only one and had run no other, that one;
// else nobody can tell yet (each is a suspect). An end by the host
// (shutdown) is nobody's.
func (pr *proc) blameOf(id uint64) blame {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	switch {
	case pr.killKind == EndShutdown || pr.killKind == EndInit:
		return blameHost
	case pr.culprit != 0 && pr.culprit == id:
		return blameCause
	case pr.culprit != 0 || pr.killReason == "idle":
		return blameOther
	case pr.running <= 1 && pr.served <= 1:
		return blameCause
	}
	return blameSuspect
}

// handle serves a request of the sandbox that came over the connection
// (on the read goroutine: anything that can wait runs on its own
// goroutine).
func (pr *proc) handle(f *frame) {
	if f.Op == opLog {
		pr.log(f)
		return
	}
	go func() { pr.c.reply(f, pr.answer(f)) }()
}

// log keeps a line the sandbox logged, within the worker's rate.
func (pr *proc) log(f *frame) {
	if f.Log != nil && pr.pool.limiter.allow(f.Log.Worker, time.Now()) {
		if n := pr.pool.limiter.takeDropped(f.Log.Worker); n > 0 {
			pr.pool.logs.Add(f.Log.Worker, f.Log.Version, "warn", fmt.Sprintf("%d log lines were dropped: the worker logged more than %d lines per second", n, pr.pool.opts.LogRate))
		}
		pr.pool.logs.Add(f.Log.Worker, f.Log.Version, f.Log.Level, f.Log.Message)
	}
}

// answer performs a request of the sandbox for the invocation it names and
// returns the reply.
func (pr *proc) answer(f *frame) *frame {
	pr.mu.Lock()
	cl := pr.calls[f.Inv]
	pr.mu.Unlock()
	r := &frame{}
	r.IDs, r.HTTP, r.Err = pr.serve(cl, f)
	r.ID, r.Reply = f.ID, true
	return r
}

func (pr *proc) serve(cl *call, f *frame) ([]string, *httpMsg, *wireErr) {
	if cl == nil {
		if f.Op == opSettle {
			return nil, nil, toWire(abi.ErrUnknownBatch)
		}
		return nil, nil, toWire(fmt.Errorf("%w: the invocation has ended", abi.ErrBackendUnavailable))
	}
	switch f.Op {
	case opSend:
		ok := false
		for _, b := range cl.v.Bindings {
			ok = ok || b.QueueUID == f.QueueUID
		}
		if !ok || pr.pool.opts.Sender == nil {
			return nil, nil, toWire(fmt.Errorf("%w: the version has no Binding to the queue %s", abi.ErrBackendUnavailable, f.QueueUID))
		}
		ids, err := pr.pool.opts.Sender.Send(cl.ctx, cl.v.Principal, cl.v.Space, f.QueueUID, fromWireOutgoing(f.Messages))
		return ids, nil, toWire(err)
	case opSettle:
		if cl.batch == nil || cl.batch.ID != f.BatchID || f.Settlement == nil {
			return nil, nil, toWire(abi.ErrUnknownBatch)
		}
		b, s := cl.batch, f.Settlement.settlement()
		var err error
		switch s.Kind {
		case abi.Acknowledge:
			err = b.Acknowledge(cl.ctx, s.MessageID)
		case abi.Retry:
			err = b.Retry(cl.ctx, s.MessageID, s.Delay)
		case abi.AcknowledgeAll:
			err = b.AcknowledgeAll(cl.ctx)
		case abi.RetryAll:
			err = b.RetryAll(cl.ctx, s.Delay)
		default:
			err = fmt.Errorf("%w: unknown settlement", abi.ErrBackendUnavailable)
		}
		return nil, nil, toWire(err)
	case opOutbound:
		m, err := pr.pool.out.do(cl, f.HTTP)
		return nil, m, toWire(err)
	}
	return nil, nil, toWire(fmt.Errorf("sandbox: unknown operation %q", f.Op))
}

// Keys lists the live sandboxes' keys, sorted (tests).
func (p *Pool) Keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for k := range p.procs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func copyVersion(v *abi.Version) *abi.Version {
	c := *v
	return &c
}
