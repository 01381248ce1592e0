// Fetch handler scenarios, routed by path.
const routes = {
  async "/echo"(request, env) {
    const url = new URL(request.url);
    return Response.json({
      url: request.url,
      method: request.method,
      path: url.pathname,
      q: url.searchParams.get("q"),
      body: await request.text(),
      bodyUsed: request.bodyUsed,
      test: request.headers.get("x-test"),
      auth: request.headers.get("authorization"),
      isRequest: request instanceof Request,
      greeting: env.GREETING,
      token: env.TOKEN,
    });
  },

  async "/binary"() {
    const body = new Uint8Array([0, 1, 2, 250, 255]);
    return new Response(body.subarray(1, 4), { status: 201, statusText: "Made", headers: { "X-Kind": "bytes", "Set-Cookie": "a=1" } });
  },

  async "/throw"() {
    throw new Error("fetch boom");
  },

  async "/notresponse"() {
    return { status: 200 };
  },

  async "/spin"() {
    for (;;) {}
  },

  async "/outbound"(request) {
    const to = new URL(request.url).searchParams.get("to");
    try {
      const r = await fetch(to, { method: "POST", body: "ping", headers: { "X-From": "worker" } });
      return Response.json({ ok: r.ok, status: r.status, text: await r.text(), echoed: r.headers.get("x-echo"), url: r.url });
    } catch (e) {
      return Response.json({ error: { name: e.name, message: e.message, isTypeError: e instanceof TypeError } });
    }
  },

  async "/log"() {
    console.log("hello from fetch", { n: 1 });
    console.warn("careful");
    return new Response("logged");
  },

  async "/alloc"() {
    const out = {};
    const attempt = (name, f) => {
      try { f(); out[name] = "ok"; } catch (e) { out[name] = e.name; }
    };
    attempt("buffer", () => new ArrayBuffer(2 * 1024 * 1024 * 1024));
    attempt("u8", () => new Uint8Array(1e9));
    attempt("f64", () => new Float64Array(1e8));
    attempt("arrayLike", () => new Uint8Array({ length: 1e9 }));
    attempt("repeat", () => "x".repeat(1e9));
    attempt("padStart", () => "x".padStart(1e9));
    attempt("small", () => { new ArrayBuffer(16); new Uint8Array(16); new Uint8Array([1, 2]); "ab".repeat(3); });
    class Sub extends Uint8Array {}
    const sub = new Sub(4);
    out.subclass = sub instanceof Uint8Array && sub instanceof Sub && sub.length === 4;
    out.instanceofAB = new Uint8Array(2).buffer instanceof ArrayBuffer;
    out.name = ArrayBuffer.name + " " + Uint8Array.name + " " + Uint8Array.BYTES_PER_ELEMENT;
    return Response.json(out);
  },

  async "/globals"() {
    const names = [
      "console", "TextEncoder", "TextDecoder", "URL", "URLSearchParams", "Headers", "Request", "Response",
      "fetch", "setTimeout", "clearTimeout", "crypto", "structuredClone", "atob", "btoa", "queueMicrotask",
      "require", "process", "module", "exports", "global", "Buffer", "setInterval", "__takoform_worker",
      "Deno", "fs", "__dirname",
    ];
    const types = {};
    for (const n of names) types[n] = typeof globalThis[n];
    // Free identifiers too: the bundler must not smuggle in a require shim.
    types["free require"] = typeof require;
    types["free process"] = typeof process;
    try { require("fs"); types["require call"] = "returned"; } catch (e) { types["require call"] = e.name; }
    return Response.json(types);
  },

  async "/behaviour"() {
    const out = {};
    const enc = new TextEncoder().encode("é€😀");
    out.encoded = Array.from(enc);
    out.decoded = new TextDecoder().decode(enc);
    out.loneSurrogate = Array.from(new TextEncoder().encode("\ud800"));
    out.replacement = new TextDecoder().decode(new Uint8Array([0x61, 0xff, 0x62]));
    try { new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array([0xff])); out.fatal = "no error"; }
    catch (e) { out.fatal = e.name; }
    out.bom = new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x41]));
    out.btoa = btoa("hello\xff");
    out.atob = atob(" aGVs bG8= ");
    try { btoa("€"); } catch (e) { out.btoaError = e.name; }
    try { atob("a"); } catch (e) { out.atobError = e.name; }
    const u = new URL("https://user@example.com:8443/a/b/../c?x=1&y=two#frag");
    out.url = { href: u.href, host: u.host, pathname: u.pathname, search: u.search, y: u.searchParams.get("y") };
    const sp = new URLSearchParams("a=1&b=2&a=3");
    out.params = sp.getAll("a");
    const h = new Headers({ "Content-Type": "text/plain" });
    h.append("X-Multi", "1");
    h.append("x-multi", "2");
    out.headers = Array.from(h);
    out.uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID());
    const rnd = crypto.getRandomValues(new Uint32Array(8));
    out.random = rnd.length === 8 && rnd.some((x) => x !== 0);
    try { crypto.getRandomValues(new Uint8Array(65537)); } catch (e) { out.quota = e.name; }
    try { crypto.getRandomValues(new Float32Array(2)); } catch (e) { out.mismatch = e.name; }
    const orig = { d: new Date(0), m: new Map([[1, { x: [1, 2] }]]), s: new Set(["a"]), b: new Uint8Array([1, 2]).buffer };
    orig.self = orig;
    const c = structuredClone(orig);
    out.clone = {
      distinct: c !== orig && c.m !== orig.m,
      cycle: c.self === c,
      date: c.d instanceof Date && c.d.getTime() === 0,
      map: c.m.get(1).x[1],
      set: c.s.has("a"),
      buffer: c.b instanceof ArrayBuffer && c.b !== orig.b && new Uint8Array(c.b)[1] === 2,
    };
    try { structuredClone({ f() {} }); } catch (e) { out.cloneError = e.name; }
    const order = [];
    queueMicrotask(() => order.push("micro"));
    await new Promise((resolve) => setTimeout(() => { order.push("timeout"); resolve(); }, 1));
    const cancelled = setTimeout(() => order.push("cancelled"), 0);
    clearTimeout(cancelled);
    await new Promise((resolve) => setTimeout(resolve, 5));
    out.order = order;
    const r = new Response('{"a":1}', { headers: { "content-type": "application/json" } });
    out.response = { ok: r.ok, status: r.status, json: await r.json(), used: r.bodyUsed };
    try { await r.text(); } catch (e) { out.reuse = e.name; }
    const rj = Response.json({ z: 1 }, { status: 202 });
    out.responseJson = { status: rj.status, type: rj.headers.get("content-type"), text: await rj.text() };
    const req = new Request("https://example.com/x", { method: "post", body: new Uint8Array([104, 105]) });
    out.request = { method: req.method, url: req.url, text: await req.clone().text(), ab: new Uint8Array(await req.arrayBuffer()).length };
    try { new Request("/relative"); } catch (e) { out.relative = e.name; }
    try { new Response("x", { status: 99 }); } catch (e) { out.badStatus = e.name; }
    return Response.json(out);
  },
};

export default {
  async fetch(request, env, ctx) {
    const route = routes[new URL(request.url).pathname];
    if (!route) return new Response("no route", { status: 404 });
    return route(request, env, ctx);
  },
};
