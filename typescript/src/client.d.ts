import type { Client } from "openapi-fetch";
import type { paths, components } from "./api.js";

export type { paths, components };
export type HostClient = Client<paths>;
/** An RFC 9457 problem with the Host API's members. */
export type Problem = components["schemas"]["Problem"];

export interface ClientOptions {
  /** The host's URL, e.g. http://127.0.0.1:8787. */
  baseUrl: string;
  /** A bearer token (tako tokens create ...). */
  token?: string;
  fetch?: typeof globalThis.fetch;
  headers?: Record<string, string>;
}

export declare function createClient(options: ClientOptions): HostClient;

export declare const Forms: {
  readonly queue: "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/";
  readonly consumer: "https://edge.forms.takoform.com/forms/QueueConsumer/0.3.0/";
  readonly worker: "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/";
  readonly version: "https://edge.forms.takoform.com/forms/WorkerVersion/0.5.0/";
  readonly pullConsumer: "https://queuehost.takoform.com/forms/PullConsumer/0.1.0/";
};

/** A message of a lease (POST …/resources/{pullConsumer}/leases). */
export type PulledMessage = components["schemas"]["PulledMessage"];
/** A lease: its ID and expiry when it holds messages. */
export type PullLease = components["schemas"]["PullLease"];

/** A pulled message's body as the bytes that were sent. */
export declare function bodyBytes(message: PulledMessage): Uint8Array;
/** A pulled message's body as text (UTF-8). */
export declare function bodyText(message: PulledMessage): string;
