// Shared by the browser tests and the screenshot script: build the host
// and the CLI, start a host on a free port with a fresh data directory, a
// viewer token and the test project applied, and launch Debian's Chromium.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHTTPServer } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const here = fileURLToPath(new URL(".", import.meta.url));
export const repo = resolve(here, "../..");
export const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";

// Why the browser tests cannot run here, or null when they can.
export function skipReason() {
  if (!existsSync(chromiumPath)) return `no Chromium at ${chromiumPath} (apt-get install -y chromium, or set CHROMIUM)`;
  return null;
}

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); });
  });
}

async function waitReady(base, proc) {
  for (let i = 0; i < 300; i++) {
    if (proc.exitCode !== null) throw new Error("the host exited with " + proc.exitCode);
    try { if ((await fetch(base + "/readyz")).ok) return; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the host did not become ready at " + base);
}

function stop(proc) {
  return new Promise((ok) => {
    if (proc.exitCode !== null) return ok();
    proc.once("exit", () => ok());
    proc.kill("SIGTERM");
  });
}

export async function startHost() {
  const tmp = mkdtempSync(join(tmpdir(), "takohost-console-"));
  const bin = join(tmp, "bin");
  execFileSync("go", ["build", "-o", bin + "/takohost", "./cmd/takohost"], { cwd: repo, stdio: "inherit" });
  execFileSync("go", ["build", "-o", bin + "/tako", "./cmd/tako"], { cwd: repo, stdio: "inherit" });
  const data = join(tmp, "data");
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  // An OTLP/HTTP sink that takes every export, so that the host traces
  // (and a message's page links to its trace) without a collector.
  const sink = createHTTPServer((req, res) => { req.resume(); req.on("end", () => { res.writeHead(200, { "content-type": "application/x-protobuf" }); res.end(); }); });
  await new Promise((ok) => sink.listen(0, "127.0.0.1", ok));
  sink.unref();
  const tracing = ["-otlp-endpoint", `http://127.0.0.1:${sink.address().port}`, "-trace-url", "http://traces.example/trace/{traceId}"];
  const run = async () => {
    const proc = spawn(bin + "/takohost", ["-data", data, "-listen", `127.0.0.1:${port}`, ...tracing], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (b) => { log = (log + b).slice(-20000); });
    proc.log = () => log;
    await waitReady(base, proc);
    return proc;
  };
  // First start writes host.json and the admin token; the viewer's token
  // is added to host.json, which the host reads at its next start.
  let proc = await run();
  await stop(proc);
  const created = execFileSync(bin + "/tako", ["tokens", "create", "viewer", "-grant", "demo:viewer", "-data", data, "-output", "json"], { encoding: "utf8" });
  const viewerToken = JSON.parse(created.trim().split("\n").pop()).token;
  // an editor of workers only, who reads the rest of the space
  const workerEditor = execFileSync(bin + "/tako", ["tokens", "create", "worker-editor", "-grant", "demo:editor:worker", "-grant", "demo:viewer", "-data", data, "-output", "json"], { encoding: "utf8" });
  const workerEditorToken = JSON.parse(workerEditor.trim().split("\n").pop()).token;
  proc = await run();
  const adminToken = readFileSync(join(data, "admin-token"), "utf8").trim();
  const tako = (...args) => execFileSync(bin + "/tako", [...args, "-host", base, "-token-file", join(data, "admin-token")], { cwd: join(here, "project"), encoding: "utf8" });
  tako("apply");
  const host = {
    base, adminToken, viewerToken, workerEditorToken, tako, proc,
    async api(method, path, body) {
      const res = await fetch(base + path, {
        method, body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
        headers: { Authorization: "Bearer " + adminToken, ...(body !== undefined && typeof body !== "string" ? { "Content-Type": "application/json" } : {}) },
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
      try { return JSON.parse(text); } catch { return text; }
    },
    async byName(name) {
      for (let token = ""; ;) {
        const page = await host.api("GET", "/v2/spaces/demo/resources?limit=500" + (token ? "&pageToken=" + encodeURIComponent(token) : ""));
        const r = page.items.find((x) => x.name === name);
        if (r) return r;
        if (!page.nextPageToken) throw new Error("no resource " + name);
        token = page.nextPageToken;
      }
    },
    // fetchWorker calls the hello worker's fetch handler: path "backlog?n=5",
    // "binary", or any other with a body that goes on tasks.
    async fetchWorker(path, body) {
      const w = await host.byName("hello");
      return host.api("POST", `/v2/spaces/demo/resources/${w.uid}/fetch/${path}`, body ?? "");
    },
    async close() {
      await stop(proc);
      rmSync(tmp, { recursive: true, force: true });
    },
  };
  return host;
}

export async function launch() {
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
}

// signIn opens the console and signs in with token on space demo.
export async function signIn(browser, host, token) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error" && !/status of 4(00|03|04|12)/.test(m.text())) errors.push(m.text()); });
  page.errors = errors;
  await page.goto(host.base + "/console/");
  await page.getByLabel("Token").fill(token);
  await page.getByLabel("Space", { exact: true }).fill("demo");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "demo: queues" }).waitFor();
  return page;
}
