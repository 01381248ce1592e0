// The conformance kit's test worker: a queue handler driven by each
// message's body, and a fetch handler that drives the producer Bindings.
//
// env.RECORDER is the kit's recorder base URL and env.SCOPE the scenario's
// scope; every observation is POSTed to RECORDER/event as JSON and awaited
// before the handler goes on, so the kit sees it even if the handler then
// throws.
//
// A message body is JSON {"tag": "m1", "do": DIRECTIVE} where DIRECTIVE is a
// string or an array indexed by attempts-1 (the last entry repeats). A body
// that is not such JSON is left unsettled (so the return acknowledges it).
// Directives:
//   ack              batch.acknowledge(id)
//   none             nothing (the return settles it)
//   retry            batch.retry(id)
//   retry:N          batch.retry(id, N)
//   throw            leave it unsettled and make the handler reject
//   throw-sync       make the handler throw synchronously, before any await
//   ack-then-throw   batch.acknowledge(id), then make the handler reject
//   ack-then-retry   acknowledge, then retry (already_settled) and acknowledge again
//   retry-then-ack   retry, then acknowledge (already_settled)
//   retry-then-ackall retry, then acknowledgeAll (which must not reverse the retry)
//   ack-then-retryall acknowledge, then retryAll (which must not reverse the acknowledgement)
//   retryall-then-ackall retryAll, then acknowledgeAll (nothing left to acknowledge)
//   ackall-then-retryall acknowledgeAll, then retryAll (nothing left to retry)
//   foreign-id       acknowledge and retry an ID that is not in the batch
//   ackall           acknowledgeAll(), then acknowledge(id) and acknowledgeAll() again
//   ackall-then-throw acknowledgeAll(), then make the handler reject
//   retryall         retryAll()
//   retryall:N       retryAll(N)
//   keep             remember this batch in module state (for "stale")
//   keep-then-throw  remember this batch, then make the handler reject
//   stale            settle the remembered batch's message with every method
//   spin             loop forever (the host's handler time limit ends it)
//   sleep:MS         wait MS milliseconds, then leave unsettled
//   sleep-ack:MS     wait MS milliseconds, then acknowledge
//   ack-detached     acknowledge through the method taken off the batch
//                    (const {acknowledge} = batch), then the same for retry
//   ack-nonstring    acknowledge(42) and retry(null): not a string ID
//   message-ack      message.ack() and message.retry() (Cloudflare's spelling)
//   ack-then-sleep:MS acknowledge, report it (an event of kind "acked" holding
//                    this message and the call's result), then wait MS
//                    milliseconds: a batch that runs holding no unsettled message

function toB64(buf) {
  const u8 = new Uint8Array(buf);
  let s = "";
  const chunk = 8192;
  for (let i = 0; i < u8.length; i += chunk) {
    s += String.fromCharCode.apply(null, u8.subarray(i, i + chunk));
  }
  return btoa(s);
}

function fromB64(b64) {
  const s = atob(b64);
  const u8 = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) u8[i] = s.charCodeAt(i);
  return u8;
}

async function record(env, ev) {
  ev.scope = env.SCOPE;
  ev.workerMillis = Date.now();
  const res = await fetch(env.RECORDER + "/event", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(ev),
  });
  if (!res.ok) throw new Error("recorder answered " + res.status);
}

function directiveOf(m, text) {
  let d;
  try {
    d = JSON.parse(text);
  } catch (e) {
    return { tag: "", step: "none" };
  }
  if (d === null || typeof d !== "object" || Array.isArray(d)) return { tag: "", step: "none" };
  let step = d.do === undefined ? "none" : d.do;
  if (Array.isArray(step)) {
    step = step[Math.min(m.attempts - 1, step.length - 1)];
  }
  return { tag: typeof d.tag === "string" ? d.tag : "", step: String(step) };
}

