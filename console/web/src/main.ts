import { ApiError, FORMS, Kind, Operation, Page, Problem, Resource, call, enc, formName, hostRoutes, kindOf, listAll, session, setUnauthenticatedHandler, spacePath } from "./api";
import { Child, ago, append, badge, bytes, dl, duration, h, replace } from "./dom";
import { HistoryPoint, QueueCharts } from "./chart";
import { highlight } from "./code";
import { messageDetail, previewLine } from "./message";
import { deadLetterGroups } from "./deadletters";

// ---- routing: #/login, #/s/{space}, #/s/{space}/r/{uid}, #/s/{space}/ops

type Cleanup = () => void;
let cleanups: Cleanup[] = [];
function onLeave(f: Cleanup) { cleanups.push(f); }
let generation = 0;

const main = () => document.getElementById("main") as HTMLElement;

setUnauthenticatedHandler((p) => {
  session.token = null;
  loginNotice = p;
  location.hash = "#/login";
});
let loginNotice: Problem | null = null;

function link(href: string, ...children: Child[]) { return h("a", { href }, ...children); }
function resHref(space: string, uid: string) { return "#/s/" + enc(space) + "/r/" + enc(uid); }

export function problemBox(e: unknown): HTMLElement {
  const p: Problem = e instanceof ApiError ? e.problem : { title: "The console failed", status: 0, detail: String(e) };
  return h("div", { class: "problem", role: "alert" },
    h("strong", null, p.title),
    " ", h("span", { class: "muted" }, [p.status ? String(p.status) : "", p.code ? " " + p.code : ""].join("")),
    p.detail ? h("p", null, p.detail) : null,
    p.errors?.length ? h("ul", null, p.errors.map((x) => h("li", null, [x.pointer, x.detail ?? x.message ?? JSON.stringify(x)].filter(Boolean).join(": ")))) : null,
    p.requestId ? h("p", { class: "muted" }, "request " + p.requestId) : null);
}

// Spaces this browser has opened (names only, never a token), offered by
// the space pickers: the Host API has no route listing spaces.
const SPACES = "takohost.console.spaces";
function knownSpaces(): string[] {
  try { const v = JSON.parse(localStorage.getItem(SPACES) ?? "[]"); return Array.isArray(v) ? v.filter((x) => typeof x === "string") : []; } catch { return []; }
}
function rememberSpace(space: string) {
  try { localStorage.setItem(SPACES, JSON.stringify([space, ...knownSpaces().filter((x) => x !== space)].slice(0, 20))); } catch { /* storage off */ }
}
// spaceList is a datalist of the spaces this browser opened and, for a
// token that may read the principals (an admin), the spaces their grants
// name.
function spaceList(id: string): HTMLDataListElement {
  const list = h("datalist", { id }, knownSpaces().map((x) => h("option", { value: x })));
  if (session.token) {
    call<{ items: { grants?: { space: string }[] }[] }>("GET", "/v2/principals", undefined, { quiet401: true }).then((page) => {
      const have = new Set(knownSpaces());
      for (const p of page.items ?? []) for (const g of p.grants ?? []) {
        if (g.space !== "*" && !have.has(g.space)) { have.add(g.space); list.append(h("option", { value: g.space })); }
      }
    }).catch(() => { /* not an admin: the remembered spaces only */ });
  }
  return list;
}

function nav(space: string | null) {
  const n = document.getElementById("nav")!;
  if (!session.token) { replace(n); return; }
  const input = h("input", { id: "space-switch", name: "space", value: space ?? "", autocomplete: "off", required: true, list: "space-options", pattern: "[a-z0-9]([a-z0-9\\-]*[a-z0-9])?" });
  replace(n,
    space ? link("#/s/" + enc(space), "Resources") : null,
    space ? link("#/s/" + enc(space) + "/ops", "Operations") : null,
    h("span", { class: "spacer" }),
    h("form", { onsubmit: (ev: Event) => { ev.preventDefault(); location.hash = "#/s/" + enc(input.value.trim()); } },
      h("label", { for: "space-switch" }, "Space"), input, spaceList("space-options"), h("button", { type: "submit", class: "secondary" }, "Open")),
    h("button", { type: "button", class: "secondary", onclick: () => { session.token = null; location.hash = "#/login"; } }, "Sign out"));
}

async function render() {
  cleanups.forEach((f) => f());
  cleanups = [];
  const gen = ++generation;
  const root = main();
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (!session.token || parts[0] === "login" || parts[0] === "") {
    if (session.token && parts[0] === "" && session.space) { location.hash = "#/s/" + enc(session.space); return; }
    nav(null);
    return loginView(root);
  }
  if (parts[0] !== "s" || !parts[1]) { location.hash = "#/login"; return; }
  const space = parts[1];
  session.space = space;
  rememberSpace(space);
  nav(space);
  replace(root, h("p", { class: "muted" }, "Loading…"));
  try {
    if (parts.length === 2) await resourcesView(root, space, gen);
    else if (parts[2]?.startsWith("ops")) await operationsView(root, space, gen, new URLSearchParams(parts[2].split("?")[1] ?? "").get("resource") ?? "");
    else if (parts[2] === "r" && parts[3]) await resourceView(root, space, parts[3], gen);
    else replace(root, h("h1", null, "Not found"), h("p", null, "No console page at this address."));
  } catch (e) {
    if (gen === generation) replace(root, problemBox(e));
  }
  if (gen === generation) {
    const h1 = root.querySelector("h1");
    document.title = (h1?.textContent ? h1.textContent + " · " : "") + "takohost console";
  }
}

window.addEventListener("hashchange", () => { void render().then(() => main().focus()); });
window.addEventListener("DOMContentLoaded", () => { void render(); });

// ---- login

