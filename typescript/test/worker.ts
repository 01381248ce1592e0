// A type test of src/worker.d.ts and src/client.d.ts: `npm run typecheck`
// compiles it. Each `@ts-expect-error` line MUST be a type error: if the
// declarations stop rejecting it, tsc fails with "Unused '@ts-expect-error'".
import type { Worker, QueueProducer, QueueBatch } from "../src/worker.js";
import { createClient, Forms, bodyText } from "../src/client.js";

interface Env {
  TASKS: QueueProducer;
  GREETING: string;
}

const worker = {
  async fetch(request, env) {
    const id: string = await env.TASKS.send(await request.text(), { delaySeconds: 5 });
    const ids: string[] = await env.TASKS.sendBatch([{ body: new Uint8Array([1, 2]) }, { body: "b", delaySeconds: 0 }]);
    // @ts-expect-error: send takes no unknown option (the host rejects it invalid_body)
    await env.TASKS.send("x", { delay: 5 });
    // @ts-expect-error: a body is a string, an ArrayBuffer or a view, not a number
    await env.TASKS.send(42);
    // @ts-expect-error: a producer Binding cannot receive
    await env.TASKS.receive();
    return new Response(env.GREETING + id + ids.length);
  },
  async queue(batch, env) {
    for (const m of batch.messages) {
      const text = new TextDecoder().decode(m.body);
      if (m.attempts > 3) await batch.retry(m.id, 60);
      else if (text) await batch.acknowledge(m.id);
      // @ts-expect-error: Cloudflare's message.ack() does not exist here: batch.acknowledge(m.id)
      m.ack();
      // @ts-expect-error: messages are read-only
      m.attempts = 1;
    }
    const { acknowledgeAll } = batch; // bound methods
    await acknowledgeAll();
    // @ts-expect-error: retry needs the message ID
    await batch.retry();
    void env.GREETING;
  },
} satisfies Worker<Env>;

export default worker;

export function settleAll(b: QueueBatch): Promise<void> {
  return b.retryAll(30);
}

export async function listQueues(baseUrl: string, token: string): Promise<string[]> {
  const host = createClient({ baseUrl, token });
  const { data, error } = await host.GET("/v2/spaces/{space}/resources", { params: { path: { space: "demo" } } });
  if (error) throw new Error(`${error.code}: ${error.detail ?? error.title}`);
  // @ts-expect-error: a path the Host API does not have
  await host.GET("/v2/nothing-here");
  return (data?.items ?? []).filter((r) => r.formUrl === Forms.queue).map((r) => r.name);
}

// Pull a lease and settle it: the lease routes are typed like every other.
export async function pullOnce(baseUrl: string, token: string, space: string, uid: string): Promise<string[]> {
  const host = createClient({ baseUrl, token });
  const { data, error } = await host.POST("/v2/spaces/{space}/resources/{uid}/leases", {
    params: { path: { space, uid } },
    body: { maxMessages: 10, waitSeconds: 5 },
  });
  if (error) throw new Error(error.code);
  // @ts-expect-error: waitSeconds is a number of seconds, not a string
  await host.POST("/v2/spaces/{space}/resources/{uid}/leases", { params: { path: { space, uid } }, body: { waitSeconds: "5" } });
  const leaseId = data.leaseId;
  if (!leaseId) return [];
  await host.POST("/v2/spaces/{space}/resources/{uid}/leases/{leaseId}/settle", {
    params: { path: { space, uid, leaseId } },
    body: { acknowledge: data.messages.map((m) => m.id), retry: [] },
  });
  return data.messages.map(bodyText);
}
