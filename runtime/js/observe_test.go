package js

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
)

// These tests pin what worker code can observe of the objects the host
// builds (batch, messages, ctx, env, the inbound Request, a returned
// Response), property by property, so that an optimisation of how they are
// built cannot change them unnoticed. The expected values are what the
// runtime showed when they were written.

const observeQueueWorker = `
const describe = (o) => Reflect.ownKeys(o).map((k) => {
  const d = Object.getOwnPropertyDescriptor(o, k);
  return [String(k), "value" in d ? typeof d.value : "accessor", d.writable, d.enumerable, d.configurable];
});
const fn = (f) => [typeof f, f.name, f.length, String(f), Object.getPrototypeOf(f) === Function.prototype, Reflect.ownKeys(f), "prototype" in f];
let prev = null;
export default {
  async queue(batch, env, ctx) {
    const [m, m2] = batch.messages;
    const out = {
      batch: describe(batch),
      batchProto: Object.getPrototypeOf(batch) === Object.prototype,
      batchJSON: JSON.stringify(batch),
      methods: ["acknowledge", "retry", "acknowledgeAll", "retryAll"].map((k) => fn(batch[k])),
      methodsStable: batch.acknowledge === batch.acknowledge && batch.retryAll === batch.retryAll,
      messagesArray: [Array.isArray(batch.messages), Object.getPrototypeOf(batch.messages) === Array.prototype, batch.messages.length],
      messagesDesc: describe(batch.messages),
      message: describe(m),
      messageProto: Object.getPrototypeOf(m) === Object.prototype,
      messageJSON: batch.messages.map((x) => JSON.stringify(x)),
      spread: Object.keys({ ...m }),
      entries: Object.entries(m).map(([k, v]) => [k, typeof v]),
      forIn: (() => { const ks = []; for (const k in m) ks.push(k); return ks; })(),
      values: [m.id, m.timestampMillis, m.attempts, m2.id, m2.timestampMillis, m2.attempts],
      numbers: [Number.isInteger(m.timestampMillis), Number.isInteger(m.attempts)],
      body: [m.body instanceof ArrayBuffer, m.body.byteLength, m.body === m.body, m.body !== m2.body,
        Object.getPrototypeOf(m.body) === ArrayBuffer.prototype, new TextDecoder().decode(m.body), new TextDecoder().decode(m2.body),
        Object.prototype.toString.call(m.body), m.body.constructor === ArrayBuffer],
      fresh: prev === null ? null : [prev.batch !== batch, prev.messages !== batch.messages, prev.m !== m, prev.body !== m.body,
        new TextDecoder().decode(prev.body), prev.ack !== batch.acknowledge, prev.ctx !== ctx, prev.waitUntil !== ctx.waitUntil,
        prev.pass !== ctx.passThroughOnException, prev.env === env, prev.out === env.OUT, prev.send === env.OUT.send],
      ctx: describe(ctx),
      ctxProto: Object.getPrototypeOf(ctx) === Object.prototype,
      ctxFns: [fn(ctx.waitUntil), fn(ctx.passThroughOnException)],
      env: describe(env),
      binding: describe(env.OUT),
      bindingFns: [fn(env.OUT.send), fn(env.OUT.sendBatch)],
      settleResult: await (async () => { const p = batch.retry(m2.id, 5); return [p instanceof Promise, await p.then((v) => ["ok", v === undefined], (e) => [e.name, e instanceof Error])]; })(),
      staleWaitUntil: (() => { if (prev === null) return null; try { prev.ctx.waitUntil(Promise.resolve()); return "accepted"; } catch (e) { return [e.name, e.message, e instanceof Error]; } })(),
    };
    // Writing to the objects works as on any plain object.
    new Uint8Array(m.body)[0] = 0x58;
    m.extra = 1;
    delete m.attempts;
    out.mutated = [JSON.stringify(m), new TextDecoder().decode(m.body), Object.isFrozen(Object.freeze(m2)), Object.isExtensible(m)];
    batch.messages.push("x");
    out.pushed = batch.messages.length;
    prev = { batch, messages: batch.messages, m, body: m.body, ack: batch.acknowledge, ctx, waitUntil: ctx.waitUntil,
      pass: ctx.passThroughOnException, env, out: env.OUT, send: env.OUT.send };
    console.log("OBSERVE " + JSON.stringify(out));
  },
};
`

