// The JavaScript half of the global surface: console, TextEncoder and
// TextDecoder, Headers, Request, Response, fetch, crypto, structuredClone and
// queueMicrotask. It is evaluated once per runtime, before any worker code,
// as a function of `host` (the Go functions this runtime exposes on purpose).
// Nothing of `host` is reachable from worker code.
(function (host) {
  "use strict";
  const g = globalThis;
  const define = (name, value) =>
    Object.defineProperty(g, name, { value, writable: true, configurable: true, enumerable: false });
  const ArrayBufferIsView = ArrayBuffer.isView;
  // The original constructor, before the allocation guard below wraps the
  // global: the prelude only builds Uint8Arrays over an ArrayBuffer (which
  // the guard never limits), so it skips the wrapper.
  const U8 = Uint8Array;

  function domError(name, message) {
    const e = new Error(message);
    e.name = name;
    return e;
  }

  // ---------- console ----------
  function inspect(v, depth, seen) {
    switch (typeof v) {
      case "string":
        return depth === 0 ? v : JSON.stringify(v);
      case "bigint":
        return String(v) + "n";
      case "symbol":
        return v.toString();
      case "function":
        return "[Function: " + (v.name || "(anonymous)") + "]";
      case "object":
        break;
      default:
        return String(v);
    }
    if (v === null) return "null";
    if (seen.has(v)) return "[Circular]";
    if (v instanceof Error) return depth === 0 && v.stack ? String(v.stack) : String(v);
    if (v instanceof Date) return isNaN(v.getTime()) ? "Invalid Date" : v.toISOString();
    if (v instanceof RegExp) return String(v);
    if (v instanceof ArrayBuffer) return "ArrayBuffer { byteLength: " + v.byteLength + " }";
    if (depth > 2) return Array.isArray(v) ? "[Array]" : "[Object]";
    seen.add(v);
    try {
      if (ArrayBufferIsView(v) && !(v instanceof DataView)) {
        const items = Array.prototype.slice.call(v, 0, 50).map(String);
        if (v.length > 50) items.push("... " + (v.length - 50) + " more");
        return v.constructor.name + "(" + v.length + ") [" + items.join(", ") + "]";
      }
      if (Array.isArray(v)) {
        const items = v.slice(0, 100).map((x) => inspect(x, depth + 1, seen));
        if (v.length > 100) items.push("... " + (v.length - 100) + " more");
        return "[" + items.join(", ") + "]";
      }
      if (v instanceof Map) {
        const items = [];
        for (const [k, x] of v) items.push(inspect(k, depth + 1, seen) + " => " + inspect(x, depth + 1, seen));
        return "Map(" + v.size + ") {" + (items.length ? " " + items.join(", ") + " " : "") + "}";
      }
      if (v instanceof Set) {
        const items = [];
        for (const x of v) items.push(inspect(x, depth + 1, seen));
        return "Set(" + v.size + ") {" + (items.length ? " " + items.join(", ") + " " : "") + "}";
      }
      if (v instanceof URL) return "URL " + JSON.stringify(v.href);
      if (v instanceof Headers) return "Headers " + inspect(Object.fromEntries(v), depth, seen);
      const keys = Object.keys(v);
      const items = keys.slice(0, 100).map((k) => {
        const key = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k) ? k : JSON.stringify(k);
        return key + ": " + inspect(v[k], depth + 1, seen);
      });
      if (keys.length > 100) items.push("... " + (keys.length - 100) + " more");
      const ctor = v.constructor && v.constructor !== Object && typeof v.constructor.name === "string" ? v.constructor.name + " " : "";
      return ctor + (items.length ? "{ " + items.join(", ") + " }" : "{}");
    } finally {
      seen.delete(v);
    }
  }
  function format(args) {
    const parts = [];
    for (let i = 0; i < args.length; i++) {
      try {
        parts.push(inspect(args[i], 0, new Set()));
      } catch (e) {
        parts.push("[uninspectable]");
      }
    }
    return parts.join(" ");
  }
  const console = {};
  for (const level of ["log", "info", "warn", "error", "debug"]) {
    const f = { [level](...args) { host.log(level, format(args)); } }[level];
    console[level] = f;
  }
  define("console", console);

  // ---------- bytes ----------
  // viewOf returns [buffer, byteOffset, byteLength] of an ArrayBuffer or an
  // ArrayBufferView, or undefined.
  function viewOf(x) {
    if (x instanceof ArrayBuffer) return [x, 0, x.byteLength];
    if (ArrayBufferIsView(x)) return [x.buffer, x.byteOffset, x.byteLength];
    return undefined;
  }
  function copyBytes(x) {
    const v = viewOf(x);
    return new U8(v[0].slice(v[1], v[1] + v[2]));
  }
  function utf8(s) {
    return new U8(host.utf8Encode(String(s)));
  }
  function decodeUTF8(bytes) {
    return host.utf8Decode(bytes.buffer, bytes.byteOffset, bytes.byteLength, false, false);
  }

  // ---------- TextEncoder / TextDecoder ----------
  class TextEncoder {
    get encoding() { return "utf-8"; }
    encode(input = "") { return utf8(input); }
    encodeInto(source, destination) {
      if (!(destination instanceof Uint8Array)) throw new TypeError("encodeInto: the destination must be a Uint8Array");
      const s = String(source);
      let read = 0, written = 0;
      for (const ch of s) {
        const b = utf8(ch);
        if (written + b.length > destination.length) break;
        destination.set(b, written);
        written += b.length;
        read += ch.length;
      }
      return { read, written };
    }
  }
  const utf8Labels = ["utf-8", "utf8", "unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "x-unicode20utf8"];
  class TextDecoder {
    #fatal; #ignoreBOM;
    constructor(label = "utf-8", options = {}) {
      const l = String(label).trim().toLowerCase();
      if (!utf8Labels.includes(l)) throw new RangeError("TextDecoder: only utf-8 is supported, not " + JSON.stringify(String(label)));
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return "utf-8"; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(input, options) {
      if (input === undefined) return "";
      const v = viewOf(input);
      if (!v) throw new TypeError("TextDecoder.decode: the input must be an ArrayBuffer or an ArrayBufferView");
      return host.utf8Decode(v[0], v[1], v[2], this.#fatal, this.#ignoreBOM);
    }
  }
  define("TextEncoder", TextEncoder);
  define("TextDecoder", TextDecoder);

  // ---------- Headers ----------
  // pushPair(list, name), this an array: push what entries() yields for one
  // name, flat (name, value, ...).
  function pushPair(list, n) {
    if (n === "set-cookie") { for (let k = 0; k < list.length; k++) this.push(n, list[k]); }
    else this.push(n, list.length === 1 ? list[0] : list.join(", "));
  }
  const tokenRE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  function headerName(n) {
    n = String(n);
    if (!tokenRE.test(n)) throw new TypeError("Invalid header name: " + JSON.stringify(n));
    return n.toLowerCase();
  }
  // Made once: a regular expression literal is a new object at every
  // evaluation (replace with a global one starts at lastIndex 0 anyway).
  const headerTrimRE = /^[\t\n\r ]+|[\t\n\r ]+$/g, headerBadRE = /[\0\r\n]/;
  function headerValue(v) {
    v = String(v).replace(headerTrimRE, "");
    if (headerBadRE.test(v)) throw new TypeError("Invalid header value");
    return v;
  }
  class Headers {
    #map = new Map();
    constructor(init) {
      if (init === undefined || init === null) return;
      if (init instanceof Headers) {
        for (const [k, v] of init.#map) this.#map.set(k, v.slice());
      } else if (typeof init === "object" && typeof init[Symbol.iterator] === "function") {
        for (const pair of init) {
          const p = Array.from(pair);
          if (p.length !== 2) throw new TypeError("Headers: each header must be a [name, value] pair");
          this.append(p[0], p[1]);
        }
      } else if (typeof init === "object") {
        for (const k of Object.keys(init)) this.append(k, init[k]);
      } else {
        throw new TypeError("Headers: cannot be built from " + typeof init);
      }
    }
    append(name, value) {
      const n = headerName(name), v = headerValue(value);
      const list = this.#map.get(n);
      if (list) list.push(v); else this.#map.set(n, [v]);
    }
    set(name, value) { this.#map.set(headerName(name), [headerValue(value)]); }
    get(name) {
      const list = this.#map.get(headerName(name));
      return list ? list.join(", ") : null;
    }
    getSetCookie() { return (this.#map.get("set-cookie") || []).slice(); }
    has(name) { return this.#map.has(headerName(name)); }
    delete(name) { this.#map.delete(headerName(name)); }
    forEach(callback, thisArg) {
      for (const [k, v] of this) callback.call(thisArg, v, k, this);
    }
    *entries() {
      const names = Array.from(this.#map.keys()).sort();
      for (const n of names) {
        const list = this.#map.get(n);
        if (!list) continue;
        if (n === "set-cookie") { for (const v of list) yield [n, v]; }
        else yield [n, list.join(", ")];
      }
    }
    *keys() { for (const [k] of this.entries()) yield k; }
    *values() { for (const [, v] of this.entries()) yield v; }
    [Symbol.iterator]() { return this.entries(); }
    get [Symbol.toStringTag]() { return "Headers"; }
    // What entries() yields, as an array, for the host.
    // A Headers of flat [name, value, ...] pairs that the host has already
    // checked and normalised as append would.
    static _internalFromPairs(flat) {
      const h = new Headers(), m = h.#map;
      for (let j = 0; j < flat.length; j += 2) {
        const list = m.get(flat[j]);
        if (list) list.push(flat[j + 1]); else m.set(flat[j], [flat[j + 1]]);
      }
      return h;
    }
    // has(name) || set(name, value), for a valid lower-case name and value
    // that need no checking.
    static _internalSetDefault(h, name, value) {
      if (!h.#map.has(name)) h.#map.set(name, [value]);
    }
    // What entries() yields, flat (name, value, ...), pushed onto out.
    static _internalPairs(h, out) {
      const m = h.#map;
      if (m.size === 1) { // the usual response header: no sorting, no names array
        m.forEach(pushPair, out);
        return out;
      }
      const names = [];
      m.forEach((_, n) => { names.push(n); }); // not Array.from: goja's iterators are slow
      names.sort();
      for (let j = 0; j < names.length; j++) pushPair.call(out, m.get(names[j]), names[j]);
      return out;
    }
  }
  const headerPairs = Headers._internalPairs, headersFromPairs = Headers._internalFromPairs, setDefaultHeader = Headers._internalSetDefault;
  delete Headers._internalPairs;
  delete Headers._internalFromPairs;
  delete Headers._internalSetDefault;
  const iteratorSymbol = Symbol.iterator;
  const headersEntries = Headers.prototype.entries, headersIterator = Headers.prototype[iteratorSymbol];
  define("Headers", Headers);

  // ---------- Body, Request, Response ----------
  // extractBody returns the bytes (Uint8Array) or null and leaves the
  // content type the body implies (or null) in extractedType: no array to
  // return both, and no second look at a body that may be a Proxy.
  let extractedType = null;
  const maxBodyBytes = host.maxBodyBytes;
  function extractBody(body) {
    extractedType = null;
    if (body === undefined || body === null) return null;
    let bytes, type = null;
    if (typeof body === "string") { bytes = utf8(body); type = "text/plain;charset=UTF-8"; }
    else if (viewOf(body)) bytes = copyBytes(body);
    else if (body instanceof URLSearchParams) { bytes = utf8(body.toString()); type = "application/x-www-form-urlencoded;charset=UTF-8"; }
    else { bytes = utf8(String(body)); type = "text/plain;charset=UTF-8"; }
    if (bytes.byteLength > maxBodyBytes) throw new TypeError("the body is larger than " + maxBodyBytes + " bytes");
    extractedType = type;
    return bytes;
  }
  // A body's state {bytes, used} is a private field rather than a WeakMap
  // entry: goja's WeakMap registers a GC cleanup for every key.
  class Body {
    #state;
    constructor(bytes) { this.#state = { bytes, used: false }; }
    // The state of a Body, undefined for anything else (what a WeakMap
    // lookup gave).
    static _internalState(x) {
      return x !== null && (typeof x === "object" || typeof x === "function") && #state in x ? x.#state : undefined;
    }
    #take() {
      const i = bodyState(this);
      if (!i) throw new TypeError("Illegal invocation");
      if (i.used) throw new TypeError("Body has already been used");
      i.used = true;
      return i.bytes || new U8(0);
    }
    get bodyUsed() { const i = bodyState(this); return !!(i && i.used); }
    // There are no streams in this runtime: body is null or a Uint8Array
    // copy of the bytes.
    get body() {
      const i = bodyState(this);
      return i && i.bytes ? i.bytes.slice() : null;
    }
    text() { try { return Promise.resolve(decodeUTF8(this.#take())); } catch (e) { return Promise.reject(e); } }
    json() { return this.text().then((t) => JSON.parse(t)); }
    arrayBuffer() { try { return Promise.resolve(this.#take().slice().buffer); } catch (e) { return Promise.reject(e); } }
    bytes() { try { return Promise.resolve(this.#take().slice()); } catch (e) { return Promise.reject(e); } }
  }
  const bodyState = Body._internalState;
  delete Body._internalState;
  // What a missing or non-object init reads as (it is only read).
  const noInit = {};
  const tokenMethods = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"];
  // inbound is {url, headers, pairs, bytes} while makeRequest builds the
  // host's Request: the url when Go vouched that it is already what new URL
  // would make of it (else null), the Headers already built or else the
  // checked pairs to build them from on first use, and the body bytes
  // already owned (no copy).
  let inbound = null;
  class Request extends Body {
    #method; #url; #headers; #pairs; #redirect;
    constructor(input, init = noInit) {
      const pre = inbound;
      inbound = null;
      if (init === null || typeof init !== "object") init = noInit;
      let url, method = "GET", headers, bytes = null, redirect = "follow";
      if (input instanceof Request) {
        url = input.url; method = input.method; headers = new Headers(input.headers); redirect = input.redirect;
        const i = bodyState(input);
        if (i.used) throw new TypeError("Request body has already been used");
        bytes = i.bytes;
      } else if (pre !== null && pre.url !== null) {
        url = pre.url;
      } else {
        try { url = new URL(String(input)).href; }
        catch (e) { throw new TypeError("Invalid URL: " + String(input)); }
        headers = new Headers();
      }
      if (init.method !== undefined) {
        const m = String(init.method);
        if (tokenMethods.includes(m)) method = m; // the usual case, without the regular expression
        else {
          if (!tokenRE.test(m)) throw new TypeError("Invalid method: " + JSON.stringify(m));
          method = tokenMethods.includes(m.toUpperCase()) ? m.toUpperCase() : m;
        }
      }
      if (init.headers !== undefined) headers = pre !== null ? pre.headers : new Headers(init.headers);
      if (init.redirect !== undefined) {
        redirect = String(init.redirect);
        if (!["follow", "manual", "error"].includes(redirect)) throw new TypeError("Invalid redirect mode: " + redirect);
      }
      if (init.body !== undefined && init.body !== null) {
        if (method === "GET" || method === "HEAD") throw new TypeError("Request with GET/HEAD method cannot have a body");
        if (pre !== null) {
          bytes = pre.bytes;
        } else {
          bytes = extractBody(init.body);
          if (extractedType) setDefaultHeader(headers, "content-type", extractedType);
        }
      }
      super(bytes);
      this.#method = method; this.#url = url; this.#headers = headers; this.#redirect = redirect;
      this.#pairs = pre !== null && headers === null ? pre.pairs : null;
    }
    get method() { return this.#method; }
    get url() { return this.#url; }
    get headers() {
      if (this.#pairs !== null) {
        this.#headers = headersFromPairs(this.#pairs);
        this.#pairs = null;
      }
      return this.#headers;
    }
    get redirect() { return this.#redirect; }
    clone() {
      if (this.bodyUsed) throw new TypeError("Request body has already been used");
      return new Request(this);
    }
    get [Symbol.toStringTag]() { return "Request"; }
  }
  const redirectStatus = [301, 302, 303, 307, 308];
  let trusted = false; // set while fetch builds a Response from the network
  // Set in the constructor rather than by initialisers: goja runs those as
  // one more function call per instance.
  class Response extends Body {
    #status; #statusText; #headers; #url; #redirected; #type;
    constructor(body = null, init = noInit) {
      if (init === null || typeof init !== "object") init = noInit;
      const status = init.status === undefined ? 200 : Number(init.status);
      if (!trusted && status !== 200 && (!Number.isInteger(status) || status < 200 || status > 599)) {
        throw new RangeError("Response status must be an integer from 200 to 599, not " + String(init.status));
      }
      const headers = new Headers(init.headers);
      const bytes = extractBody(body), type = extractedType;
      if (bytes !== null && !trusted && (status === 101 || status === 103 || status === 204 || status === 205 || status === 304)) {
        throw new TypeError("Response with status " + status + " cannot have a body");
      }
      if (type) setDefaultHeader(headers, "content-type", type);
      super(bytes);
      this.#status = status;
      this.#statusText = init.statusText === undefined ? "" : String(init.statusText);
      this.#headers = headers;
      this.#url = ""; this.#redirected = false; this.#type = "default";
    }
    get status() { return this.#status; }
    get ok() { return this.#status >= 200 && this.#status <= 299; }
    get statusText() { return this.#statusText; }
    get headers() { return this.#headers; }
    get url() { return this.#url; }
    get redirected() { return this.#redirected; }
    get type() { return this.#type; }
    clone() {
      if (this.bodyUsed) throw new TypeError("Response body has already been used");
      const i = bodyState(this);
      const r = new Response(i.bytes, { status: this.#status, statusText: this.#statusText, headers: this.#headers });
      r.#url = this.#url; r.#redirected = this.#redirected; r.#type = this.#type;
      return r;
    }
    static json(data, init = {}) {
      const text = JSON.stringify(data);
      if (text === undefined) throw new TypeError("Response.json: the data cannot be serialised to JSON");
      const headers = new Headers(init && init.headers);
      setDefaultHeader(headers, "content-type", "application/json");
      return new Response(text, { ...init, headers });
    }
    static redirect(url, status = 302) {
      if (!redirectStatus.includes(status)) throw new RangeError("Invalid redirect status " + status);
      const href = new URL(String(url)).href;
      const r = new Response(null, { status, headers: { location: href } });
      return r;
    }
    static #network(parts) {
      trusted = true;
      try {
        const r = new Response(parts.body, { status: parts.status, statusText: parts.statusText, headers: parts.headers });
        r.#url = parts.url; r.#redirected = !!parts.redirected; r.#type = "basic";
        return r;
      } finally {
        trusted = false;
      }
    }
    static error() {
      trusted = true;
      try {
        const r = new Response(null, { status: 0 });
        r.#type = "error";
        return r;
      } finally {
        trusted = false;
      }
    }
    static _internalNetwork(parts) { return Response.#network(parts); }
    get [Symbol.toStringTag]() { return "Response"; }
  }
  const networkResponse = Response._internalNetwork;
  delete Response._internalNetwork;
  define("Request", Request);
  define("Response", Response);

  // ---------- fetch ----------
  function fetch(input, init) {
    let req;
    try { req = new Request(input, init); } catch (e) { return Promise.reject(e); }
    const i = bodyState(req);
    if (i.used) return Promise.reject(new TypeError("Request body has already been used"));
    i.used = true;
    const body = i.bytes ? i.bytes.slice().buffer : null;
    return host.fetch(req.method, req.url, Array.from(req.headers), body, req.redirect).then(networkResponse);
  }
  define("fetch", fetch);

  // ---------- crypto ----------
  const integerArrays = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    typeof BigInt64Array === "function" ? BigInt64Array : Int8Array, typeof BigUint64Array === "function" ? BigUint64Array : Int8Array];
  const crypto = {
    getRandomValues(array) {
      if (!integerArrays.some((C) => array instanceof C)) {
        throw domError("TypeMismatchError", "getRandomValues: the argument must be an integer typed array");
      }
      if (array.byteLength > 65536) {
        throw domError("QuotaExceededError", "getRandomValues: at most 65536 bytes can be requested at once");
      }
      host.randomFill(array.buffer, array.byteOffset, array.byteLength);
      return array;
    },
    randomUUID() { return host.randomUUID(); },
  };
  define("crypto", crypto);

  // ---------- structuredClone ----------
  function structuredClone(value, options) {
    const seen = new Map();
    function clone(v) {
      if (typeof v === "symbol") throw domError("DataCloneError", "structuredClone: a Symbol cannot be cloned");
      if (typeof v === "function") throw domError("DataCloneError", "structuredClone: a function cannot be cloned");
      if (v === null || typeof v !== "object") return v;
      if (seen.has(v)) return seen.get(v);
      let out;
      if (v instanceof Date) out = new Date(v.getTime());
      else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
      else if (v instanceof ArrayBuffer) out = v.slice(0);
      else if (v instanceof DataView) { seen.set(v, null); out = new DataView(clone(v.buffer), v.byteOffset, v.byteLength); }
      else if (ArrayBufferIsView(v)) { seen.set(v, null); out = new v.constructor(clone(v.buffer), v.byteOffset, v.length); }
      else if (v instanceof Boolean || v instanceof Number || v instanceof String) out = Object(v.valueOf());
      else if (v instanceof Error) {
        const C = { EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError }[v.name] || Error;
        out = new C(v.message);
        seen.set(v, out);
        if (v.stack !== undefined) out.stack = String(v.stack);
        return out;
      }
      else if (v instanceof Map) { out = new Map(); seen.set(v, out); for (const [k, x] of v) out.set(clone(k), clone(x)); return out; }
      else if (v instanceof Set) { out = new Set(); seen.set(v, out); for (const x of v) out.add(clone(x)); return out; }
      else if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet || bodyState(v) !== undefined || v instanceof Headers || v instanceof URL) {
        throw domError("DataCloneError", "structuredClone: " + Object.prototype.toString.call(v) + " cannot be cloned");
      }
      else {
        out = Array.isArray(v) ? new Array(v.length) : {};
        seen.set(v, out);
        for (const k of Object.keys(v)) out[k] = clone(v[k]);
        return out;
      }
      seen.set(v, out);
      return out;
    }
    if (arguments.length === 0) throw new TypeError("structuredClone: 1 argument required");
    return clone(value);
  }
  define("structuredClone", structuredClone);

  // ---------- queueMicrotask ----------
  function queueMicrotask(callback) {
    if (typeof callback !== "function") throw new TypeError("queueMicrotask: the callback must be a function");
    Promise.resolve().then(() => {
      try { callback(); } catch (e) { host.reportError(e, "in a queueMicrotask callback"); }
    });
  }
  define("queueMicrotask", queueMicrotask);

  // ---------- allocation guard ----------
  // A single ArrayBuffer, typed array or repeated/padded string larger than
  // host.maxAllocBytes throws a RangeError. goja has no heap limit; this
  // stops the one-line ways to ask for gigabytes, not a slow accumulation
  // (the time limit bounds that).
  const maxAlloc = host.maxAllocBytes;
  const tooBig = (what, n) => new RangeError(what + ": " + n + " bytes is more than the allocation limit of " + maxAlloc + " bytes");
  // Each constructor is replaced by a function that checks the requested
  // size and then constructs the original; prototype, statics and
  // instanceof stay those of the original (no Proxy: goja's instanceof does
  // not accept a Proxy of a constructor).
  const ArrayBufferCtor = ArrayBuffer;
  const guardCtor = (name, Orig, size) => {
    const F = { [name]: function (...args) {
      if (new.target === undefined) throw new TypeError("Constructor " + name + " requires 'new'");
      const n = size(args, Orig);
      if (n > maxAlloc) throw tooBig(name, n);
      return Reflect.construct(Orig, args, new.target === F ? Orig : new.target);
    } }[name];
    Object.setPrototypeOf(F, Orig);
    Object.defineProperty(F, "prototype", { value: Orig.prototype, writable: false, enumerable: false, configurable: false });
    Object.defineProperty(Orig.prototype, "constructor", { value: F, writable: true, enumerable: false, configurable: true });
    define(name, F);
  };
  guardCtor("ArrayBuffer", ArrayBufferCtor, (args) => Number(args[0]) || 0);
  for (const name of ["Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array", "Int32Array", "Uint32Array",
    "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array"]) {
    const C = g[name];
    if (typeof C !== "function") continue;
    guardCtor(name, C, (args, Orig) => {
      const a = args[0];
      let n = 0;
      if (typeof a === "number") n = a;
      else if (a !== null && typeof a === "object" && !(a instanceof ArrayBufferCtor) && typeof a.length === "number") n = a.length;
      return n * Orig.BYTES_PER_ELEMENT;
    });
  }
  const strProto = String.prototype;
  const guardString = (name, size) => {
    const orig = strProto[name];
    Object.defineProperty(strProto, name, {
      value: { [name](...args) {
        const n = size(String(this), args);
        if (n * 2 > maxAlloc) throw tooBig("String.prototype." + name, n * 2);
        return orig.apply(this, args);
      } }[name],
      writable: true, configurable: true, enumerable: false,
    });
  };
  guardString("repeat", (s, [count]) => s.length * Math.max(0, Math.floor(Number(count)) || 0));
  guardString("padStart", (s, [len]) => Number(len) || 0);
  guardString("padEnd", (s, [len]) => Number(len) || 0);

  // ---------- what Go uses ----------
  return {
    isView: (x) => ArrayBufferIsView(x),
    toPromise: (x) => Promise.resolve(x),
    // makeRequest builds the inbound Request. canonical: Go checked that
    // new URL(url).href is url. pairs are flat [name, value, ...]; checked:
    // Go validated and normalised them as Headers.append would, else
    // append checks them here (and throws what it throws). body is a fresh
    // ArrayBuffer (within maxBodyBytes) or null.
    makeRequest(url, canonical, method, pairs, checked, body) {
      const hasBody = body !== null && method !== "GET" && method !== "HEAD";
      let headers = null;
      if (!checked) {
        headers = new Headers();
        for (let j = 0; j < pairs.length; j += 2) headers.append(pairs[j], pairs[j + 1]);
      }
      inbound = { url: canonical ? url : null, headers, pairs, bytes: hasBody ? new U8(body) : null };
      try {
        return new Request(url, { method, headers, body: hasBody ? body : undefined });
      } finally {
        inbound = null;
      }
    },
    // responseParts gives Go the Response the handler returned. When
    // converting it can run no worker code (a number status, a string
    // statusText, the prelude's own Headers), it is the array [status,
    // statusText, body buffer or null, byteOffset, byteLength, name, value,
    // ...]; otherwise {status, statusText, headers: [[name, value], ...],
    // body}, whose values Go converts as JavaScript would.
    responseParts(r) {
      if (!(r instanceof Response)) {
        throw new TypeError("the fetch handler must return a Response, not " + (r === null ? "null" : typeof r === "object" ? Object.prototype.toString.call(r) : typeof r));
      }
      const i = bodyState(r);
      if (i.used) throw new TypeError("the returned Response's body has already been used");
      // Array.from(headers), without the generators while entries and the
      // iterator are the prelude's own.
      const h = r.headers;
      const own = h instanceof Headers && h.entries === headersEntries && h[iteratorSymbol] === headersIterator;
      const pairs = own ? null : Array.from(h);
      const status = r.status, statusText = r.statusText, bytes = i.bytes;
      if (own && typeof status === "number" && typeof statusText === "string") {
        const out = bytes === null ? [status, statusText, null, 0, 0] : [status, statusText, bytes.buffer, bytes.byteOffset, bytes.byteLength];
        return headerPairs(h, out);
      }
      const flat = own ? headerPairs(h, []) : null, arrays = [];
      if (own) for (let j = 0; j < flat.length; j += 2) arrays.push([flat[j], flat[j + 1]]);
      return { status, statusText, headers: own ? arrays : pairs, body: bytes };
    },
  };
})
