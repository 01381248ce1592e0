import { call, enc, spacePath } from "./api";
import { Child, ago, h, replace } from "./dom";

// The forensics extension on a dead-letter queue's page (spec/peers.md
// §Dead-letter groups): its dead letters grouped by cause, largest group
// first, each with its count, first and last seen, an example, a bar chart
// of the last 24 hours, and a dry run and a redrive of that group only.

export interface Group {
  fingerprint: string; title: string; outcome: string; count: number;
  firstSeenMillis: number; lastSeenMillis: number; exampleMessageId: string;
  histogram?: number[]; frames?: string[];
}

interface Groups { groups: Group[]; deadLetters: number; bucketMillis: number; endMillis: number }

const SVG = "http://www.w3.org/2000/svg";

// bars draws a group's histogram as an SVG bar chart (no inline style: the
// console's Content-Security-Policy allows none).
function bars(g: Group, bucketMillis: number, endMillis: number): Element {
  const hs = g.histogram ?? [];
  const w = 6, gap = 1, height = 28;
  const max = Math.max(1, ...hs);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", String(hs.length * (w + gap)));
  svg.setAttribute("height", String(height));
  svg.setAttribute("class", "group-chart");
  svg.setAttribute("role", "img");
  const start = endMillis - hs.length * bucketMillis;
  svg.setAttribute("aria-label", g.count + " dead letters from " + new Date(start).toISOString() + ", " + hs.join(", ") + " per " + bucketMillis / 60000 + " min");
  hs.forEach((n, i) => {
    const r = document.createElementNS(SVG, "rect");
    const bh = n === 0 ? 1 : Math.max(2, Math.round((n / max) * height));
    r.setAttribute("x", String(i * (w + gap)));
    r.setAttribute("y", String(height - bh));
    r.setAttribute("width", String(w));
    r.setAttribute("height", String(bh));
    r.setAttribute("class", n === 0 ? "empty" : "bar");
    const t = document.createElementNS(SVG, "title");
    t.textContent = new Date(start + i * bucketMillis).toISOString().slice(0, 16).replace("T", " ") + ": " + n;
    r.appendChild(t);
    svg.appendChild(r);
  });
  return svg;
}

// deadLetterGroups fills box with the groups of queue uid; act runs a
// group's redrive (dryRun or not) and is offered only when canAct.
export async function deadLetterGroups(box: HTMLElement, space: string, uid: string, canAct: { ok: boolean; reason: string },
  act: (group: Group, dryRun: boolean) => void, problem: (e: unknown) => Child): Promise<void> {
  try {
    const g = await call<Groups>("GET", spacePath(space, "/resources/" + enc(uid) + "/deadletters/groups?buckets=24&bucketSeconds=3600"));
    if (g.groups.length === 0) { replace(box, h("p", { class: "muted" }, "No dead-lettered message.")); return; }
    const btn = (label: string, gr: Group, dry: boolean) => h("button", {
      type: "button", class: "secondary", disabled: !canAct.ok, title: canAct.ok ? null : canAct.reason,
      "aria-label": label + " group " + gr.fingerprint, onclick: () => act(gr, dry),
    }, label);
    replace(box,
      h("p", { class: "muted small" }, g.deadLetters + " dead letters in " + g.groups.length + (g.groups.length === 1 ? " group" : " groups") + "; the chart is the last 24 h, one bar an hour."),
      h("table", { id: "dead-letter-groups" }, h("caption", { class: "visually-hidden" }, "Dead letters by cause"),
        h("thead", null, h("tr", null, ["Cause", "Count", "Last 24 h", "First seen", "Last seen", "Example", ""].map((x) => h("th", { scope: "col" }, x || h("span", { class: "visually-hidden" }, "Actions"))))),
        h("tbody", null, g.groups.map((gr) => h("tr", { "data-group": gr.fingerprint },
          h("td", null, h("div", { class: "group-title" }, gr.title),
            gr.frames?.length ? h("div", { class: "muted small" }, gr.frames.join(" ← ")) : null,
            h("code", { class: "small muted" }, gr.fingerprint)),
          h("td", { class: "num" }, gr.count),
          h("td", null, bars(gr, g.bucketMillis, g.endMillis)),
          h("td", null, ago(gr.firstSeenMillis)),
          h("td", null, ago(gr.lastSeenMillis)),
          h("td", null, h("code", { class: "small" }, gr.exampleMessageId)),
          h("td", null, btn("Dry run", gr, true), " ", btn("Redrive group", gr, false)))))));
  } catch (e) { replace(box, problem(e)); }
}