function loginView(root: HTMLElement) {
  const token = h("input", { id: "token", type: "password", autocomplete: "off", required: true });
  const space = h("input", { id: "space", autocomplete: "off", required: true, value: session.space ?? knownSpaces()[0] ?? "", list: "login-spaces", "aria-describedby": "space-hint", pattern: "[a-z0-9]([a-z0-9\\-]*[a-z0-9])?" });
  const out = h("div", { "aria-live": "polite" });
  if (loginNotice) { out.append(problemBox(new ApiError(loginNotice))); loginNotice = null; }
  const form = h("form", {
    class: "login", onsubmit: async (ev: Event) => {
      ev.preventDefault();
      replace(out);
      try {
        await call("GET", spacePath(space.value.trim(), "/resources?limit=1"), undefined, { token: token.value.trim(), quiet401: true });
        session.token = token.value.trim();
        location.hash = "#/s/" + enc(space.value.trim());
      } catch (e) {
        replace(out, problemBox(e));
      }
    },
  },
    h("label", { for: "token" }, "Token"), token,
    h("label", { for: "space" }, "Space"), space, spaceList("login-spaces"),
    h("p", { id: "space-hint", class: "hint" }, "The space your resources are in: the ", h("code", null, "space:"), " of your project's ",
      h("code", null, "tako.yaml"), " (the README's walkthrough uses ", h("code", null, "demo"), "). Lowercase letters, digits and hyphens. Spaces you opened in this browser are offered."),
    h("button", { type: "submit" }, "Sign in"));
  replace(root,
    h("h1", null, "Sign in"),
    h("p", null, "Enter a Host API token (the admin token is in the host's data directory, ", h("code", null, "admin-token"), "). It is kept in this tab only (sessionStorage) and sent as an Authorization header; it never appears in an address."),
    form, out);
  token.focus();
}

// ---- resources of a space, one server-side page at a time

const TABS: [string, string, string | null][] = [
  ["all", "All", null], ["queues", "Queues", FORMS.queue], ["workers", "Workers", FORMS.worker],
  ["versions", "Versions", FORMS.version], ["consumers", "Consumers", FORMS.consumer],
];

async function resourcesView(root: HTMLElement, space: string, gen: number) {
  const tab = sessionStorage.getItem("takohost.console.tab") ?? "queues";
  const current = TABS.find((t) => t[0] === tab) ?? TABS[1];
  const tokens: (string | undefined)[] = [undefined];
  let pageNo = 0;
  const body = h("div");
  const tabs = h("div", { class: "tabs", role: "group", "aria-label": "Resource kind" }, TABS.map(([id, label]) =>
    h("button", { type: "button", "aria-pressed": id === current[0] ? "true" : "false", onclick: () => { sessionStorage.setItem("takohost.console.tab", id); void render(); } }, label)));
  replace(root, h("div", { class: "crumbs" }, "Space ", h("strong", null, space)), h("h1", null, space + ": " + current[1].toLowerCase()), tabs, body);
  const load = async () => {
    const q = new URLSearchParams({ limit: "50" });
    if (current[2]) q.set("formUrl", current[2]);
    const t = tokens[pageNo];
    if (t) q.set("pageToken", t);
    let page: Page<Resource>;
    try {
      page = await call<Page<Resource>>("GET", spacePath(space, "/resources?" + q));
    } catch (e) { replace(body, problemBox(e)); return; }
    if (gen !== generation) return;
    tokens[pageNo + 1] = page.nextPageToken;
    const rows = page.items.map((r) => h("tr", null,
      h("td", null, link(resHref(space, r.uid), r.name)),
      h("td", null, formName(r.formUrl)),
      h("td", { class: "state", "data-uid": r.uid }, badge(r.state)),
      h("td", null, observedSummary(r)),
      h("td", null, h("time", { datetime: r.updateTime, title: r.updateTime }, ago(Date.parse(r.updateTime))))));
    replace(body,
      page.items.length === 0 && pageNo === 0 ? h("p", null, "No " + current[1].toLowerCase() + " in this space.") :
        h("table", null, h("caption", { class: "visually-hidden" }, current[1] + " of " + space),
          h("thead", null, h("tr", null, ["Name", "Form", "State", "Observed", "Updated"].map((x) => h("th", { scope: "col" }, x)))),
          h("tbody", null, rows)),
      pager(pageNo, !!page.nextPageToken, page.items.length, (d) => { pageNo += d; void load(); }));
    // A queue's delivery state is kept beside its spec (spec/peers.md
    // §Active and inactive delivery), not in the listed resource: read it
    // for the page's active queues, so that a paused one says so.
    for (const r of page.items) {
      if (kindOf(r.formUrl) !== "queue" || r.state !== "active") continue;
      call<{ active: boolean }>("GET", spacePath(space, "/resources/" + enc(r.uid) + "/delivery")).then((d) => {
        const td = body.querySelector(`td.state[data-uid="${CSS.escape(r.uid)}"]`);
        if (td && gen === generation) replace(td, stateBadge(r, d.active));
      }).catch(() => { /* keep the resource's state */ });
    }
  };
  await load();
}

// stateBadge is a resource's state, except that an active queue whose
// delivery is paused says paused (its lifecycle state stays in the title).
function stateBadge(r: Resource, deliveryActive: boolean | null): HTMLElement {
  if (kindOf(r.formUrl) === "queue" && r.state === "active" && deliveryActive === false) {
    const b = badge("paused");
    b.title = "The queue is active and accepts sends; its delivery is paused: no batch starts.";
    return b;
  }
  return badge(r.state);
}

function pager(pageNo: number, hasNext: boolean, count: number, go: (d: number) => void): HTMLElement {
  return h("div", { class: "pager", role: "navigation", "aria-label": "Pages" },
    h("button", { type: "button", class: "secondary", disabled: pageNo === 0, onclick: () => go(-1) }, "Previous page"),
    h("span", null, "Page " + (pageNo + 1) + " · " + count + " shown"),
    h("button", { type: "button", class: "secondary", disabled: !hasNext, onclick: () => go(1) }, "Next page"));
}

function observedSummary(r: Resource): string {
  const o = r.observed ?? {};
  switch (kindOf(r.formUrl)) {
    case "queue": return o.messageCount !== undefined ? o.messageCount + " messages" : "";
    case "consumer": return o.consumerAttached ? "attached" : o.consumerAttached === false ? "not attached" : "";
    case "worker": return (r.spec?.handlers ?? []).join(", ");
    case "version": return (r.spec?.modules ?? []).length + " modules";
  }
  return "";
}

// ---- references: outgoing from the spec, incoming found by reading the
// space's consumers, versions and workers (never its queues: a queue
// references nothing, and a space may hold 10 000 of them).

interface Ref { label: string; uid: string; name?: string; kind?: Kind }

