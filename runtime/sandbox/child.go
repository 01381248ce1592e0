package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
)

// EnvVar, set to "1" in a process's environment, makes Main run the
// sandbox loop instead of returning. The host sets it on the children it
// starts; nothing else should.
const EnvVar = "TAKOHOST_SANDBOX"

// The child's ends of its pipes to the host (cmd.ExtraFiles).
const (
	fromHostFD = 3
	toHostFD   = 4
)

// Main must be the first call of every program that can start a host
// (cmd/takohost, the tools, and the TestMain of packages whose tests start
// one): the host starts sandboxes by running its own executable with EnvVar
// set, and in that process Main serves the host on the inherited socket and
// exits instead of returning.
func Main() {
	if os.Getenv(EnvVar) != "1" {
		return
	}
	closeInherited()
	jailMain() // stage one of a jailed sandbox does not return (jail_linux.go)
	if os.Getenv(envProbe) == "1" {
		os.Exit(0)
	}
	os.Exit(childMain())
}

func childMain() int {
	hostEnd, err := openPipeConn(fromHostFD, toHostFD, "connection")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox: the pipes to the host:", err)
		return 70
	}
	// The host never expects a working directory: whatever the worker
	// loads comes over the connection.
	_ = os.Chdir("/")
	c := newConn(hostEnd)
	s := &child{c: c, versions: map[string]*abi.Version{}, calls: map[uint64]context.CancelFunc{},
		early: map[uint64]time.Time{}, earlyHorizon: time.Minute}
	err = c.readLoop(s.handle, func(err error) error { return err })
	if s.rt != nil {
		s.rt.Close()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "sandbox: reading from the host:", err)
		return 70
	}
	return 0
}

// child is the sandbox side: a js.Runtime whose sends, settlements,
// outbound fetches and log lines go to the host.
type child struct {
	c  *conn
	rt *js.Runtime

	mu       sync.Mutex
	versions map[string]*abi.Version
	calls    map[uint64]context.CancelFunc
	// early holds cancels that came before their invocation started
	// (opCancel comes over the connection, the invocation over a lane or
	// to a worker goroutine), each with when it came; one older than
	// earlyHorizon is dropped.
	early        map[uint64]time.Time
	earlyHorizon time.Duration

	work workers // runs the requests (serve)
}

func (s *child) handle(f *frame) {
	switch f.Op {
	case opInit:
		s.init(f.Init)
	case opCancel:
		s.mu.Lock()
		cancel := s.calls[f.Inv]
		if cancel == nil {
			s.cancelEarly(f.Inv, time.Now())
		}
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case opSelfTest:
		// Tests only (Options.selfTest): the host asks the sandbox to try
		// what its containment refuses (contain_linux.go).
		go func() {
			r := &frame{Err: toWire(fmt.Errorf("sandbox: unknown operation %q", f.Op))}
			if os.Getenv(envSelfTest) == "1" {
				r = &frame{IDs: selfTest(f.IDs)}
			}
			s.c.reply(f, r)
		}()
	case opEvict:
		s.mu.Lock()
		delete(s.versions, f.VersionUID)
		s.mu.Unlock()
		if s.rt != nil {
			s.rt.Evict(f.VersionUID)
		}
	default:
		s.accept(f)
		s.work.run(func() { s.serve(nil, f) })
	}
}

// accept keeps the version a request carries.
func (s *child) accept(f *frame) {
	if f.Version != nil {
		s.mu.Lock()
		s.versions[f.Version.UID] = f.Version
		s.mu.Unlock()
	}
}

// cancelEarly keeps the cancel of invocation id, which has not started
// (or has already ended), for it to find when it starts; s.mu is held.
func (s *child) cancelEarly(id uint64, now time.Time) {
	for k, at := range s.early {
		if now.Sub(at) > s.earlyHorizon {
			delete(s.early, k)
		}
	}
	s.early[id] = now
}

// runLane runs the invocations that come over lane l until it ends.
func (s *child) runLane(l *childLane) {
	for {
		f := l.next()
		if f == nil {
			return
		}
		s.accept(f)
		s.serve(l, f)
	}
}

