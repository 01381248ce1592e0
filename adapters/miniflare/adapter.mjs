// The Miniflare adapter: Miniflare 4 (Cloudflare's local runtime, workerd)
// behind the Host API v2 routes the Takoform conformance kit needs, so that
// tools/conform runs unchanged against Cloudflare's queues.
//
// Why it is shaped this way:
//
//   - One Miniflare (one workerd process) per space. Every scenario of the
//     kit works in a space of its own, so scenarios do not restart each
//     other's workerd, and a space's queues are Cloudflare queues named as
//     the resources are.
//   - A resource write changes the space's Miniflare options; Miniflare
//     applies new options by restarting workerd (Miniflare.setOptions). The
//     adapter calls it only when what workerd sees changed (a worker's
//     selected version, a consumer, a queue's delivery delay), once for
//     writes made together, and the Operation succeeds once workerd runs
//     the new configuration. A queue alone, a worker without a version and
//     an unselected version change nothing workerd sees.
//   - The Host API's own rules (admission, references, Operations, etags)
//     are this adapter's code, kept small: the kit is here to test
//     Miniflare's queues, and docs/conformance-miniflare.md says which
//     results are the adapter's. Specs are checked against the repository's
//     own JSON Schemas (../../schemas), by a validator of the subset they use.
//   - The worker ABI is mapped onto Cloudflare's by shim.mjs, which decides
//     nothing Cloudflare decides.
//
// It declares no capability (GET /v2/capabilities): Miniflare keeps queued
// messages in memory (no restart), has no fault hook, no handler time limit
// it enforces, and none of this host's extensions.
//
// Usage: node adapter.mjs [--listen 127.0.0.1:0] --token-file FILE
// Prints "READY http://ADDR" once it serves; SIGTERM or SIGINT stops it,
// and so does the end of its stdin with --stop-on-eof (for a parent that
// holds a pipe to it).

import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { fileURLToPath } from "node:url";
import { Miniflare, Log, LogLevel } from "miniflare";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const MINIFLARE_VERSION = JSON.parse(fs.readFileSync(path.join(here, "node_modules/miniflare/package.json"), "utf8")).version;
const SHIM = fs.readFileSync(path.join(here, "shim.mjs"), "utf8");

const FORMS = {
  queue: "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/",
  consumer: "https://edge.forms.takoform.com/forms/QueueConsumer/0.3.0/",
  worker: "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
  version: "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
};
const KIND_OF = Object.fromEntries(Object.entries(FORMS).map(([k, v]) => [v, k]));
const SPEC_SCHEMA = {
  queue: "atleastoncequeue-0.2.0.spec.json",
  consumer: "queueconsumer-0.3.0.spec.json",
  worker: "moduleworker-0.3.0.spec.json",
  version: "workerversion-0.5.0.spec.json",
};
const PROBLEM_BASE = "https://miniflare-adapter.invalid/problems/";

// ---- arguments ----

function arg(name, def) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : def;
}
const listen = arg("--listen", "127.0.0.1:0");
const tokenFile = arg("--token-file", "");
if (!tokenFile) {
  console.error("adapter: --token-file FILE is required (the admin token the kit is given with --token)");
  process.exit(2);
}
const adminToken = fs.readFileSync(tokenFile, "utf8").trim();
const verbose = process.env.ADAPTER_VERBOSE === "1";

// ---- JSON Schema (the subset schemas/ uses) ----

const schemaCache = new Map();
function loadSchema(file) {
  let s = schemaCache.get(file);
  if (!s) {
    s = JSON.parse(fs.readFileSync(path.join(repo, "schemas", file), "utf8"));
    schemaCache.set(file, s);
  }
  return s;
}

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

