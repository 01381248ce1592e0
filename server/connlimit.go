package server

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/takoform/queuehost/problem"
)

// Connection caps of the Host API's listener (spec/host-api.md §Connections).
const (
	// MaxDefaultConns bounds DefaultMaxConns.
	MaxDefaultConns = 4096
	// DefaultMaxConnsPerClient is how many connections one client address
	// may hold when the host config sets no other number: room for a busy
	// client's concurrent requests and long polls, a quarter of the total
	// on a host with 1024 file descriptors.
	DefaultMaxConnsPerClient = 256
	// maxRefusing bounds the connections being answered 503 at once; above
	// it an excess connection is closed without an answer, so that a flood
	// cannot hold more descriptors through the refusals themselves.
	maxRefusing = 256
	// refuseTimeout bounds writing one refusal, drainTimeout the reading
	// of what the client sent meanwhile (so that the close does not reset
	// the connection before the client reads the answer).
	refuseTimeout = time.Second
	drainTimeout  = 100 * time.Millisecond
)

// DefaultMaxConns is how many connections the Host API keeps open at once
// when the host config sets no other number: half the process's file
// descriptor limit (the journal, sandboxes and outbound fetches need the
// rest), at least 64 and at most MaxDefaultConns. Past the descriptor
// limit accept fails and nobody is answered, which the cap prevents.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1024
	}
	return int(min(MaxDefaultConns, max(64, rl.Cur/2)))
}

// ConnLimits configures LimitListener.
type ConnLimits struct {
	// MaxConns caps the open connections (DefaultMaxConns() when zero).
	MaxConns int
	// MaxConnsPerClient caps the open connections of one client address
	// (DefaultMaxConnsPerClient when zero).
	MaxConnsPerClient int
	// TrustedProxies are addresses and prefixes ("10.0.0.5",
	// "10.0.0.0/8") whose connections count only against MaxConns: a
	// reverse proxy carries many clients' requests, and it caps each of
	// them itself. The host never reads X-Forwarded-For.
	TrustedProxies []string
	// Logger receives one warning when refusals start and a count of them
	// at most every 10 s while they go on.
	Logger *slog.Logger
	// Name is the listener's name in those warnings ("the Host API" when
	// empty).
	Name string
}

// Caps of the metrics listener (-metrics-listen): its own, smaller than the
// Host API's, so that a flood of it holds few descriptors and takes nothing
// from the Host API's share; a Prometheus scraper needs one or two.
const (
	MetricsMaxConns          = 64
	MetricsMaxConnsPerClient = 16
)

// ParseTrustedProxies checks a list of addresses and prefixes.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is neither an IP address nor a prefix (10.0.0.0/8)", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// LimitListener wraps ln so that at most MaxConns connections are open at
// once and at most MaxConnsPerClient from one client address. A connection
// over a cap is answered at once with 503 too_many_connections
// (Connection: close, Retry-After) and closed, so that clients holding
// idle or half-sent requests cannot make the Host API unreachable for
// others; the caps apply before any byte of a request is read.
func LimitListener(ln net.Listener, lim ConnLimits) (*Limited, error) {
	if lim.MaxConns <= 0 {
		lim.MaxConns = DefaultMaxConns()
	}
	if lim.MaxConnsPerClient <= 0 {
		lim.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	if lim.Logger == nil {
		lim.Logger = slog.New(slog.DiscardHandler)
	}
	if lim.Name == "" {
		lim.Name = "the Host API"
	}
	trusted, err := ParseTrustedProxies(lim.TrustedProxies)
	if err != nil {
		return nil, err
	}
	return &Limited{Listener: ln, lim: lim, trusted: trusted, perIP: map[netip.Addr]int{}}, nil
}

// Limited is the listener LimitListener returns.
type Limited struct {
	net.Listener
	lim     ConnLimits
	trusted []netip.Prefix

	mu       sync.Mutex
	open     int
	perIP    map[netip.Addr]int
	refusing atomic.Int64

	refused     atomic.Int64 // since the start
	lastLog     time.Time
	loggedCount int64
}

// Refused is how many connections were refused since the start.
func (l *Limited) Refused() int64 { return l.refused.Load() }

// Open is how many connections are open now.
func (l *Limited) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *Limited) isTrusted(a netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func clientAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// Accept returns the next connection within the caps; connections over a
// cap are refused on their own goroutine.
func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientAddr(c)
		perClient := !l.isTrusted(ip)
		l.mu.Lock()
		why := ""
		switch {
		case l.open >= l.lim.MaxConns:
			why = fmt.Sprintf("the host has %d connections open, its limit", l.lim.MaxConns)
		case perClient && l.perIP[ip] >= l.lim.MaxConnsPerClient:
			why = fmt.Sprintf("this client address has %d connections open, the limit for one address", l.lim.MaxConnsPerClient)
		}
		if why == "" {
			l.open++
			if perClient {
				l.perIP[ip]++
			}
			l.mu.Unlock()
			return &limitedConn{Conn: c, l: l, ip: ip, perClient: perClient}, nil
		}
		l.mu.Unlock()
		l.refuse(c, ip, why)
	}
}

func (l *Limited) release(ip netip.Addr, perClient bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if perClient {
		if l.perIP[ip]--; l.perIP[ip] <= 0 {
			delete(l.perIP, ip)
		}
	}
}

// refuse answers c 503 and closes it, or only closes it when too many
// refusals are under way.
func (l *Limited) refuse(c net.Conn, ip netip.Addr, why string) {
	n := l.refused.Add(1)
	l.logRefusal(n, ip, why)
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		defer c.Close()
		c.SetDeadline(time.Now().Add(refuseTimeout))
		id := newID("req-")
		doc := problem.New(503, problem.CodeTooManyConnections, "%s; close idle connections or retry later", why).Document("", id)
		body, _ := json.Marshal(doc)
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nContent-Length: %d\r\nRetry-After: 1\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n%s", len(body), id, body)
		// Half-close and drain what the client sends meanwhile, so that the
		// close does not reset the connection before the answer is read.
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(drainTimeout))
		buf := make([]byte, 4096)
		for total := 0; total < 64<<10; {
			k, err := c.Read(buf)
			total += k
			if err != nil {
				return
			}
		}
	}()
}

func (l *Limited) logRefusal(n int64, ip netip.Addr, why string) {
	l.mu.Lock()
	now := time.Now()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < 10*time.Second {
		l.mu.Unlock()
		return
	}
	since := n - l.loggedCount
	l.lastLog, l.loggedCount = now, n
	l.mu.Unlock()
	l.lim.Logger.Warn("connections refused over "+l.lim.Name+"'s caps", "client", ip.String(), "why", why, "refused", since, "refusedTotal", n)
}

type limitedConn struct {
	net.Conn
	l         *Limited
	ip        netip.Addr
	perClient bool
	once      sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip, c.perClient) })
	return err
}