async function references(space: string, r: Resource): Promise<{ out: Ref[]; in: Ref[]; complete: boolean; consumers: Resource[]; versions: Resource[] }> {
  const out: Ref[] = [];
  const s = r.spec ?? {};
  const kind = kindOf(r.formUrl);
  if (kind === "consumer") {
    if (s.queue) out.push({ label: "consumes queue", uid: s.queue.resourceUid });
    if (s.worker) out.push({ label: "feeds worker", uid: s.worker.resourceUid });
    if (s.deadLetterQueue) out.push({ label: "dead-letters to", uid: s.deadLetterQueue.resourceUid });
  } else if (kind === "worker") {
    if (s.version) out.push({ label: "selected version", uid: s.version.resourceUid });
  } else if (kind === "version") {
    if (s.worker) out.push({ label: "version of worker", uid: s.worker.resourceUid });
    for (const b of s.queueProducerBindings ?? []) out.push({ label: "binds queue as env." + b.name, uid: b.resource.resourceUid });
  }
  const inc: Ref[] = [];
  let complete = true;
  let consumers: Resource[] = [], versions: Resource[] = [];
  if (kind === "queue" || kind === "worker") {
    const c = await listAll(space, FORMS.consumer);
    complete &&= c.complete;
    consumers = c.items;
    for (const x of c.items) {
      const xs = x.spec ?? {};
      if (xs.queue?.resourceUid === r.uid) inc.push({ label: "consumed by", uid: x.uid, name: x.name, kind: "consumer" });
      if (xs.deadLetterQueue?.resourceUid === r.uid) inc.push({ label: "dead-letter queue of", uid: x.uid, name: x.name, kind: "consumer" });
      if (xs.worker?.resourceUid === r.uid) inc.push({ label: "fed by consumer", uid: x.uid, name: x.name, kind: "consumer" });
    }
    const v = await listAll(space, FORMS.version);
    complete &&= v.complete;
    for (const x of v.items) {
      const xs = x.spec ?? {};
      if (xs.worker?.resourceUid === r.uid) { versions.push(x); inc.push({ label: "version", uid: x.uid, name: x.name, kind: "version" }); }
      for (const b of xs.queueProducerBindings ?? []) {
        if (b.resource?.resourceUid === r.uid) inc.push({ label: "sent to by version (env." + b.name + ")", uid: x.uid, name: x.name, kind: "version" });
      }
    }
  } else if (kind === "version") {
    const w = await listAll(space, FORMS.worker);
    complete &&= w.complete;
    for (const x of w.items) if (x.spec?.version?.resourceUid === r.uid) inc.push({ label: "selected by worker", uid: x.uid, name: x.name, kind: "worker" });
  }
  // Name the outgoing references (one GET each; a spec holds a few).
  await Promise.all(out.map(async (o) => {
    try { const x = await call<Resource>("GET", spacePath(space, "/resources/" + enc(o.uid))); o.name = x.name; o.kind = kindOf(x.formUrl); }
    catch { o.name = undefined; }
  }));
  return { out, in: inc, complete, consumers, versions };
}

function refList(space: string, refs: Ref[], empty: string): HTMLElement {
  if (refs.length === 0) return h("p", { class: "muted" }, empty);
  return h("ul", null, refs.map((x) => h("li", null, x.label + " ",
    x.name ? link(resHref(space, x.uid), x.name) : h("span", null, x.uid, " ", h("em", null, "(missing)")),
    x.kind ? h("span", { class: "muted" }, " · " + x.kind) : null)));
}

// ---- one resource

async function resourceView(root: HTMLElement, space: string, uid: string, gen: number) {
  const r = await call<Resource>("GET", spacePath(space, "/resources/" + enc(uid)));
  if (gen !== generation) return;
  const kind = kindOf(r.formUrl);
  const refsBox = h("div", null, h("p", { class: "muted" }, "Finding references…"));
  const specific = h("div");
  const stateEl = h("span", { id: "resource-state" }, badge(r.state));
  // The resource, its raw observed document and its references; folded on
  // a queue's page, whose own figures come first.
  const about = h("details", { class: "fold", id: "about", open: kind !== "queue" },
    h("summary", null, h("h2", { id: "h-about" }, "Resource and references")),
    h("div", { class: "cols" },
      h("section", { "aria-label": "Resource" },
        dl([["Form", formName(r.formUrl)], ["UID", r.uid], ["State", r.state], ["Generation", r.generation],
          ["Created", r.createTime], ["Updated", r.updateTime]]),
        h("details", { class: "fold", id: "observed" }, h("summary", null, "Observed (raw JSON)"),
          h("pre", { tabindex: "0", "aria-label": "Observed" }, JSON.stringify(r.observed, null, 2)))),
      h("section", { "aria-labelledby": "h-refs" }, h("h3", { id: "h-refs" }, "References"), refsBox)));
  replace(root,
    h("div", { class: "crumbs" }, link("#/s/" + enc(space), space), " / ", kind),
    h("h1", null, r.name, " ", stateEl),
    kind === "queue" ? specific : [about, specific]);
  // On a queue's page the folded sections go below its charts (queueView).
  const folds = h("div", { class: "folds" }, kind === "queue" ? about : null);
  const refs = await references(space, r).catch((e) => { replace(refsBox, problemBox(e)); return null; });
  if (gen !== generation) return;
  if (refs) {
    replace(refsBox,
      h("h3", null, "From this " + kind), refList(space, refs.out, "None."),
      h("h3", null, "To this " + kind), refList(space, refs.in, "Nothing in this space refers to it."),
      refs.complete ? null : h("p", { class: "notice" }, "Only the first 5 000 consumers, versions and workers of the space were read for references."));
  }
  const routes = await hostRoutes();
  if (routes.has("GET /v2/spaces/{space}/operations")) {
    const box = h("section", { "aria-labelledby": "h-ops" });
    if (kind === "queue") folds.append(h("details", { class: "fold", id: "ops-fold" }, h("summary", null, h("h2", { id: "h-ops-fold" }, "Operations")), box));
    else specific.before(box);
    try {
      const page = await call<Page<Operation>>("GET", spacePath(space, "/operations?limit=5&resourceUid=" + enc(r.uid)));
      if (gen !== generation) return;
      replace(box, h("h2", { id: "h-ops" }, "Operations"),
        page.items.length ? opTable(space, page.items) : h("p", { class: "muted" }, "No recent Operation."),
        link("#/s/" + enc(space) + "/ops?resource=" + enc(r.uid), "All Operations of " + r.name));
    } catch (e) { replace(box, h("h2", { id: "h-ops" }, "Operations"), problemBox(e)); }
  }
  if (kind === "queue") await queueView(specific, space, r, refs?.consumers.filter((c) => c.spec?.queue?.resourceUid === r.uid) ?? [],
    !!refs?.consumers.some((c) => c.spec?.deadLetterQueue?.resourceUid === r.uid), gen, (active) => replace(stateEl, stateBadge(r, active)), folds);
  else if (kind === "worker") await workerView(specific, space, r, refs?.versions ?? [], gen);
  else if (kind === "version") versionView(specific, space, r, null);
  else if (kind === "consumer") append(specific, [h("h2", null, "Settings"), consumerSettings(space, r)]);
}

