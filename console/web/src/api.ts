// The Host API client: every request carries the tab's token from
// sessionStorage (never a URL), and every refusal becomes an ApiError
// holding the RFC 9457 problem the host answered.
import { FORM_URLS } from "./forms.gen";

export interface Problem {
  type?: string; title: string; status: number; detail?: string; code?: string; requestId?: string;
  errors?: { pointer?: string; detail?: string; message?: string; [k: string]: unknown }[];
}

export interface Resource {
  uid: string; name: string; space: string; formUrl: string; offering: string;
  spec: any; observed: any; output: any; state: string; generation: number; etag: string;
  createTime: string; updateTime: string;
}

export interface Operation {
  id: string; kind: string; resourceUid: string; state: string; effect: string;
  error?: Problem; idempotencyKey?: string; createTime: string; updateTime: string;
}

export interface Page<T> { items: T[]; nextPageToken?: string }

const TOKEN = "takohost.console.token";
const SPACE = "takohost.console.space";

export const session = {
  get token(): string | null { return sessionStorage.getItem(TOKEN); },
  set token(v: string | null) { v ? sessionStorage.setItem(TOKEN, v) : sessionStorage.removeItem(TOKEN); },
  get space(): string | null { return sessionStorage.getItem(SPACE); },
  set space(v: string | null) { v ? sessionStorage.setItem(SPACE, v) : sessionStorage.removeItem(SPACE); },
};

export class ApiError extends Error {
  constructor(public problem: Problem) {
    super(problem.title + (problem.detail ? ": " + problem.detail : ""));
  }
}

let onUnauthenticated: (p: Problem) => void = () => {};
export function setUnauthenticatedHandler(f: (p: Problem) => void) { onUnauthenticated = f; }

export async function call<T>(method: string, path: string, body?: unknown, opts: { quiet401?: boolean; token?: string; signal?: AbortSignal; headers?: Record<string, string> } = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json, application/problem+json" };
  const token = opts.token ?? session.token;
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  Object.assign(headers, opts.headers ?? {});
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store", credentials: "omit", signal: opts.signal });
  } catch (e) {
    if (opts.signal?.aborted) throw e;
    throw new ApiError({ title: "The host could not be reached", status: 0, detail: String(e), code: "network" });
  }
  const text = await res.text();
  let data: any = undefined;
  if (text) {
    try { data = JSON.parse(text); } catch { data = undefined; }
  }
  if (!res.ok) {
    const p: Problem = data && typeof data.title === "string"
      ? data
      : { title: res.statusText || "HTTP " + res.status, status: res.status, detail: text.slice(0, 500) };
    if (res.status === 401 && !opts.quiet401) onUnauthenticated(p);
    throw new ApiError(p);
  }
  return data as T;
}

export const enc = encodeURIComponent;

export function spacePath(space: string, rest = ""): string {
  return "/v2/spaces/" + enc(space) + rest;
}

// The Form URLs come from the spec (forms.gen.ts, written by make generate).
export const FORMS = {
  queue: FORM_URLS.AtLeastOnceQueue,
  consumer: FORM_URLS.QueueConsumer,
  worker: FORM_URLS.ModuleWorker,
  version: FORM_URLS.WorkerVersion,
} as const;

export type Kind = keyof typeof FORMS | "other";

export function kindOf(formUrl: string): Kind {
  const m = /\/forms\/([A-Za-z]+)\//.exec(formUrl);
  switch (m?.[1]) {
    case "AtLeastOnceQueue": return "queue";
    case "QueueConsumer": return "consumer";
    case "ModuleWorker": return "worker";
    case "WorkerVersion": return "version";
  }
  return "other";
}

export function formName(formUrl: string): string {
  const m = /\/forms\/([A-Za-z]+)\/([^/]+)\//.exec(formUrl);
  return m ? m[1] + " " + m[2] : formUrl;
}

// listAll reads up to maxPages pages of the space's resources of one Form
// (500 each): enough to find the references to one resource in a space of
// tens of thousands without reading it whole. scanned says how many were
// read, complete whether that was all of them.
export async function listAll(space: string, formUrl: string, maxPages = 10): Promise<{ items: Resource[]; complete: boolean }> {
  const items: Resource[] = [];
  let token: string | undefined;
  for (let i = 0; i < maxPages; i++) {
    const q = new URLSearchParams({ formUrl, limit: "500" });
    if (token) q.set("pageToken", token);
    const page = await call<Page<Resource>>("GET", spacePath(space, "/resources?" + q));
    items.push(...page.items);
    token = page.nextPageToken;
    if (!token) return { items, complete: true };
  }
  return { items, complete: false };
}

// The extension routes this host serves, read once from its OpenAPI
// document, so the console offers purge or redrive only where they exist.
let routes: Promise<Set<string>> | null = null;
export function hostRoutes(): Promise<Set<string>> {
  if (!routes) {
    routes = call<any>("GET", "/v2/openapi.json").then((doc) => {
      const out = new Set<string>();
      for (const [p, item] of Object.entries<any>(doc.paths ?? {})) {
        for (const m of Object.keys(item)) {
          if (["get", "put", "post", "delete", "patch"].includes(m)) out.add(m.toUpperCase() + " " + p);
        }
      }
      return out;
    }).catch(() => new Set<string>());
  }
  return routes;
}
