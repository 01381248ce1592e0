package js

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dop251/goja"
	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/membudget"
)

// Fetch runs the worker's fetch(request, env, ctx) for r and returns the
// Response it produced as an *http.Response whose Body is fully buffered
// (the caller copies it out, for example with WriteResponse).
//
// path is the decoded path under the worker's fetch route ("foo/bar" or
// "/foo/bar"); request.url is scheme://r.Host/path?query, request.method and
// the body are r's, and request.headers are r's without Authorization (the
// host credential is never shown to worker code).
//
// The returned error is for what the host answers itself: ErrNoFetchHandler,
// a *CompileError, ErrRequestTooLarge, ErrClosed, or a pool wait that
// outlived ctx. A handler that throws, rejects, returns something other than
// a Response or runs out of time yields a 500 application/problem+json
// response (code "worker_exception" or "worker_timeout") and a log entry.
func (rt *Runtime) Fetch(ctx context.Context, v *abi.Version, r *http.Request, path string) (*http.Response, error) {
	e, err := rt.version(v)
	if err != nil {
		return nil, err
	}
	if !e.prog.HasHandler(HandlerFetch) {
		return nil, ErrNoFetchHandler
	}
	body, err := RequestBody(r, rt.opts.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if host == "" {
		host = "localhost"
	}
	u := &url.URL{Scheme: scheme, Host: host, Path: "/" + strings.TrimPrefix(path, "/"), RawQuery: r.URL.RawQuery}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}

	var resp *http.Response
	err = e.run(ctx, func(in *instance) error {
		c := &fetchCall{in: in, r: r, u: u, method: method, body: body}
		err := in.invoke(ctx, rt.opts.InvocationTimeout, c.start, c.finish)
		resp = c.resp
		return err
	})
	if err == nil {
		return resp, nil
	}
	var se *ScriptError
	switch {
	case errors.As(err, &se):
		e.logError(ctx, fmt.Sprintf("Uncaught (in fetch handler) %s", se.describe()))
		return problemResponse(r, "worker_exception", "The worker's fetch handler threw an exception", se.Error()), nil
	case errors.Is(err, ErrTimeout):
		e.logError(ctx, "Uncaught (in fetch handler) "+err.Error())
		return problemResponse(r, "worker_timeout", "The worker's fetch handler ran out of time", err.Error()), nil
	}
	return nil, err
}

// headerPairsFor flattens h (without Authorization) to [name, value, ...]
// with lower-case names. checked reports that every pair is as
// Headers.append leaves it (a token name, a value trimmed of HTTP
// whitespace without NUL, CR or LF), and the values are then the trimmed
// ones: the prelude builds the Headers from them as they are. Otherwise
// the values are the raw ones and append checks them (and throws its own
// error).
func headerPairsFor(h http.Header) (pairs []any, checked bool) {
	n := 0
	for _, vs := range h {
		n += 2 * len(vs)
	}
	pairs = make([]any, 0, n)
	for k, vs := range h {
		if strings.EqualFold(k, "Authorization") {
			continue
		}
		name := strings.ToLower(k)
		for _, v := range vs {
			pairs = append(pairs, name, v)
		}
	}
	for i := 0; i < len(pairs); i += 2 {
		if !isToken(pairs[i].(string)) || strings.ContainsAny(trimHTTPSpace(pairs[i+1].(string)), "\x00\r\n") {
			return pairs, false
		}
	}
	for i := 1; i < len(pairs); i += 2 {
		pairs[i] = trimHTTPSpace(pairs[i].(string))
	}
	return pairs, true
}

// trimHTTPSpace is what Headers does to a value first.
func trimHTTPSpace(v string) string { return strings.Trim(v, "\t\n\r ") }