function consumerSettings(space: string, c: Resource): HTMLElement {
  const s = c.spec ?? {};
  let dlq: Child = "none (exhausted messages are discarded)";
  if (s.deadLetterQueue) {
    // Named by the queue's name (one GET); a deleted one keeps its UID.
    const uid = s.deadLetterQueue.resourceUid;
    const a = link(resHref(space, uid), uid);
    a.classList.add("dlq");
    call<Resource>("GET", spacePath(space, "/resources/" + enc(uid)))
      .then((q) => { a.textContent = q.name; a.title = uid; }).catch(() => a.after(" (gone)"));
    dlq = a;
  }
  return dl([["Batch size", s.maxBatchSize], ["Batch timeout", s.maxBatchTimeoutSeconds + " s"], ["Concurrency", s.maxConcurrency],
    ["Retries", s.maxRetries], ["Retry delay", s.retryDelaySeconds + " s"], ["Dead-letter queue", dlq]]);
}

// ---- queue

interface Stats {
  queueUid: string; messages: number; bytes: number; oldestAgeSeconds: number; batchesInFlight: number; active: boolean;
  batches?: { id: string; consumerUid: string; messages: number; formTimeMillis: number; state: string }[];
  sinceStart?: { accepted: number; delivered: number; acknowledged: number; retried: number; deadLettered: number; discarded: number; expired: number };
  byState: { available: number; delayed: number; retryWaiting: number; inFlight: number; removing: number };
}

// canWrite asks the host whether this token may change this resource,
// changing nothing: an update to the spec it has now, with an If-Match no
// ETag ever equals, is refused 403 for a principal that may not write this
// resource's Form and 412 for one that may (the host checks the permission
// before the precondition, and both before anything is written).
async function canWrite(space: string, r: Resource): Promise<{ ok: boolean; reason: string }> {
  try {
    await call("PUT", spacePath(space, "/resources/" + enc(r.uid)), { spec: r.spec }, { headers: { "If-Match": '"console-permission-probe"' } });
    return { ok: true, reason: "" };
  } catch (e) {
    const p = (e as ApiError).problem;
    if (p?.status === 403) return { ok: false, reason: "Your token may not change this " + kindOf(r.formUrl) + ": " + (p.detail ?? p.title) + "." };
    return { ok: true, reason: "" };
  }
}