// Bodies of the first and of the second delivery of the same batch.
var wantObserveQueue = [2]string{
	`{"batch":[["id","string",true,true,true],["queue","string",true,true,true],["messages","object",true,true,true],["acknowledge","function",true,true,true],["retry","function",true,true,true],["acknowledgeAll","function",true,true,true],["retryAll","function",true,true,true]],"batchProto":true,"batchJSON":"{\"id\":\"b1\",\"queue\":\"orders\",\"messages\":[{\"id\":\"m1\",\"timestampMillis\":1700000000001,\"body\":{},\"attempts\":1},{\"id\":\"m2\",\"timestampMillis\":1700000000002,\"body\":{},\"attempts\":2}]}","methods":[["function","acknowledge",1,"function acknowledge() { [native code] }",true,["length","name"],false],["function","retry",1,"function retry() { [native code] }",true,["length","name"],false],["function","acknowledgeAll",0,"function acknowledgeAll() { [native code] }",true,["length","name"],false],["function","retryAll",0,"function retryAll() { [native code] }",true,["length","name"],false]],"methodsStable":true,"messagesArray":[true,true,2],"messagesDesc":[["0","object",true,true,true],["1","object",true,true,true],["length","number",true,false,false]],"message":[["id","string",true,true,true],["timestampMillis","number",true,true,true],["body","object",true,true,true],["attempts","number",true,true,true]],"messageProto":true,"messageJSON":["{\"id\":\"m1\",\"timestampMillis\":1700000000001,\"body\":{},\"attempts\":1}","{\"id\":\"m2\",\"timestampMillis\":1700000000002,\"body\":{},\"attempts\":2}"],"spread":["id","timestampMillis","body","attempts"],"entries":[["id","string"],["timestampMillis","number"],["body","object"],["attempts","number"]],"forIn":["id","timestampMillis","body","attempts"],"values":["m1",1700000000001,1,"m2",1700000000002,2],"numbers":[true,true],"body":[true,6,true,true,true,"body 1","body 2","[object ArrayBuffer]",true],"fresh":null,"ctx":[["waitUntil","function",true,true,true],["passThroughOnException","function",true,true,true]],"ctxProto":true,"ctxFns":[["function","waitUntil",1,"function waitUntil() { [native code] }",true,["length","name"],false],["function","passThroughOnException",0,"function passThroughOnException() { [native code] }",true,["length","name"],false]],"env":[["OUT","object",true,true,true]],"binding":[["send","function",true,true,true],["sendBatch","function",true,true,true]],"bindingFns":[["function","send",1,"function send() { [native code] }",true,["length","name"],false],["function","sendBatch",1,"function sendBatch() { [native code] }",true,["length","name"],false]],"settleResult":[true,["ok",true]],"staleWaitUntil":null,"mutated":["{\"id\":\"m1\",\"timestampMillis\":1700000000001,\"body\":{},\"extra\":1}","Xody 1",true,true],"pushed":3}`,
	`{"batch":[["id","string",true,true,true],["queue","string",true,true,true],["messages","object",true,true,true],["acknowledge","function",true,true,true],["retry","function",true,true,true],["acknowledgeAll","function",true,true,true],["retryAll","function",true,true,true]],"batchProto":true,"batchJSON":"{\"id\":\"b1\",\"queue\":\"orders\",\"messages\":[{\"id\":\"m1\",\"timestampMillis\":1700000000001,\"body\":{},\"attempts\":1},{\"id\":\"m2\",\"timestampMillis\":1700000000002,\"body\":{},\"attempts\":2}]}","methods":[["function","acknowledge",1,"function acknowledge() { [native code] }",true,["length","name"],false],["function","retry",1,"function retry() { [native code] }",true,["length","name"],false],["function","acknowledgeAll",0,"function acknowledgeAll() { [native code] }",true,["length","name"],false],["function","retryAll",0,"function retryAll() { [native code] }",true,["length","name"],false]],"methodsStable":true,"messagesArray":[true,true,2],"messagesDesc":[["0","object",true,true,true],["1","object",true,true,true],["length","number",true,false,false]],"message":[["id","string",true,true,true],["timestampMillis","number",true,true,true],["body","object",true,true,true],["attempts","number",true,true,true]],"messageProto":true,"messageJSON":["{\"id\":\"m1\",\"timestampMillis\":1700000000001,\"body\":{},\"attempts\":1}","{\"id\":\"m2\",\"timestampMillis\":1700000000002,\"body\":{},\"attempts\":2}"],"spread":["id","timestampMillis","body","attempts"],"entries":[["id","string"],["timestampMillis","number"],["body","object"],["attempts","number"]],"forIn":["id","timestampMillis","body","attempts"],"values":["m1",1700000000001,1,"m2",1700000000002,2],"numbers":[true,true],"body":[true,6,true,true,true,"body 1","body 2","[object ArrayBuffer]",true],"fresh":[true,true,true,true,"Xody 1",true,true,true,true,true,true,true],"ctx":[["waitUntil","function",true,true,true],["passThroughOnException","function",true,true,true]],"ctxProto":true,"ctxFns":[["function","waitUntil",1,"function waitUntil() { [native code] }",true,["length","name"],false],["function","passThroughOnException",0,"function passThroughOnException() { [native code] }",true,["length","name"],false]],"env":[["OUT","object",true,true,true]],"binding":[["send","function",true,true,true],["sendBatch","function",true,true,true]],"bindingFns":[["function","send",1,"function send() { [native code] }",true,["length","name"],false],["function","sendBatch",1,"function sendBatch() { [native code] }",true,["length","name"],false]],"settleResult":[true,["already_settled",true]],"staleWaitUntil":["Error","waitUntil: the invocation has ended",true],"mutated":["{\"id\":\"m1\",\"timestampMillis\":1700000000001,\"body\":{},\"extra\":1}","Xody 1",true,true],"pushed":3}`,
}