// isToken: an HTTP token, the header names Headers accepts.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// canonicalURL reports whether new URL(u.String()).href is u.String()
// itself, so that the prelude need not parse it again. The URL class
// (goja_nodejs) re-parses with net/url, drops a default or malformed port,
// lower-cases and punycode-encodes the host, cleans the path (path.Clean:
// no "//", ".", "..", trailing "/") and percent-encodes some query bytes.
// Only URLs none of that changes pass: host of [a-z0-9.-] without an
// "xn--" label and an optional port without a leading zero that is not the
// scheme's default, a clean path, and a query of bytes the URL class keeps.
func canonicalURL(u *url.URL) bool {
	host, port, hasPort := strings.Cut(u.Host, ":")
	if host == "" || strings.HasPrefix(host, "xn--") || strings.Contains(host, ".xn--") {
		return false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	if hasPort {
		if port == "" || len(port) > 5 || port[0] == '0' || (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
			return false
		}
		for i := 0; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return false
			}
		}
	}
	if u.Path == "" || path.Clean(u.Path) != u.Path || u.RawPath != "" || u.Fragment != "" || u.ForceQuery || u.User != nil || u.Opaque != "" {
		return false
	}
	for i := 0; i < len(u.RawQuery); i++ {
		if c := u.RawQuery[i]; c >= 0x80 || !urlQueryKept[c] {
			return false
		}
	}
	return true
}

// urlQueryKept: the query bytes the URL class leaves as they are
// (goja_nodejs's tblEscapeURLQuery).
var urlQueryKept = func() (t [0x80]bool) {
	for c := byte('!'); c <= '~'; c++ {
		t[c] = true
	}
	for _, c := range []byte("\"#'<>") {
		t[c] = false
	}
	return t
}()

// fetchCall is one invocation of a worker's fetch handler. Its two steps
// are methods rather than closures so that CPU profiles name them.
type fetchCall struct {
	in     *instance
	r      *http.Request
	u      *url.URL
	method string
	body   []byte
	resp   *http.Response
}

// start builds the Request and calls the worker's fetch handler, which runs
// until its first await. The two steps are separate methods so that CPU
// profiles tell the host's part from the worker's.
func (c *fetchCall) start(inv *invocation) (goja.Value, error) {
	fetch, _ := goja.AssertFunction(c.in.def.Get(HandlerFetch))
	if fetch == nil {
		return nil, &ScriptError{Name: "TypeError", Message: "the default export's fetch is not a function"}
	}
	req, err := c.request()
	if err != nil {
		return nil, err
	}
	return c.callHandler(inv, fetch, req)
}

// request builds the inbound Request (prelude.js).
func (c *fetchCall) request() (goja.Value, error) {
	in := c.in
	pairs, checked := headerPairsFor(c.r.Header)
	var bodyV goja.Value = goja.Null()
	if len(c.body) > 0 {
		bodyV = in.vm.ToValue(in.vm.NewArrayBuffer(c.body))
	}
	vm := in.vm
	return in.h.makeRequest(goja.Undefined(), vm.ToValue(c.u.String()), vm.ToValue(canonicalURL(c.u)), vm.ToValue(c.method),
		vm.NewArray(pairs...), vm.ToValue(checked), bodyV)
}

// callHandler runs the worker's fetch(request, env, ctx): the worker's own
// code, up to its first await.
func (c *fetchCall) callHandler(inv *invocation, fetch goja.Callable, req goja.Value) (goja.Value, error) {
	return fetch(c.in.def, req, c.in.env, c.in.ctxObject(inv))
}

// finish turns the Response the handler fulfilled with into c.resp.
func (c *fetchCall) finish(res goja.Value) error {
	parts, err := c.in.h.responseParts(goja.Undefined(), res)
	if err != nil {
		return err
	}
	c.resp, err = c.in.httpResponse(parts.ToObject(c.in.vm), c.r)
	return err
}

func (e *version) logError(ctx context.Context, msg string) { e.logLine(ctx, "error", msg) }

// httpResponse converts what responseParts returned.
func (in *instance) httpResponse(parts *goja.Object, r *http.Request) (*http.Response, error) {
	if parts.ClassName() == "Array" {
		return in.plainHTTPResponse(parts, r)
	}
	status := int(parts.Get("status").ToInteger())
	h := http.Header{}
	in.headerPairs(parts.Get("headers"), func(k, v string) { h.Add(k, v) })
	var body []byte
	if bv := parts.Get("body"); bv != nil && !goja.IsNull(bv) && !goja.IsUndefined(bv) {
		b, ok, err := in.viewBytes(bv)
		if err != nil || !ok {
			return nil, &ScriptError{Name: "TypeError", Message: "the Response body cannot be read"}
		}
		body = b
	}
	return newHTTPResponse(r, status, parts.Get("statusText").String(), h, body), nil
}