async function queueView(root: HTMLElement, space: string, q: Resource, consumers: Resource[], isDLQ: boolean, gen: number, onDelivery: (active: boolean) => void, about: HTMLElement) {
  const statsBox = h("div", { class: "grid", "aria-live": "off" });
  const statsErr = h("div");
  const chartBox = h("div", { class: "chart", id: "backlog-chart", role: "img", "aria-label": "Backlog over the last hour" });
  const every = h("span", { id: "sample-every" }, "2 s");
  const batchesBox = h("div", { id: "batches" });
  const consumerName = new Map(consumers.map((c) => [c.uid, c.name]));
  const ratesBox = h("div", { class: "chart", id: "rates-chart", role: "img", "aria-label": "Messages per second over the last hour" });
  const actions = h("div", { class: "actions" });
  const actionOut = h("div", { "aria-live": "polite" });
  const sendBox = h("div", { id: "send-message" });
  const groupsBox = h("div", { id: "dead-letter-causes" });
  const msgs = h("div");
  replace(root,
    h("section", { class: "delivery", "aria-label": "Delivery" }, actions, actionOut),
    h("h2", { class: "visually-hidden" }, "Messages now"), statsErr, statsBox,
    h("h2", null, "Backlog, last hour"),
    h("p", { class: "muted small" }, "Before this page opened: the host's samples, every 10 s. Since: this page's, every ", every, "."),
    h("div", { class: "cols charts" },
      h("div", null, h("h3", { id: "h-backlog" }, "Messages by state"), chartBox),
      h("div", null, h("h3", { id: "h-rates" }, "Messages per second"), ratesBox)),
    isDLQ ? [h("h2", null, "Dead letters by cause"), groupsBox] : null,
    h("h2", null, "Send a message"), sendBox,
    h("details", { class: "fold", id: "consumer-fold" },
      h("summary", null, h("h2", null, consumers.length === 0 ? "Consumer: none" : "Consumer: " + consumers.map((c) => c.name).join(", "))),
      consumers.length === 0 ? h("p", { class: "muted" }, "No consumer reads this queue.") :
        h("div", null, consumers.map((c) => h("div", null, h("h3", null, link(resHref(space, c.uid), c.name)), consumerSettings(space, c))))),
    about,
    h("h2", null, "Batches in flight"), batchesBox,
    h("h2", null, "Browse messages"), msgs);
  const chart = new QueueCharts(chartBox, ratesBox);
  onLeave(() => chart.destroy());
  // The hour before this page: the host's own samples (history route).
  const routesNow = await hostRoutes();
  if (routesNow.has("GET /v2/spaces/{space}/resources/{uid}/history")) {
    try {
      const hist = await call<{ points: HistoryPoint[] }>("GET", spacePath(space, "/resources/" + enc(q.uid) + "/history"));
      if (gen !== generation) return;
      chart.history(hist.points);
    } catch (e) { if (gen === generation) replace(statsErr, problemBox(e)); }
  }
  let last: Stats | null = null;
  // The host counts a queue's messages by state by walking it (linear in
  // the queue), so the console samples every 2 s, or less often where a
  // sample takes long (a queue of millions): at most a twentieth of the
  // time in the stats route for one open tab.
  let interval = 2000;
  const tick = async () => {
    try {
      const t0 = performance.now();
      const s = await call<Stats>("GET", spacePath(space, "/resources/" + enc(q.uid) + "/stats"));
      interval = Math.min(30000, Math.max(2000, Math.round((performance.now() - t0) * 20 / 1000) * 1000));
      every.textContent = interval / 1000 + " s";
      if (gen !== generation) return;
      last = s;
      onDelivery(s.active);
      replace(statsErr);
      chart.add(Date.now() / 1000, s);
      replace(statsBox, ...[
        ["Messages", s.messages], ["Available", s.byState.available], ["In flight", s.byState.inFlight],
        ["Retry waiting", s.byState.retryWaiting], ["Delayed", s.byState.delayed], ["Removing", s.byState.removing],
        ["Batches in flight", s.batchesInFlight], ["Oldest", duration(s.oldestAgeSeconds)], ["Bytes", bytes(s.bytes)],
        ["Delivery", s.active ? "delivering" : "paused"],
      ].map(([k, v]) => h("div", { class: "stat", "data-stat": String(k) }, h("div", { class: "k" }, String(k)), h("div", { class: "v" }, String(v)))));
      renderActions();
      const bs = s.batches ?? [];
      replace(batchesBox, bs.length === 0 ? h("p", { class: "muted" }, s.batches ? "None." : "This host's stats do not list batches.") :
        h("table", null, h("caption", { class: "visually-hidden" }, "Batches in flight"),
          h("thead", null, h("tr", null, ["Batch", "Consumer", "Messages", "State", "Formed"].map((x) => h("th", { scope: "col" }, x)))),
          h("tbody", null, bs.map((b) => h("tr", { "data-batch-state": b.state },
            h("td", null, h("code", null, b.id)),
            h("td", null, link(resHref(space, b.consumerUid), consumerName.get(b.consumerUid) ?? b.consumerUid)),
            h("td", { class: "num" }, b.messages), h("td", null, b.state),
            h("td", null, ago(b.formTimeMillis)))))),
        s.batchesInFlight > bs.length ? h("p", { class: "muted" }, (s.batchesInFlight - bs.length) + " more not listed.") : null);
    } catch (e) { if (gen === generation) replace(statsErr, problemBox(e)); }
  };
  let timer = 0;
  const loop = async () => { await tick(); if (gen === generation) timer = window.setTimeout(() => void loop(), interval); };
  timer = window.setTimeout(() => void loop(), interval);
  onLeave(() => clearTimeout(timer));
  const [perm, routes] = await Promise.all([canWrite(space, q), hostRoutes()]);
  const base = "/v2/spaces/{space}/resources/{uid}";
  // Purge and redrive (spec/peers.md), offered where the host's API has
  // them; redrive only on a queue that is some consumer's dead-letter queue.
  const extra: { label: string; path: string; body: unknown; confirm: string; danger: boolean }[] = [];
  if (routes.has("POST " + base + "/purge")) {
    extra.push({ label: "Purge", path: "/purge", body: undefined, danger: true,
      confirm: "Remove every message " + q.name + " holds? Messages held by a running batch stay with it. This cannot be undone." });
  }
  if (isDLQ && routes.has("POST " + base + "/redrive")) {
    extra.push({ label: "Redrive", path: "/redrive", body: {}, danger: false,
      confirm: "Move " + q.name + "'s dead-lettered messages back to the queues they came from (100 a second)?" });
  }
  let rendered = "";
  const renderActions = () => {
    const active = last?.active;
    // Rebuilt only when what it shows changes, so that focus stays put
    // while the stats refresh.
    const key = String(active) + String(last === null);
    if (key === rendered) return;
    rendered = key;
    const hadFocus = actions.contains(document.activeElement) ? (document.activeElement as HTMLElement).textContent : null;
    const btn = (label: string, danger: boolean, run: () => void) => h("button", {
      type: "button", class: danger ? "danger" : "", disabled: !perm.ok || last === null,
      "aria-describedby": perm.ok ? null : "action-reason", onclick: run,
    }, label);
    replace(actions,
      active === false
        ? btn("Resume delivery", false, () => confirmThen("Resume delivery of " + q.name + "?", () => setDelivery(true)))
        : btn("Pause delivery", false, () => confirmThen("Pause delivery of " + q.name + "? Messages stay on the queue; no new batch starts.", () => setDelivery(false))),
      extra.map((x) => btn(x.label, x.danger, () => confirmThen(x.confirm, () => runExtra(x.path, x.body, x.label)))),
      perm.ok ? null : h("span", { id: "action-reason", class: "reason" }, perm.reason),
      routes.has("POST " + base + "/purge") ? null : h("span", { class: "reason" }, "Purge and redrive: this host's API has no such route."));
    if (hadFocus) (Array.from(actions.querySelectorAll("button")).find((b) => b.textContent === hadFocus) ?? actions.querySelector("button"))?.focus();
  };
  const setDelivery = async (active: boolean) => {
    try {
      await call("PUT", spacePath(space, "/resources/" + enc(q.uid) + "/delivery"), { active });
      replace(actionOut, h("p", { class: "notice", role: "status" }, active ? "Delivery resumed." : "Delivery paused."));
      await tick();
    } catch (e) { replace(actionOut, problemBox(e)); }
  };
  const runExtra = async (path: string, body: unknown, label: string) => {
    try {
      const op = await call<Operation>("POST", spacePath(space, "/resources/" + enc(q.uid) + path), body);
      rememberOp(space, op.id);
      await followOperation(actionOut, space, op, label, () => { void tick(); });
      await tick();
      await loadPage();
    } catch (e) { replace(actionOut, problemBox(e)); }
  };
  renderActions();
  const loadGroups = async () => {
    if (!isDLQ || !routes.has("GET " + base + "/deadletters/groups")) return;
    await deadLetterGroups(groupsBox, space, q.uid, { ok: perm.ok && routes.has("POST " + base + "/redrive"), reason: perm.reason }, (g, dryRun) => {
      const run = () => void runExtra("/redrive", { group: g.fingerprint, dryRun }, dryRun ? "Dry run of group " + g.fingerprint : "Redrive of group " + g.fingerprint).then(loadGroups);
      if (dryRun) run();
      else confirmThen("Move the " + g.count + " dead letters of " + q.name + " that failed with \u201c" + g.title + "\u201d back to the queues they came from (100 a second)?", run);
    }, problemBox);
  };
  await loadGroups();
  sendForm(space, q, perm, routes.has("POST " + base + "/messages"), sendBox, async () => { await tick(); await loadPage(); });
  await tick();

  // The message browser: server-side pages (limit 20), oldest accepted first.
  const tokens: (string | undefined)[] = [undefined];
  let pageNo = 0;
  const table = h("div");
  const detail = h("div", { id: "message-detail" });
  append(msgs, [table, detail]);
  let openId: string | null = null;
  const loadPage = async () => {
    const qs = new URLSearchParams({ limit: "20" });
    if (tokens[pageNo]) qs.set("pageToken", tokens[pageNo]!);
    try {
      const page = await call<Page<any>>("GET", spacePath(space, "/resources/" + enc(q.uid) + "/messages?" + qs));
      if (gen !== generation) return;
      tokens[pageNo + 1] = page.nextPageToken;
      // An open message no longer on the page (acknowledged, purged,
      // redriven, or another page) is closed.
      if (openId !== null && !page.items.some((m) => m.id === openId)) { openId = null; replace(detail); }
      const rows = page.items.map((m) => {
        const open = h("button", { type: "button", class: "secondary", "aria-label": "Open message " + m.id, onclick: () => {
          table.querySelectorAll("tr.selected").forEach((x) => x.classList.remove("selected"));
          tr.classList.add("selected");
          openId = m.id;
          replace(detail, messageDetail(m, (uid) => resHref(space, uid)));
          (detail.querySelector("h3") as HTMLElement | null)?.focus();
        } }, "Open");
        const tr = h("tr", { "data-message-id": m.id, class: m.id === openId ? "selected" : null },
          h("td", null, open),
          h("td", null, h("code", null, m.id)),
          h("td", null, m.state), h("td", { class: "num" }, m.attempts),
          h("td", null, ago(m.acceptTimeMillis)), h("td", { class: "num" }, bytes(m.size)),
          h("td", null, previewLine(m)));
        return tr;
      });
      replace(table,
        page.items.length === 0 && pageNo === 0 ? h("p", null, "The queue holds no message.") :
          h("table", null, h("caption", { class: "visually-hidden" }, "Messages of " + q.name),
            h("thead", null, h("tr", null, ["", "ID", "State", "Attempts", "Accepted", "Size", "Preview"].map((x) => h("th", { scope: "col" }, x || h("span", { class: "visually-hidden" }, "Open"))))),
            h("tbody", null, rows)),
        pager(pageNo, !!page.nextPageToken, page.items.length, (d) => { pageNo += d; void loadPage(); }),
        h("button", { type: "button", class: "secondary", onclick: () => { void loadPage(); } }, "Refresh messages"));
    } catch (e) { replace(table, problemBox(e)); }
  };
  await loadPage();
}

