package js

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/membudget"
)

func newRequest(method, target, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return httptest.NewRequest(method, "http://host.example"+target, rd)
}

func readBody(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fetchVersion(t testing.TB, uid string) *abi.Version {
	v := loadVersion(t, "fetch", uid)
	v.Vars = map[string]string{"GREETING": "hi"}
	v.Secrets = map[string]string{"TOKEN": "tok"}
	return v
}

func doFetch(t *testing.T, rt *Runtime, v *abi.Version, r *http.Request, path string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := rt.Fetch(t.Context(), v, r, path)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	body := readBody(t, resp)
	var m map[string]any
	if strings.Contains(resp.Header.Get("Content-Type"), "json") {
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
	}
	return resp, m
}

func TestFetchRoundTrip(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := fetchVersion(t, "v-fetch")
	r := newRequest("POST", "/v2/spaces/s/resources/w/fetch/echo?q=42", "payload")
	r.Header.Set("X-Test", "yes")
	r.Header.Set("Authorization", "Bearer host-token")
	resp, got := doFetch(t, rt, v, r, "echo")
	want := map[string]any{
		"url": "http://host.example/echo?q=42", "method": "POST", "path": "/echo", "q": "42", "body": "payload",
		"bodyUsed": true, "test": "yes", "auth": nil, "isRequest": true, "greeting": "hi", "token": "tok",
	}
	if resp.StatusCode != 200 || !reflect.DeepEqual(got, want) {
		t.Fatalf("status %d, got %v\nwant %v", resp.StatusCode, got, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
}

func TestFetchBinaryResponse(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	resp, err := rt.Fetch(t.Context(), fetchVersion(t, "v-bin"), newRequest("GET", "/binary", ""), "/binary")
	if err != nil {
		t.Fatal(err)
	}
	b := readBody(t, resp)
	if resp.StatusCode != 201 || resp.Status != "201 Made" || b != "\x01\x02\xfa" || resp.Header.Get("X-Kind") != "bytes" || resp.Header.Get("Set-Cookie") != "a=1" {
		t.Fatalf("%s %v %q", resp.Status, resp.Header, b)
	}
	w := httptest.NewRecorder()
	resp, _ = rt.Fetch(t.Context(), fetchVersion(t, "v-bin"), newRequest("GET", "/binary", ""), "/binary")
	if err := WriteResponse(w, resp); err != nil || w.Code != 201 || w.Body.String() != "\x01\x02\xfa" {
		t.Fatalf("WriteResponse: %v %d %q", err, w.Code, w.Body.String())
	}
}

func TestFetchHandlerFailures(t *testing.T) {
	rt := New(Options{InvocationTimeout: 150 * time.Millisecond})
	defer rt.Close()
	v := fetchVersion(t, "v-fail")
	for path, code := range map[string]string{"/throw": "worker_exception", "/notresponse": "worker_exception", "/spin": "worker_timeout"} {
		resp, got := doFetch(t, rt, v, newRequest("GET", path, ""), path)
		if resp.StatusCode != 500 || got["code"] != code || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %v", path, resp.StatusCode, got)
		}
	}
	logs := rt.Logs(v.WorkerUID, 0, 100)
	var msgs []string
	for _, e := range logs {
		if e.Level == "error" {
			msgs = append(msgs, e.Message)
		}
	}
	all := strings.Join(msgs, "\n")
	if len(msgs) != 3 || !strings.Contains(all, "fetch boom") || !strings.Contains(all, "must return a Response") || !strings.Contains(all, "time limit") {
		t.Fatalf("error logs: %q", msgs)
	}
}

func TestFetchRequestTooLarge(t *testing.T) {
	rt := New(Options{MaxBodyBytes: 10})
	defer rt.Close()
	if _, err := rt.Fetch(t.Context(), fetchVersion(t, "v-big"), newRequest("POST", "/echo", "01234567890"), "/echo"); !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("Fetch = %v", err)
	}
}

func TestGlobalSurface(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	_, got := doFetch(t, rt, fetchVersion(t, "v-globals"), newRequest("GET", "/globals", ""), "/globals")
	want := map[string]any{}
	for _, n := range []string{"TextEncoder", "TextDecoder", "URL", "URLSearchParams", "Headers", "Request", "Response",
		"fetch", "setTimeout", "clearTimeout", "structuredClone", "atob", "btoa", "queueMicrotask"} {
		want[n] = "function"
	}
	want["console"], want["crypto"] = "object", "object"
	for _, n := range []string{"require", "process", "module", "exports", "global", "Buffer", "setInterval", "__takoform_worker", "Deno", "fs", "__dirname"} {
		want[n] = "undefined"
	}
	want["free require"], want["free process"], want["require call"] = "undefined", "undefined", "TypeError"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestGlobalBehaviour(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	resp, got := doFetch(t, rt, fetchVersion(t, "v-behaviour"), newRequest("GET", "/behaviour", ""), "/behaviour")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, got)
	}
	b, _ := json.Marshal(got)
	want := `{"atob":"hello","atobError":"InvalidCharacterError","badStatus":"RangeError","bom":"A","btoa":"aGVsbG//","btoaError":"InvalidCharacterError",` +
		`"clone":{"buffer":true,"cycle":true,"date":true,"distinct":true,"map":2,"set":true},"cloneError":"DataCloneError",` +
		`"decoded":"é€😀","encoded":[195,169,226,130,172,240,159,152,128],"fatal":"TypeError",` +
		`"headers":[["content-type","text/plain"],["x-multi","1, 2"]],"loneSurrogate":[239,191,189],"mismatch":"TypeMismatchError",` +
		`"order":["micro","timeout"],"params":["1","3"],"quota":"QuotaExceededError","random":true,"relative":"TypeError","replacement":"a�b",` +
		`"request":{"ab":2,"method":"POST","text":"hi","url":"https://example.com/x"},"response":{"json":{"a":1},"ok":true,"status":200,"used":true},` +
		`"responseJson":{"status":202,"text":"{\"z\":1}","type":"application/json"},"reuse":"TypeError",` +
		`"url":{"host":"example.com:8443","href":"https://user@example.com:8443/a/c?x=1\u0026y=two#frag","pathname":"/a/c","search":"?x=1\u0026y=two","y":"two"},"uuid":true}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestConsoleReachesLogs(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := fetchVersion(t, "v-log")
	doFetch(t, rt, v, newRequest("GET", "/log", ""), "/log")
	logs := rt.Logs(v.WorkerUID, 0, 10)
	if len(logs) != 2 || logs[0].Message != "hello from fetch { n: 1 }" || logs[0].Level != "log" || logs[1].Level != "warn" ||
		logs[0].Seq < time.Now().Add(-time.Hour).UnixMicro() || logs[1].Seq != logs[0].Seq+1 || logs[0].VersionUID != "v-log" || logs[0].TimeMillis == 0 {
		t.Fatalf("logs %+v", logs)
	}
	if after := rt.Logs(v.WorkerUID, logs[0].Seq, 10); len(after) != 1 || after[0].Seq != logs[1].Seq {
		t.Fatalf("after 1: %+v", after)
	}
	// A deleted worker's log goes with it.
	rt.ForgetWorker(v.WorkerUID)
	if left := rt.Logs(v.WorkerUID, 0, 10); len(left) != 0 {
		t.Fatalf("log of a forgotten worker: %+v", left)
	}
}

func outboundServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.Header.Get("X-From"))
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func outbound(t *testing.T, rt *Runtime, to string) map[string]any {
	t.Helper()
	_, got := doFetch(t, rt, fetchVersion(t, "v-out"), newRequest("GET", "/outbound?to="+url.QueryEscape(to), ""), "/outbound")
	return got
}

func TestOutboundFetchAllowed(t *testing.T) {
	srv := outboundServer(t)
	rt := New(Options{AllowedFetchHosts: []string{"127.0.0.1"}})
	defer rt.Close()
	got := outbound(t, rt, srv.URL+"/x")
	want := map[string]any{"ok": true, "status": 202.0, "text": "POST ping", "echoed": "worker", "url": srv.URL + "/x"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestOutboundFetchDenied(t *testing.T) {
	srv := outboundServer(t)
	rt := New(Options{AllowedFetchHosts: []string{"127.0.0.1", "169.254.169.254", "[fe80::1]:80"}})
	defer rt.Close()
	for _, c := range []struct{ to, msg string }{
		{"http://not-allowed.example/", "not in the allowed hosts"},
		{"http://localhost:1/", "not in the allowed hosts"},
		{"http://169.254.169.254/latest/meta-data/", "link-local and cloud metadata"},
		{"http://[fe80::1]/", "link-local and cloud metadata"},
		{"ftp://127.0.0.1/", "scheme"},
		{srv.URL + "/redirect?to=" + url.QueryEscape("http://elsewhere.example/"), "not in the allowed hosts"},
	} {
		got := outbound(t, rt, c.to)
		e, _ := got["error"].(map[string]any)
		if e == nil || e["name"] != "TypeError" || e["isTypeError"] != true || !strings.Contains(e["message"].(string), c.msg) {
			t.Errorf("%s: %v", c.to, got)
		}
	}
	deny := New(Options{})
	defer deny.Close()
	if e, _ := outbound(t, deny, srv.URL)["error"].(map[string]any); e == nil {
		t.Errorf("fetch with no allowed hosts succeeded")
	}
}

func TestBlockedAddresses(t *testing.T) {
	for addr, blocked := range map[string]bool{
		"169.254.169.254": true, "169.254.0.1": true, "fe80::1": true, "::ffff:169.254.169.254": true,
		"64:ff9b::a9fe:a9fe": true, "fd00:ec2::254": true, "100.100.100.200": true, "0.0.0.0": true, "::": true,
		"127.0.0.1": false, "10.0.0.1": false, "93.184.216.34": false, "::1": false, "2001:db8::1": false,
	} {
		if got := blockedAddr(netip.MustParseAddr(addr)); got != blocked {
			t.Errorf("%s: blocked %v", addr, got)
		}
	}
}

func TestAllowedHostPatterns(t *testing.T) {
	rt := New(Options{AllowedFetchHosts: []string{"API.example.com", "*.svc.example", "10.0.0.1:8080", "[::1]:9000"}})
	defer rt.Close()
	for raw, ok := range map[string]bool{
		"https://api.example.com/x": true, "http://api.example.com:81/": true, "https://api.example.com./": true,
		"https://other.example.com/": false, "https://a.svc.example/": true, "https://svc.example/": false,
		"http://10.0.0.1:8080/": true, "http://10.0.0.1/": false, "http://[::1]:9000/": true, "http://[::1]/": false,
	} {
		u, _ := url.Parse(raw)
		if got := rt.hostAllowed(u); got != ok {
			t.Errorf("%s: allowed %v", raw, got)
		}
	}
}

func TestAllocationGuard(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	_, got := doFetch(t, rt, fetchVersion(t, "v-alloc"), newRequest("GET", "/alloc", ""), "/alloc")
	want := map[string]any{
		"buffer": "RangeError", "u8": "RangeError", "f64": "RangeError", "arrayLike": "RangeError",
		"repeat": "RangeError", "padStart": "RangeError", "small": "ok",
		"subclass": true, "instanceofAB": true, "name": "ArrayBuffer Uint8Array 1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

// An allowed name that resolves to loopback is refused at dial time; only
// the IP literal itself, allowed, reaches loopback.
func TestOutboundFetchNameToLoopbackRefused(t *testing.T) {
	srv := outboundServer(t)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	rt := New(Options{AllowedFetchHosts: []string{"localhost"}})
	defer rt.Close()
	got := outbound(t, rt, "http://localhost:"+port+"/x")
	e, _ := got["error"].(map[string]any)
	if e == nil || !strings.Contains(e["message"].(string), "loopback and private addresses") {
		t.Fatalf("got %v", got)
	}
	for addr, internal := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "192.168.0.1": true, "172.16.0.1": true, "fd12::1": true,
		"100.64.0.1": true, "::ffff:127.0.0.1": true, "93.184.216.34": false, "2001:db8::1": false,
	} {
		if got := internalAddr(netip.MustParseAddr(addr)); got != internal {
			t.Errorf("%s: internal %v", addr, got)
		}
	}
	if !literalAllowed([]string{"127.0.0.1:80"}, netip.MustParseAddr("127.0.0.1"), "80") || literalAllowed([]string{"127.0.0.1:80"}, netip.MustParseAddr("127.0.0.1"), "81") {
		t.Errorf("literalAllowed")
	}
}

// An outbound fetch whose response body the host's memory budget cannot
// take now rejects with QuotaExceededError before the body is buffered
// (#36); once the share is free again the same fetch succeeds, and
// nothing stays reserved.
func TestOutboundFetchMemoryBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(2<<20))
		w.Write(bytes.Repeat([]byte("b"), 2<<20))
	}))
	defer srv.Close()
	budget := membudget.New(membudget.Limits{Total: 64 << 20, PerWorker: 16 << 20})
	rt := New(Options{AllowedFetchHosts: []string{"127.0.0.1"}, BodyBudget: budget})
	defer rt.Close()
	v := fetchVersion(t, "v-out")
	// Another request of the same worker holds 15 of its 16 MiB.
	held, err := budget.Reserve(membudget.Holder{Worker: v.WorkerUID}, 15<<20)
	if err != nil {
		t.Fatal(err)
	}
	_, got := doFetch(t, rt, v, newRequest("GET", "/outbound?to="+url.QueryEscape(srv.URL+"/big"), ""), "/outbound")
	e, _ := got["error"].(map[string]any)
	if e == nil || e["name"] != FetchBudgetErrorName || !strings.Contains(e["message"].(string), "this worker holds 15.0 MiB") {
		t.Fatalf("over the worker's share: %v", got)
	}
	held.Release()
	_, got = doFetch(t, rt, v, newRequest("GET", "/outbound?to="+url.QueryEscape(srv.URL+"/big"), ""), "/outbound")
	if got["status"] != 200.0 || len(got["text"].(string)) != 2<<20 {
		t.Fatalf("with the share free: %.200v", got)
	}
	if budget.Used() != 0 || budget.Peak() < 2<<20 {
		t.Fatalf("used %d, peak %d", budget.Used(), budget.Peak())
	}
}