// plainHTTPResponse converts responseParts' array [status, statusText,
// buffer or null, byteOffset, byteLength, name, value, ...], which holds
// only numbers, strings and the body's ArrayBuffer.
func (in *instance) plainHTTPResponse(parts *goja.Object, r *http.Request) (*http.Response, error) {
	vals, ok := parts.Export().([]any)
	if !ok || len(vals) < 5 || len(vals)%2 != 1 {
		return nil, &ScriptError{Name: "TypeError", Message: "the Response cannot be read"}
	}
	// Converted as the object form is: a fractional status truncates.
	status := parts.Get("0").ToInteger()
	text, _ := vals[1].(string)
	var body []byte
	if ab, ok := vals[2].(goja.ArrayBuffer); ok {
		b := ab.Bytes()
		off, n := toInt(vals[3]), toInt(vals[4])
		if off < 0 || n < 0 || off+n > len(b) {
			return nil, &ScriptError{Name: "TypeError", Message: "the Response body cannot be read"}
		}
		body = append([]byte(nil), b[off:off+n]...)
	}
	h := make(http.Header, (len(vals)-5)/2)
	for i := 5; i < len(vals); i += 2 {
		k, _ := vals[i].(string)
		v, _ := vals[i+1].(string)
		h.Add(k, v)
	}
	return newHTTPResponse(r, int(status), text, h, body), nil
}

// toInt reads a small integer that Export gave as int64 or float64.
func toInt(v any) int {
	switch x := v.(type) {
	case int64:
		return int(x)
	case float64:
		return int(x)
	}
	return -1
}

func newHTTPResponse(r *http.Request, status int, text string, h http.Header, body []byte) *http.Response {
	if text == "" {
		text = http.StatusText(status)
	}
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + text,
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// headerPairs calls add for each [name, value] of the prelude's array of
// string pairs (what Headers iterates), reading the goja arrays in place
// rather than exporting them.
func (in *instance) headerPairs(v goja.Value, add func(k, v string)) {
	arr, ok := v.(*goja.Object)
	if !ok || arr.ClassName() != "Array" {
		return
	}
	n := arr.Get("length").ToInteger()
	for i := int64(0); i < n; i++ {
		kv, ok := arr.Get(strconv.FormatInt(i, 10)).(*goja.Object)
		if !ok || kv.ClassName() != "Array" || kv.Get("length").ToInteger() != 2 {
			continue
		}
		add(kv.Get("0").String(), kv.Get("1").String())
	}
}

func problemResponse(r *http.Request, code, title, detail string) *http.Response {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "title": title, "status": 500, "code": code, "detail": detail})
	return &http.Response{
		Status: "500 Internal Server Error", StatusCode: 500, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/problem+json"}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       r,
	}
}

// WriteResponse copies a Response returned by Fetch to w.
func WriteResponse(w http.ResponseWriter, resp *http.Response) error {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	w.WriteHeader(resp.StatusCode)
	_, err := io.Copy(w, resp.Body)
	return err
}

// ---------- outbound fetch ----------

type fetchResult struct {
	status     int
	statusText string
	url        string
	redirected bool
	headers    [][2]string
	body       []byte
}

// RequestBody is r's body, at most max bytes (ErrRequestTooLarge above).
// A body that holds its bytes in one buffer (a Bytes method, as the
// server's fetch route passes them, reserved in the host's memory budget)
// is taken as it is, not copied: an 8 MiB request used to be copied, and
// its buffer grown by doubling, once per layer it went through.
func RequestBody(r *http.Request, max int) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if bb, ok := r.Body.(interface{ Bytes() []byte }); ok {
		b := bb.Bytes()
		if len(b) > max {
			return nil, ErrRequestTooLarge
		}
		return b, nil
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= int64(max) {
		buf.Grow(int(r.ContentLength) + 1)
	}
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, int64(max)+1)); err != nil {
		return nil, fmt.Errorf("js: reading the request body: %w", err)
	}
	if buf.Len() > max {
		return nil, ErrRequestTooLarge
	}
	if buf.Len() == 0 {
		return nil, nil
	}
	return buf.Bytes(), nil
}