// init applies the limits the host chose: the Go runtime's soft memory
// limit, the address-space limit (an allocation beyond it kills this
// process, not the host), the goroutine stack limit (a runaway recursion in
// Go code dies here), and the js.Runtime.
func (s *child) init(m *initMsg) {
	if m.MemoryLimit > 0 {
		debug.SetMemoryLimit(m.MemoryLimit * 3 / 4)
	}
	if m.AddressSpace > 0 {
		lim := syscall.Rlimit{Cur: uint64(m.AddressSpace), Max: uint64(m.AddressSpace)}
		_ = syscall.Setrlimit(syscall.RLIMIT_AS, &lim)
	}
	if m.MaxStack > 0 {
		debug.SetMaxStack(m.MaxStack)
	}
	if m.InvocationTimeout > 0 {
		// The host kills a sandbox whose invocation outlives its
		// deadline by KillGrace: no invocation starts later than that
		// after its cancel.
		s.earlyHorizon = 2 * m.InvocationTimeout
	}
	// The sandbox's own containment (contain_linux.go), before any worker
	// code: a sandbox that cannot apply what the host asked for ends here.
	if err := containChild(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox: containment:", err)
		os.Exit(71)
	}
	s.rt = js.New(js.Options{
		Sender:            sender{s},
		AllowedFetchHosts: m.AllowedFetchHosts,
		InvocationTimeout: m.InvocationTimeout,
		StartupTimeout:    m.StartupTimeout,
		Transport:         transport{s},
		Waiter:            waiter{},
		// A line goes the way its invocation's reply will, ahead of it.
		LogSink: func(ctx context.Context, worker, version, level, msg string) {
			f := &frame{Op: opLog, Log: &logMsg{Worker: worker, Version: version, Level: level, Message: msg}}
			if l := invOf(ctx).lane; l != nil {
				_ = l.write(f)
				return
			}
			_ = s.c.write(f)
		},
	})
	for i := range m.Lanes {
		l, err := openChildLane(i)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(70)
		}
		go s.runLane(l)
	}
}

func (s *child) version(f *frame) (*abi.Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.versions[f.VersionUID]
	if v == nil {
		return nil, fmt.Errorf("%w: %s", errVersionNotSent, f.VersionUID)
	}
	return v, nil
}

// errVersionNotSent: a request named a version the sandbox does not hold
// (the host sends it again with the request).
var errVersionNotSent = errors.New("sandbox: the request's version was never sent")

type invKey struct{}

// inv is what an invocation's context carries: its ID, which its sends,
// settlements and fetches name, and the lane it came over (nil: the
// connection), which they go over.
type inv struct {
	id   uint64
	lane *childLane
}

func invOf(ctx context.Context) inv {
	in, _ := ctx.Value(invKey{}).(inv)
	return in
}

// caller is the way to the host: the connection or a lane.
type caller interface {
	call(ctx context.Context, f *frame) (*frame, error)
}

// to is the way to the host of the invocation of ctx.
func (s *child) to(ctx context.Context) caller {
	if l := invOf(ctx).lane; l != nil {
		return l
	}
	return s.c
}

// serve runs one request of the host that came over lane l (nil: the
// connection) and replies the same way; the context carries the
// invocation (inv) and ends at its deadline or on opCancel.
func (s *child) serve(l *childLane, f *frame) {
	r := &frame{}
	defer func() {
		if l == nil {
			s.c.reply(f, r)
			return
		}
		r.ID, r.Reply = f.ID, true
		_ = l.write(r)
	}()
	if s.rt == nil {
		r.Err = toWire(errors.New("sandbox: not initialised"))
		return
	}
	v, err := s.version(f)
	if err != nil {
		r.Err = toWire(err)
		return
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), invKey{}, inv{id: f.ID, lane: l}))
	if !f.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, f.Deadline)
	}
	defer cancel()
	s.mu.Lock()
	s.calls[f.ID] = cancel
	_, cancelled := s.early[f.ID]
	delete(s.early, f.ID)
	s.mu.Unlock()
	if cancelled {
		cancel()
	}
	defer func() {
		s.mu.Lock()
		delete(s.calls, f.ID)
		s.mu.Unlock()
	}()

	switch f.Op {
	case opProbe:
		// The admission sandbox only probes: the runtime's Options (the
		// startup limit) apply, and nothing is kept.
		p, err := s.rt.Compile(v)
		if err == nil {
			r.Handlers = p.Handlers
		}
		r.Err = toWire(err)
		s.rt.Evict(v.UID)
		s.mu.Lock()
		delete(s.versions, v.UID)
		s.mu.Unlock()
	case opLoad:
		p, err := s.rt.Compile(v)
		if err == nil {
			r.Handlers = p.Handlers
		}
		r.Err = toWire(err)
	case opQueue:
		if f.StartBy != 0 && monoNow() > f.StartBy {
			// The last moment the host could prove its lease passed
			// before the batch got here (the host stalled after its
			// check): another host may be delivering it again.
			r.Err = toWire(abi.ErrNotStarted)
			return
		}
		h, err := s.rt.QueueHandler(v)
		if err == nil {
			b := abi.NewBatch(f.Batch.ID, f.Batch.Queue, f.Batch.Messages, settler{s: s, inv: f.ID})
			err = h.HandleBatch(ctx, b)
		}
		r.Err = toWire(err)
	case opFetch:
		resp, err := s.fetch(ctx, v, f)
		r.HTTP, r.Err = resp, toWire(err)
	default:
		r.Err = toWire(fmt.Errorf("sandbox: unknown operation %q", f.Op))
	}
}

