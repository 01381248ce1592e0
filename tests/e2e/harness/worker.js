// The torture and end-to-end test worker.
//
// env.RECORDER is the driver's loopback recorder base URL, env.SCOPE a tag
// the driver uses to tell runs apart, env.DLQ the dead-letter queue's name.
// Every delivery is POSTed to RECORDER/event before any settlement, and the
// acknowledgements that RESOLVED are POSTed after them, so the driver knows
// (a) every delivery the handler saw and (b) every acknowledgement the host
// said was durable.
//
// A message body is JSON {"k": KEY, "do": DIRECTIVE}; DIRECTIVE is a string
// or an array indexed by attempts-1 (the last entry repeats):
//   ack        batch.acknowledge(id), reported once it resolves
//   none       nothing: the handler's return acknowledges it
//   retry      batch.retry(id, 0)
//   throw      leave it unsettled and make the handler reject
//   sleep:MS   wait MS milliseconds, then acknowledge
//   spin       loop forever (the handler time limit ends it)
//   gate:NAME  wait for RECORDER/gate/NAME to answer (Recorder.Gate), then
//              acknowledge
//   hog        wait for RECORDER/gate/hog, then allocate until the
//              sandbox's memory is exhausted
// Messages of the queue named env.DLQ are always acknowledged.

async function post(env, ev) {
  ev.scope = env.SCOPE;
  const res = await fetch(env.RECORDER + "/event", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(ev),
  });
  if (!res.ok) throw new Error("recorder answered " + res.status);
}

function text(buf) {
  try {
    return new TextDecoder().decode(new Uint8Array(buf));
  } catch (e) {
    return "";
  }
}

function stepOf(m, body) {
  let d;
  try {
    d = JSON.parse(body);
  } catch (e) {
    return { k: "", step: "ack" };
  }
  if (d === null || typeof d !== "object") return { k: "", step: "ack" };
  let step = d.do === undefined ? "ack" : d.do;
  if (Array.isArray(step)) step = step[Math.min(m.attempts - 1, step.length - 1)];
  return { k: typeof d.k === "string" ? d.k : "", step: String(step) };
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function json(v, status) {
  return new Response(JSON.stringify(v), { status: status || 200, headers: { "content-type": "application/json" } });
}

async function probe(env, req) {
  const out = {};
  out.require = typeof require;
  out.process = typeof process;
  out.Deno = typeof Deno;
  out.Bun = typeof Bun;
  out.fs = typeof fs;
  out.globalRequire = typeof globalThis.require;
  out.module = typeof module;
  out.importScripts = typeof importScripts;
  try {
    const fsName = ["f", "s"].join("");
    const m = require(fsName);
    out.requireCall = "returned:" + typeof m;
  } catch (e) {
    out.requireCall = "error:" + (e && e.message ? String(e.message) : String(e));
  }
  try {
    out.fnCtorProcess = new Function("return typeof process")();
  } catch (e) {
    out.fnCtorProcess = "error:" + e.name;
  }
  try {
    out.dynamicImport = typeof eval("import('fs')");
  } catch (e) {
    out.dynamicImport = "error:" + e.name;
  }
  if (req.fetch) {
    try {
      const res = await fetch(req.fetch, { method: "GET" });
      out.fetch = { ok: true, status: res.status, body: (await res.text()).slice(0, 200) };
    } catch (e) {
      out.fetch = { ok: false, name: e && e.name ? String(e.name) : "", message: e && e.message ? String(e.message) : String(e) };
    }
  }
  return out;
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const path = url.pathname;
    if (path.endsWith("/send")) {
      const req = JSON.parse(await request.text());
      const b = env[req.binding];
      if (!b) return json({ ok: false, name: "no-binding" });
      try {
        let ids;
        if (req.bodies.length === 1 && !req.batch) {
          ids = [await b.send(req.bodies[0])];
        } else {
          ids = await b.sendBatch(req.bodies.map((x) => ({ body: x })));
        }
        return json({ ok: true, ids: ids });
      } catch (e) {
        return json({ ok: false, name: e && e.name ? String(e.name) : String(e), message: e && e.message ? String(e.message) : "" });
      }
    }
    if (path.endsWith("/probe")) {
      const req = JSON.parse((await request.text()) || "{}");
      return json(await probe(env, req));
    }
    if (path.endsWith("/spin")) {
      for (;;) {
        /* the handler time limit ends this */
      }
    }
    if (path.endsWith("/secret-use")) {
      // Uses the secret the way a worker would (an outbound call's
      // credential) without ever returning or logging it.
      const s = env.API_SECRET || "";
      console.log("secret-use: secret present:", s.length > 0, "length", s.length);
      try {
        await fetch(env.RECORDER + "/secret-sink", { method: "POST", headers: { authorization: "Bearer " + s }, body: "x" });
      } catch (e) {
        console.log("secret-use: sink failed", String(e && e.name));
      }
      return json({ ok: true, hasSecret: s.length > 0 });
    }
    if (path.endsWith("/secret-throw")) {
      // Throws an error whose message does not contain the secret.
      throw new Error("directed failure without the secret");
    }
    return new Response("worker ok");
  },

  async queue(batch, env, ctx) {
    const dlq = batch.queue === env.DLQ;
    const msgs = batch.messages.map((m) => {
      const body = text(m.body);
      const s = stepOf(m, body);
      return { id: m.id, attempts: m.attempts, ts: m.timestampMillis, k: s.k, step: dlq ? "ack" : s.step };
    });
    await post(env, { kind: "delivery", batchId: batch.id, queue: batch.queue, messages: msgs });
    const acked = [];
    const failed = [];
    let fail = false;
    for (const m of msgs) {
      const st = m.step;
      const arg = st.indexOf(":") >= 0 ? Number(st.slice(st.indexOf(":") + 1)) : 0;
      const name = st.indexOf(":") >= 0 ? st.slice(0, st.indexOf(":")) : st;
      try {
        switch (name) {
          case "ack":
            await batch.acknowledge(m.id);
            acked.push(m.id);
            break;
          case "none":
            break;
          case "retry":
            await batch.retry(m.id, 0);
            break;
          case "throw":
          case "dead":
            fail = true;
            break;
          case "sleep":
            await sleep(arg);
            await batch.acknowledge(m.id);
            acked.push(m.id);
            break;
          case "spin":
            for (;;) {
              /* the handler time limit ends this */
            }
          case "gate":
            await fetch(env.RECORDER + "/gate/" + st.slice(5));
            await batch.acknowledge(m.id);
            acked.push(m.id);
            break;
          case "hog": {
            await fetch(env.RECORDER + "/gate/hog");
            const keep = [];
            for (;;) keep.push(new Uint8Array(16 << 20)); // the sandbox's memory ends this
          }
          default:
            await batch.acknowledge(m.id);
            acked.push(m.id);
        }
      } catch (e) {
        failed.push({ id: m.id, name: e && e.name ? String(e.name) : String(e) });
        fail = true;
      }
    }
    await post(env, { kind: "settled", batchId: batch.id, queue: batch.queue, acked: acked, failed: failed, threw: fail });
    if (fail) throw new Error("directed failure");
  },
};
