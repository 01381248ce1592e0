// Queue handler scenarios, selected by env.MODE. Everything the handler
// observes is reported with seen(...), which the Go test reads back from
// the worker's log.
import { seen, errInfo, bytesHex } from "./seen.js";

let invocations = 0; // module state: persists across batches on one runtime
let saved = null; // a settlement method kept from an earlier batch

const scenarios = {
  async shape(batch) {
    seen("shape", {
      id: batch.id,
      queue: batch.queue,
      messages: batch.messages.map((m) => ({
        id: m.id,
        timestampMillis: m.timestampMillis,
        attempts: m.attempts,
        isArrayBuffer: m.body instanceof ArrayBuffer,
        body: new TextDecoder().decode(m.body),
      })),
      methods: ["acknowledge", "retry", "acknowledgeAll", "retryAll"].map((k) => typeof batch[k]),
    });
    // the body is a copy: writing to it changes nothing on the Go side
    new Uint8Array(batch.messages[0].body)[0] = 0x21;
  },

  async ackOneRetryRest(batch) {
    const [first, ...rest] = batch.messages;
    const r1 = await batch.acknowledge(first.id);
    const rs = await Promise.all(rest.map((m) => batch.retry(m.id)));
    seen("results", { ack: r1 === undefined, retries: rs.map((r) => r === undefined) });
  },

  async retryAllDelay(batch) {
    await batch.retryAll(120);
  },

  async ackAll(batch) {
    await batch.acknowledgeAll();
  },

  async throwAfterAck(batch) {
    await batch.acknowledge(batch.messages[0].id);
    throw new Error("boom after ack");
  },

  async cloudflareAck(batch) {
    for (const m of batch.messages) m.ack();
  },
  async cloudflareRetry(batch) {
    batch.messages[0].retry({ delaySeconds: 5 });
  },
  async cloudflareAckAll(batch) {
    batch.ackAll();
  },
  async otherMissing(batch) {
    batch.messages[0].frobnicate();
  },
  async rejectPlain(batch) {
    return Promise.reject("just a string");
  },

  // Detached methods; one is kept for the next invocation.
  async keepRef(batch) {
    const { acknowledge } = batch;
    saved = acknowledge;
    await acknowledge(batch.messages[0].id);
  },

  async useSaved(batch) {
    try {
      await saved("m1");
      seen("saved", { ok: true });
    } catch (e) {
      seen("saved", errInfo(e));
    }
  },

  async settleTwice(batch) {
    const id = batch.messages[0].id;
    await batch.acknowledge(id);
    try {
      await batch.retry(id);
      seen("twice", { ok: true });
    } catch (e) {
      seen("twice", errInfo(e));
    }
  },

  async unknownMessage(batch) {
    try {
      await batch.acknowledge("not-in-this-batch");
      seen("unknown", { ok: true });
    } catch (e) {
      seen("unknown", errInfo(e));
    }
  },

  async backendDown(batch) {
    try {
      await batch.acknowledgeAll();
      seen("down", { ok: true });
    } catch (e) {
      seen("down", errInfo(e));
    }
  },

  async argErrors(batch) {
    const id = batch.messages[0].id;
    const calls = {
      ackNumber: () => batch.acknowledge(5),
      ackMissing: () => batch.acknowledge(),
      retryNumber: () => batch.retry(7),
      retryFraction: () => batch.retry(id, 1.5),
      retryTooBig: () => batch.retry(id, 43201),
      retryString: () => batch.retry(id, "5"),
      retryNull: () => batch.retry(id, null),
      retryAllNegative: () => batch.retryAll(-1),
      retryAllNaN: () => batch.retryAll(NaN),
    };
    const out = {};
    for (const [k, f] of Object.entries(calls)) {
      const p = f();
      out[k] = { isPromise: p instanceof Promise };
      try {
        await p;
        out[k].ok = true;
      } catch (e) {
        Object.assign(out[k], errInfo(e));
      }
    }
    await batch.retry(id, 0);
    await batch.retryAll(43200);
    seen("args", out);
  },

  async unhandled(batch) {
    batch.acknowledge("not-in-this-batch"); // not awaited: its rejection is logged
    Promise.reject(new Error("handled later")).catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, 10));
  },

  async counter(batch) {
    invocations++;
    seen("counter", { invocations });
  },

  async infinite(batch) {
    for (;;) {}
  },

  async hang(batch) {
    await new Promise(() => {});
  },

  async timerThenAck(batch) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    await batch.acknowledgeAll();
    seen("timer", { ok: true });
  },

  async waitUntil(batch, env, ctx) {
    ctx.waitUntil(
      new Promise((resolve) => setTimeout(resolve, 30)).then(() => batch.acknowledgeAll()).then(() => seen("waitUntil", { done: true }))
    );
  },

  async deepRecursion(batch) {
    const f = (n) => f(n + 1) + 1;
    f(0);
  },

  async sends(batch, env) {
    const out = {};
    const attempt = async (name, f) => {
      try {
        out[name] = { ok: true, value: await f() };
      } catch (e) {
        out[name] = errInfo(e);
      }
    };
    const OUT = env.OUT;
    await attempt("keys", async () => Object.keys(OUT).sort());
    await attempt("utf8", () => OUT.send("é"));
    const buf = new Uint8Array([0, 1, 2, 3, 4, 5, 6, 7]).buffer;
    await attempt("view", () => OUT.send(new Uint8Array(buf, 2, 3)));
    await attempt("dataView", () => OUT.send(new DataView(buf, 5)));
    await attempt("u16", () => OUT.send(new Uint16Array(buf, 2, 1)));
    await attempt("arrayBuffer", () => OUT.send(buf));
    await attempt("delay", () => OUT.send("later", { delaySeconds: 30 }));
    await attempt("max", () => OUT.send(new Uint8Array(127000)));
    await attempt("tooLarge", () => OUT.send(new Uint8Array(127001)));
    await attempt("tooLargeString", () => OUT.send("x".repeat(126999) + "é"));
    await attempt("object", () => OUT.send({ hello: "world" }));
    await attempt("number", () => OUT.send(42));
    await attempt("null", () => OUT.send(null));
    await attempt("undefined", () => OUT.send());
    await attempt("empty", () => OUT.send(""));
    await attempt("unknownOption", () => OUT.send("x", { delaySeconds: 1, priority: 2 }));
    await attempt("badDelay", () => OUT.send("x", { delaySeconds: 1.5 }));
    await attempt("delayTooBig", () => OUT.send("x", { delaySeconds: 43201 }));
    await attempt("optionsNotObject", () => OUT.send("x", 5));
    await attempt("batchOf101", () => OUT.sendBatch(Array.from({ length: 101 }, () => ({ body: "x" }))));
    await attempt("batchOf0", () => OUT.sendBatch([]));
    await attempt("batchNotArray", () => OUT.sendBatch({ body: "x" }));
    await attempt("batchUnknownField", () => OUT.sendBatch([{ body: "a" }, { body: "b", extra: 1 }]));
    await attempt("batchBadBody", () => OUT.sendBatch([{ body: "a" }, { body: {} }]));
    await attempt("batchTooLargeBody", () => OUT.sendBatch([{ body: "a" }, { body: new Uint8Array(127001) }]));
    await attempt("batch", () => OUT.sendBatch([{ body: "a" }, { body: new Uint8Array([98]), delaySeconds: 5 }, { body: "c" }]));
    seen("sends", out);
  },

  async sendFails(batch, env) {
    try {
      await env.OUT.send("x");
      seen("fail", { ok: true });
    } catch (e) {
      seen("fail", errInfo(e));
    }
  },

  async env(batch, env) {
    seen("env", { keys: Object.keys(env).sort(), GREETING: env.GREETING, TOKEN: env.TOKEN });
  },

  async consoleLevels(batch) {
    console.log("plain", 1, { a: [1, "two"] }, null, undefined);
    console.info("info line");
    console.warn("warn line");
    console.error(new Error("an error object"));
    console.debug("debug line");
  },
};

export default {
  async queue(batch, env, ctx) {
    // MODE "byBody": the first message's body names the scenario, so that
    // one runtime can run several scenarios in a row.
    const mode = env.MODE === "byBody" ? new TextDecoder().decode(batch.messages[0].body) : env.MODE;
    const f = scenarios[mode];
    if (!f) throw new Error("unknown MODE " + mode);
    return f(batch, env, ctx);
  },
};
