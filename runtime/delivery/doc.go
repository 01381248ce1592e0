// Package delivery is the host's delivery engine for AtLeastOnceQueue 0.2.0
// and QueueConsumer 0.3.0: it accepts messages (Send), delivers them in
// batches to each consumer's queue handler, applies the handler's
// settlements, retries, dead-letters, discards and expires messages, and
// recovers all of it from the store after a restart. Every change of a
// message is one store.Apply that is durable before anyone is told.
//
// # Scheduling
//
// There is no polling loop over messages. Each queue holds, in memory:
//
//   - a map of its messages (IDs, times, attempts; bodies stay in the
//     store and are read with Store.Bodies at delivery);
//   - a "delayed" order of messages not yet visible, ordered by visible
//     time, and an "available" order of messages already visible, ordered
//     by visible time, then accept time, then accept order (input order
//     within one Send): the stable batch order;
//   - an expiry order by accept time. Retention is one duration per
//     queue, so the order of deadlines is the accept order whatever the
//     current messageRetentionSeconds; an update of retention changes only
//     the deadline of the first and applies to existing messages at once.
//
// The three orders are msgOrder (order.go): a sorted run plus a heap for
// the few messages that arrive out of order, with lazy removal, so that
// sending, delivering and acknowledging a message cost O(1) in the usual
// case however long the backlog.
//
// Each queue has at most one timer (Options.Clock), armed only for its
// next due event: the next expiry, the next message becoming visible, the
// batch fill deadline, or the end of a backoff. Whenever something changes
// (a send, a settlement, a batch ending, a configuration update, the timer
// firing) the queue's pump runs under the queue's lock: it expires what is
// due, forms the batches that are due, starts background writes, and
// re-arms or stops the timer. An empty queue, or one whose consumer is at
// maxConcurrency, arms no delivery timer; an idle queue costs no goroutine
// and no timer, so ten thousand queues with consumers cost only memory.
// Store I/O and handlers never run under a queue's lock: they run in a
// goroutine per batch (or per background write).
//
// A batch is due when the consumer has fewer than maxConcurrency batches in
// flight and either maxBatchSize messages are available (delivered at once)
// or the first available message has been visible for
// maxBatchTimeoutSeconds (0: at once). It takes up to maxBatchSize messages
// from the front of the available order.
//
// # Lease and settlement lifecycle
//
// A batch goes dispatching → running → closing → closed.
//
//   - dispatching: its messages are leased in memory (no other batch can
//     take them). The handler is resolved (Resolver); the bodies are read;
//     then ONE store.Apply(DeliverMessages) durably increments attempts and
//     records the lease. A resolution, body or write failure delivers
//     nothing and counts nothing: the messages go back unchanged and the
//     consumer backs off (1s, doubling, at most 1 min).
//   - running: the handler has the batch (Message.Attempts is the new
//     count, 1 on the first delivery). Settlements are accepted. Each
//     settlement marks its messages "settling" so exactly one of
//     concurrent settlements of a message wins (a later one waits for the
//     first: ErrAlreadySettled if it succeeded, its own attempt if it
//     failed), writes one store.Apply, and returns only after it is
//     durable. A store failure returns ErrBackendUnavailable and leaves the
//     message unsettled. Once accepted, a settlement's write is not
//     abandoned when its ctx ends (the handler's context, which the engine
//     cancels when the invocation ends): closing waits for it, and only the
//     store decides its outcome.
//   - closing: the invocation ended (return, error or panic, time limit,
//     or closed by Detach/Stop/RemoveQueue). From here every settlement
//     is ErrUnknownBatch. Once no settlement is in flight, the engine
//     settles what is left unsettled in one Apply: acknowledged (return
//     nil), retried after retryDelaySeconds (error, panic, time limit), or
//     left as it is (closed by the host). Then the batch is closed and its
//     concurrency slot freed.
//
// A retry of a message that has already had 1+maxRetries deliveries is a
// dead-letter move (RemoveMessages(dead_lettered) and AcceptMessage into the
// DLQ as a new message, in one Apply, then added to the DLQ's memory and
// pumped) or a discard (RemoveMessages(discarded)). The same happens to an
// exhausted message found in the available order (after a restart, a failed
// finalization, or a lowered maxRetries): it is never delivered again.
//
// # Tracing
//
// With Options.Tracer (package telemetry) the engine reports a span per
// Send, per batch handed to a handler, per attempt at a message (linked to
// its send and to its previous attempt) and per settlement (trace.go).
// The send's trace context is stored with each message
// (store.Message.TraceParent) and carried by dead-letter moves, redrives
// and give-backs; the previous attempt's lives in memory only. Without a
// Tracer every hook is one nil test: nothing is allocated or stored.
//
// # Choices where the Forms are silent
//
// These are the engine's decisions, for spec/runtime-abi.md:
//
//  1. Delivery is recorded (attempts+1, lease) durably before the handler
//     sees a batch, so a message that crashes the host still exhausts
//     1+maxRetries deliveries. A failed resolution of the handler, or a
//     failed delivery write, counts nothing and is retried with backoff.
//     A delivery counts as an attempt only once it is recorded AND handed
//     to a handler: a batch closed while its delivery was being recorded
//     (Detach, Stop, Unload), one whose queue's lease ran out meanwhile in
//     a cluster (Remote.Current), and one its handler refused to start
//     (abi.ErrNotStarted: past the lease's end, abi.WithStartBy) give the
//     attempt back, restoring the records as they were in one write; in a
//     cluster nothing is recorded while the lease is running out
//     (Remote.Deliverable). Only when that write fails does the attempt
//     stay counted.
//  2. The batch fill timeout runs from the moment the oldest available
//     message became visible (its visibleAt), so a backlog that built up
//     while the consumer was busy, detached or backing off is delivered at
//     once, in batches of up to maxBatchSize.
//  3. Order within a batch and between batches is visible time, then accept
//     time, then input order of one sendBatch (after a restart: ID order
//     within one millisecond). Delivery is still unordered in general
//     (retries, restarts).
//  4. A settlement method that failed with backend_unavailable settled
//     nothing: the message may be settled again; if the handler ends first,
//     the end-of-invocation rule applies to it.
//  5. acknowledgeAll/retryAll with nothing unsettled succeed as no-ops.
//     Messages currently being settled by a concurrent call are not
//     "unsettled" for them.
//  6. The handler time limit (Options.HandlerTimeout, default 30 s) is
//     measured by the engine's clock. At the limit the handler's context is
//     cancelled with cause ErrHandlerTimeout (wraps
//     context.DeadlineExceeded) and the batch is closed as a throw whether
//     or not the handler returns; with the real clock the context also
//     carries the deadline.
//  7. Retention: a message counts as expired from accept time +
//     messageRetentionSeconds (inclusive), measured with the queue's
//     current setting. Waiting and retry-backoff messages are removed
//     (RemovedExpired) at that instant; a message in a running batch is
//     not yanked from its handler: it is flagged, and removed as expired
//     when it would come back to the queue (retry, throw, close). An
//     acknowledgement still acknowledges it. Once found expired, a message
//     stays expired even if retention is raised before its removal is
//     durable (nothing expired is restored). Expired messages are never
//     delivered.
//  8. Stop stops new batches, lets running handlers finish within the
//     grace period (ctx); a handler that returns then is settled as usual.
//     When ctx ends, the rest are closed without acknowledging anything:
//     unsettled messages stay leased in the store and are redelivered after
//     restart. Sends are accepted during the grace period.
//  9. Detach stops new batches and waits for the consumer's running
//     batches. Explicit settlements made meanwhile count, but a handler
//     that returns normally does NOT acknowledge what it left unsettled:
//     those messages are deliverable again at once (the next consumer sees
//     attempts+1). When ctx ends first, the batches are closed (context
//     cause: the batch was closed) and Detach returns nil if that proves
//     the stop boundary (no settlement in flight); otherwise it returns an
//     error and the consumer stays detaching until Detach is called again.
//     Until then the queue cannot get another consumer.
//  10. Restart (Start): a message with a lease is unsettled from a run that
//     ended: it is visible at once; if it already had 1+maxRetries
//     deliveries it is dead-lettered or discarded without being delivered.
//     Messages a host-closed batch returns (Detach, Stop) follow the
//     same rule.
//  11. A store failure while settling the rest of an ended batch leaves the
//     messages unsettled (leased in the store); they are redelivered after
//     retryDelaySeconds (or dead-lettered/discarded if exhausted).
//  12. A dead-letter move that fails (store failure, DLQ unknown to the
//     engine) moves nothing; the message stays in its queue, is not
//     delivered again, and the move is retried with backoff. The moved
//     message has a new ID, the move time as accept time, attempts 0 (the
//     DLQ's consumer sees 1) and is visible after the DLQ's
//     deliveryDelaySeconds.
//  13. maxRetries, retryDelaySeconds and deadLetterQueue are read when the
//     decision is made (settlement or end of batch), so UpdateConsumer
//     applies to them at once; batch size, timeout and concurrency apply to
//     the next batch. Nothing running is restarted.
//  14. Message and batch IDs are 128 random bits as 32 hex digits, never
//     reused. QueueStats counts messages held (accepted and not yet
//     acknowledged, discarded, moved or removed as expired), including
//     leased ones.
//  15. Send validates the whole batch before any effect (1..100 messages,
//     bodies 1..127000 bytes, delays 0..43200) and accepts all messages in
//     one Apply; the accept time is the engine clock in UTC ms, visibleAt is
//     accept time + (delay ?? the queue's current deliveryDelaySeconds).
//     An update of deliveryDelaySeconds affects only later sends.
//  16. RemoveQueue drops the queue's messages durably (DropQueue), closes
//     its batches and forgets any consumer still attached; the API layer
//     refuses to delete a queue that is referenced.
//  17. A serialized queue (QueueConfig.Serialized, the Offering
//     "serialized") is delivered strictly in accept order, one batch at a
//     time, from its head only; a retried or delayed head blocks what is
//     behind it; its IDs carry the accept order across restarts. See
//     serial.go.
package delivery
