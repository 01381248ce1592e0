package main

import (
	"context"
	"fmt"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/abi/abitest"
	"github.com/takoform/queuehost/runtime/js"
)

// benchWorker is the module every JavaScript run uses. queue reads every
// body (as goHandler does) and returns, so the engine acknowledges the
// batch. fetch drives the producer Binding Q: /batch?size=N sends 100
// messages with one sendBatch, /one?size=N sends one.
const benchWorker = `
const bodies = {};
function body(n) {
  let b = bodies[n];
  if (b === undefined) { b = "x".repeat(n); bodies[n] = b; }
  return b;
}
export default {
  async queue(batch, env, ctx) {
    let n = 0;
    for (const m of batch.messages) n += m.body.byteLength;
    return;
  },
  async fetch(request, env, ctx) {
    const u = new URL(request.url);
    const size = Number(u.searchParams.get("size") || "100");
    const b = body(size);
    if (u.pathname.endsWith("/batch")) {
      const msgs = [];
      for (let i = 0; i < 100; i++) msgs.push({ body: b });
      const ids = await env.Q.sendBatch(msgs);
      return new Response(String(ids.length));
    }
    await env.Q.send(b);
    return new Response("1");
  },
};
`

func benchVersion(uid string, bindings []abi.Binding) *abi.Version {
	return &abi.Version{UID: uid, Space: "bench", WorkerUID: "w1", Principal: "bench", MainModule: "main.js",
		Modules: []abi.Module{{Name: "main.js", Content: benchWorker}}, Bindings: bindings}
}

var jsKind = handlerKind{Name: "goja handler", New: func(ctx context.Context) (abi.Handler, func(), error) {
	rt := js.New(js.Options{Logger: quietLogger})
	h, err := rt.QueueHandler(benchVersion("v1", nil))
	if err != nil {
		rt.Close()
		return nil, nil, err
	}
	return h, rt.Close, nil
}}

// overheadLayer calls HandleBatch directly, on one goroutine, with batches
// of 1 and 100 messages of 100 B, for the goja handler and for goHandler:
// time per batch = a + b·n gives the per-batch (a) and per-message (b)
// cost of each, and their difference is the JavaScript runtime's.
func (b *bench) overheadLayer(ctx context.Context) {
	s := b.rep.section("JavaScript invocation overhead (runtime/js)",
		fmt.Sprintf("HandleBatch called directly in a loop on one goroutine for %s per point, with a settler that does nothing (no store, no disk), "+
			"batches of 1 and of 100 messages of 100 B. The goja handler reads every body's byteLength and returns; the Go handler reads every body's length and returns. "+
			"Per batch and per message come from time per batch = a + b·n fitted through n = 1 and n = 100. Limit: the Go handler in the same run.", b.pointDur),
		"handler", "µs per batch of 1", "µs per batch of 100", "per-batch cost a", "per-message cost b", "CPU µs per batch of 100", "ratio to Go (batch of 100)")
	rt := js.New(js.Options{Logger: quietLogger})
	defer rt.Close()
	jh, err := rt.QueueHandler(benchVersion("v-overhead", nil))
	if err != nil {
		s.NotMeasured = "js.QueueHandler: " + err.Error()
		return
	}
	type res struct{ t1, t100, cpu100 time.Duration }
	measure := func(name string, h abi.Handler) (res, error) {
		var r res
		for _, n := range []int{1, 100} {
			msgs := make([]abi.Message, n)
			for i := range msgs {
				msgs[i] = abi.Message{ID: fmt.Sprintf("m%d", i), TimestampMillis: time.Now().UnixMilli(), Body: make([]byte, 100), Attempts: 1}
			}
			c := b.prog.phase(fmt.Sprintf("overhead %s batch of %d", name, n), "batches")
			sp := startSpan()
			deadline := time.Now().Add(b.pointDur)
			calls := 0
			for time.Now().Before(deadline) {
				for k := 0; k < 16; k++ {
					bt := abi.NewBatch(fmt.Sprintf("b%d", calls), "bench", msgs, abitest.Settler{})
					if err := h.HandleBatch(ctx, bt); err != nil {
						b.prog.end()
						return r, err
					}
					calls++
				}
				c.Add(16)
			}
			wall, cpu := sp.end()
			b.prog.end()
			per := wall / time.Duration(calls)
			if n == 1 {
				r.t1 = per
			} else {
				r.t100, r.cpu100 = per, cpu/time.Duration(calls)
			}
		}
		return r, nil
	}
	gr, err := measure("Go", goHandler())
	if err != nil {
		s.NotMeasured = "Go handler: " + err.Error()
		return
	}
	jr, err := measure("goja", jh)
	if err != nil {
		s.NotMeasured = "goja handler: " + err.Error()
		return
	}
	fit := func(r res) (a, per time.Duration) {
		per = (r.t100 - r.t1) / 99
		a = r.t1 - per
		return max(a, 0), max(per, 0)
	}
	us := func(d time.Duration) string { return num(float64(d.Nanoseconds()) / 1e3) }
	ga, gb := fit(gr)
	ja, jb := fit(jr)
	s.row("Go handler (limit)", us(gr.t1), us(gr.t100), us(ga)+" µs", dur(gb), us(gr.cpu100), "1×")
	s.row("goja handler", us(jr.t1), us(jr.t100), us(ja)+" µs", dur(jb), us(jr.cpu100), ratio(float64(jr.t100), float64(gr.t100)))
	s.note("JavaScript runtime overhead: %s per batch and %s per message above the Go handler doing the same work.", dur(max(ja-ga, 0)), dur(max(jb-gb, 0)))
	b.results["overhead/js/batch"] = float64(ja - ga)
	b.results["overhead/js/msg"] = float64(jb - gb)
}
