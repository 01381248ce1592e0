package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/membudget"
)

// outbound performs the sandboxes' outbound fetches: the allowed hosts are
// checked again here, the dialler checks the address actually connected to
// (js.NewOutboundTransport), and concurrency is capped per invocation, per
// destination and for the host.
type outbound struct {
	allowed []string
	rt      http.RoundTripper
	total   chan struct{}
	budget  *membudget.Budget // bodies in flight (nil: no bound)
}

func newOutbound(o Options) *outbound {
	rt := o.Transport
	if rt == nil {
		t := js.NewOutboundTransport(o.AllowedFetchHosts)
		t.MaxConnsPerHost = o.FetchPerHost
		t.ResponseHeaderTimeout = o.InvocationTimeout
		rt = t
	}
	return &outbound{allowed: append([]string(nil), o.AllowedFetchHosts...), rt: rt, total: make(chan struct{}, o.FetchTotal), budget: o.BodyBudget}
}

func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the invocation ended while its fetch waited for a connection slot: %w", context.Cause(ctx))
	}
}

func (o *outbound) do(cl *call, m *httpMsg) (*httpMsg, error) {
	if m == nil {
		return nil, errors.New("no request")
	}
	u, err := url.Parse(m.URL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the scheme %q is not supported", u.Scheme)
	}
	if !js.HostAllowed(o.allowed, u) {
		return nil, fmt.Errorf("the host %q is not in the allowed hosts", u.Host)
	}
	ctx := cl.ctx
	if err := acquire(ctx, cl.fetches); err != nil {
		return nil, err
	}
	defer func() { <-cl.fetches }()
	if err := acquire(ctx, o.total); err != nil {
		return nil, err
	}
	defer func() { <-o.total }()

	// The request body came in the sandbox's frame; it and the response
	// body are charged to the invoking principal (else the version's
	// creator) and the worker until the reply is handed to the sandbox.
	res, err := o.budget.Reserve(fetchHolder(cl), int64(len(m.Body)))
	if err != nil {
		return nil, err
	}
	defer res.Release()
	req, err := http.NewRequestWithContext(ctx, m.Method, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(len(m.Body))
	if len(m.Body) == 0 {
		req.Body = http.NoBody
	}
	for k, vs := range m.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := o.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := membudget.ReadBody(resp.Body, resp.ContentLength, js.DefaultMaxBodyBytes, res)
	switch {
	case errors.Is(err, membudget.ErrOverLimit):
		return nil, fmt.Errorf("the response body is larger than %d bytes", js.DefaultMaxBodyBytes)
	case errors.Is(err, membudget.ErrBusy) || errors.Is(err, membudget.ErrTooLarge):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("reading the response body: %w", err)
	}
	return &httpMsg{Status: resp.StatusCode, StatusText: resp.Status, Header: resp.Header, Body: b}, nil
}

// fetchHolder is whom an invocation's outbound fetch is charged to: the
// principal whose request invoked the worker, else the version's creator,
// and the worker.
func fetchHolder(cl *call) membudget.Holder {
	p, ok := abi.Invoker(cl.ctx)
	if !ok {
		p = cl.v.Principal
	}
	return membudget.Holder{Principal: p, Worker: cl.v.WorkerUID}
}

// logLimiter is a token bucket per worker: rate lines per second, burst
// ten seconds' worth.
type logLimiter struct {
	rate float64
	mu   sync.Mutex
	b    map[string]*bucket
}

type bucket struct {
	tokens  float64
	last    time.Time
	dropped int
}

func newLogLimiter(rate int) *logLimiter {
	return &logLimiter{rate: float64(rate), b: map[string]*bucket{}}
}

func (l *logLimiter) allow(worker string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b[worker]
	if b == nil {
		b = &bucket{tokens: l.rate * 10, last: now}
		l.b[worker] = b
	}
	b.tokens += now.Sub(b.last).Seconds() * l.rate
	if b.tokens > l.rate*10 {
		b.tokens = l.rate * 10
	}
	b.last = now
	if b.tokens < 1 {
		b.dropped++
		return false
	}
	b.tokens--
	return true
}

func (l *logLimiter) takeDropped(worker string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b[worker]
	if b == nil {
		return 0
	}
	n := b.dropped
	b.dropped = 0
	return n
}