func (s *child) fetch(ctx context.Context, v *abi.Version, f *frame) (*httpMsg, error) {
	m := f.HTTP
	req, err := http.NewRequestWithContext(ctx, m.Method, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return nil, err
	}
	req.Header = m.Header
	req.Host = m.Host
	req.ContentLength = int64(len(m.Body))
	if len(m.Body) == 0 {
		req.Body = http.NoBody
	}
	resp, err := s.rt.Fetch(ctx, v, req, f.Path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &httpMsg{Status: resp.StatusCode, StatusText: resp.Status, Header: resp.Header, Body: b}, nil
}

// ask sends a request to the host for the invocation of ctx and waits for
// the reply (the host answers within the invocation's life).
func (s *child) ask(ctx context.Context, f *frame) (*frame, error) {
	f.Inv = invOf(ctx).id
	return outcome(s.to(ctx).call(ctx, f))
}

// outcome is a call's reply and error as its caller sees them: a reply
// that carries an error is that error.
func outcome(r *frame, err error) (*frame, error) {
	if err != nil {
		return nil, err
	}
	return r, r.Err.err()
}

type sender struct{ s *child }

// Send asks the host, which sends as the version the invocation runs
// (principal and space are the host's to decide, not this process's).
func (x sender) Send(ctx context.Context, _, _, queueUID string, msgs []abi.OutgoingMessage) ([]string, error) {
	r, err := x.s.ask(ctx, &frame{Op: opSend, QueueUID: queueUID, Messages: toWireOutgoing(msgs)})
	if err != nil {
		return nil, err
	}
	return r.IDs, nil
}

// StartSend sends without a goroutine of its own over the invocation's
// lane: the loop goroutine reads the reply itself while it waits (waiter).
func (x sender) StartSend(ctx context.Context, principal, space, queueUID string, msgs []abi.OutgoingMessage, done func([]string, error)) {
	in := invOf(ctx)
	if in.lane == nil {
		go func() { done(x.Send(ctx, principal, space, queueUID, msgs)) }()
		return
	}
	f := &frame{Op: opSend, QueueUID: queueUID, Messages: toWireOutgoing(msgs), Inv: in.id}
	in.lane.start(f, func(r *frame, err error) {
		if r, err = outcome(r, err); err != nil {
			done(nil, err)
			return
		}
		done(r.IDs, nil)
	})
}

// waiter is the js.Waiter of an invocation: one that came over a lane and
// waits for replies to requests it started reads them itself
// (childLane.idle); any other waits for its loop's wake channel.
type waiter struct{}

func (waiter) Wait(ctx context.Context, wake <-chan struct{}) {
	if l := invOf(ctx).lane; l != nil && l.replies.waiting() > 0 {
		l.idle(ctx.Done(), wake)
		return
	}
	select {
	case <-wake:
	case <-ctx.Done():
	}
}

func (waiter) Wake(ctx context.Context) {
	if l := invOf(ctx).lane; l != nil {
		l.wakeIdle()
	}
}

type settler struct {
	s   *child
	inv uint64
}

// Settle names the invocation that received the batch, whatever
// invocation calls it: the host answers unknown_batch once that one ended.
func (x settler) Settle(ctx context.Context, batchID string, st abi.Settlement) error {
	f := &frame{Op: opSettle, BatchID: batchID, Settlement: toWireSettlement(st), Inv: x.inv}
	_, err := outcome(x.s.to(ctx).call(ctx, f))
	return err
}

type transport struct{ s *child }

// RoundTrip asks the host to perform one outbound request (one hop: the
// js runtime's client follows redirects and checks each against the
// allowed hosts; the host checks again and dials).
func (x transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	r, err := x.s.ask(req.Context(), &frame{Op: opOutbound, HTTP: &httpMsg{Method: req.Method, URL: req.URL.String(), Header: req.Header, Body: body}})
	if err != nil {
		return nil, err
	}
	m := r.HTTP
	return &http.Response{
		Status: m.StatusText, StatusCode: m.Status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header(m.Header), Body: io.NopCloser(bytes.NewReader(m.Body)), ContentLength: int64(len(m.Body)),
		Request: req,
	}, nil
}

// classify says how a sandbox ended from the head of what its Go runtime
// printed to stderr (GOTRACEBACK=none keeps that to the fatal lines); ""
// when nothing there explains it.
func classify(stderr string) string {
	switch {
	case strings.Contains(stderr, "sandbox: containment:"):
		line := stderr[strings.Index(stderr, "sandbox: containment:"):]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		return "crash (" + line + ")"
	case strings.Contains(stderr, "stack exceeds") || strings.Contains(stderr, "stack overflow"):
		return "stack overflow"
	case strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory"):
		return "memory cap"
	case strings.Contains(stderr, "fatal error:"):
		line := stderr[strings.Index(stderr, "fatal error:"):]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		return "crash (" + line + ")"
	case strings.Contains(stderr, "panic:"):
		return "crash (panic)"
	}
	return ""
}