func TestObserveQueueObjects(t *testing.T) {
	rt := New(Options{Sender: &fakeSender{}})
	defer rt.Close()
	v := &abi.Version{UID: "v-observe", Space: "space-1", WorkerUID: "w-observe", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: observeQueueWorker}}, Bindings: []abi.Binding{{Name: "OUT", QueueUID: "q"}}}
	h, err := rt.QueueHandler(v)
	if err != nil {
		t.Fatal(err)
	}
	s := newFakeSettler()
	b := s.batch("b1", 2)
	// The same abi.Batch twice: the second invocation must still get
	// fresh objects and a fresh copy of each body.
	for i := 0; i < 2; i++ {
		if err := h.HandleBatch(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, e := range rt.Logs(v.WorkerUID, 0, 100) {
		if m, ok := strings.CutPrefix(e.Message, "OBSERVE "); ok {
			got = append(got, m)
		}
	}
	if len(got) != 2 {
		t.Fatalf("reports %q, logs %+v", got, rt.Logs(v.WorkerUID, 0, 100))
	}
	for i, g := range got {
		if g != wantObserveQueue[i] {
			t.Errorf("delivery %d:\ngot  %s\nwant %s", i+1, g, wantObserveQueue[i])
		}
	}
}

const observeFetchWorker = `
const describe = (o) => Reflect.ownKeys(o).map((k) => {
  const d = Object.getOwnPropertyDescriptor(o, k);
  return [String(k), "value" in d ? typeof d.value : "accessor", d.writable, d.enumerable, d.configurable];
});
const attempt = (f) => { try { return ["ok", f()]; } catch (e) { return [e.name, e.message]; } };
class Custom extends Response {
  get status() { return 299; }
  get headers() { const h = new Headers(super.headers); h.set("x-custom", "1"); return h; }
}
export default {
  async fetch(request, env, ctx) {
    switch (request.headers.get("x-observe")) {
      case "url": return new Response(request.url);
      case "custom": return new Custom("custom body", { statusText: "Fine" });
      case "headers": return Response.json(Array.from(request.headers));
    }
    const h = request.headers;
    const out = {
      url: request.url, method: request.method, redirect: request.redirect,
      own: describe(request), proto: Object.getPrototypeOf(request) === Request.prototype,
      bodyProto: Reflect.ownKeys(Object.getPrototypeOf(Request.prototype)).map(String),
      requestProto: Reflect.ownKeys(Request.prototype).map(String),
      json: JSON.stringify(request), tag: Object.prototype.toString.call(request),
      headersSame: h === request.headers, isHeaders: h instanceof Headers, headers: Array.from(h),
      get: [h.get("x-test"), h.get("X-TEST"), h.get("authorization"), h.has("content-type")],
      bodyUsed: request.bodyUsed, body: [request.body instanceof Uint8Array, request.body !== request.body, request.body && request.body.length],
      clone: await request.clone().text(),
      copy: await new Request(request).text(),
      text: await request.text(), usedAfter: request.bodyUsed,
      again: await request.text().then(() => "ok", (e) => e.name),
      cloneUsed: attempt(() => request.clone()),
      structured: attempt(() => structuredClone(request)),
      structuredFake: attempt(() => JSON.stringify(structuredClone(Object.create(Request.prototype)))),
      structuredResponse: attempt(() => structuredClone(new Response("x"))),
      fakeURL: attempt(() => Object.create(Request.prototype).url),
      fakeText: await Object.create(Request.prototype).text().then(() => "ok", (e) => [e.name, e.message]),
    };
    const r = new Response("id");
    out.response = [describe(r), Array.from(r.headers), r.status, r.statusText, r.ok, r.type, r.url, r.redirected, r.bodyUsed,
      r.headers === r.headers, Object.prototype.toString.call(r)];
    const r2 = new Response(null, { status: 204, headers: [["X-A", " 1 "]] });
    out.response2 = [Array.from(r2.headers), r2.body, await r2.text()];
    return Response.json(out, { headers: { "X-Out": "yes" } });
  },
};
`

const wantObserveFetch = `{"url":"http://worker.example/all?q=1","method":"POST","redirect":"follow","own":[],"proto":true,"bodyProto":["constructor","bodyUsed","body","text","json","arrayBuffer","bytes"],"requestProto":["constructor","method","url","headers","redirect","clone","Symbol(Symbol.toStringTag)"],"json":"{}","tag":"[object Request]","headersSame":true,"isHeaders":true,"headers":[["set-cookie","c=1"],["x-multi","a, b"],["x-test","yes"]],"get":["yes","yes",null,false],"bodyUsed":false,"body":[true,true,5],"clone":"hello","copy":"hello","text":"hello","usedAfter":true,"again":"TypeError","cloneUsed":["TypeError","Request body has already been used"],"structured":["DataCloneError","structuredClone: [object Request] cannot be cloned"],"structuredFake":["ok","{}"],"structuredResponse":["DataCloneError","structuredClone: [object Response] cannot be cloned"],"fakeURL":["TypeError","Cannot read private member #url from an object whose class did not declare it"],"fakeText":["TypeError","Cannot read private member #take from an object whose class did not declare it"],"response":[[],[["content-type","text/plain;charset=UTF-8"]],200,"",true,"default","",false,false,true,"[object Response]"],"response2":[[["x-a","1"]],null,""]}`

func observeFetch(t *testing.T, rt *Runtime, v *abi.Version, r *http.Request, path string) (*http.Response, string) {
	t.Helper()
	resp, err := rt.Fetch(t.Context(), v, r, path)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readBody(t, resp)
}

func observeFetchVersion() *abi.Version {
	return &abi.Version{UID: "v-observe-fetch", Space: "space-1", WorkerUID: "w-observe-fetch", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: observeFetchWorker}}}
}

