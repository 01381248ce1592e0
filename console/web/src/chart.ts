import uPlot from "../vendor/uplot/uPlot.esm.js";

// BacklogChart draws a queue's messages by state over the last hour with
// uPlot. Samples come from the stats route (the console polls it); they
// are kept in the tab's sessionStorage so that leaving the queue page and
// coming back keeps the hour.
const HOUR = 3600;

interface Sample { t: number; messages: number; available: number; inFlight: number; waiting: number }

export class BacklogChart {
  private samples: Sample[];
  private plot: uPlot;
  private key: string;
  private ro: ResizeObserver;

  constructor(private el: HTMLElement, id: string) {
    this.key = "takohost.console.series." + id;
    try { this.samples = JSON.parse(sessionStorage.getItem(this.key) ?? "[]"); } catch { this.samples = []; }
    const width = Math.max(300, el.clientWidth - 10);
    this.plot = new uPlot({
      width, height: 220,
      scales: { x: { time: true, range: (_u, min, max) => [Math.min(min, max - 60), max] }, y: { range: (_u, _min, max) => [0, Math.max(5, max * 1.1)] } },
      axes: [{}, { label: "messages" }],
      series: [
        {},
        { label: "total", stroke: "#0b5cad", width: 2 },
        { label: "available", stroke: "#1a7f37", width: 1.5 },
        { label: "in flight", stroke: "#8250df", width: 1.5 },
        { label: "delayed or retry waiting", stroke: "#b35900", width: 1.5 },
      ],
    }, this.data(), el);
    this.ro = new ResizeObserver(() => this.plot.setSize({ width: Math.max(300, el.clientWidth - 10), height: 220 }));
    this.ro.observe(el);
    this.mark();
  }

  add(t: number, s: { messages: number; byState: { available: number; inFlight: number; delayed: number; retryWaiting: number } }) {
    this.samples.push({ t, messages: s.messages, available: s.byState.available, inFlight: s.byState.inFlight, waiting: s.byState.delayed + s.byState.retryWaiting });
    const cut = t - HOUR;
    while (this.samples.length && this.samples[0].t < cut) this.samples.shift();
    try { sessionStorage.setItem(this.key, JSON.stringify(this.samples)); } catch { /* full: keep in memory */ }
    this.plot.setData(this.data());
    this.mark();
  }

  // mark exposes the plotted series to assistive technology and tests.
  private mark() {
    const last = this.samples[this.samples.length - 1];
    this.el.dataset.points = String(this.samples.length);
    this.el.dataset.last = last ? String(last.messages) : "";
    this.el.setAttribute("aria-label", "Backlog over the last hour: " + this.samples.length + " samples" +
      (last ? ", now " + last.messages + " messages, " + last.available + " available, " + last.inFlight + " in flight" : ""));
  }

  private data(): uPlot.AlignedData {
    const s = this.samples;
    return [s.map((x) => x.t), s.map((x) => x.messages), s.map((x) => x.available), s.map((x) => x.inFlight), s.map((x) => x.waiting)];
  }

  destroy() { this.ro.disconnect(); this.plot.destroy(); }
}
