import { greet } from "./greet.js";

export default {
  // POST /v2/spaces/demo/resources/<worker uid>/fetch with a body: the
  // body becomes one message on the tasks queue.
  async fetch(request, env) {
    const text = await request.text();
    await env.TASKS.send(text);
    return new Response("queued\n");
  },
  // Each message is logged; returning normally acknowledges the batch. A
  // message "fail" throws: the batch is retried, and after 1 + maxRetries
  // deliveries the message goes to the dead-letter queue.
  async queue(batch, env) {
    for (const m of batch.messages) {
      const text = new TextDecoder().decode(m.body);
      if (text === "fail") throw new Error("asked to fail");
      console.log(greet(env.GREETING, text));
    }
  },
};
