// Types of the worker ABI of the Takoform queue host: what a ModuleWorker's
// main module exports and what the host hands it (spec/runtime-abi.md).
// Every name and rule here is that document's; where the two disagree, the
// document wins and this file is a bug.
//
// Use: `import type { Worker, QueueBatch, QueueProducer } from "@takoform/queuehost/worker";`
// then `export default { async queue(batch, env) { ... } } satisfies Worker<Env>;`

/** The body of a message as sent: a string (sent as its UTF-8 bytes), an
 * ArrayBuffer or any ArrayBufferView (the viewed bytes only); 1..127000
 * bytes. */
export type MessageBody = string | ArrayBuffer | ArrayBufferView;

/** Options of one `send`: `delaySeconds` is an integer 0..43200; when
 * omitted the queue's `deliveryDelaySeconds` at the time of the send
 * applies. Any other member is rejected with `invalid_body`. */
export interface SendOptions {
  delaySeconds?: number;
}

/** One message of a `sendBatch`. Any other member is rejected with
 * `invalid_body`. */
export interface SendBatchMessage {
  body: MessageBody;
  delaySeconds?: number;
}

/** A producer Binding, `env[name]`, for a queue the version binds in
 * `queueProducerBindings`. It can only send: nothing to receive, peek or
 * settle. A resolved Promise means the host accepted and durably stored
 * the message(s), not that they were delivered.
 *
 * Rejections (`Error.name`): `invalid_body`, `message_too_large` (a body
 * over 127000 bytes), `batch_too_large` (0 or more than 100 messages),
 * `backend_unavailable`. */
export interface QueueProducer {
  /** Sends one message; resolves with the host-issued message ID. */
  send(body: MessageBody, options?: SendOptions): Promise<string>;
  /** Sends 1..100 messages atomically (all or none); resolves with their
   * IDs in input order. */
  sendBatch(messages: readonly SendBatchMessage[]): Promise<string[]>;
}

/** The `Error.name` of a producer Binding's rejection. */
export type SendErrorName = "invalid_body" | "message_too_large" | "batch_too_large" | "backend_unavailable";

/** One message of a batch. Its members are data only: settle it through
 * the batch (`batch.acknowledge(message.id)`), not through the message
 * (Cloudflare's `message.ack()` does not exist here). */
export interface QueueMessage {
  /** 1..256 characters, stable across redeliveries, unique in the queue. */
  readonly id: string;
  /** The accept time, UTC epoch milliseconds, stable across redeliveries. */
  readonly timestampMillis: number;
  /** The original bytes, a fresh copy per delivery. */
  readonly body: ArrayBuffer;
  /** 1 on the first delivery, +1 on each redelivery. */
  readonly attempts: number;
}

/** The batch a queue handler receives. The settlement methods are bound to
 * it (`const { acknowledge } = batch` works) and resolve with `undefined`
 * once the settlement is durable. After the invocation ends every method
 * rejects `unknown_batch`.
 *
 * When the handler returns, every unsettled message is acknowledged; when
 * it throws, rejects or runs past the host's time limit, settled results
 * stand and every unsettled message is retried after the consumer's
 * `retryDelaySeconds`. */
export interface QueueBatch {
  /** 1..256 characters, unique per delivery. */
  readonly id: string;
  /** The queue resource's name. */
  readonly queue: string;
  /** 1..maxBatchSize messages. */
  readonly messages: readonly QueueMessage[];
  /** Settles one message of this batch as delivered. Rejects
   * `unknown_batch`, `unknown_message`, `already_settled`,
   * `backend_unavailable`; a non-string ID rejects with a TypeError. */
  acknowledge(messageId: string): Promise<void>;
  /** Returns one message to the queue, visible again after `delaySeconds`
   * (an integer 0..43200; a RangeError otherwise) or, when omitted, the
   * consumer's `retryDelaySeconds`. Same rejections as `acknowledge`. */
  retry(messageId: string, delaySeconds?: number): Promise<void>;
  /** Acknowledges every message not yet settled (a no-op when none is).
   * Rejects `unknown_batch`, `backend_unavailable`. */
  acknowledgeAll(): Promise<void>;
  /** Retries every message not yet settled (a no-op when none is). */
  retryAll(delaySeconds?: number): Promise<void>;
}

/** The `Error.name` of a settlement's rejection. */
export type SettlementErrorName = "unknown_batch" | "unknown_message" | "already_settled" | "backend_unavailable";

/** The third argument of a handler. */
export interface ExecutionContext {
  /** Extends the invocation until the promise settles, within the time
   * limit. */
  waitUntil(promise: Promise<unknown>): void;
}

/** `env`: the version's vars and secrets (strings) and producer Bindings,
 * each by its name. Declare yours as an interface:
 * `interface Env { TASKS: QueueProducer; GREETING: string }`. */
export type Env = Record<string, string | QueueProducer>;

/** A ModuleWorker's default export. A worker declares in its spec which
 * handlers it provides (`fetch`, `queue`); a QueueConsumer's worker must
 * provide `queue`. */
export interface Worker<E = Env> {
  fetch?(request: Request, env: E, ctx: ExecutionContext): Response | Promise<Response>;
  queue?(batch: QueueBatch, env: E, ctx: ExecutionContext): void | Promise<void>;
}