func TestObserveFetchObjects(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := observeFetchVersion()
	r := httptest.NewRequest(http.MethodPost, "http://worker.example/x?q=1", strings.NewReader("hello"))
	r.Header.Set("X-Test", "yes")
	r.Header.Add("X-Multi", "a")
	r.Header.Add("X-Multi", "b")
	r.Header.Set("Set-Cookie", "c=1")
	r.Header.Set("Authorization", "Bearer secret")
	resp, body := observeFetch(t, rt, v, r, "/all")
	if resp.StatusCode != 200 || resp.Header.Get("X-Out") != "yes" || body != wantObserveFetch {
		t.Errorf("got %d %v\n%s\nwant %s", resp.StatusCode, resp.Header, body, wantObserveFetch)
	}
	r = httptest.NewRequest(http.MethodGet, "http://worker.example/", nil)
	r.Header.Set("X-Observe", "custom")
	resp, body = observeFetch(t, rt, v, r, "custom")
	// The host reads a Response subclass through its (overridden) getters.
	if want := (http.Header{"Content-Type": {"text/plain;charset=UTF-8"}, "X-Custom": {"1"}}); resp.Status != "299 Fine" ||
		!reflect.DeepEqual(resp.Header, want) || body != "custom body" {
		t.Errorf("custom: %s %v %q", resp.Status, resp.Header, body)
	}
}