// outboundFetch is host.fetch(method, url, headerPairs, body|null,
// redirect) → Promise of the response parts; failures reject TypeError.
func (in *instance) outboundFetch(call goja.FunctionCall) goja.Value {
	if in.rt == nil {
		return in.rejected(in.newError("TypeError", "fetch is not available here"))
	}
	method := call.Argument(0).String()
	rawURL := call.Argument(1).String()
	var hdrs [][2]string
	if hv, ok := call.Argument(2).Export().([]any); ok {
		for _, p := range hv {
			if kv, ok := p.([]any); ok && len(kv) == 2 {
				hdrs = append(hdrs, [2]string{fmt.Sprint(kv[0]), fmt.Sprint(kv[1])})
			}
		}
	}
	var body []byte
	if bv := call.Argument(3); !goja.IsNull(bv) && !goja.IsUndefined(bv) {
		b, ok, err := in.viewBytes(bv)
		if err != nil || !ok {
			return in.rejected(in.newError("TypeError", "fetch: the request body cannot be read"))
		}
		body = b
	}
	redirect := call.Argument(4).String()
	rt := in.rt
	hold := membudget.Holder{}
	if in.ver != nil {
		hold = membudget.Holder{Principal: in.ver.v.Principal, Worker: in.ver.v.WorkerUID}
	}
	return in.async(func(ctx context.Context) (any, error) {
		if p, ok := abi.Invoker(ctx); ok {
			hold.Principal = p
		}
		return rt.doFetch(ctx, hold, method, rawURL, hdrs, body, redirect)
	}, func(r any) goja.Value {
		fr := r.(*fetchResult)
		o := in.vm.NewObject()
		_ = o.Set("status", fr.status)
		_ = o.Set("statusText", fr.statusText)
		_ = o.Set("url", fr.url)
		_ = o.Set("redirected", fr.redirected)
		pairs := make([]any, len(fr.headers))
		for i, kv := range fr.headers {
			pairs[i] = in.vm.NewArray(kv[0], kv[1])
		}
		_ = o.Set("headers", in.vm.NewArray(pairs...))
		if fr.body != nil {
			_ = o.Set("body", in.vm.NewArrayBuffer(fr.body))
		} else {
			_ = o.Set("body", goja.Null())
		}
		return o
	}, func(err error) goja.Value {
		return fetchError(in, err)
	})
}

// FetchBudgetErrorName is the Error.name an outbound fetch rejects with
// when the host's memory for bodies in flight (its total, the principal's
// or the worker's share) cannot take its request or response body now
// (runtime/membudget); retrying later may succeed. Other failures reject
// with a TypeError, as fetch does.
const FetchBudgetErrorName = "QuotaExceededError"

func fetchError(in *instance, err error) goja.Value {
	if errors.Is(err, membudget.ErrBusy) {
		return in.newError(FetchBudgetErrorName, "fetch failed: "+err.Error())
	}
	return in.newError("TypeError", "fetch failed: "+err.Error())
}

var errRedirectMode = errors.New(`redirect mode is "error"`)

func (rt *Runtime) doFetch(ctx context.Context, hold membudget.Holder, method, rawURL string, hdrs [][2]string, body []byte, redirect string) (*fetchResult, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the scheme %q is not supported", u.Scheme)
	}
	if !rt.hostAllowed(u) {
		return nil, fmt.Errorf("the host %q is not in the allowed hosts", u.Host)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd)
	if err != nil {
		return nil, err
	}
	for _, kv := range hdrs {
		if strings.EqualFold(kv[0], "host") {
			continue
		}
		req.Header.Add(kv[0], kv[1])
	}
	c := *rt.client
	c.CheckRedirect = func(next *http.Request, via []*http.Request) error {
		switch redirect {
		case "manual":
			return http.ErrUseLastResponse
		case "error":
			return errRedirectMode
		}
		if len(via) >= 20 {
			return errors.New("too many redirects")
		}
		if !rt.hostAllowed(next.URL) {
			return fmt.Errorf("redirected to %q, which is not in the allowed hosts", next.URL.Host)
		}
		return nil
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("the invocation ended or ran out of time: %w", err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	// The response body is charged before it is buffered; the charge ends
	// with the fetch (the body then belongs to the worker's heap).
	res, err := rt.opts.BodyBudget.Reserve(hold, int64(len(body)))
	if err != nil {
		return nil, err
	}
	defer res.Release()
	b, err := membudget.ReadBody(resp.Body, resp.ContentLength, rt.opts.MaxBodyBytes, res)
	switch {
	case errors.Is(err, membudget.ErrOverLimit):
		return nil, fmt.Errorf("the response body is larger than %d bytes", rt.opts.MaxBodyBytes)
	case errors.Is(err, membudget.ErrBusy) || errors.Is(err, membudget.ErrTooLarge):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("reading the response body: %w", err)
	}
	fr := &fetchResult{
		status:     resp.StatusCode,
		statusText: strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode))),
		url:        resp.Request.URL.String(),
		redirected: resp.Request.URL.String() != rawURL,
		body:       b,
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			fr.headers = append(fr.headers, [2]string{strings.ToLower(k), v})
		}
	}
	return fr, nil
}