// sendForm publishes one message to the queue through the Host API's
// publish route (spec/peers.md §Publish), as tako send does: the body is
// sent as its UTF-8 text, which is what the consumer receives; the Forms
// keep no content type. Offered where the host has the route and the token
// may change the queue.
function sendForm(space: string, q: Resource, perm: { ok: boolean; reason: string }, hasRoute: boolean, box: HTMLElement, after: () => Promise<void>) {
  if (!hasRoute) {
    replace(box, h("p", { class: "reason" }, "Sending: this host's API has no publish route."));
    return;
  }
  const delayDefault = q.spec?.deliveryDelaySeconds ?? 0;
  const body = h("textarea", { id: "send-body", name: "body", rows: 3, required: true, disabled: !perm.ok, "aria-describedby": perm.ok ? "send-help" : "send-reason" });
  const delay = h("input", { id: "send-delay", name: "delaySeconds", type: "number", min: 0, max: 43200, step: 1, placeholder: String(delayDefault), disabled: !perm.ok });
  const out = h("div", { "aria-live": "polite" });
  const submit = async (ev: Event) => {
    ev.preventDefault();
    const m: { body: string; delaySeconds?: number } = { body: body.value };
    if (delay.value !== "") m.delaySeconds = Number(delay.value);
    try {
      const r = await call<{ messageIds: string[] }>("POST", spacePath(space, "/resources/" + enc(q.uid) + "/messages"), { messages: [m] });
      replace(out, h("p", { class: "notice", role: "status" }, "Sent: message ", h("code", null, r.messageIds[0]), "."));
      body.value = "";
      await after();
    } catch (e) { replace(out, problemBox(e)); }
  };
  replace(box,
    h("form", { id: "send-form", onsubmit: (ev: Event) => { void submit(ev); } },
      h("label", { for: "send-body" }, "Body"), body,
      h("p", { id: "send-help", class: "muted" }, "Sent as its UTF-8 text (1 to 127000 bytes); the consumer receives those bytes."),
      h("label", { for: "send-delay" }, "Delay in seconds (empty: the queue's, " + delayDefault + ")"), delay,
      h("div", null, h("button", { type: "submit", id: "send-submit", disabled: !perm.ok, "aria-describedby": perm.ok ? null : "send-reason" }, "Send"))),
    perm.ok ? null : h("span", { id: "send-reason", class: "reason" }, perm.reason),
    out);
}

function confirmThen(question: string, run: () => void) {
  const d = h("dialog", { "aria-labelledby": "confirm-q" },
    h("p", { id: "confirm-q" }, question),
    h("div", { class: "actions" },
      h("button", { type: "button", class: "secondary", onclick: () => { d.close(); d.remove(); } }, "Cancel"),
      h("button", { type: "button", id: "confirm-ok", onclick: () => { d.close(); d.remove(); run(); } }, "Confirm")));
  d.addEventListener("close", () => d.remove()); // Escape closes it too
  document.body.append(d);
  d.showModal();
}

// ---- Operations

function rememberOp(space: string, id: string) {
  const key = "takohost.console.ops." + space;
  const ids: string[] = JSON.parse(sessionStorage.getItem(key) ?? "[]");
  if (!ids.includes(id)) ids.unshift(id);
  sessionStorage.setItem(key, JSON.stringify(ids.slice(0, 50)));
}

function progressText(p: any): string {
  if (p.dryRun) return "dry run: " + (p.wouldMove ?? 0) + " of " + (p.total ?? 0) + " would move" + (p.skipped ? ", " + p.skipped + " would be skipped" : "") + (p.group ? " (group " + p.group + ")" : "") + "; nothing moved";
  return [
    p.removed !== undefined ? p.removed + " removed" : "",
    p.moved !== undefined ? p.moved + " moved" + (p.total !== undefined ? " of " + p.total : "") : "",
    p.skipped ? p.skipped + " skipped" : "",
  ].filter(Boolean).join(", ") + (p.group ? " (group " + p.group + ")" : "");
}

// followOperation shows an Operation until it finishes: its state, effect,
// progress (a purge's removed, a redrive's moved of total and skipped) and
// error, with Cancel for a running redrive where the host can cancel.
async function followOperation(box: HTMLElement, space: string, op: Operation, label: string, onProgress?: () => void) {
  const routes = await hostRoutes();
  for (;;) {
    const p: any = (op as any).progress;
    const running = ["pending", "running", "reconciling"].includes(op.state);
    replace(box, h("div", { class: "notice", role: "status", "data-operation": op.id, "data-state": op.state },
      label + ": Operation ", h("code", null, op.id), " ", badge(op.state), " effect ", op.effect,
      p ? h("span", { class: "progress" }, " · " + progressText(p)) : null,
      running && op.kind === "redrive" && routes.has("POST /v2/spaces/{space}/operations/{id}/cancel")
        ? [" ", h("button", { type: "button", class: "secondary", onclick: async () => {
          try { await call("POST", spacePath(space, "/operations/" + enc(op.id) + "/cancel")); } catch (e) { box.append(problemBox(e)); }
        } }, "Cancel redrive")] : null,
      op.error ? problemBox(new ApiError(op.error)) : null));
    onProgress?.();
    if (!running) return;
    op = await call<Operation>("GET", spacePath(space, "/operations/" + enc(op.id) + "?wait=1"));
  }
}