// The inbound Request's url as the worker sees it.
func TestObserveRequestURL(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := observeFetchVersion()
	for _, c := range []struct{ host, target, path, want string }{
		{"worker.example", "/", "url", "200 http://worker.example/url"},
		{"Worker.Example:80", "/", "url", "200 http://worker.example/url"},
		{"worker.example:8080", "/?a=b&c=d", "url", "200 http://worker.example:8080/url?a=b&c=d"},
		{"[::1]:8080", "/?x", "url", "200 http://[::1]:8080/url?x"},
		{"", "/?x=1", "url", "200 http://localhost/url?x=1"},
		{"worker.example", "/?q=a%20b&r=%22'%3C", "url", "200 http://worker.example/url?q=a%20b&r=%22%27%3C"},
		{"worker.example", "/?q=a%20b&r=\"'<>`", "url", "200 http://worker.example/url?q=a%20b&r=%22%27%3C%3E`"},
		{"worker.example", "/", "a b/c\"d'e<f>g`h{i}j|k^l", "200 http://worker.example/a%20b/c%22d%27e%3Cf%3Eg%60h%7Bi%7Dj%7Ck%5El"},
		{"worker.example", "/", "é/日本/%41", "200 http://worker.example/%C3%A9/%E6%97%A5%E6%9C%AC/%2541"},
		{"worker.example", "/", "a/../b/./c", "200 http://worker.example/b/c"},
		{"worker.example", "/", "/a//b/", "200 http://worker.example/a/b"},
		{"worker.example", "/?é=ü#frag", "url", "200 http://worker.example/url?%C3%A9=%C3%BC#frag"},
		{"xn--bcher-kva.example", "/", "url", "200 http://xn--bcher-kva.example/url"},
		{"bücher.example", "/", "url", "200 http://xn--bcher-kva.example/url"},
		{"WORKER.example.", "/", "url", "200 http://worker.example./url"},
		{"worker.example:0080", "/", "url", "200 http://worker.example/url"},
		{"127.0.0.1:80", "/", "url", "200 http://127.0.0.1/url"},
		{"user@worker.example", "/", "url", "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid URL: http://user%40worker.example/url\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{"worker.example", "/?a=%zz", "url", "200 http://worker.example/url?a=%zz"},
		{"worker.example", "/", "%zz", "200 http://worker.example/%25zz"},
		{"worker.example", "/", "a\\b", "200 http://worker.example/a%5Cb"},
		{"worker.example", "/", "a\tb", "200 http://worker.example/a%09b"},
		{"worker.example", "/", "a;b=c,d:e@f!g$h&i(j)k*l+m", "200 http://worker.example/a;b=c,d:e@f%21g$h&i%28j%29k%2Al+m"},
		{"worker.example", "/?a=1;b=2,c:d@e!f$g&h(i)j*k+l/m?n", "x", "200 http://worker.example/x?a=1;b=2,c:d@e!f$g&h(i)j*k+l/m?n"},
		{"worker.example", "/", "a.b/.c/..d/...", "200 http://worker.example/a.b/.c/..d/..."},
		{"worker.example", "/", "%2e/%2E%2e/x", "200 http://worker.example/%252e/%252E%252e/x"},
		{"worker.example", "/?", "x", "200 http://worker.example/x"},
		{"worker.example", "/?a=b", "", "200 http://worker.example/?a=b"},
		{"a-b.c_d.example:65535", "/", "x", "200 http://a-b.c_d.example:65535/x"},
		{"worker.example:65536", "/", "x", "200 http://worker.example:65536/x"},
		{"10.0.0.1", "/", "x", "200 http://10.0.0.1/x"},
		{"0x7f.1", "/", "x", "200 http://0x7f.1/x"},
		{"1.2.3", "/", "x", "200 http://1.2.3/x"},
		{"[::FFFF:1.2.3.4]", "/", "x", "200 http://::ffff:1.2.3.4/x"},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://x"+c.target, nil)
		r.Host = c.host
		r.Header.Set("X-Observe", "url")
		resp, body := observeFetch(t, rt, v, r, c.path)
		if got := fmt.Sprint(resp.StatusCode, " ", body); got != c.want {
			t.Errorf("Host %q, target %q, path %q: got %q, want %q", c.host, c.target, c.path, got, c.want)
		}
	}
}

// The inbound Request's headers as the worker sees them, and the header
// values the host's Request refuses.
func TestObserveRequestHeaders(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := observeFetchVersion()
	for _, c := range []struct {
		h    http.Header
		want string
	}{
		{http.Header{"X-Space": {"  padded\t ", "\n x"}, "X-Empty": {""}}, "200 [[\"x-empty\",\"\"],[\"x-observe\",\"headers\"],[\"x-space\",\"padded, x\"]]"},
		{http.Header{"X-Nul": {"a\x00b"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header value\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"X-Cr": {"a\rb"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header value\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"X-Lf": {"a\nb"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header value\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"X-Ctl": {"a\x01b\x7f"}}, "200 [[\"x-ctl\",\"a\\u0001b\x7f\"],[\"x-observe\",\"headers\"]]"},
		{http.Header{"Bad Name": {"x"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header name: \\\"bad name\\\"\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"Bad:Name": {"x"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header name: \\\"bad:name\\\"\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"": {"x"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header name: \\\"\\\"\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"É": {"x"}}, "500 {\"code\":\"worker_exception\",\"detail\":\"TypeError: Invalid header name: \\\"é\\\"\",\"status\":500,\"title\":\"The worker's fetch handler threw an exception\",\"type\":\"about:blank\"}"},
		{http.Header{"X-Utf8": {"é", "\xff"}}, "200 [[\"x-observe\",\"headers\"],[\"x-utf8\",\"é, \ufffd\"]]"},
		{http.Header{"Set-Cookie": {"a=1", "b=2"}, "Cookie": {"c=3", "d=4"}}, "200 [[\"cookie\",\"c=3, d=4\"],[\"set-cookie\",\"a=1\"],[\"set-cookie\",\"b=2\"],[\"x-observe\",\"headers\"]]"},
		{http.Header{"!#$%&'*+-.^_`|~09Az": {"v"}}, "200 [[\"!#$%&'*+-.^_`|~09az\",\"v\"],[\"x-observe\",\"headers\"]]"},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://worker.example/", nil)
		r.Header = c.h
		r.Header.Set("X-Observe", "headers")
		resp, body := observeFetch(t, rt, v, r, "headers")
		if got := fmt.Sprint(resp.StatusCode, " ", body); got != c.want {
			t.Errorf("headers %q: got %q, want %q", c.h, got, c.want)
		}
	}
}

const observeBodiesWorker = `
export default {
  async queue(batch) {
    const ms = batch.messages;
    const out = { n: ms.length, ok: true, bad: [] };
    const check = (c, what) => { if (!c) { out.ok = false; out.bad.push(what); } };
    for (let i = 0; i < ms.length; i++) {
      const m = ms[i];
      const want = "m" + i + ":" + "x".repeat(i);
      check(JSON.stringify(Object.keys(m)) === '["id","timestampMillis","body","attempts"]', "keys " + i);
      check(m.id === "id-" + i && m.timestampMillis === 1700000000000 + (i % 3 === 0 ? 0 : i) && m.attempts === 1 + (i % 4), "values " + i);
      check(m.body instanceof ArrayBuffer && m.body.byteLength === want.length, "length " + i);
      check(new TextDecoder().decode(m.body) === want, "content " + i);
      check(new Uint8Array(m.body).length === want.length && m.body.slice(0).byteLength === want.length, "views " + i);
    }
    // Each body is its own buffer: filling one changes no other.
    for (const m of ms) new Uint8Array(m.body).fill(0x2a);
    for (let i = 0; i < ms.length; i++) {
      const b = new Uint8Array(ms[i].body);
      check(b.length === ("m" + i + ":").length + i && b.every((x) => x === 0x2a), "fill " + i);
    }
    console.log("BODIES " + JSON.stringify(out));
  },
};
`

// A full batch: every message reads as its own, bodies of several sizes
// are separate buffers, timestamps repeat as they do in a sendBatch.
func TestObserveBatchBodies(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := &abi.Version{UID: "v-observe-bodies", Space: "space-1", WorkerUID: "w-observe-bodies", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: observeBodiesWorker}}}
	h, err := rt.QueueHandler(v)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]abi.Message, 100)
	for i := range msgs {
		ts := int64(1700000000000)
		if i%3 != 0 {
			ts += int64(i)
		}
		msgs[i] = abi.Message{ID: fmt.Sprintf("id-%d", i), TimestampMillis: ts, Body: []byte(fmt.Sprintf("m%d:%s", i, strings.Repeat("x", i))), Attempts: 1 + i%4}
	}
	b := abi.NewBatch("b-bodies", "orders", msgs, abitest.Settler{})
	for i := 0; i < 2; i++ {
		if err := h.HandleBatch(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("m%d:%s", i, strings.Repeat("x", i)); string(m.Body) != want {
			t.Fatalf("message %d's Go body changed to %q", i, m.Body)
		}
	}
	var reports []string
	for _, e := range rt.Logs(v.WorkerUID, 0, 100) {
		if r, ok := strings.CutPrefix(e.Message, "BODIES "); ok {
			reports = append(reports, r)
		}
	}
	if want := `{"n":100,"ok":true,"bad":[]}`; len(reports) != 2 || reports[0] != want || reports[1] != want {
		t.Fatalf("reports %q, want twice %s", reports, want)
	}
}

const observeSendBatchWorker = `
export default {
  async fetch(request, env) {
    const log = [];
    const tracked = (name, body, extra = {}) => {
      const m = { get body() { log.push(name + ".body"); return body; }, ...extra };
      return m;
    };
    const cases = {
      sparse: () => { const a = [{ body: "a" }]; a[2] = { body: "c" }; return a; },
      getters: () => [tracked("m0", "a"), tracked("m1", "b")],
      getterDelay: () => [{ body: "a", get delaySeconds() { log.push("delay"); return 5; } }],
      nonEnumerable: () => [Object.defineProperty({ body: "a" }, "hidden", { value: 1, enumerable: false })],
      symbolKey: () => [{ body: "a", [Symbol("s")]: 1 }],
      inherited: () => [Object.assign(Object.create({ extra: 1 }), { body: "a" })],
      nullProto: () => [Object.assign(Object.create(null), { body: "a" })],
      unknownOrder: () => [{ body: "a", zeta: 1, alpha: 2 }],
      numericKey: () => [{ body: "a", 1: "x" }],
      subclass: () => { class A extends Array {} return A.from([{ body: "a" }, { body: "b" }]); },
      arrayGetter: () => { const a = [{ body: "a" }, null]; Object.defineProperty(a, 1, { get() { log.push("index1"); return { body: "b" }; } }); return a; },
      proxy: () => new Proxy([{ body: "a" }], {}),
      classInstance: () => { class M { constructor() { this.body = "a"; } } return [new M()]; },
      arrayMessage: () => [["a"]],
      undefinedDelay: () => [{ body: "a", delaySeconds: undefined }],
      lengthGetter: () => { const a = [{ body: "a" }]; return new Proxy(a, { get(t, k) { log.push("get " + String(k)); return t[k]; } }); },
      bigLength: () => { const a = []; a.length = 101; return a; },
      secondBad: () => [{ body: "" }, { body: 5 }],
      typed: () => [{ body: new Uint16Array([1, 2]) }, { body: new DataView(new ArrayBuffer(3), 1) }],
    };
    const out = {};
    for (const [k, f] of Object.entries(cases)) {
      log.length = 0;
      try {
        out[k] = ["ok", await env.OUT.sendBatch(f())];
      } catch (e) {
        out[k] = [e.name, e.message];
      }
      if (log.length) out[k].push(log.slice());
    }
    return Response.json(out);
  },
};
`

// sendBatch's conversion of unusual arrays and message objects: what is
// read (getters run, in order), what is accepted and the first error.
func TestObserveSendBatch(t *testing.T) {
	snd := &fakeSender{}
	rt := New(Options{Sender: snd})
	defer rt.Close()
	v := &abi.Version{UID: "v-observe-sendbatch", Space: "space-1", WorkerUID: "w-observe-sendbatch", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: observeSendBatchWorker}}, Bindings: []abi.Binding{{Name: "OUT", QueueUID: "q"}}}
	resp, body := observeFetch(t, rt, v, httptest.NewRequest(http.MethodGet, "http://worker.example/", nil), "/")
	if want := `{"sparse":["invalid_body","sendBatch: message 1 must be an object {body, delaySeconds?}"],"getters":["ok",["id-1","id-2"],["m0.body","m1.body"]],"getterDelay":["ok",["id-3"],["delay"]],"nonEnumerable":["ok",["id-4"]],"symbolKey":["ok",["id-5"]],"inherited":["invalid_body","sendBatch: message 0 must be an object {body, delaySeconds?}"],"nullProto":["ok",["id-6"]],"unknownOrder":["invalid_body","sendBatch: message 0 has the unknown field \"zeta\""],"numericKey":["invalid_body","sendBatch: message 0 has the unknown field \"1\""],"subclass":["ok",["id-7","id-8"]],"arrayGetter":["ok",["id-9","id-10"],["index1"]],"proxy":["invalid_body","sendBatch: messages must be an array"],"classInstance":["invalid_body","sendBatch: message 0 must be an object {body, delaySeconds?}"],"arrayMessage":["invalid_body","sendBatch: message 0 must be an object {body, delaySeconds?}"],"undefinedDelay":["ok",["id-11"]],"lengthGetter":["invalid_body","sendBatch: messages must be an array"],"bigLength":["batch_too_large","sendBatch: 101 messages: a batch holds 1 to 100 messages"],"secondBad":["invalid_body","sendBatch: message 0: the body is empty (a body is a string, an ArrayBuffer or an ArrayBufferView of at least one byte)"],"typed":["ok",["id-12","id-13"]]}`; resp.StatusCode != 200 || body != want {
		t.Errorf("got %d %s\nwant %s", resp.StatusCode, body, want)
	}
	var sent []string
	for _, c := range snd.sent() {
		var ms []string
		for _, m := range c.Msgs {
			d := "-"
			if m.Delay != nil {
				d = fmt.Sprint(*m.Delay)
			}
			ms = append(ms, fmt.Sprintf("%q/%s", m.Body, d))
		}
		sent = append(sent, strings.Join(ms, " "))
	}
	want := []string{`"a"/- "b"/-`, `"a"/5`, `"a"/-`, `"a"/-`, `"a"/-`, `"a"/- "b"/-`, `"a"/- "b"/-`, `"a"/-`, `"\x01\x00\x02\x00"/- "\x00\x00"/-`}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("sent %q\nwant %q", sent, want)
	}
}

// A Response subclass whose status is a fraction, NaN or out of range:
// the host truncates it as it always did.
func TestObserveOddStatus(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := &abi.Version{UID: "v-observe-status", Space: "space-1", WorkerUID: "w-observe-status", Principal: "alice", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: `
class Odd extends Response {
  constructor(s) { super("odd"); this.s = s; }
  get status() { return this.s; }
}
export default {
  async fetch(request) {
    return new Odd(Number(new URL(request.url).searchParams.get("s")));
  },
};
`}}}
	for s, want := range map[string]string{"201.9": "201", "-0.5": "0", "404": "404"} {
		resp, body := observeFetch(t, rt, v, httptest.NewRequest(http.MethodGet, "http://worker.example/?s="+s, nil), "/")
		if got := fmt.Sprint(resp.StatusCode); got != want || body != "odd" {
			t.Errorf("status %s: got %s %q, want %s", s, got, body, want)
		}
	}
}
