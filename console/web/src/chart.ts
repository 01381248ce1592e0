import uPlot from "../vendor/uplot/uPlot.esm.js";

// QueueCharts draws a queue's last hour with uPlot: its messages by state,
// and its messages per second (sent, acknowledged, retried,
// dead-lettered) from the deltas of the cumulative counts since the
// engine started. The hour before the page opened comes from the host's
// history route (one sample per 10 s, kept by the host: total messages and
// the counts); the page then adds its own samples of the stats route
// (every 2 s or less often, with the counts by state).
const HOUR = 3600;

interface Sample {
  t: number; messages: number; available: number | null; inFlight: number | null; waiting: number | null;
  c?: { accepted: number; acknowledged: number; retried: number; deadLettered: number };
}

export interface HistoryPoint {
  timeMillis: number; messages: number; accepted: number; acknowledged: number; retried: number; deadLettered: number;
}

export interface StatsLike {
  messages: number;
  byState: { available: number; inFlight: number; delayed: number; retryWaiting: number };
  sinceStart?: { accepted: number; acknowledged: number; retried: number; deadLettered: number };
}

const RATES = ["accepted", "acknowledged", "retried", "deadLettered"] as const;

function plot(el: HTMLElement, yLabel: string, series: uPlot.Series[], data: uPlot.AlignedData): uPlot {
  return new uPlot({
    width: Math.max(300, el.clientWidth - 20), height: 170,
    scales: {
      x: {
        time: true,
        // at least a minute wide, so that the first samples do not stretch
        // to fill an axis of years
        range: (u) => {
          const xs = u.data[0];
          const hi = xs.length ? xs[xs.length - 1] : Date.now() / 1000;
          return [Math.min(xs.length ? xs[0] : hi, hi - 60), hi];
        },
      },
      y: { range: (_u, _min, max) => [0, Math.max(5, max * 1.1)] },
    },
    axes: [{}, { label: yLabel }],
    series: [{}, ...series],
  }, data, el);
}

export class QueueCharts {
  private samples: Sample[] = [];
  private backlog: uPlot;
  private rates: uPlot;
  private ro: ResizeObserver;

  constructor(private backlogEl: HTMLElement, private ratesEl: HTMLElement) {
    this.backlog = plot(backlogEl, "messages", [
      { label: "total", stroke: "#0b5cad", width: 2 },
      { label: "available", stroke: "#1a7f37", width: 1.5 },
      { label: "in flight", stroke: "#8250df", width: 1.5 },
      { label: "delayed or retry waiting", stroke: "#b35900", width: 1.5 },
    ], this.backlogData());
    this.rates = plot(ratesEl, "per second", [
      { label: "sent", stroke: "#0b5cad", width: 2 },
      { label: "acknowledged", stroke: "#1a7f37", width: 1.5 },
      { label: "retried", stroke: "#b35900", width: 1.5 },
      { label: "dead-lettered", stroke: "#b3261e", width: 1.5 },
    ], this.ratesData());
    this.ro = new ResizeObserver(() => {
      for (const [p, el] of [[this.backlog, backlogEl], [this.rates, ratesEl]] as const) p.setSize({ width: Math.max(300, el.clientWidth - 20), height: 170 });
    });
    this.ro.observe(backlogEl);
    this.ro.observe(ratesEl);
    this.mark();
  }

  // history puts the host's samples before the page's own (those older
  // than the page's first sample), so the charts open with the last hour.
  history(points: HistoryPoint[]) {
    const firstOwn = this.samples.length ? this.samples[0].t : Infinity;
    const before: Sample[] = points.map((p) => ({
      t: p.timeMillis / 1000, messages: p.messages, available: null, inFlight: null, waiting: null,
      c: { accepted: p.accepted, acknowledged: p.acknowledged, retried: p.retried, deadLettered: p.deadLettered },
    })).filter((x) => x.t < firstOwn);
    this.samples = [...before, ...this.samples];
    this.backlogEl.dataset.history = String(before.length);
    this.redraw();
  }

  add(t: number, s: StatsLike) {
    const c = s.sinceStart;
    this.samples.push({
      t, messages: s.messages, available: s.byState.available, inFlight: s.byState.inFlight, waiting: s.byState.delayed + s.byState.retryWaiting,
      c: c ? { accepted: c.accepted, acknowledged: c.acknowledged, retried: c.retried, deadLettered: c.deadLettered } : undefined,
    });
    const cut = t - HOUR;
    while (this.samples.length && this.samples[0].t < cut) this.samples.shift();
    this.redraw();
  }

  private redraw() {
    this.backlog.setData(this.backlogData());
    this.rates.setData(this.ratesData());
    this.mark();
  }

  // mark exposes what is plotted to assistive technology and tests.
  private mark() {
    const last = this.samples[this.samples.length - 1];
    this.backlogEl.dataset.points = String(this.samples.length);
    this.backlogEl.dataset.last = last ? String(last.messages) : "";
    this.backlogEl.setAttribute("aria-label", "Backlog over the last hour: " + this.samples.length + " samples" +
      (last ? ", now " + last.messages + " messages" + (last.available !== null ? ", " + last.available + " available, " + last.inFlight + " in flight" : "") : ""));
    const r = this.ratesData();
    const now = RATES.map((_, i) => { const col = r[i + 1] as (number | null)[]; return col.length ? col[col.length - 1] : null; });
    const peak = RATES.map((_, i) => Math.max(0, ...(r[i + 1] as (number | null)[]).map((x) => x ?? 0)));
    RATES.forEach((k, i) => { this.ratesEl.dataset["peak" + k[0].toUpperCase() + k.slice(1)] = peak[i].toFixed(2); });
    this.ratesEl.setAttribute("aria-label", "Messages per second over the last hour" +
      (now[0] === null ? ": not yet measured" : ": now " + RATES.map((k, i) => k + " " + (now[i] ?? 0).toFixed(1)).join(", ")));
  }

  private backlogData(): uPlot.AlignedData {
    const s = this.samples;
    return [s.map((x) => x.t), s.map((x) => x.messages), s.map((x) => x.available), s.map((x) => x.inFlight), s.map((x) => x.waiting)];
  }

  // ratesData: the rate over each interval between two samples, plotted at
  // its end; none across a restart of the host (a count going down) or a
  // sample without counts.
  private ratesData(): uPlot.AlignedData {
    const s = this.samples;
    const cols: (number | null)[][] = RATES.map(() => []);
    s.forEach((x, i) => {
      const p = s[i - 1];
      RATES.forEach((k, j) => {
        if (!p || !p.c || !x.c || x.t <= p.t || x.c[k] < p.c[k]) cols[j].push(null);
        else cols[j].push((x.c[k] - p.c[k]) / (x.t - p.t));
      });
    });
    return [s.map((x) => x.t), ...cols] as uPlot.AlignedData;
  }

  destroy() { this.ro.disconnect(); this.backlog.destroy(); this.rates.destroy(); }
}