async function operationsView(root: HTMLElement, space: string, gen: number, resource: string) {
  const routes = await hostRoutes();
  const listing = routes.has("GET /v2/spaces/{space}/operations");
  const body = h("div");
  const state = h("select", { id: "op-state" }, ["", "pending", "running", "succeeded", "failed", "reconciling"].map((s) => h("option", { value: s }, s || "any")));
  const idInput = h("input", { id: "op-id", autocomplete: "off" });
  const found = h("div", { "aria-live": "polite" });
  replace(root,
    h("div", { class: "crumbs" }, link("#/s/" + enc(space), space), " / operations"),
    h("h1", null, "Operations"),
    h("form", { class: "filters", onsubmit: async (ev: Event) => {
      ev.preventDefault();
      try { replace(found, opTable(space, [await call<Operation>("GET", spacePath(space, "/operations/" + enc(idInput.value.trim())))])); }
      catch (e) { replace(found, problemBox(e)); }
    } }, h("label", { for: "op-id" }, "Operation ID"), idInput, h("button", { type: "submit", class: "secondary" }, "Look up")),
    found,
    listing ? h("div", { class: "filters" }, h("label", { for: "op-state" }, "State"), state,
      resource ? [h("span", null, "Resource ", link(resHref(space, resource), resource)), link("#/s/" + enc(space) + "/ops", "all resources")] : null) : null,
    body);
  if (listing) {
    const tokens: (string | undefined)[] = [undefined];
    let pageNo = 0;
    const load = async () => {
      const qs = new URLSearchParams({ limit: "50" });
      if (tokens[pageNo]) qs.set("pageToken", tokens[pageNo]!);
      if (state.value) qs.set("state", state.value);
      if (resource) qs.set("resourceUid", resource);
      try {
        const page = await call<Page<Operation>>("GET", spacePath(space, "/operations?" + qs));
        if (gen !== generation) return;
        tokens[pageNo + 1] = page.nextPageToken;
        replace(body, page.items.length || pageNo > 0 ? opTable(space, page.items) : h("p", null, "No Operation matches."), pager(pageNo, !!page.nextPageToken, page.items.length, (d) => { pageNo += d; void load(); }));
      } catch (e) { replace(body, problemBox(e)); }
    };
    state.addEventListener("change", () => { tokens.length = 1; pageNo = 0; void load(); });
    await load();
    return;
  }
  const ids: string[] = JSON.parse(sessionStorage.getItem("takohost.console.ops." + space) ?? "[]");
  const ops = (await Promise.all(ids.map((id) => call<Operation>("GET", spacePath(space, "/operations/" + enc(id))).catch(() => null)))).filter((x): x is Operation => x !== null);
  if (gen !== generation) return;
  replace(body,
    h("p", { class: "notice" }, "This host's API has no route listing a space's Operations: shown are the ones started from this tab, and any looked up by ID."),
    ops.length ? opTable(space, ops) : h("p", { class: "muted" }, "None started from this tab."));
}

function opTable(space: string, ops: Operation[]): HTMLElement {
  const links = new Map<string, HTMLAnchorElement[]>();
  const resLink = (uid: string) => {
    const a = link(resHref(space, uid), uid);
    links.set(uid, [...(links.get(uid) ?? []), a]);
    return a;
  };
  const table = h("table", null, h("caption", { class: "visually-hidden" }, "Operations"),
    h("thead", null, h("tr", null, ["ID", "Kind", "Resource", "State", "Effect", "Error", "Updated"].map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", null, ops.map((o) => h("tr", { "data-operation-id": o.id },
      h("td", null, h("code", null, o.id)), h("td", null, o.kind),
      h("td", null, resLink(o.resourceUid)),
      h("td", null, badge(o.state)), h("td", null, o.effect, (o as any).progress ? " · " + progressText((o as any).progress) : ""),
      h("td", null, o.error ? [h("strong", null, o.error.title), o.error.detail ? ": " + o.error.detail : ""] : ""),
      h("td", null, h("time", { datetime: o.updateTime, title: o.updateTime }, ago(Date.parse(o.updateTime))))))));
  // Name the resources (one GET each of the page's distinct ones); a
  // deleted one keeps its UID.
  for (const [uid, as] of links) {
    call<Resource>("GET", spacePath(space, "/resources/" + enc(uid)))
      .then((r) => as.forEach((a) => { a.textContent = r.name; a.title = uid; }))
      .catch(() => as.forEach((a) => a.after(" (gone)")));
  }
  return table;
}

// ---- worker and version

const LEVELS = ["debug", "log", "info", "warn", "error"];