// validate returns [{pointer, message}] for v against schema s.
function validate(s, v, ptr, errs) {
  if (s.$ref) return validate(loadSchema(s.$ref), v, ptr, errs);
  if (s.type) {
    const t = typeOf(v);
    const ok = s.type === t || (s.type === "number" && t === "integer");
    if (!ok) {
      errs.push({ pointer: ptr, message: `must be of type ${s.type}` });
      return errs;
    }
  }
  if (s.enum && !s.enum.includes(v)) errs.push({ pointer: ptr, message: `must be one of ${s.enum.join(", ")}` });
  if (typeof v === "number") {
    if (s.minimum !== undefined && v < s.minimum) errs.push({ pointer: ptr, message: `must be >= ${s.minimum}` });
    if (s.maximum !== undefined && v > s.maximum) errs.push({ pointer: ptr, message: `must be <= ${s.maximum}` });
  }
  if (typeof v === "string") {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) errs.push({ pointer: ptr, message: `must be at least ${s.minLength} characters` });
    if (s.maxLength !== undefined && n > s.maxLength) errs.push({ pointer: ptr, message: `must be at most ${s.maxLength} characters` });
    if (s.pattern && !new RegExp(s.pattern, "u").test(v)) errs.push({ pointer: ptr, message: `must match ${s.pattern}` });
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) errs.push({ pointer: ptr, message: `must have at least ${s.minItems} items` });
    if (s.maxItems !== undefined && v.length > s.maxItems) errs.push({ pointer: ptr, message: `must have at most ${s.maxItems} items` });
    if (s.uniqueItems && new Set(v.map((x) => JSON.stringify(x))).size !== v.length) errs.push({ pointer: ptr, message: "must have unique items" });
    if (s.items) v.forEach((x, i) => validate(s.items, x, `${ptr}/${i}`, errs));
  }
  if (typeOf(v) === "object") {
    const keys = Object.keys(v);
    for (const r of s.required || []) if (!(r in v)) errs.push({ pointer: `${ptr}/${r}`, message: "is required" });
    if (s.maxProperties !== undefined && keys.length > s.maxProperties) errs.push({ pointer: ptr, message: `must have at most ${s.maxProperties} members` });
    for (const k of keys) {
      if (s.properties && k in s.properties) validate(s.properties[k], v[k], `${ptr}/${k}`, errs);
      else if (s.additionalProperties === false) errs.push({ pointer: `${ptr}/${k}`, message: "is not allowed" });
      else if (typeof s.additionalProperties === "object") validate(s.additionalProperties, v[k], `${ptr}/${k}`, errs);
    }
  }
  return errs;
}

// ---- problems ----

class Problem extends Error {
  constructor(status, code, detail, errors) {
    super(detail);
    this.status = status;
    this.code = code;
    this.errors = errors;
  }
}
const TITLES = {
  unauthenticated: "Unauthenticated",
  not_found: "Not found",
  invalid_request: "Invalid request",
  unknown_form: "Unknown Form",
  unknown_offering: "Unknown offering",
  invalid_spec: "Invalid spec",
  invalid_reference: "Invalid reference",
  name_conflict: "Name conflict",
  consumer_conflict: "Consumer conflict",
  dead_letter_cycle: "Dead-letter cycle",
  dependency_conflict: "Dependency conflict",
  operation_in_progress: "Operation in progress",
  precondition_failed: "Precondition failed",
  missing_handler: "Missing handler",
  backend_unavailable: "Backend unavailable",
  worker_error: "Worker error",
  not_implemented: "Not implemented",
  idempotency_key_reuse: "Idempotency-Key reused",
};
function problemBody(p, instance, requestId) {
  const b = { type: PROBLEM_BASE + p.code, title: TITLES[p.code] || p.code, status: p.status, code: p.code, detail: p.message, instance, requestId };
  if (p.errors) b.errors = p.errors;
  return b;
}

// ---- state ----

const spaces = new Map();
function space(name) {
  let s = spaces.get(name);
  if (!s) {
    s = { name, res: new Map(), ops: new Map(), idem: new Map(), mf: null, applied: "", apply: null, pending: [], lastUse: Date.now() };
    spaces.set(name, s);
  }
  s.lastUse = Date.now();
  return s;
}

const now = () => new Date().toISOString();
const newUID = (p) => p + "_" + crypto.randomBytes(10).toString("hex");

function etagOf(r) {
  const h = crypto.createHash("sha256").update(JSON.stringify(r.spec)).digest("hex").slice(0, 16);
  return `"${r.generation}-${h}"`;
}

function observedOf(s, r) {
  if (r.state === "creating" || !r.observedOnce) return {};
  if (r.kind === "queue") return { queueExists: true };
  if (r.kind === "consumer") {
    const q = s.res.get(r.spec.queue.resourceUid);
    const w = s.res.get(r.spec.worker.resourceUid);
    return { queueExists: !!q, workerExists: !!w, consumerAttached: r.attached === true };
  }
  return {};
}

function view(s, r, full = true) {
  const spec = full || r.kind !== "version" ? r.spec : { ...r.spec, modules: r.spec.modules.map((m) => ({ name: m.name })) };
  return {
    uid: r.uid, name: r.name, space: s.name, formUrl: r.formUrl, offering: "embedded", spec,
    observed: observedOf(s, r), output: {}, state: r.state, generation: r.generation, etag: etagOf(r),
    createTime: r.createTime, updateTime: r.updateTime,
  };
}

