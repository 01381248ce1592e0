// The worker ABI shim: the entry module the adapter puts in front of a
// WorkerVersion's own modules when it runs them on workerd. It maps the
// names and shapes of spec/runtime-abi.md onto Cloudflare's Queues API and
// decides nothing that Cloudflare decides: every limit, delay, retry count,
// batch and settlement outcome is Miniflare's own. What it adds is only what
// a name mapping cannot do without:
//
//   - Cloudflare's send() and sendBatch() resolve with no message ID, and
//     the ABI's resolve with the IDs; so the shim makes an ID (16 random
//     bytes, 32 hex characters) and carries it in front of the body's bytes
//     (contentType "bytes"), and reads it back on delivery. Each message is
//     16 bytes longer than its body on Cloudflare's side.
//   - The ABI settles by ID on the batch (batch.acknowledge(id)), Cloudflare
//     on the message (msg.ack()); so the shim finds the message by ID. An ID
//     that is in no message of the batch is unknown_message (there is no
//     Cloudflare call to pass it to), and an ID that is not a string is the
//     ABI's TypeError.
//
// A body that is neither a string nor bytes goes to Cloudflare as it is, in
// Cloudflare's default "v8" content type (what a Cloudflare worker calling
// send(value) gets), with the ID beside it; on delivery such a body is the
// deserialized value, not an ArrayBuffer.
//
// The adapter fills in MAIN (the version's main module) and BINDINGS (the
// names of its producer Bindings) when it writes this module.

import * as main from "__TAKO_MAIN__";

const BINDINGS = __TAKO_BINDINGS__;
const ID_BYTES = 16;

function named(name, message) {
  const e = new Error(message);
  e.name = name;
  return e;
}

function newID() {
  return crypto.getRandomValues(new Uint8Array(ID_BYTES));
}

function hex(u8) {
  let s = "";
  for (const b of u8) s += b.toString(16).padStart(2, "0");
  return s;
}

function asBytes(body) {
  if (typeof body === "string") return new TextEncoder().encode(body);
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  return null;
}

// wire is what Cloudflare's producer gets for one ABI body: the ID and the
// body's bytes in "bytes", or the ID and the value itself in "v8".
function wire(body) {
  const id = newID();
  const bytes = asBytes(body);
  if (bytes === null) return { id: hex(id), body: { takoId: hex(id), value: body }, contentType: "v8" };
  const out = new Uint8Array(ID_BYTES + bytes.byteLength);
  out.set(id, 0);
  out.set(bytes, ID_BYTES);
  return { id: hex(id), body: out, contentType: "bytes" };
}

// unwire is the inverse, on delivery.
function unwire(body) {
  if (body instanceof ArrayBuffer && body.byteLength >= ID_BYTES) {
    return { id: hex(new Uint8Array(body, 0, ID_BYTES)), body: body.slice(ID_BYTES) };
  }
  if (body !== null && typeof body === "object" && typeof body.takoId === "string") {
    return { id: body.takoId, body: body.value };
  }
  return { id: "", body: body };
}

function producer(cf) {
  return Object.freeze({
    async send(body, options) {
      const w = wire(body);
      const opts = Object.assign({}, options === undefined ? {} : options, { contentType: w.contentType });
      await cf.send(w.body, opts);
      return w.id;
    },
    async sendBatch(messages) {
      if (!Array.isArray(messages)) return cf.sendBatch(messages);
      const ids = [];
      const out = messages.map((m) => {
        if (m === null || typeof m !== "object") return m;
        const w = wire(m.body);
        ids.push(w.id);
        return Object.assign({}, m, { body: w.body, contentType: w.contentType });
      });
      await cf.sendBatch(out);
      return ids;
    },
  });
}

function wrapEnv(env) {
  const out = Object.assign({}, env);
  for (const name of BINDINGS) {
    if (env[name] !== undefined) out[name] = producer(env[name]);
  }
  return out;
}

let batches = 0;

function wrapBatch(cf) {
  const byID = new Map();
  const messages = cf.messages.map((m) => {
    const u = unwire(m.body);
    const id = u.id || String(m.id);
    byID.set(id, m);
    return { id: id, timestampMillis: m.timestamp.getTime(), body: u.body, attempts: m.attempts };
  });
  const find = (id) => {
    if (typeof id !== "string") throw new TypeError("messageId must be a string");
    const m = byID.get(id);
    if (m === undefined) throw named("unknown_message", "no message " + id + " in this batch");
    return m;
  };
  const delay = (d) => (d === undefined ? undefined : { delaySeconds: d });
  batches++;
  return {
    id: "mf-" + Date.now().toString(36) + "-" + batches,
    queue: cf.queue,
    messages: messages,
    acknowledge: async (id) => {
      find(id).ack();
    },
    retry: async (id, delaySeconds) => {
      find(id).retry(delay(delaySeconds));
    },
    acknowledgeAll: async () => {
      cf.ackAll();
    },
    retryAll: async (delaySeconds) => {
      cf.retryAll(delay(delaySeconds));
    },
  };
}

const mod = main.default;
const handlers = {};
if (mod && typeof mod.fetch === "function") {
  handlers.fetch = (request, env, ctx) => {
    const u = new URL(request.url);
    if (u.pathname === "/__tako/handlers") return Response.json(Object.keys(mod).filter((k) => typeof mod[k] === "function"));
    return mod.fetch(request, wrapEnv(env), ctx);
  };
} else {
  handlers.fetch = (request) => {
    const u = new URL(request.url);
    if (u.pathname === "/__tako/handlers") return Response.json(mod ? Object.keys(mod).filter((k) => typeof mod[k] === "function") : []);
    return new Response("the worker has no fetch handler", { status: 404 });
  };
}
if (mod && typeof mod.queue === "function") {
  handlers.queue = (batch, env, ctx) => mod.queue(wrapBatch(batch), wrapEnv(env), ctx);
}
export default handlers;