async function workerView(root: HTMLElement, space: string, w: Resource, versions: Resource[], gen: number) {
  const selected = w.spec?.version?.resourceUid as string | undefined;
  const versionBox = h("div");
  const level = h("select", { id: "log-level" }, h("option", { value: "" }, "all levels"), LEVELS.map((l) => h("option", { value: l }, l + " and above")));
  const text = h("input", { id: "log-text", type: "search", autocomplete: "off" });
  const paused = h("input", { id: "log-pause", type: "checkbox" });
  const logBox = h("div", { class: "log", id: "log", role: "log", "aria-label": "Worker log", tabindex: "0" });
  const logErr = h("div");
  const invBox = h("div", { id: "invocations" });
  replace(root,
    h("h2", null, "Handlers"), h("p", null, (w.spec?.handlers ?? []).join(", ")),
    h("h2", null, "Versions"),
    versions.length === 0 ? h("p", { class: "muted" }, "No version of this worker.") :
      h("table", null, h("caption", { class: "visually-hidden" }, "Versions"),
        h("thead", null, h("tr", null, ["Version", "State", "Selected", "Created"].map((x) => h("th", { scope: "col" }, x)))),
        h("tbody", null, versions.map((v) => h("tr", null, h("td", null, link(resHref(space, v.uid), v.name)), h("td", null, badge(v.state)),
          h("td", null, v.uid === selected ? "selected" : ""), h("td", null, v.createTime))))),
    h("h2", null, "Live log"),
    h("div", { class: "filters" },
      h("label", { for: "log-level" }, "Level"), level,
      h("label", { for: "log-text" }, "Text"), text,
      h("label", null, paused, " Pause the tail")),
    logErr, logBox,
    h("h2", null, "Recent invocations"), invBox,
    versionBox);
  if (selected) {
    try {
      const v = await call<Resource>("GET", spacePath(space, "/resources/" + enc(selected)));
      if (gen === generation) versionView(versionBox, space, v, "Selected version: " + v.name);
    } catch (e) { replace(versionBox, problemBox(e)); }
  }
  const entries: any[] = [];
  let after = 0;
  const draw = () => {
    const min = level.value ? LEVELS.indexOf(level.value) : 0;
    const t = text.value.toLowerCase();
    const shown = entries.filter((e) => LEVELS.indexOf(e.level) >= min && (!t || String(e.message).toLowerCase().includes(t)));
    const atEnd = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
    replace(logBox, shown.length === 0 ? h("div", { class: "muted" }, entries.length ? "No line matches the filters." : "No log line yet.") :
      shown.slice(-500).map((e) => h("div", { class: "lvl-" + e.level },
        h("time", { datetime: new Date(e.timeMillis).toISOString() }, new Date(e.timeMillis).toLocaleTimeString()),
        h("strong", null, e.level), " ", e.message)));
    if (atEnd) logBox.scrollTop = logBox.scrollHeight;
  };
  level.addEventListener("change", draw);
  text.addEventListener("input", draw);
  // Follow the log: each request waits (long poll, up to 20 s) for an
  // entry after the last one seen; leaving the page aborts it.
  const abort = new AbortController();
  onLeave(() => abort.abort());
  paused.addEventListener("change", () => { if (!paused.checked) draw(); });
  const follow = async () => {
    let first = true;
    while (!abort.signal.aborted) {
      try {
        const page = await call<any>("GET", spacePath(space, "/resources/" + enc(w.uid) + "/logs?limit=1000&after=" + after + (first ? "" : "&wait=20")), undefined, { signal: abort.signal });
        first = false;
        if (gen !== generation) return;
        replace(logErr);
        const items = page.items ?? [];
        if (items.length) {
          entries.push(...items);
          after = items[items.length - 1].seq;
          if (entries.length > 5000) entries.splice(0, entries.length - 5000);
        }
        if (!paused.checked) draw();
      } catch (e) {
        if (abort.signal.aborted || gen !== generation) return;
        replace(logErr, problemBox(e));
        await new Promise((r) => setTimeout(r, 3000));
      }
    }
  };
  void follow();

  // Recent invocations (the host keeps the newest 50 per worker), every 3 s.
  const routes = await hostRoutes();
  if (!routes.has("GET /v2/spaces/{space}/resources/{uid}/invocations")) {
    replace(invBox, h("p", { class: "muted" }, "This host's API has no route for a worker's invocations."));
    return;
  }
  const names = new Map<string, string>();
  const nameOf = async (uid: string) => {
    if (!names.has(uid)) {
      names.set(uid, uid);
      try { names.set(uid, (await call<Resource>("GET", spacePath(space, "/resources/" + enc(uid)))).name); } catch { /* keep the UID */ }
    }
    return names.get(uid)!;
  };
  const loadInv = async () => {
    try {
      const page = await call<{ items: any[] }>("GET", spacePath(space, "/resources/" + enc(w.uid) + "/invocations?limit=20"));
      await Promise.all(page.items.flatMap((i) => [nameOf(i.consumerUid), nameOf(i.queueUid)]));
      if (gen !== generation) return;
      replace(invBox, page.items.length === 0 ? h("p", { class: "muted" }, "No queue handler invocation since the host started.") :
        h("table", null, h("caption", { class: "visually-hidden" }, "Recent invocations"),
          h("thead", null, h("tr", null, ["Finished", "Outcome", "Duration", "Messages", "Queue", "Consumer"].map((x) => h("th", { scope: "col" }, x)))),
          h("tbody", null, page.items.map((i) => h("tr", { "data-outcome": i.outcome },
            h("td", null, h("time", { datetime: new Date(i.finishTimeMillis).toISOString() }, new Date(i.finishTimeMillis).toLocaleTimeString())),
            h("td", null, badge(i.outcome)),
            h("td", { class: "num" }, i.durationMillis < 1000 ? i.durationMillis.toFixed(1) + " ms" : (i.durationMillis / 1000).toFixed(2) + " s"),
            h("td", { class: "num" }, i.messages),
            h("td", null, link(resHref(space, i.queueUid), names.get(i.queueUid) ?? i.queueUid)),
            h("td", null, link(resHref(space, i.consumerUid), names.get(i.consumerUid) ?? i.consumerUid)))))));
    } catch (e) { if (gen === generation) replace(invBox, problemBox(e)); }
  };
  await loadInv();
  const invTimer = setInterval(() => void loadInv(), 3000);
  onLeave(() => clearInterval(invTimer));
}

function versionView(root: HTMLElement, space: string, v: Resource, title: string | null) {
  const s = v.spec ?? {};
  const vars = Object.entries<string>(s.vars ?? {});
  const bindings: any[] = s.queueProducerBindings ?? [];
  append(root, [
    title ? h("h2", null, title) : null,
    h("h3", null, "Vars"),
    vars.length ? dl(vars.map(([k, x]) => [k, x])) : h("p", { class: "muted" }, "None."),
    h("h3", null, "Bindings"),
    bindings.length ? h("ul", null, bindings.map((b) => {
      const a = link(resHref(space, b.resource.resourceUid), b.resource.resourceUid);
      call<Resource>("GET", spacePath(space, "/resources/" + enc(b.resource.resourceUid)))
        .then((r) => { a.textContent = r.name; a.title = r.uid; }).catch(() => a.after(" (gone)"));
      return h("li", null, h("code", null, "env." + b.name), " → queue ", a);
    })) : h("p", { class: "muted" }, "None."),
    h("p", { class: "muted" }, "Secrets are write-only: the Host API never returns them, so the console cannot show them."),
    h("h3", null, "Modules"),
    (s.modules ?? []).map((m: any) => h("section", { class: "module" },
      h("h4", null, m.name, m.name === s.mainModule ? " (main module)" : ""),
      m.content === undefined ? h("p", { class: "muted" }, "Content not loaded.") : highlight(m.content, m.name + " source"))),
  ]);
}