function opView(op) {
  const o = { id: op.id, kind: op.kind, resourceUid: op.resourceUid, state: op.state, effect: op.effect, createTime: op.createTime, updateTime: op.updateTime };
  if (op.error) o.error = op.error;
  if (op.idempotencyKey) o.idempotencyKey = op.idempotencyKey;
  return o;
}

// ---- what workerd runs ----

// config is the space's Miniflare options: one workerd worker per
// ModuleWorker with a selected version, its producer Bindings and the
// consumers of the queues it is attached to.
function config(s) {
  const workers = [{ name: "tako-adapter-idle", modules: true, script: "export default { fetch() { return new Response('idle'); } }", compatibilityDate: "2026-07-01" }];
  const consumersByWorker = new Map();
  for (const r of s.res.values()) {
    if (r.kind !== "consumer" || r.state === "deleting" && r.detaching) continue;
    const list = consumersByWorker.get(r.spec.worker.resourceUid) || [];
    list.push(r);
    consumersByWorker.set(r.spec.worker.resourceUid, list);
  }
  for (const w of s.res.values()) {
    if (w.kind !== "worker" || !w.spec.version || w.state === "deleting") continue;
    const v = s.res.get(w.spec.version.resourceUid);
    if (!v) continue;
    const names = (v.spec.queueProducerBindings || []).map((b) => b.name);
    const entry = SHIM.replace("__TAKO_MAIN__", "./" + v.spec.mainModule).replace("__TAKO_BINDINGS__", JSON.stringify(names));
    const modules = [{ type: "ESModule", path: "/w/tako-shim-entry.mjs", contents: entry }];
    for (const m of v.spec.modules) modules.push({ type: "ESModule", path: "/w/" + m.name, contents: m.content });
    const queueProducers = {};
    for (const b of v.spec.queueProducerBindings || []) {
      const q = s.res.get(b.resource.resourceUid);
      if (!q) continue;
      const p = { queueName: q.name };
      if (q.spec.deliveryDelaySeconds !== undefined) p.deliveryDelay = q.spec.deliveryDelaySeconds;
      queueProducers[b.name] = p;
    }
    const queueConsumers = {};
    for (const c of consumersByWorker.get(w.uid) || []) {
      const q = s.res.get(c.spec.queue.resourceUid);
      if (!q) continue;
      const o = { maxBatchSize: c.spec.maxBatchSize, maxBatchTimeout: c.spec.maxBatchTimeoutSeconds, maxRetries: c.spec.maxRetries, retryDelay: c.spec.retryDelaySeconds };
      if (c.spec.deadLetterQueue) {
        const d = s.res.get(c.spec.deadLetterQueue.resourceUid);
        if (d) o.deadLetterQueue = d.name;
      }
      queueConsumers[q.name] = o;
    }
    workers.push({
      name: w.uid, modulesRoot: "/", modules, compatibilityDate: "2026-07-01",
      bindings: { ...(v.spec.vars || {}), ...(v.secrets || {}) },
      queueProducers, queueConsumers,
    });
  }
  // cf: false keeps Miniflare from fetching Request.cf's data from
  // Cloudflare: nothing leaves the machine, and startup does not wait on it.
  return { host: "127.0.0.1", port: 0, cf: false, log: new SpaceLog(s), workers };
}

// SpaceLog is a space's Miniflare log: it passes on warnings and errors
// (everything with ADAPTER_VERBOSE=1), and counts each batch the queue
// broker reports ("QUEUE q 3/3") as activity of the space, so that the idle
// reaper below never stops a workerd that is still delivering messages when
// no Host API request came for a while (the queue checker waits minutes on
// deliveries after its last send).
class SpaceLog extends Log {
  constructor(s) {
    super(verbose ? LogLevel.DEBUG : LogLevel.INFO);
    this.space = s;
  }
  logWithLevel(level, message) {
    if (level === LogLevel.INFO && String(message).includes("QUEUE")) this.space.lastUse = Date.now();
    if (verbose || level <= LogLevel.WARN) super.logWithLevel(level, message);
  }
}

