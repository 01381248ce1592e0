package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// TestHalfOpenFlood: 1100 connections from one address that send part of a
// request's headers and then nothing (#14) do not make the Host API
// unreachable. The host runs with 1024 file descriptors (a common default
// limit), which 1100 held connections would exhaust: then accept fails and
// nobody is answered until the header timeout frees some. With the default
// caps (512 in all at 1024 descriptors, 256 per address) the address holds
// 256 of them; every other one is answered 503 too_many_connections (or,
// past the refusals under way, closed) at once, and a client from another
// address, and an authenticated API call, are answered while they stay
// open.
func TestHalfOpenFlood(t *testing.T) {
	var wrap []string
	if _, err := exec.LookPath("prlimit"); err == nil {
		wrap = []string{"prlimit", "--nofile=1024:1024"}
	}
	e := startEnv(t, hostOpts{wrap: wrap})
	ctx := ctxT(t, 120*time.Second)
	addr := e.host.Addr
	const flood = 1100
	var held []net.Conn
	refused, other := 0, 0
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < flood; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		if _, err := io.WriteString(c, "GET /v2/capabilities HTTP/1.1\r\nHost: x\r\n"); err != nil {
			// Refused and closed before the write: counted below.
			continue
		}
	}
	// Each connection is either held (no answer yet) or was answered 503
	// or closed. They are read at once, each for at most 2 s.
	type result struct {
		status int
		body   string
		err    error
		retry  string
	}
	results := make(chan result, len(held))
	for _, c := range held {
		go func(c net.Conn) {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				results <- result{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode, body: string(b), retry: resp.Header.Get("Retry-After")}
		}(c)
	}
	var otherErrs []string
	for range held {
		r := <-results
		if r.err != nil {
			if ne, ok := r.err.(net.Error); ok && ne.Timeout() {
				continue // held open, waiting for the rest of its headers
			}
			other++
			if len(otherErrs) < 3 {
				otherErrs = append(otherErrs, r.err.Error())
			}
			continue
		}
		var p struct{ Code string }
		if r.status != 503 || json.Unmarshal([]byte(r.body), &p) != nil || p.Code != "too_many_connections" || r.retry == "" {
			t.Fatalf("an excess connection was answered %d %s", r.status, r.body)
		}
		refused++
	}
	t.Logf("%d half-open connections from one address: %d answered 503 too_many_connections, %d closed without an answer (%s), %d held", flood, refused, other, strings.Join(otherErrs, "; "), flood-refused-other)
	if refused+other < flood-256 {
		t.Fatalf("only %d of %d excess connections were refused", refused+other, flood-256)
	}
	if refused == 0 {
		t.Fatal("no excess connection was answered")
	}

	// Another client address is answered while the flood's connections
	// are held.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from 127.0.0.2: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another client during the flood: %v %v", resp, err)
	}
	t.Logf("another client's /healthz answered in %s during the flood", time.Since(start).Round(time.Millisecond))
	// An API call from another address too.
	api := &harness.Client{Base: "http://" + addr, Token: e.admin.Token, Timeout: 30 * time.Second,
		HTTP: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}}
	r, err := api.Do(ctx, "GET", "/v2/spaces/"+spaceA+"/resources", nil, nil)
	if err != nil || r.Status != 200 {
		t.Fatalf("an API call from another address during the flood: %v %s", err, r)
	}
	if !strings.Contains(e.host.Out.String(), "connections refused over the Host API's caps") {
		t.Error("the host's log does not say it refused connections")
	}
}
