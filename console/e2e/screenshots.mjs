// Screenshots of the console's main pages at 1280×800, for the README:
// `make console-screenshots` (docs/console/*.png).
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { launch, repo, signIn, skipReason, startHost } from "./lib.mjs";

const reason = skipReason();
if (reason) { console.error("screenshots skipped: " + reason); process.exit(1); }
const out = join(repo, "docs", "console");
mkdirSync(out, { recursive: true });
const host = await startHost();
const browser = await launch();
try {
  await host.fetchWorker("backlog?n=40");
  await host.fetchWorker("binary");
  await host.fetchWorker("x", "world");
  await host.fetchWorker("x", "fail: the order total is negative");
  const shot = async (page, name) => { await page.waitForTimeout(300); await page.screenshot({ path: join(out, name + ".png") }); console.log("docs/console/" + name + ".png"); };

  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const login = await ctx.newPage();
  await login.goto(host.base + "/console/");
  await shot(login, "login");

  // backlog is consumed by nobody: paused, it shows the paused state
  await host.api("PUT", `/v2/spaces/demo/resources/${(await host.byName("backlog")).uid}/delivery`, { active: false });
  const page = await signIn(browser, host, host.adminToken);
  await page.locator("td.state", { hasText: "paused" }).waitFor();
  await shot(page, "resources");
  await page.getByRole("link", { name: "backlog", exact: true }).click();
  await page.getByRole("heading", { name: "Backlog, last hour" }).waitFor();
  for (let i = 0; i < 6; i++) { await host.fetchWorker("backlog?n=15"); await page.waitForTimeout(2100); }
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot(page, "queue");
  await page.getByRole("button", { name: /^Open message/ }).first().click();
  await page.locator("#message-detail").scrollIntoViewIfNeeded();
  await shot(page, "message");
  await page.goto(host.base + "/console/#/s/demo/r/" + (await host.byName("tasks-dead")).uid);
  await page.getByRole("button", { name: /^Open message/ }).first().click();
  await page.locator("#message-detail").scrollIntoViewIfNeeded();
  await shot(page, "dead-letter");
  await page.getByRole("button", { name: "Redrive" }).click();
  await page.getByRole("dialog").waitFor();
  await shot(page, "redrive-confirm");
  await page.getByRole("dialog").getByRole("button", { name: "Confirm" }).click();
  await page.locator('[data-operation][data-state="succeeded"]').waitFor({ timeout: 30000 });
  await page.evaluate(() => window.scrollTo(0, 0));
  await shot(page, "redrive-done");
  await page.goto(host.base + "/console/#/s/demo/r/" + (await host.byName("hello")).uid);
  await page.locator("#log div").first().waitFor();
  await page.locator("#invocations tr[data-outcome]").first().waitFor();
  await shot(page, "worker");
  await page.evaluate(() => document.getElementById("log").previousElementSibling.previousElementSibling.previousElementSibling.scrollIntoView());
  await shot(page, "worker-log");
  await page.goto(host.base + "/console/#/s/demo/ops");
  await page.getByRole("heading", { name: "Operations" }).waitFor();
  await shot(page, "operations");
  const viewer = await signIn(browser, host, host.viewerToken);
  await viewer.goto(host.base + "/console/#/s/demo/r/" + (await host.byName("tasks")).uid);
  await viewer.locator("#action-reason").waitFor();
  await viewer.evaluate(() => window.scrollTo(0, 0));
  await shot(viewer, "viewer-queue");
} finally {
  await browser.close();
  await host.close();
}
process.exit(0);