// apply brings the space's workerd to its current configuration: at once
// when none runs, else after the writes of the next 50 ms. Every Operation
// waiting on it then succeeds, or fails with the reason workerd gave.
function scheduleApply(s, done) {
  s.pending.push(done);
  if (s.apply) return;
  s.apply = (async () => {
    await new Promise((r) => setTimeout(r, 50));
    while (s.pending.length) {
      const waiting = s.pending.splice(0);
      let err = null;
      try {
        const opts = config(s);
        const key = JSON.stringify(opts.workers);
        if (key !== s.applied) {
          if (!s.mf) s.mf = new Miniflare(opts);
          else await s.mf.setOptions(opts);
          await s.mf.ready;
          s.applied = key;
        }
      } catch (e) {
        err = e;
        s.applied = "";
      }
      for (const w of waiting) w(err);
    }
    s.apply = null;
  })();
}

function applied(s) {
  return new Promise((resolve) => scheduleApply(s, resolve));
}

// An idle space's workerd is stopped (its messages with it) after
// IDLE_MS without a request for it.
const IDLE_MS = Number(process.env.ADAPTER_IDLE_MS || 5 * 60 * 1000);
setInterval(() => {
  for (const s of spaces.values()) {
    if (s.mf && !s.apply && Date.now() - s.lastUse > IDLE_MS) {
      const mf = s.mf;
      s.mf = null;
      s.applied = "";
      mf.dispose().catch(() => {});
    }
  }
}, 30_000).unref();

// ---- operations ----

function newOp(s, kind, r, key) {
  const op = { id: newUID("op"), kind, resourceUid: r.uid, state: "running", effect: "none", createTime: now(), updateTime: now(), waiters: [] };
  if (key) op.idempotencyKey = key;
  s.ops.set(op.id, op);
  r.op = op;
  return op;
}

function finishOp(op, state, effect, error) {
  op.state = state;
  op.effect = effect;
  op.updateTime = now();
  if (error) op.error = error;
  for (const w of op.waiters.splice(0)) w();
}

// run carries out a write: change the record, apply it to workerd, then
// settle the Operation; undo restores the record when workerd refused.
function run(s, op, r, undo) {
  applied(s).then((err) => {
    if (err) {
      undo();
      finishOp(op, "failed", "none", { type: PROBLEM_BASE + "invalid_spec", title: TITLES.invalid_spec, status: 422, code: "invalid_spec", detail: "workerd refused the configuration: " + String(err.message || err).split("\n")[0] });
      return;
    }
    if (op.kind === "delete") s.res.delete(r.uid);
    else {
      r.state = "active";
      r.observedOnce = true;
      if (r.kind === "consumer") r.attached = true;
    }
    finishOp(op, "succeeded", "applied");
  });
}

// ---- admission ----

function checkRefs(s, kind, spec) {
  const refs = [];
  if (kind === "consumer") {
    refs.push(["/spec/queue/resourceUid", spec.queue.resourceUid, "queue"]);
    refs.push(["/spec/worker/resourceUid", spec.worker.resourceUid, "worker"]);
    if (spec.deadLetterQueue) refs.push(["/spec/deadLetterQueue/resourceUid", spec.deadLetterQueue.resourceUid, "queue"]);
  }
  if (kind === "worker" && spec.version) refs.push(["/spec/version/resourceUid", spec.version.resourceUid, "version"]);
  if (kind === "version") {
    refs.push(["/spec/worker/resourceUid", spec.worker.resourceUid, "worker"]);
    (spec.queueProducerBindings || []).forEach((b, i) => refs.push([`/spec/queueProducerBindings/${i}/resource/resourceUid`, b.resource.resourceUid, "queue"]));
  }
  for (const [ptr, uid, want] of refs) {
    const t = s.res.get(uid);
    if (!t || t.kind !== want || t.state === "deleting" || t.state === "creating") {
      throw new Problem(422, "invalid_reference", `${ptr} names no ${want} of this space`, [{ pointer: ptr, message: "not found" }]);
    }
  }
}

function checkSpec(kind, spec, privateInputs) {
  const errs = validate(loadSchema(SPEC_SCHEMA[kind]), spec, "/spec", []);
  if (privateInputs !== undefined) {
    if (kind === "version") validate(loadSchema("workerversion-0.5.0.private-inputs.json"), privateInputs, "/privateInputs", errs);
    else if (typeOf(privateInputs) !== "object" || Object.keys(privateInputs).length) errs.push({ pointer: "/privateInputs", message: "this Form takes no private inputs" });
  }
  if (errs.length) throw new Problem(422, "invalid_spec", errs.map((e) => `${e.pointer} ${e.message}`).join("; "), errs);
  if (kind === "version") {
    const names = new Set(spec.modules.map((m) => m.name));
    if (!names.has(spec.mainModule)) throw new Problem(422, "invalid_spec", "/spec/mainModule names no module", [{ pointer: "/spec/mainModule", message: "names no module" }]);
    const seen = new Set(Object.keys(spec.vars || {}).concat(Object.keys((privateInputs || {}).secrets || {})));
    (spec.queueProducerBindings || []).forEach((b, i) => {
      if (seen.has(b.name)) throw new Problem(422, "invalid_spec", `binding name ${b.name} is used twice`, [{ pointer: `/spec/queueProducerBindings/${i}/name`, message: "duplicate" }]);
      seen.add(b.name);
    });
  }
}