async function settle(results, op, id, fn) {
  try {
    const v = await fn();
    results.push({ op: op, id: id, ok: true, value: v === undefined ? "undefined" : typeof v, at: Date.now() });
  } catch (e) {
    results.push({ op: op, id: id, ok: false, name: e && e.name ? String(e.name) : String(e), at: Date.now() });
  }
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function runQueue(batch, env, plan) {
  const startMillis = Date.now();
  await record(env, {
    kind: "start",
    batchId: batch.id,
    queue: batch.queue,
    messages: plan.map((p) => p.info),
  });
  const results = [];
  let fail = false;
  for (const p of plan) {
    const id = p.info.id;
    const step = p.info.step;
    const arg = step.indexOf(":") >= 0 ? Number(step.slice(step.indexOf(":") + 1)) : undefined;
    const name = step.indexOf(":") >= 0 ? step.slice(0, step.indexOf(":")) : step;
    switch (name) {
      case "ack":
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        break;
      case "none":
        break;
      case "retry":
        if (arg === undefined) await settle(results, "retry", id, () => batch.retry(id));
        else await settle(results, "retry", id, () => batch.retry(id, arg));
        break;
      case "throw":
        fail = true;
        break;
      case "ack-then-throw":
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        fail = true;
        break;
      case "ack-then-retry":
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        await settle(results, "retry", id, () => batch.retry(id));
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        break;
      case "retry-then-ack":
        await settle(results, "retry", id, () => batch.retry(id));
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        await settle(results, "retry", id, () => batch.retry(id, 0));
        break;
      case "retry-then-ackall":
        await settle(results, "retry", id, () => batch.retry(id));
        await settle(results, "acknowledgeAll", "", () => batch.acknowledgeAll());
        break;
      case "ack-then-retryall":
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        await settle(results, "retryAll", "", () => batch.retryAll());
        break;
      case "retryall-then-ackall":
        await settle(results, "retryAll", "", () => batch.retryAll());
        await settle(results, "acknowledgeAll", "", () => batch.acknowledgeAll());
        break;
      case "ackall-then-retryall":
        await settle(results, "acknowledgeAll", "", () => batch.acknowledgeAll());
        await settle(results, "retryAll", "", () => batch.retryAll());
        break;
      case "foreign-id":
        await settle(results, "acknowledge", "kit-not-in-this-batch", () => batch.acknowledge("kit-not-in-this-batch"));
        await settle(results, "retry", "kit-not-in-this-batch", () => batch.retry("kit-not-in-this-batch"));
        break;
      case "ackall":
        await settle(results, "acknowledgeAll", "", () => batch.acknowledgeAll());
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        await settle(results, "retry", id, () => batch.retry(id));
        await settle(results, "acknowledgeAll", "", () => batch.acknowledgeAll());
        break;
      case "ackall-then-throw":
        await settle(results, "acknowledgeAll", "", () => batch.acknowledgeAll());
        fail = true;
        break;
      case "retryall":
        if (arg === undefined) await settle(results, "retryAll", "", () => batch.retryAll());
        else await settle(results, "retryAll", "", () => batch.retryAll(arg));
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        break;
      case "keep":
        globalThis.__kitKept = { batch: batch, id: id };
        break;
      case "keep-then-throw":
        globalThis.__kitKept = { batch: batch, id: id };
        fail = true;
        break;
      case "stale": {
        const k = globalThis.__kitKept;
        if (!k) {
          results.push({ op: "stale", id: id, ok: false, name: "kit:no-kept-batch" });
          break;
        }
        await settle(results, "acknowledge", k.id, () => k.batch.acknowledge(k.id));
        await settle(results, "retry", k.id, () => k.batch.retry(k.id));
        await settle(results, "acknowledgeAll", "", () => k.batch.acknowledgeAll());
        await settle(results, "retryAll", "", () => k.batch.retryAll());
        break;
      }
      case "spin":
        for (;;) {
          /* the host's handler time limit ends this */
        }
      case "sleep":
        await sleep(arg || 0);
        break;
      case "sleep-ack":
        await sleep(arg || 0);
        await settle(results, "acknowledge", id, () => batch.acknowledge(id));
        break;
      case "ack-detached": {
        const { acknowledge, retry } = batch;
        await settle(results, "acknowledge", id, () => acknowledge(id));
        await settle(results, "retry", id, () => retry(id));
        break;
      }
      case "ack-nonstring":
        await settle(results, "acknowledge", "42", () => batch.acknowledge(42));
        await settle(results, "retry", "null", () => batch.retry(null));
        break;
      case "message-ack": {
        const msg = batch.messages.find((x) => x.id === id);
        await settle(results, "message.ack", id, () => msg.ack());
        await settle(results, "message.retry", id, () => msg.retry());
        break;
      }
      case "ack-then-sleep": {
        const acked = [];
        await settle(acked, "acknowledge", id, () => batch.acknowledge(id));
        results.push(...acked);
        await record(env, { kind: "acked", batchId: batch.id, queue: batch.queue, messages: [p.info], results: acked });
        await sleep(arg || 0);
        break;
      }
      case "sleep-retry":
        await sleep(arg || 0);
        await settle(results, "retry", id, () => batch.retry(id, 0));
        break;
      default:
        results.push({ op: "unknown-directive", id: id, ok: false, name: "kit:unknown-directive:" + step });
    }
  }
  await record(env, {
    kind: "end",
    batchId: batch.id,
    queue: batch.queue,
    startMillis: startMillis,
    results: results,
    threw: fail,
  });
  if (fail) throw new Error("kit: directed failure");
}

function bodyFrom(spec) {
  if (spec === null || typeof spec !== "object") return spec;
  if ("string" in spec) return spec.string;
  if ("json" in spec) return JSON.stringify(spec.json);
  if ("repeat" in spec) return spec.repeat.repeat(spec.count);
  if ("bytes" in spec) return fromB64(spec.bytes).buffer;
  if ("fill" in spec) return new Uint8Array(spec.fill).fill(0x61).buffer;
  if ("view" in spec) {
    const inner = fromB64(spec.view);
    const pad = spec.offset || 0;
    const u8 = new Uint8Array(pad + inner.length + 3);
    u8.fill(0x7e);
    u8.set(inner, pad);
    if (spec.kind === "DataView") return new DataView(u8.buffer, pad, inner.length);
    if (spec.kind === "Int16Array") return new Int16Array(u8.buffer, pad, inner.length / 2);
    return new Uint8Array(u8.buffer, pad, inner.length);
  }
  if ("padded" in spec) {
    // a JSON text {"tag":T,"pad":"..."} of exactly spec.padded UTF-8 bytes,
    // padded with spec.char (default "a")
    const c = spec.char || "a";
    const prefix = '{"tag":"' + spec.tag + '","pad":"';
    const suffix = '"}';
    const enc = new TextEncoder();
    const base = enc.encode(prefix + suffix).length;
    const cb = enc.encode(c).length;
    const k = Math.floor((spec.padded - base) / cb);
    const rem = spec.padded - base - k * cb;
    const text = prefix + c.repeat(k) + "a".repeat(rem) + suffix;
    if (spec.as === "bytes") return enc.encode(text).buffer;
    return text;
  }
  if ("raw" in spec) return spec.raw;
  throw new Error("kit: unknown body spec " + JSON.stringify(spec));
}

async function send(env, binding, call) {
  const b = env[binding];
  if (!b) return { ok: false, name: "kit:no-binding", message: "env has no " + binding };
  try {
    let ids;
    if (call.op === "send") {
      const body = bodyFrom(call.body);
      if ("options" in call) ids = [await b.send(body, call.options)];
      else ids = [await b.send(body)];
    } else if (call.op === "sendBatch") {
      let msgs = call.messagesRaw;
      if (call.messages) {
        msgs = call.messages.map((m) => {
          const o = Object.assign({}, m);
          o.body = bodyFrom(m.body);
          return o;
        });
      }
      const r = await b.sendBatch(msgs);
      if (!Array.isArray(r)) return { ok: false, name: "kit:not-an-array", message: typeof r };
      ids = r;
    } else {
      return { ok: false, name: "kit:unknown-op", message: String(call.op) };
    }
    return { ok: true, ids: ids, sentMillis: Date.now() };
  } catch (e) {
    return { ok: false, name: e && e.name ? String(e.name) : String(e), message: e && e.message ? String(e.message) : "" };
  }
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const binding = url.searchParams.get("binding") || "";
    if (url.pathname.endsWith("/send")) {
      const call = JSON.parse(await request.text());
      const out = await send(env, binding, call);
      return new Response(JSON.stringify(out), { headers: { "content-type": "application/json" } });
    }
    if (url.pathname.endsWith("/inspect")) {
      const b = env[binding];
      const members = {};
      for (const n of ["send", "sendBatch", "receive", "pull", "peek", "acknowledge", "ack", "retry", "acknowledgeAll", "retryAll", "delete"]) {
        members[n] = b === undefined || b === null ? "undefined" : typeof b[n];
      }
      return new Response(JSON.stringify({ type: typeof b, members: members }), { headers: { "content-type": "application/json" } });
    }
    return new Response("kit worker", { status: 200 });
  },

  queue(batch, env, ctx) {
    const plan = batch.messages.map((m) => {
      let bytes = m.body;
      let text = "";
      try {
        text = new TextDecoder().decode(new Uint8Array(bytes));
      } catch (e) {
        text = "";
      }
      const d = directiveOf(m, text);
      return {
        info: {
          id: m.id,
          idType: typeof m.id,
          timestampMillis: m.timestampMillis,
          attempts: m.attempts,
          bodyIsArrayBuffer: bytes instanceof ArrayBuffer,
          bodyLength: bytes && bytes.byteLength,
          body: bytes instanceof ArrayBuffer ? toB64(bytes) : "",
          tag: d.tag,
          step: d.step,
          keys: Object.keys(m).sort(),
        },
      };
    });
    if (plan.some((p) => p.info.step === "throw-sync")) {
      throw new Error("kit: directed synchronous throw");
    }
    return runQueue(batch, env, plan);
  },
};
