import { Child, dl, h } from "./dom";

const KNOWN = new Set(["id", "acceptTimeMillis", "visibleAtMillis", "attempts", "size", "state", "bodyPreview", "bodyTruncated", "deadLetter", "attemptHistory", "deadLetterGroup", "traceId", "traceUrl"]);

function decode(b64: string): Uint8Array {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

// asText is the preview as text when it is UTF-8 without control
// characters (a truncated preview may end inside a character), else null.
function asText(b: Uint8Array, truncated: boolean): string | null {
  for (let cut = 0; cut <= (truncated ? 3 : 0); cut++) {
    try {
      const s = new TextDecoder("utf-8", { fatal: true }).decode(b.subarray(0, b.length - cut));
      return /[\u0000-\u0008\u000e-\u001f\u007f]/.test(s) ? null : s;
    } catch { /* try one byte shorter */ }
  }
  return null;
}

function hex(b: Uint8Array): string {
  const lines: string[] = [];
  for (let i = 0; i < b.length; i += 16) {
    const row = Array.from(b.subarray(i, i + 16));
    const hx = row.map((x) => x.toString(16).padStart(2, "0")).join(" ");
    const ascii = row.map((x) => (x >= 32 && x < 127 ? String.fromCharCode(x) : ".")).join("");
    lines.push(i.toString(16).padStart(6, "0") + "  " + hx.padEnd(47) + "  " + ascii);
  }
  return lines.join("\n");
}

export function previewLine(m: any): string {
  const b = decode(m.bodyPreview);
  const t = asText(b, m.bodyTruncated);
  if (t === null) return "binary: " + Array.from(b.subarray(0, 12)).map((x) => x.toString(16).padStart(2, "0")).join(" ") + (b.length > 12 ? " …" : "");
  const one = t.replace(/\s+/g, " ");
  return one.length > 80 ? one.slice(0, 80) + "…" : one + (m.bodyTruncated ? "…" : "");
}

// deadLetterInfo is what the host says of where a dead-lettered message
// came from and why (its deadLetter member, spec/peers.md §Dead-letter
// metadata), and any other member of the listing the console does not know,
// shown as it is.
function deadLetterInfo(m: any, href: (uid: string) => string): [string, Child][] {
  const out: [string, Child][] = [];
  const d = m.deadLetter;
  if (d && typeof d === "object") {
    const ref = (uid?: string, name?: string) => uid ? h("a", { href: href(uid) }, name ?? uid) : name ?? "";
    if (d.sourceQueueUid || d.sourceQueueName) out.push(["From queue", ref(d.sourceQueueUid, d.sourceQueueName)]);
    if (d.consumerUid || d.consumerName) out.push(["By consumer", ref(d.consumerUid, d.consumerName)]);
    if (d.reason) out.push(["Reason", d.reason === "retries_exhausted" ? "retries_exhausted (every delivery allowed by maxRetries failed)" : String(d.reason)]);
    if (d.attempts !== undefined) out.push(["Deliveries there", String(d.attempts)]);
    if (d.originalMessageId) out.push(["Original message ID", d.originalMessageId]);
    if (d.deadLetteredAtMillis) out.push(["Dead-lettered at", new Date(d.deadLetteredAtMillis).toISOString()]);
    if (m.deadLetterGroup) out.push(["Group", h("code", null, String(m.deadLetterGroup))]);
    for (const [k, v] of Object.entries(d)) {
      if (!["sourceQueueUid", "sourceQueueName", "consumerUid", "consumerName", "reason", "attempts", "originalMessageId", "deadLetteredAtMillis"].includes(k)) out.push([k, JSON.stringify(v)]);
    }
  }
  const walk = (prefix: string, v: any) => {
    if (v && typeof v === "object" && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) walk(prefix ? prefix + "." + k : k, x);
    else out.push([prefix, typeof v === "string" ? v : JSON.stringify(v)]);
  };
  for (const [k, v] of Object.entries(m)) if (!KNOWN.has(k)) walk(k, v);
  return out;
}

// trace is the row naming the trace of a traced message's send
// (spec/peers.md §Tracing), a link when the host knows where traces are
// read (takohost -trace-url); none for an untraced message.
function trace(m: any): [string, Child][] {
  if (typeof m.traceId !== "string") return [];
  const id = h("code", null, m.traceId);
  return [["Trace", typeof m.traceUrl === "string" && /^https?:\/\//.test(m.traceUrl)
    ? h("a", { id: "message-trace", href: m.traceUrl, target: "_blank", rel: "noopener noreferrer" }, id)
    : h("span", { id: "message-trace" }, id)]];
}

export function messageDetail(m: any, href: (uid: string) => string): HTMLElement {
  const b = decode(m.bodyPreview);
  const text = asText(b, m.bodyTruncated);
  let json: string | null = null;
  if (text !== null && !m.bodyTruncated) {
    try { json = JSON.stringify(JSON.parse(text), null, 2); } catch { json = null; }
  }
  const views: [string, string | null][] = [["Text", text], ["JSON", json], ["Hex", hex(b)]];
  const pre = h("pre", { id: "message-body", tabindex: "0", "aria-label": "Message body" });
  const buttons = views.map(([name, v]) => h("button", {
    type: "button", "aria-pressed": "false", disabled: v === null, title: v === null ? "The body is not " + (name === "JSON" ? "complete JSON" : "UTF-8 text") : null,
    onclick: () => show(name),
  }, name));
  const show = (name: string) => {
    views.forEach(([n], i) => buttons[i].setAttribute("aria-pressed", n === name ? "true" : "false"));
    pre.textContent = views.find(([n]) => n === name)![1] ?? "";
  };
  const dead = deadLetterInfo(m, href);
  const box = h("section", { class: "message", "aria-labelledby": "message-title" },
    h("h3", { id: "message-title", tabindex: "-1" }, "Message " + m.id),
    dl([["State", m.state], ["Attempts", m.attempts], ["Accepted", new Date(m.acceptTimeMillis).toISOString()],
      ["Visible from", new Date(m.visibleAtMillis).toISOString()], ["Size", m.size + " bytes"], ...trace(m)]),
    dead.length ? h("div", { class: "notice", id: "dead-letter" }, h("strong", null, "Dead-lettered"), dl(dead)) : null,
    attempts(m.attemptHistory),
    h("div", { class: "tabs", role: "group", "aria-label": "Body view" }, buttons),
    m.bodyTruncated ? h("p", { class: "muted" }, "The preview holds the body's first " + b.length + " of " + m.size + " bytes.") : null,
    pre);
  show(json !== null ? "JSON" : text !== null ? "Text" : "Hex");
  return box;
}



const OUTCOMES: Record<string, string> = {
  retried: "retried by the handler", thrown: "threw", time_limit: "ran past the time limit", sandbox_ended: "its sandbox ended",
};

// attempts is a message's attempt history (spec/peers.md §Attempt
// history): its last attempts, oldest first, how each ended, and the
// thrown error with its stack.
function attempts(hist: any): HTMLElement | null {
  if (!Array.isArray(hist) || hist.length === 0) return null;
  return h("section", { id: "attempts", "aria-labelledby": "attempts-title" },
    h("h4", { id: "attempts-title" }, "Last attempts"),
    h("table", null, h("caption", { class: "visually-hidden" }, "Attempts, oldest first"),
      h("thead", null, h("tr", null, ["#", "Started", "Outcome", "Ran", "Host", "Version", "Error"].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", null, hist.map((a: any) => h("tr", { "data-outcome": String(a.outcome) },
        h("td", { class: "num" }, a.attempt),
        h("td", null, new Date(a.startedAtMillis).toISOString()),
        h("td", null, (OUTCOMES[a.outcome] ?? String(a.outcome)) + (a.outcome === "retried" && a.delaySeconds !== undefined ? " (in " + a.delaySeconds + " s)" : "")),
        h("td", { class: "num" }, a.durationMillis + " ms"),
        h("td", null, a.host ?? ""),
        h("td", null, a.workerVersionUid ? h("code", null, a.workerVersionUid) : ""),
        h("td", { class: "error" },
          a.errorName || a.errorMessage ? h("div", null, [a.errorName, a.errorMessage].filter(Boolean).join(": ")) : null,
          a.errorStack ? h("details", null, h("summary", null, "stack"), h("pre", { class: "stack" }, a.errorStack)) : null))))));
}
