// A typed Host API v2 client: openapi-fetch over the paths that
// openapi-typescript generates from the reference host's OpenAPI document
// (src/api.d.ts, `npm run generate`). See client.d.ts for the types.
import createFetchClient from "openapi-fetch";

/**
 * createClient returns a client for one host: `client.GET(path, {params})`,
 * `client.POST(path, {params, body})` and so on, every path, parameter,
 * body and answer typed from the OpenAPI document. Problems (RFC 9457) come
 * back in `error`.
 */
export function createClient({ baseUrl, token, fetch: f, headers } = {}) {
  if (!baseUrl) throw new TypeError("createClient: baseUrl is required (the host's URL, e.g. http://127.0.0.1:8787)");
  const h = { ...(headers || {}) };
  if (token) h.Authorization = "Bearer " + token;
  return createFetchClient({ baseUrl: baseUrl.replace(/\/+$/, ""), headers: h, ...(f ? { fetch: f } : {}) });
}

/** Form URLs of the resources the host manages, matched exactly. */
export const Forms = Object.freeze({
  queue: "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/",
  consumer: "https://edge.forms.takoform.com/forms/QueueConsumer/0.3.0/",
  worker: "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/",
  version: "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/",
  pullConsumer: "https://queuehost.takoform.com/forms/PullConsumer/0.1.0/",
});

/**
 * bodyBytes is a pulled message's body as the bytes that were sent: the
 * host answers the UTF-8 text of a body that is valid UTF-8 (bodyEncoding
 * "text") and the base64 of any other (bodyEncoding "base64").
 */
export function bodyBytes(message) {
  if (message.bodyEncoding === "base64") return Uint8Array.from(atob(message.body), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(message.body);
}

/**
 * bodyText is a pulled message's body as text (UTF-8; invalid sequences
 * replaced).
 */
export function bodyText(message) {
  if (message.bodyEncoding === "base64") return new TextDecoder().decode(bodyBytes(message));
  return message.body;
}