// hostAllowed matches u's host against Options.AllowedFetchHosts.
func (rt *Runtime) hostAllowed(u *url.URL) bool { return HostAllowed(rt.opts.AllowedFetchHosts, u) }

// HostAllowed matches u's host (and its port, the scheme's default when u
// names none) against allowed, patterns as in Options.AllowedFetchHosts.
func HostAllowed(allowed []string, u *url.URL) bool {
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == "":
		case strings.HasPrefix(a, "*."):
			if strings.HasSuffix(host, a[1:]) && len(host) > len(a)-1 {
				return true
			}
		default:
			if h, p, err := net.SplitHostPort(a); err == nil {
				if strings.Trim(h, "[]") == host && p == port {
					return true
				}
			} else if strings.Trim(a, "[]") == host {
				return true
			}
		}
	}
	return false
}

// literalAllowed reports whether allowed names ip (with port, or with no
// port) as an IP literal: the only way to reach a loopback or private
// address.
func literalAllowed(allowed []string, ip netip.Addr, port string) bool {
	for _, a := range allowed {
		a = strings.TrimSpace(a)
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			h, p = a, ""
		}
		lit, err := netip.ParseAddr(strings.Trim(h, "[]"))
		if err == nil && lit.Unmap() == ip.Unmap() && (p == "" || p == port) {
			return true
		}
	}
	return false
}

// internalAddr reports whether ip is loopback, private (RFC 1918, ULA
// fc00::/7) or shared address space (100.64.0.0/10): addresses a name may
// not resolve to, only an allow-listed IP literal may reach.
func internalAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return ip.IsLoopback() || ip.IsPrivate() || cgnat.Contains(ip)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Addresses never dialled, whatever name resolved to them.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack (inside link-local anyway)
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud (legacy)
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// blockedAddr reports whether the dialler must refuse ip: link-local
// (169.254.0.0/16, fe80::/10), link-local multicast, unspecified, or a
// cloud metadata address, also when IPv4-mapped or behind NAT64.
func blockedAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsInterfaceLocalMulticast() {
		return true
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return true
		}
	}
	return false
}

func (rt *Runtime) newFetchClient() *http.Client {
	if rt.opts.Transport != nil {
		return &http.Client{Transport: rt.opts.Transport}
	}
	return &http.Client{Transport: NewOutboundTransport(rt.opts.AllowedFetchHosts)}
}

// NewOutboundTransport is the transport of workers' outbound fetch: no
// proxy from the environment, and a dialler that checks the IP actually
// connected to, whatever name resolved to it. It refuses link-local,
// unspecified and cloud metadata addresses always, and loopback, private
// and shared addresses unless that IP literal is in allowed (a name that
// resolves to 127.0.0.1 is refused even when the name is allowed).
func NewOutboundTransport(allowed []string) *http.Transport {
	allowed = append([]string(nil), allowed...)
	d := &net.Dialer{
		Timeout:   10 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			host, port, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("refusing to dial %s: not an IP address", address)
			}
			if blockedAddr(ip) {
				return fmt.Errorf("refusing to connect to %s: link-local and cloud metadata addresses are not reachable from workers", host)
			}
			if internalAddr(ip) && !literalAllowed(allowed, ip, port) {
				return fmt.Errorf("refusing to connect to %s: loopback and private addresses are reachable only when that IP literal is an allowed host", host)
			}
			return nil
		},
	}
	return &http.Transport{
		Proxy:                 nil, // no environment: never a proxy from HTTP_PROXY
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}