function checkConsumerRules(s, spec, self) {
  for (const r of s.res.values()) {
    if (r.kind === "consumer" && r.uid !== self && r.spec.queue.resourceUid === spec.queue.resourceUid) {
      throw new Problem(409, "consumer_conflict", "the queue already has a consumer", [{ pointer: "/spec/queue/resourceUid", message: "has a consumer" }]);
    }
  }
  const edges = new Map();
  for (const r of s.res.values()) if (r.kind === "consumer" && r.uid !== self && r.spec.deadLetterQueue) edges.set(r.spec.queue.resourceUid, r.spec.deadLetterQueue.resourceUid);
  if (spec.deadLetterQueue) edges.set(spec.queue.resourceUid, spec.deadLetterQueue.resourceUid);
  let at = spec.queue.resourceUid;
  for (let i = 0; i <= edges.size; i++) {
    at = edges.get(at);
    if (at === undefined) break;
    if (at === spec.queue.resourceUid) throw new Problem(422, "dead_letter_cycle", "the dead-letter queues would form a cycle", [{ pointer: "/spec/deadLetterQueue/resourceUid", message: "cycle" }]);
  }
}

function busy(r) {
  if (r.op && !["succeeded", "failed"].includes(r.op.state)) throw new Problem(409, "operation_in_progress", "an Operation on this resource is still running");
}

function dependents(s, r) {
  for (const o of s.res.values()) {
    if (o.kind === "consumer" && [o.spec.queue.resourceUid, o.spec.worker.resourceUid, o.spec.deadLetterQueue?.resourceUid].includes(r.uid)) return o;
    if (o.kind === "version" && (o.spec.queueProducerBindings || []).some((b) => b.resource.resourceUid === r.uid)) return o;
    if (o.kind === "worker" && o.spec.version?.resourceUid === r.uid) return o;
  }
  if (r.kind === "worker") for (const o of s.res.values()) if (o.kind === "version" && o.spec.worker.resourceUid === r.uid) return o;
  return null;
}

// ---- routes ----

function accepted(res, s, op) {
  res.statusCode = 202;
  res.setHeader("Location", `/v2/spaces/${s.name}/operations/${op.id}`);
  return opView(op);
}

// canonical is JSON with members sorted and no insignificant white space:
// the fingerprint of a request body (spec/host-api.md §Idempotency).
function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v !== null && typeof v === "object") return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  return JSON.stringify(v);
}

function idemKey(req) {
  let k = req.headers["idempotency-key"];
  if (k === undefined) return undefined;
  if (/^"(?:[^"\\]|\\.)*"$/.test(k)) k = k.slice(1, -1).replace(/\\(.)/g, "$1");
  if (!/^[\x21-\x7e]{1,255}$/.test(k)) throw new Problem(400, "invalid_request", "Idempotency-Key must be 1..255 visible ASCII characters, bare or as a structured-field string");
  return k;
}

// idempotent runs fn once per (space, method, path, key): a replay with the
// same body returns the first Operation; another body is
// idempotency_key_reuse. A request refused in admission stores no key.
function idempotent(s, req, res, body, fn) {
  const key = idemKey(req);
  if (key === undefined) return fn(undefined);
  const scope = req.method + " " + new URL(req.url, "http://x").pathname + " " + key;
  const fingerprint = crypto.createHash("sha256").update(body === undefined ? "" : canonical(body)).digest("hex");
  const prev = s.idem.get(scope);
  if (prev) {
    if (prev.fingerprint !== fingerprint) throw new Problem(422, "idempotency_key_reuse", "this Idempotency-Key was used with another request body");
    res.setHeader("Idempotent-Replayed", "true");
    return { replay: prev.op };
  }
  const out = fn(key);
  if (out && out.op) s.idem.set(scope, { fingerprint, op: out.op });
  return out;
}

