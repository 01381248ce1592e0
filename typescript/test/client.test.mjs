// The typed Host API client against a running host: TAKOHOST_URL and
// TAKOHOST_TOKEN name it (tests/e2e/typescript_test.go starts one and runs
// this file). Without them the test fails: it is never silently skipped.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, Forms } from "../src/client.js";

const baseUrl = process.env.TAKOHOST_URL;
const token = process.env.TAKOHOST_TOKEN;
const space = "ts-client";

test("the environment names a host", () => {
  assert.ok(baseUrl, "TAKOHOST_URL is not set: run this through tests/e2e (go test -run TypeScript ./tests/e2e/)");
  assert.ok(token, "TAKOHOST_TOKEN is not set");
});

async function settle(host, op) {
  for (let i = 0; i < 200; i++) {
    if (op.state === "succeeded" || op.state === "failed") return op;
    await new Promise((r) => setTimeout(r, 50));
    const { data, error } = await host.GET("/v2/spaces/{space}/operations/{id}", { params: { path: { space, id: op.id } } });
    assert.equal(error, undefined, JSON.stringify(error));
    op = data;
  }
  assert.fail(`operation ${op.id} did not end`);
}

test("create a queue, see it listed, read its stats", async () => {
  const host = createClient({ baseUrl, token });
  const { data: op, error, response } = await host.POST("/v2/spaces/{space}/resources", {
    params: { path: { space } },
    body: { name: "orders", formUrl: Forms.queue, spec: { deliveryDelaySeconds: 0, messageRetentionSeconds: 3600 } },
  });
  assert.equal(error, undefined, JSON.stringify(error));
  assert.equal(response.status, 202);
  const done = await settle(host, op);
  assert.equal(done.state, "succeeded", JSON.stringify(done));
  const list = await host.GET("/v2/spaces/{space}/resources", { params: { path: { space } } });
  assert.equal(list.error, undefined);
  const q = list.data.items.find((r) => r.name === "orders");
  assert.ok(q, "the new queue is listed");
  assert.equal(q.formUrl, Forms.queue);
  const stats = await host.GET("/v2/spaces/{space}/resources/{uid}/stats", { params: { path: { space, uid: q.uid } } });
  assert.equal(stats.error, undefined, JSON.stringify(stats.error));
});

test("a bad request answers a problem with its code, and changes nothing", async () => {
  const host = createClient({ baseUrl, token });
  const { data, error, response } = await host.POST("/v2/spaces/{space}/resources", {
    params: { path: { space } },
    body: { name: "Not A Name", formUrl: Forms.queue, spec: {} },
  });
  assert.equal(data, undefined);
  assert.ok(response.status >= 400 && response.status < 500, `status ${response.status}`);
  assert.match(response.headers.get("content-type"), /^application\/problem\+json/);
  assert.equal(typeof error.code, "string");
  assert.ok(error.code.length > 0);
  const list = await host.GET("/v2/spaces/{space}/resources", { params: { path: { space } } });
  assert.ok(!list.data.items.some((r) => r.name === "Not A Name"));
});

test("without a token the host answers 401 with a problem", async () => {
  const host = createClient({ baseUrl });
  const { error, response } = await host.GET("/v2/spaces/{space}/resources", { params: { path: { space } } });
  assert.equal(response.status, 401);
  assert.equal(typeof error.code, "string");
});

test("publish to the queue (spec/peers.md §Publish): text and bytes, a retry with its Idempotency-Key answers the same IDs", async () => {
  const host = createClient({ baseUrl, token });
  const list = await host.GET("/v2/spaces/{space}/resources", { params: { path: { space } } });
  const q = list.data.items.find((r) => r.name === "orders");
  assert.ok(q, "the queue of the first test");
  const bytes = Buffer.from([0xff, 0x00, 0x7b]).toString("base64");
  const publish = () => host.POST("/v2/spaces/{space}/resources/{uid}/messages", {
    params: { path: { space, uid: q.uid }, header: { "Idempotency-Key": "node-order-1" } },
    body: { messages: [{ body: "from a Node program" }, { body: bytes, bodyEncoding: "base64", delaySeconds: 0 }] },
  });
  const first = await publish();
  assert.equal(first.error, undefined, JSON.stringify(first.error));
  assert.equal(first.data.messageIds.length, 2);
  const again = await publish();
  assert.deepEqual(again.data.messageIds, first.data.messageIds);
  assert.equal(again.response.headers.get("idempotent-replayed"), "true");
  const msgs = await host.GET("/v2/spaces/{space}/resources/{uid}/messages", { params: { path: { space, uid: q.uid } } });
  assert.equal(msgs.error, undefined, JSON.stringify(msgs.error));
  assert.deepEqual(msgs.data.items.map((m) => Buffer.from(m.bodyPreview, "base64").toString("base64")),
    [Buffer.from("from a Node program").toString("base64"), bytes], "the two messages once, bytes intact");
  const tooMany = await host.POST("/v2/spaces/{space}/resources/{uid}/messages", {
    params: { path: { space, uid: q.uid } }, body: { messages: [] },
  });
  assert.equal(tooMany.response.status, 400);
  assert.equal(tooMany.error.code, "batch_too_large");
});
