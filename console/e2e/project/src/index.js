export default {
  // POST …/fetch/backlog?n=N puts N JSON messages on backlog; …/fetch/binary
  // one binary message; any other path puts the request body on tasks.
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/backlog") {
      const n = Number(url.searchParams.get("n") || "1");
      for (let i = 0; i < n; i++) await env.BACKLOG.send(JSON.stringify({ order: i, note: "backlog message" }));
      return new Response("queued " + n + "\n");
    }
    if (url.pathname === "/binary") {
      await env.BACKLOG.send(new Uint8Array([0, 1, 2, 254, 255, 10, 13, 7]));
      return new Response("queued binary\n");
    }
    await env.TASKS.send(await request.text());
    return new Response("queued\n");
  },
  // Every message is logged; one whose body starts with "slow" takes 4 s,
  // one whose body starts with "fail" throws, and with maxRetries 0 it is
  // dead-lettered at once.
  async queue(batch, env) {
    for (const m of batch.messages) {
      const text = typeof m.body === "string" ? m.body : new TextDecoder().decode(m.body);
      if (text.startsWith("slow")) await new Promise((r) => setTimeout(r, 4000));
      if (text.startsWith("fail")) {
        console.error("refusing " + text);
        throw new Error("cannot handle " + text);
      }
      console.log(env.GREETING + ", " + text);
    }
  },
};
