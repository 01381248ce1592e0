package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/runtime/js"
)

// outbound performs the sandboxes' outbound fetches: the allowed hosts are
// checked again here, the dialler checks the address actually connected to
// (js.NewOutboundTransport), and concurrency is capped per invocation, per
// destination and for the host.
type outbound struct {
	allowed []string
	rt      http.RoundTripper
	total   chan struct{}
}

func newOutbound(o Options) *outbound {
	rt := o.Transport
	if rt == nil {
		t := js.NewOutboundTransport(o.AllowedFetchHosts)
		t.MaxConnsPerHost = o.FetchPerHost
		t.ResponseHeaderTimeout = o.InvocationTimeout
		rt = t
	}
	return &outbound{allowed: append([]string(nil), o.AllowedFetchHosts...), rt: rt, total: make(chan struct{}, o.FetchTotal)}
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

	req, err := http.NewRequestWithContext(ctx, m.Method, m.URL, strings.NewReader(string(m.Body)))
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
	b, err := io.ReadAll(io.LimitReader(resp.Body, js.DefaultMaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the response body: %w", err)
	}
	if len(b) > js.DefaultMaxBodyBytes {
		return nil, fmt.Errorf("the response body is larger than %d bytes", js.DefaultMaxBodyBytes)
	}
	return &httpMsg{Status: resp.StatusCode, StatusText: resp.Status, Header: resp.Header, Body: b}, nil
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
