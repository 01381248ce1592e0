package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// limitedServer serves 200 "ok" behind LimitListener with the given caps,
// with a header timeout long enough that half-sent requests stay open for
// the whole test.
func limitedServer(t *testing.T, lim ConnLimits) (*Limited, string) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := LimitListener(raw, lim)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute,
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, raw.Addr().String()
}

// dialFrom connects to addr from the loopback address src (Linux routes
// all of 127.0.0.0/8 to lo).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// halfOpen opens a connection from src that sends part of a request's
// headers and then nothing.
func halfOpen(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, src, addr)
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// get makes one request from src and returns the status and body.
func get(t *testing.T, src, addr string) (int, string) {
	t.Helper()
	c := dialFrom(t, src, addr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitOpen waits until the listener counts n open connections (the
// accept loop runs on the server's goroutine).
func waitOpen(t *testing.T, l *Limited, n int) {
	t.Helper()
	for i := 0; i < 500 && l.Open() != n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.Open(); got != n {
		t.Fatalf("open connections: %d, want %d", got, n)
	}
}

func TestLimitListenerPerClientAndTotal(t *testing.T) {
	l, addr := limitedServer(t, ConnLimits{MaxConns: 6, MaxConnsPerClient: 3})
	// One client holds its 3 connections with half-sent requests.
	var held []net.Conn
	for i := 0; i < 3; i++ {
		held = append(held, halfOpen(t, "127.0.0.1", addr))
	}
	waitOpen(t, l, 3)
	// Its fourth is answered 503 too_many_connections at once.
	status, body := get(t, "127.0.0.1", addr)
	if status != 503 {
		t.Fatalf("a fourth connection from the same address: %d %s", status, body)
	}
	var p struct {
		Code, Detail, RequestID string
		Status                  int
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Code != "too_many_connections" || p.Status != 503 || !strings.Contains(p.Detail, "this client address") {
		t.Fatalf("refusal body %q (%v)", body, err)
	}
	// Another client is answered.
	if status, body := get(t, "127.0.0.2", addr); status != 200 || body != "ok" {
		t.Fatalf("another client: %d %s", status, body)
	}
	// The server closes that connection after its answer, but possibly
	// after the client has read it: wait for the release, or the third
	// address's last connection can be refused while it is still counted.
	waitOpen(t, l, 3)
	// A third address fills the host's total of 6...
	for i := 0; i < 3; i++ {
		held = append(held, halfOpen(t, "127.0.0.3", addr))
	}
	waitOpen(t, l, 6)
	// ...so a new address is refused too, saying why.
	status, body = get(t, "127.0.0.4", addr)
	if status != 503 || !strings.Contains(body, "connections open, its limit") {
		t.Fatalf("over the total: %d %s", status, body)
	}
	if l.Refused() != 2 {
		t.Fatalf("refused %d, want 2", l.Refused())
	}
	// Closing the held connections frees the room.
	for _, c := range held {
		c.Close()
	}
	waitOpen(t, l, 0)
	if status, body := get(t, "127.0.0.4", addr); status != 200 {
		t.Fatalf("after the held connections closed: %d %s", status, body)
	}
}

// A trusted proxy's connections count only against the total.
func TestLimitListenerTrustedProxy(t *testing.T) {
	l, addr := limitedServer(t, ConnLimits{MaxConns: 5, MaxConnsPerClient: 2, TrustedProxies: []string{"127.0.0.5", "127.0.1.0/24"}})
	for i := 0; i < 4; i++ {
		halfOpen(t, "127.0.0.5", addr)
	}
	waitOpen(t, l, 4)
	if status, body := get(t, "127.0.1.9", addr); status != 200 {
		t.Fatalf("a fifth connection, from a trusted prefix: %d %s", status, body)
	}
	waitOpen(t, l, 4) // that one's release (see TestLimitListenerPerClientAndTotal)
	halfOpen(t, "127.0.0.5", addr)
	waitOpen(t, l, 5)
	if status, _ := get(t, "127.0.0.5", addr); status != 503 {
		t.Fatalf("the proxy over the total: %d", status)
	}
	if _, err := LimitListener(nil, ConnLimits{TrustedProxies: []string{"proxy.example"}}); err == nil {
		t.Fatal("a host name accepted as a trusted proxy")
	}
}
