package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/takoform/queuehost/tests/e2e/harness"
)

// Limits the host documents (spec/host-api.md §Transport, host/host.go).
const (
	maxBodyBytes      = 8 << 20
	maxJSONDepth      = 64
	maxHeaderBytes    = 64 << 10
	readHeaderTimeout = 10 * time.Second
)

// TestLimits sends what a hostile or broken client would: an oversized
// body (Host API and fetch route), deep JSON nesting, huge headers, a
// client that never finishes its headers. Each gets a clear problem or a
// closed connection as documented, never a 5xx, and the host goes on.
func TestLimits(t *testing.T) {
	e := startEnv(t, hostOpts{})
	ctx := ctxT(t, 90*time.Second)
	topo := e.topology(harness.TopologyOptions{NoConsumers: true})
	c := e.admin
	sp := "/v2/spaces/" + topo.Space

	// The slow client runs alongside the rest: headers never finished.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		slowClient(t, e.host.Addr)
	}()

	before, err := c.List(ctx, topo.Space)
	if err != nil {
		t.Fatal(err)
	}
	big := func(n int) []byte {
		pre := `{"name":"big","formUrl":"` + harness.FormQueue + `","spec":{"deliveryDelaySeconds":0,"messageRetentionSeconds":86400,"pad":"`
		suf := `"}}`
		b := bytes.Repeat([]byte("a"), n-len(pre)-len(suf))
		return append(append([]byte(pre), b...), suf...)
	}
	nest := func(depth int) []byte {
		spec := strings.Repeat(`{"a":`, depth-1) + "1" + strings.Repeat("}", depth-1)
		return []byte(`{"name":"deep","formUrl":"` + harness.FormQueue + `","spec":` + spec + `}`)
	}
	cases := []struct {
		name   string
		method string
		path   string
		body   []byte
		ctype  string
		status int
		code   string
		detail string // a substring of the detail
	}{
		{"body over 8 MiB", "POST", sp + "/resources", big(maxBodyBytes + 1), "application/json", 400, "invalid_request", "larger"},
		{"body of 8 MiB (not too large, bad spec)", "POST", sp + "/resources", big(maxBodyBytes), "application/json", 422, "invalid_spec", ""},
		{"PUT body over 8 MiB", "PUT", sp + "/resources/" + topo.Queue, append([]byte(`{"spec":{"x":"`), append(bytes.Repeat([]byte("a"), maxBodyBytes), `"}}`...)...), "application/json", 400, "invalid_request", "larger"},
		{"fetch body over 8 MiB", "POST", sp + "/resources/" + topo.Worker + "/fetch/hello", bytes.Repeat([]byte("a"), maxBodyBytes+1), "text/plain", 413, "payload_too_large", "larger"},
		{"nesting 65 levels", "POST", sp + "/resources", nest(maxJSONDepth + 1), "application/json", 400, "invalid_request", "nested"},
		{"nesting 100000 levels", "POST", sp + "/resources", nest(100000), "application/json", 400, "invalid_request", "nested"},
		{"nesting 64 levels (allowed depth, bad spec)", "POST", sp + "/resources", nest(maxJSONDepth), "application/json", 422, "invalid_spec", ""},
		{"unclosed nesting", "POST", sp + "/resources", []byte(strings.Repeat("[", 5000)), "application/json", 400, "invalid_request", ""},
		{"not JSON", "POST", sp + "/resources", []byte("name=x"), "application/json", 400, "invalid_request", ""},
		{"wrong content type", "POST", sp + "/resources", []byte(`{"name":"x"}`), "text/plain", 400, "invalid_request", ""},
		{"no body", "POST", sp + "/resources", nil, "application/json", 400, "invalid_request", ""},
	}
	for _, tc := range cases {
		hdr := http.Header{"Content-Type": {tc.ctype}}
		var b any
		if tc.body != nil {
			b = tc.body
		}
		r, err := c.Do(ctx, tc.method, tc.path, b, hdr)
		if err != nil {
			// A closed connection is an acceptable answer to an oversized
			// body only.
			if tc.detail == "larger" && isClosed(err) {
				t.Logf("%s: connection closed (%v)", tc.name, err)
				continue
			}
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.Status != tc.status {
			t.Errorf("%s: want %d %s, got %s", tc.name, tc.status, tc.code, r)
			continue
		}
		checkProblem(t, r, tc.code)
		if tc.detail != "" && r.Problem != nil && !strings.Contains(r.Detail(), tc.detail) {
			t.Errorf("%s: detail %q does not say %q", tc.name, r.Detail(), tc.detail)
		}
		t.Logf("%-44s -> %d %s: %.100s", tc.name, r.Status, r.Code(), detailOf(r))
	}

	// Headers over the host's limit get a 431 problem; past Go's own,
	// higher, cap (1 MiB) Go's server answers 431 itself (plain text: it
	// never reaches the handler) or closes the connection.
	if r, err := c.Do(ctx, "GET", sp+"/resources", nil, http.Header{"X-Big": {strings.Repeat("h", maxHeaderBytes+8<<10)}}); err != nil {
		t.Errorf("header of %d bytes: %v", maxHeaderBytes+8<<10, err)
	} else if r.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("header of %d bytes: want 431, got %s", maxHeaderBytes+8<<10, r)
	} else {
		checkProblem(t, r, "header_too_large")
	}
	if r, err := c.Do(ctx, "GET", sp+"/resources", nil, http.Header{"X-Big": {strings.Repeat("h", 2<<20)}}); err != nil && !isClosed(err) {
		t.Errorf("header of 2 MiB: %v", err)
	} else if err == nil && r.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("header of 2 MiB: want 431, got %s", r)
	}
	// Headers just under the limit pass.
	if r, err := c.Do(ctx, "GET", sp+"/resources", nil, http.Header{"X-Big": {strings.Repeat("h", maxHeaderBytes/2)}}); err != nil || r.Status != 200 {
		t.Errorf("a 32 KiB header: %v %s", err, r)
	}

	wg.Wait()
	// Nothing changed, and the host still serves.
	after, err := c.List(ctx, topo.Space)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("refused requests changed the space: %d resources before, %d after", len(before), len(after))
	}
	if !e.host.Running() {
		t.Fatal("the host died")
	}
}

