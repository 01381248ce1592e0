// How the console behaves at the sizes the issue names: a space with
// QUEUES queues (default: up to the host's limit of 10 000 resources in a
// space, beside the test project's 6) and a queue with MESSAGES messages
// (default 1 000 000). Prints how long each page takes to show, in a real
// browser, and the stats route's latency, which the queue page polls.
// `make console-scale` (minutes: filling the queue dominates).
import { launch, signIn, skipReason, startHost } from "./lib.mjs";

let QUEUES = Number(process.env.QUEUES ?? 0);
const MESSAGES = Number(process.env.MESSAGES ?? 1000000);
const reason = skipReason();
if (reason) { console.error("scale run skipped: " + reason); process.exit(1); }

const host = await startHost();
const browser = await launch();
const pool = async (n, width, f) => {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => { while (next < n) await f(next++); }));
};
const ms = (t0) => Math.round(performance.now() - t0);
try {
  const existing = (await host.api("GET", "/v2/spaces/demo/resources?limit=500")).items.length;
  if (!QUEUES) QUEUES = 10000 - existing;
  let t0 = performance.now();
  await pool(QUEUES, 16, (i) => host.api("POST", "/v2/spaces/demo/resources", {
    name: "q-" + String(i).padStart(5, "0"), formUrl: "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/",
    spec: { messageRetentionSeconds: 86400 },
  }));
  console.log(`created ${QUEUES} queues in ${ms(t0)} ms (the space holds ${QUEUES + existing} resources)`);
  t0 = performance.now();
  const per = 1000;
  await pool(Math.ceil(MESSAGES / per), 4, () => host.fetchWorker("backlog?n=" + per));
  console.log(`sent ${MESSAGES} messages to backlog in ${ms(t0)} ms`);
  const backlog = await host.byName("backlog");
  const lat = [];
  for (let i = 0; i < 20; i++) {
    const t = performance.now();
    const s = await host.api("GET", `/v2/spaces/demo/resources/${backlog.uid}/stats`);
    lat.push(performance.now() - t);
    if (i === 0) console.log(`stats: ${s.messages} messages`);
  }
  lat.sort((a, b) => a - b);
  console.log(`stats route: median ${lat[10].toFixed(1)} ms, max ${lat[19].toFixed(1)} ms over 20 calls`);

  t0 = performance.now();
  const page = await signIn(browser, host, host.adminToken);
  await page.locator("tbody tr").first().waitFor();
  console.log(`sign in to the first page of queues: ${ms(t0)} ms`);
  for (let i = 1; i <= 3; i++) {
    t0 = performance.now();
    await page.getByRole("button", { name: "Next page" }).click();
    await page.getByText(`Page ${i + 1} ·`).waitFor();
    console.log(`queues page ${i + 1}: ${ms(t0)} ms`);
  }
  t0 = performance.now();
  await page.goto(host.base + "/console/#/s/demo/r/" + backlog.uid);
  await page.locator('[data-stat="Messages"]').waitFor();
  console.log(`queue page with ${MESSAGES} messages, counts shown: ${ms(t0)} ms`);
  await page.locator("tr[data-message-id]").first().waitFor();
  console.log(`queue page, first page of messages shown: ${ms(t0)} ms`);
  for (let i = 1; i <= 3; i++) {
    t0 = performance.now();
    await page.getByRole("button", { name: "Next page" }).click();
    await page.getByText(`Page ${i + 1} ·`).waitFor();
    console.log(`messages page ${i + 1}: ${ms(t0)} ms`);
  }
  t0 = performance.now();
  await page.getByRole("button", { name: "Pause delivery" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Confirm" }).click();
  await page.getByRole("status").filter({ hasText: "Delivery paused." }).waitFor();
  console.log(`pause confirmed and shown: ${ms(t0)} ms`);
} finally {
  await browser.close();
  await host.close();
}
process.exit(0);