async function createResource(s, req, res, body) {
  if (typeOf(body) !== "object") throw new Problem(400, "invalid_request", "the body must be a JSON object");
  const envErrs = validate(loadSchema("create-resource-request.json"), body, "", []);
  if (envErrs.length) throw new Problem(400, "invalid_request", envErrs.map((e) => `${e.pointer} ${e.message}`).join("; "), envErrs);
  const out = idempotent(s, req, res, body, (key) => {
    const kind = KIND_OF[body.formUrl];
    if (!kind) throw new Problem(422, "unknown_form", `${body.formUrl} is not one of the Forms this host serves`, [{ pointer: "/formUrl", message: "unknown" }]);
    if (body.offering !== undefined && body.offering !== "embedded") throw new Problem(422, "unknown_offering", "this host serves every Form in the offering embedded only", [{ pointer: "/offering", message: "unknown" }]);
    checkSpec(kind, body.spec, body.privateInputs);
    for (const r of s.res.values()) if (r.name === body.name) throw new Problem(409, "name_conflict", `a resource named ${body.name} exists`);
    if (kind === "worker" && body.spec.version) throw new Problem(422, "invalid_reference", "a worker cannot select a version at creation", [{ pointer: "/spec/version/resourceUid", message: "no version belongs to it yet" }]);
    checkRefs(s, kind, body.spec);
    if (kind === "consumer") checkConsumerRules(s, body.spec, null);
    const r = { uid: newUID(kind), name: body.name, kind, formUrl: body.formUrl, spec: body.spec, state: "creating", generation: 1, createTime: now(), updateTime: now() };
    if (kind === "version") r.secrets = (body.privateInputs || {}).secrets;
    s.res.set(r.uid, r);
    const op = newOp(s, "create", r, key);
    run(s, op, r, () => s.res.delete(r.uid));
    return { op };
  });
  return accepted(res, s, out.replay || out.op);
}

async function updateResource(s, req, res, r, body) {
  if (typeOf(body) !== "object") throw new Problem(400, "invalid_request", "the body must be a JSON object");
  const envErrs = validate(loadSchema("update-resource-request.json"), body, "", []);
  if (envErrs.length) throw new Problem(400, "invalid_request", envErrs.map((e) => `${e.pointer} ${e.message}`).join("; "), envErrs);
  const out = idempotent(s, req, res, body, (key) => {
    if (!r) throw new Problem(404, "not_found", "no such resource");
    const im = req.headers["if-match"];
    if (im && im !== etagOf(r)) throw new Problem(412, "precondition_failed", "If-Match does not match the resource's etag");
    checkSpec(r.kind, body.spec, body.privateInputs);
    const same = JSON.stringify(body.spec) === JSON.stringify(r.spec);
    if (r.kind === "version" && (!same || body.privateInputs !== undefined)) throw new Problem(422, "invalid_spec", "every field of a WorkerVersion is immutable", [{ pointer: "/spec", message: "immutable" }]);
    if (r.kind === "consumer") {
      if (body.spec.queue.resourceUid !== r.spec.queue.resourceUid) throw new Problem(422, "invalid_spec", "queue is immutable", [{ pointer: "/spec/queue", message: "immutable" }]);
      if (body.spec.worker.resourceUid !== r.spec.worker.resourceUid) throw new Problem(422, "invalid_spec", "worker is immutable", [{ pointer: "/spec/worker", message: "immutable" }]);
    }
    checkRefs(s, r.kind, body.spec);
    if (r.kind === "worker" && body.spec.version) {
      const v = s.res.get(body.spec.version.resourceUid);
      if (v.spec.worker.resourceUid !== r.uid) throw new Problem(422, "invalid_reference", "the version belongs to another worker", [{ pointer: "/spec/version/resourceUid", message: "another worker's" }]);
    }
    if (r.kind === "consumer") checkConsumerRules(s, body.spec, r.uid);
    busy(r);
    const op = newOp(s, "update", r, key);
    if (same) {
      finishOp(op, "succeeded", "none");
      return { op };
    }
    const before = { spec: r.spec, generation: r.generation, updateTime: r.updateTime };
    r.spec = body.spec;
    r.generation++;
    r.updateTime = now();
    r.state = "updating";
    run(s, op, r, () => Object.assign(r, before, { state: "active" }));
    return { op };
  });
  return accepted(res, s, out.replay || out.op);
}

