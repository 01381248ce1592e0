// The worker of tools/jepsen: a fetch route that sends numbered messages
// through the producer Binding WORK, and a queue handler that reports
// every delivery to the harness's recorder (env.RECORDER) before it
// settles anything, then settles and reports what resolved.
//
// A message body is JSON {"n": NUMBER, "f": FAILURES}: the handler fails
// the message (retry, or leaves it unsettled and throws, by the parity of
// n + attempts) while attempts <= FAILURES, and acknowledges it after.
// Messages of the dead-letter queue (env.DLQ) are always acknowledged.
//
// HOST is the name of the host this sandbox runs on. The harness tells it
// on every fetch (?host=NAME): a worker cannot otherwise know its host,
// and its sandbox is per host.

let HOST = "";

async function report(env, path, ev) {
  // A report that fails is tried again (the recorder drops a repeated
  // announcement of one batch); one that never gets through makes the
  // handler throw before it settles anything, and says so in the log.
  let last;
  for (let i = 0; i < 5; i++) {
    try {
      const res = await fetch(env.RECORDER + path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(ev),
      });
      await res.text();
      if (res.ok) return;
      last = new Error("recorder answered " + res.status);
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  console.log("jepsen: report to " + path + " failed: " + String(last));
  throw last;
}

function json(v) {
  return new Response(JSON.stringify(v), { headers: { "content-type": "application/json" } });
}

function parse(m) {
  try {
    const d = JSON.parse(new TextDecoder().decode(new Uint8Array(m.body)));
    if (d && typeof d.n === "number" && typeof d.f === "number") return d;
  } catch (e) {}
  return { n: -1, f: 0 };
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const h = url.searchParams.get("host");
    if (h) HOST = h;
    if (url.pathname.endsWith("/send")) {
      const req = JSON.parse(await request.text());
      try {
        const ids = await env.WORK.sendBatch(req.bodies.map((b) => ({ body: b })));
        return json({ ok: true, ids: ids });
      } catch (e) {
        return json({ ok: false, name: e && e.name ? String(e.name) : String(e), message: e && e.message ? String(e.message) : "" });
      }
    }
    return json({ ok: true, host: HOST });
  },

  async queue(batch, env) {
    const dlq = batch.queue === env.DLQ;
    const msgs = batch.messages.map((m) => {
      const d = parse(m);
      let act = "ack";
      if (!dlq && m.attempts <= d.f) act = (d.n + m.attempts) % 2 === 0 ? "retry" : "throw";
      return { n: d.n, id: m.id, attempts: m.attempts, act: act };
    });
    // Announce first and wait for the recorder: nothing below runs before
    // the recorder has this delivery in its order.
    await report(env, "/deliver", { queue: batch.queue, batch: batch.id, host: HOST, msgs: msgs });
    const acked = [];
    const retried = [];
    const failed = [];
    let fail = false;
    for (const m of msgs) {
      try {
        if (m.act === "ack") {
          await batch.acknowledge(m.id);
          acked.push(m.id);
        } else if (m.act === "retry") {
          await batch.retry(m.id, 0);
          retried.push(m.id);
        } else {
          fail = true;
        }
      } catch (e) {
        failed.push(m.id);
        fail = true;
      }
    }
    await report(env, "/settled", { queue: batch.queue, batch: batch.id, host: HOST, acked: acked, retried: retried, failed: failed });
    if (fail) throw new Error("directed failure");
  },
};
