// The fuzz target's worker: the first message's bytes choose a send's
// arguments (body type, options, an offset) and carry the body's bytes; the
// outcome is logged as "FUZZ <json>" for the Go side to check against its
// own reading of the same bytes (runtime/js/fuzz_test.go).
export default {
  async queue(batch, env) {
    const m = new Uint8Array(batch.messages[0].body);
    const kind = (m[0] ?? 0) % 7, opt = (m[1] ?? 0) % 6, off = m[2] ?? 0;
    const rest = m.subarray(Math.min(3, m.length));
    const at = Math.min(off, rest.length);
    let body;
    switch (kind) {
      case 0: {
        let s = "";
        for (const b of rest) s += String.fromCharCode(b); // code points 0..255
        body = s;
        break;
      }
      case 1: body = rest.slice().buffer; break;
      case 2: body = new Uint8Array(rest.slice().buffer, at); break;
      case 3: body = new DataView(rest.slice().buffer, at); break;
      case 4: body = { bytes: rest.length }; break;
      case 5: body = rest.length; break;
      default: body = null;
    }
    const options = [undefined, { delaySeconds: off * 200 }, { delaySeconds: off + 0.5 }, { delaySeconds: String(off) }, { extra: 1 }, {}][opt];
    let out;
    try {
      out = { ok: true, id: await env.OUT.send(body, options) };
    } catch (e) {
      out = { ok: false, name: e && e.name };
    }
    console.log("FUZZ " + JSON.stringify(out));
  },
};