async function deleteResource(s, req, res, r) {
  const out = idempotent(s, req, res, undefined, (key) => {
    if (!r) throw new Problem(404, "not_found", "no such resource");
    const im = req.headers["if-match"];
    if (im && im !== etagOf(r)) throw new Problem(412, "precondition_failed", "If-Match does not match the resource's etag");
    const d = dependents(s, r);
    if (d) throw new Problem(409, "dependency_conflict", `${d.name} refers to this resource`);
    busy(r);
    const op = newOp(s, "delete", r, key);
    r.state = "deleting";
    r.detaching = true;
    run(s, op, r, () => {
      r.state = "active";
      r.detaching = false;
    });
    return { op };
  });
  return accepted(res, s, out.replay || out.op);
}

async function getOperation(s, res, id, wait) {
  const op = s.ops.get(id);
  if (!op) throw new Problem(404, "not_found", "no such Operation");
  if (wait > 0 && !["succeeded", "failed"].includes(op.state)) {
    await new Promise((resolve) => {
      const t = setTimeout(resolve, wait * 1000);
      op.waiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }
  if (!["succeeded", "failed"].includes(op.state)) res.setHeader("Retry-After", "1");
  return opView(op);
}

async function invokeFetch(s, req, res, r, rest, query, body) {
  if (r.kind !== "worker") throw new Problem(404, "not_found", "only a ModuleWorker has a fetch route");
  if (!r.spec.version || !r.spec.handlers.includes("fetch")) throw new Problem(404, "not_found", "the worker has no selected version with a fetch handler");
  if (s.apply) await s.apply;
  if (!s.mf) throw new Problem(503, "backend_unavailable", "workerd is not running for this space");
  const headers = {};
  for (const [k, v] of Object.entries(req.headers)) if (!["host", "authorization", "connection", "content-length"].includes(k)) headers[k] = v;
  // Miniflare's entry worker routes a request to the worker this header
  // names; mf.getWorker(name).fetch would go through Miniflare's Node-side
  // proxy client instead, which takes seconds a call on a loaded machine.
  headers["MF-Route-Override"] = r.uid;
  const init = { method: req.method, headers, redirect: "manual" };
  if (!["GET", "HEAD"].includes(req.method)) init.body = body;
  let out;
  try {
    out = await s.mf.dispatchFetch("http://worker.invalid/" + rest + query, init);
  } catch (e) {
    throw new Problem(500, "worker_error", "the worker's fetch handler failed: " + e.message);
  }
  res.statusCode = out.status;
  out.headers.forEach((v, k) => {
    if (!["content-length", "transfer-encoding", "connection"].includes(k)) res.setHeader(k, v);
  });
  res.end(Buffer.from(await out.arrayBuffer()));
  return undefined;
}

// parseJSON reads a request body. A number written with a fraction or an
// exponent (5.0, 5e0) is kept as a string of its source, so the schema's
// integer check refuses it as the Host API requires, where plain JSON.parse
// would read 5.
function parseJSON(req, buf) {
  const ct = req.headers["content-type"] || "";
  if (!/^application\/json\s*(;|$)/i.test(ct)) throw new Problem(400, "invalid_request", "the body must be application/json");
  try {
    return JSON.parse(buf.toString("utf8"), (k, v, ctx) => (typeof v === "number" && ctx && /[.eE]/.test(ctx.source) ? ctx.source : v));
  } catch (e) {
    throw new Problem(400, "invalid_request", "the body is not JSON: " + e.message);
  }
}

const SPACE_RE = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;

async function route(req, res, requestId, body) {
  const u = new URL(req.url, "http://adapter.invalid");
  const p = u.pathname;
  if (req.method === "GET" && p === "/v2/openapi.json") {
    res.setHeader("Content-Type", "application/json");
    res.end(fs.readFileSync(path.join(repo, "gen/api/openapi.json")));
    return undefined;
  }
  if (req.method === "GET" && (p === "/healthz" || p === "/readyz")) return { status: "ok" };
  if (req.method === "GET" && p === "/v2/capabilities") {
    return { host: { name: "miniflare (takoform conformance adapter)", version: MINIFLARE_VERSION }, capabilities: [] };
  }
  const m = p.match(/^\/v2\/spaces\/([^/]+)(\/.*)$/);
  const auth = req.headers.authorization || "";
  const tok = auth.startsWith("Bearer ") ? auth.slice(7) : "";
  const okTok = tok.length === adminToken.length && crypto.timingSafeEqual(Buffer.from(tok), Buffer.from(adminToken));
  if (m && !SPACE_RE.test(decodeURIComponent(m[1]))) throw new Problem(400, "invalid_request", `space ${m[1]} is not a valid space name`);
  if (!okTok) throw new Problem(401, "unauthenticated", "a valid bearer token is required");
  if (!m) throw new Problem(404, "not_found", "no such route");
  const s = space(m[1]);
  const rest = m[2];
  let mm;
  if (rest === "/resources") {
    if (req.method === "POST") return createResource(s, req, res, parseJSON(req, body));
    if (req.method === "GET") {
      const form = u.searchParams.get("formUrl");
      const items = [...s.res.values()].filter((r) => !form || r.formUrl === form).map((r) => view(s, r, u.searchParams.get("view") === "full"));
      return { items };
    }
  }
  if ((mm = rest.match(/^\/resources\/([^/]+)\/fetch(\/.*)?$/))) {
    const r = s.res.get(mm[1]);
    if (!r) throw new Problem(404, "not_found", "no such resource");
    return invokeFetch(s, req, res, r, (mm[2] || "/").slice(1), u.search, body);
  }
  if ((mm = rest.match(/^\/resources\/([^/]+)\/logs$/)) && req.method === "GET") {
    if (!s.res.get(mm[1])) throw new Problem(404, "not_found", "no such resource");
    return { items: [] };
  }
  if ((mm = rest.match(/^\/resources\/([^/]+)$/))) {
    const r = s.res.get(mm[1]);
    // a PUT or DELETE replay answers even after the resource is gone
    if (!r && !((req.method === "PUT" || req.method === "DELETE") && req.headers["idempotency-key"])) throw new Problem(404, "not_found", "no such resource");
    if (req.method === "GET") {
      if (!r) throw new Problem(404, "not_found", "no such resource");
      res.setHeader("ETag", etagOf(r));
      return view(s, r);
    }
    if (req.method === "PUT") return updateResource(s, req, res, r, parseJSON(req, body));
    if (req.method === "DELETE") {
      if (u.searchParams.has("ifIdle")) throw new Problem(400, "invalid_request", "ifIdle is a host extension this host does not serve");
      return deleteResource(s, req, res, r);
    }
  }
  if (rest === "/operations" && req.method === "GET") {
    const state = u.searchParams.get("state");
    const ruid = u.searchParams.get("resourceUid");
    const items = [...s.ops.values()].filter((o) => (!state || o.state === state) && (!ruid || o.resourceUid === ruid)).reverse().map(opView);
    return { items };
  }
  if ((mm = rest.match(/^\/operations\/([^/]+)$/)) && req.method === "GET") {
    const w = u.searchParams.get("wait");
    if (w !== null && !/^(0|[1-9][0-9]*)$/.test(w)) throw new Problem(400, "invalid_request", "wait must be an integer 0..60");
    return getOperation(s, res, decodeURIComponent(mm[1]), Math.min(Number(w || 0), 60));
  }
  throw new Problem(404, "not_found", "no such route");
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const given = req.headers["x-request-id"];
    const requestId = typeof given === "string" && /^[\x21-\x7e]{1,128}$/.test(given) ? given : crypto.randomUUID();
    res.setHeader("X-Request-Id", requestId);
    try {
      const out = await route(req, res, requestId, Buffer.concat(chunks));
      if (out !== undefined) {
        res.setHeader("Content-Type", "application/json");
        res.end(JSON.stringify(out));
      }
    } catch (e) {
      const p = e instanceof Problem ? e : new Problem(500, "backend_unavailable", "the adapter failed: " + e.message);
      if (!(e instanceof Problem)) console.error("adapter:", e);
      if (!res.headersSent) {
        res.statusCode = p.status;
        res.setHeader("Content-Type", "application/problem+json");
        res.end(JSON.stringify(problemBody(p, new URL(req.url, "http://x").pathname, requestId)));
      } else res.end();
    }
  });
});

// Longer than the kit's client keeps idle connections, so a request is never
// sent on a connection the adapter is closing (Node's default is 5 s).
server.keepAliveTimeout = 130_000;
server.headersTimeout = 131_000;

const [lhost, lport] = [listen.slice(0, listen.lastIndexOf(":")), Number(listen.slice(listen.lastIndexOf(":") + 1))];
server.listen(lport, lhost, () => {
  const a = server.address();
  console.log(`READY http://${a.address}:${a.port}`);
});

async function stop() {
  server.close();
  await Promise.allSettled([...spaces.values()].filter((s) => s.mf).map((s) => s.mf.dispose()));
  process.exit(0);
}
if (process.argv.includes("--stop-on-eof")) {
  process.stdin.resume();
  process.stdin.on("end", stop);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
