import { greet } from "./greet.js";

export default {
  // POST /v2/spaces/demo/resources/<worker uid>/fetch with a body: the
  // body becomes one message on the tasks queue.
  async fetch(request, env) {
    const text = await request.text();
    await env.TASKS.send(text);
    return new Response("queued\n");
  },
  // Each message is logged; returning normally acknowledges the batch.
  async queue(batch, env) {
    for (const m of batch.messages) {
      console.log(greet(env.GREETING, new TextDecoder().decode(m.body)));
    }
  },
};