func detailOf(r *harness.Response) string {
	if r.Problem == nil {
		return ""
	}
	return r.Detail()
}

func isClosed(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") || strings.Contains(s, "EOF") || strings.Contains(s, "closed")
}

// slowClient opens a connection, sends half a request line and trickles a
// header byte every 500 ms: the host must close it after ReadHeaderTimeout
// (10 s), not hold it forever.
func slowClient(t *testing.T, addr string) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Errorf("slow client: %v", err)
		return
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "GET /v2/openapi.json HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
	closed := make(chan string, 1)
	go func() {
		rd := bufio.NewReader(conn)
		line, err := rd.ReadString('\n')
		if err == nil {
			io.Copy(io.Discard, rd)
			closed <- "answered " + strings.TrimSpace(line)
			return
		}
		closed <- "closed"
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(readHeaderTimeout + 8*time.Second)
	for {
		select {
		case how := <-closed:
			took := time.Since(start)
			if took < readHeaderTimeout-time.Second {
				t.Errorf("slow client: %s after %s, before ReadHeaderTimeout (%s)", how, took, readHeaderTimeout)
			}
			if strings.HasPrefix(how, "answered HTTP/1.1 2") {
				t.Errorf("slow client: the host answered an unfinished request: %s", how)
			}
			t.Logf("slow client: %s after %s (ReadHeaderTimeout %s)", how, took.Round(100*time.Millisecond), readHeaderTimeout)
			return
		case <-tick.C:
			conn.Write([]byte("x"))
		case <-limit:
			t.Errorf("slow client: connection still open after %s", time.Since(start))
			return
		}
	}
}
