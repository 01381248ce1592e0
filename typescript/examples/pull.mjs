// An application that is not part of the host: it publishes to a queue and
// consumes it over HTTP through this package as its users import it
// (@takoform/queuehost), as tests/e2e's TestPullClientsInGoAndNode runs it
// beside a Go program doing the same through the Go client.
//
//   node examples/pull.mjs publish PREFIX N   publish PREFIX-1..PREFIX-N
//   node examples/pull.mjs drain LIMIT        lease and acknowledge up to LIMIT
//                                             messages, printing each body,
//                                             until a lease comes back empty
//
// TAKOHOST_URL, TAKOHOST_TOKEN, TAKOHOST_SPACE, QUEUE_UID and CONSUMER_UID
// name the host, the token, the space, the queue and the pull consumer.
import { createClient, bodyText } from "@takoform/queuehost";

const env = process.env;
const host = createClient({ baseUrl: env.TAKOHOST_URL, token: env.TAKOHOST_TOKEN });
const space = env.TAKOHOST_SPACE;
const [mode, a, b] = process.argv.slice(2);

function fail(what, error) {
  console.error(`pull.mjs: ${what}: ${error.code} ${error.detail ?? ""}`);
  process.exit(1);
}

if (mode === "publish") {
  const messages = Array.from({ length: Number(b) }, (_, i) => ({ body: `${a}-${i + 1}` }));
  const { error } = await host.POST("/v2/spaces/{space}/resources/{uid}/messages", {
    params: { path: { space, uid: env.QUEUE_UID } },
    body: { messages },
  });
  if (error) fail("publish", error);
} else if (mode === "drain") {
  const uid = env.CONSUMER_UID;
  const limit = Number(a);
  for (let done = 0; done < limit; ) {
    const { data, error } = await host.POST("/v2/spaces/{space}/resources/{uid}/leases", {
      params: { path: { space, uid } },
      body: { maxMessages: Math.min(3, limit - done), waitSeconds: 1 },
    });
    if (error) fail("pull", error);
    if (data.messages.length === 0) break;
    const settled = await host.POST("/v2/spaces/{space}/resources/{uid}/leases/{leaseId}/settle", {
      params: { path: { space, uid, leaseId: data.leaseId } },
      body: { acknowledge: data.messages.map((m) => m.id) },
    });
    if (settled.error) fail("settle", settled.error);
    for (const m of data.messages) console.log(bodyText(m));
    done += data.messages.length;
  }
} else {
  console.error("usage: node examples/pull.mjs publish PREFIX N | drain LIMIT");
  process.exit(2);
}
