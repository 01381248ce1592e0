package main

// edit replaces Search by Replace in File (relative to the module root).
//
// A Go file's edit is anchored by a marker: Mark names the line that ends
// in the comment "// mutate:NAME" (several markers share one comment:
// "// mutate:a mutate:b"), and Search must occur exactly once in that line
// and the lines after it that Search spans, markers left out. So a mutant
// survives its code moving and the rest of its file changing, and Search
// is only as long as the change needs ("if " -> "if false && " keeps
// working when the condition is reworded). A file that cannot hold a
// comment (a JSON schema) has no Mark: Search must occur exactly once in
// the whole file.
type edit struct {
	File, Mark, Search, Replace string
}

// mutation is one deliberate single-rule breakage of the reference host.
type mutation struct {
	ID     string
	Rule   string // Form (or Host API) and section, as the scenario tags name them
	What   string // the breakage, in words
	Edits  []edit
	Tags   string   // the kit's tag expression for the run: tags joined by "," (OR) only
	Slow   bool     // the run includes @slow scenarios (conform -slow)
	Expect []string // scenario names (without an outline's " #n"); at least one must fail
}

// mutations is the list of the mutation check (features/README.md).
var mutations = []mutation{
	{
		ID:   "second-consumer",
		Rule: "QueueConsumer 0.3.0 @consumer-rules (QC-DELIV-32)",
		What: "allow a second consumer of the same queue (skip the consumer_conflict check)",
		Edits: []edit{{
			File:    "controller/form_consumer.go",
			Mark:    "second-consumer",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags:   "@consumer-rules",
		Expect: []string{"a second consumer of the same queue is consumer_conflict"},
	},
	{
		ID:   "queue-immutable",
		Rule: "QueueConsumer 0.3.0 @consumer-rules (QC-INPUT-5, QC-CRUD-6)",
		What: "accept an update that changes a consumer's queue",
		Edits: []edit{{
			File:    "controller/form_consumer.go",
			Mark:    "queue-immutable",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags:   "@consumer-rules",
		Expect: []string{"changing queue or worker is invalid_spec"},
	},
	{
		ID:   "max-retries-first",
		Rule: "QueueConsumer 0.3.0 @retries (QC-DELIV-27, QC-INPUT-10)",
		What: "count the first delivery in maxRetries (exhausted at attempts >= maxRetries)",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "max-retries-first-1",
			Search:  "1+c.cfg.",
			Replace: "c.cfg.",
		}, {
			File:    "runtime/delivery/queue.go",
			Mark:    "max-retries-first-2",
			Search:  ">= 1+cfg.",
			Replace: ">= cfg.",
		}},
		Tags:   "@retries",
		Expect: []string{"maxRetries counts redeliveries, not the first delivery"},
	},
	{
		ID:   "retry-delay-ignored",
		Rule: "QueueConsumer 0.3.0 @retries (QC-DELIV-21, QC-INPUT-11)",
		What: "retry(id) without a delay retries at once instead of after retryDelaySeconds",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "retry-delay-ignored",
			Search:  "cfg.RetryDelaySeconds",
			Replace: "0",
		}},
		Tags:   "@retries",
		Expect: []string{"retry without a delay waits retryDelaySeconds"},
	},
	{
		ID:   "throw-delay-ignored",
		Rule: "QueueConsumer 0.3.0 @retries (QC-DELIV-26, QC-INPUT-11)",
		What: "a handler that throws has its unsettled messages retried at once, not after retryDelaySeconds",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "throw-delay-ignored",
			Search:  "+int64(cfg.RetryDelaySeconds)*1000",
			Replace: "",
		}},
		Tags:   "@retries",
		Expect: []string{"a throw retries after retryDelaySeconds"},
	},
	{
		ID:   "dlq-keeps-attempts",
		Rule: "QueueConsumer 0.3.0 @retries (QC-DELIV-30, QC-DELIV-31)",
		What: "a dead-lettered message keeps its attempts in the dead-letter queue instead of starting as a new message",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "dlq-keeps-attempts",
			Search:  "now+delay, 0,",
			Replace: "now+delay, m.attempts,",
		}},
		Tags:   "@retries",
		Expect: []string{"an exhausted message moves to the dead-letter queue as a new message"},
	},
	{
		ID:   "settlement-reversed",
		Rule: "QueueConsumer 0.3.0 @settlement (QC-DELIV-23)",
		What: "let a settled message be settled again (no already_settled: retry after acknowledge is accepted)",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "settlement-reversed",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags: "@settlement",
		Expect: []string{
			"acknowledge settles a message; a second settlement is already_settled and nothing is reversed",
			"retry returns a message for redelivery; acknowledging it afterwards is already_settled",
		},
	},
	{
		ID:   "ack-after-throw",
		Rule: "QueueConsumer 0.3.0 @settlement (QC-DELIV-26)",
		What: "a handler that throws or rejects has its unsettled messages acknowledged instead of retried",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "ack-after-throw",
			Search:  "case outSuccess:\n\t\t\tp.ack = append(p.ack, bm.m)\n\t\tcase outFailure, outTimeout:",
			Replace: "case outSuccess, outFailure:\n\t\t\tp.ack = append(p.ack, bm.m)\n\t\tcase outTimeout:",
		}},
		Tags: "@settlement",
		Expect: []string{
			"a handler that rejects retries what it left unsettled",
			"a handler that throws synchronously retries what it left unsettled",
		},
	},
	{
		ID:   "stale-batch-settles",
		Rule: "QueueConsumer 0.3.0 @settlement (QC-DELIV-15, QC-DELIV-24)",
		What: "a settlement method called after its invocation ended resolves instead of rejecting with unknown_batch",
		Edits: []edit{{
			File:    "runtime/js/queue.go",
			Mark:    "stale-batch-settles",
			Search:  "return nil, call(ctx)",
			Replace: "if err := call(ctx); err != nil && abi.Code(err) != \"unknown_batch\" {\n\t\t\treturn nil, err\n\t\t}\n\t\treturn nil, nil",
		}},
		Tags: "@settlement",
		Expect: []string{
			"after the handler returned, every method of its batch is unknown_batch",
			"after the handler threw, every method of its batch is unknown_batch",
		},
	},
	{
		ID:   "max-batch-size",
		Rule: "QueueConsumer 0.3.0 @batch (QC-DELIV-8, QC-INPUT-7)",
		What: "a batch takes maxBatchSize + 1 messages",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "max-batch-size",
			Search:  "c.cfg.MaxBatchSize &&",
			Replace: "c.cfg.MaxBatchSize+1 &&",
		}},
		Tags:   "@batch",
		Expect: []string{"no batch holds more than maxBatchSize messages"},
	},
	{
		ID:   "max-concurrency",
		Rule: "QueueConsumer 0.3.0 @batch (QC-INPUT-9)",
		What: "ignore maxConcurrency (dispatch while batches are in flight)",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "max-concurrency",
			Search:  "c.inflight < c.cfg.MaxConcurrency && ",
			Replace: "",
		}},
		Tags: "@batch",
		Expect: []string{
			"no more than maxConcurrency batches run at once",
			"maxConcurrency 1 runs one batch at a time",
		},
	},
	{
		ID:   "consumer-unknown-field",
		Rule: "QueueConsumer 0.3.0 @spec-validation (QC-UNK-1, QC-INPUT-15)",
		What: "accept an unknown spec field (the consumer spec schema's additionalProperties is true)",
		Edits: []edit{{
			File:    "schemas/queueconsumer-0.3.0.spec.json",
			Search:  `"additionalProperties": false`,
			Replace: `"additionalProperties": true`,
		}},
		Tags:   "@spec-validation",
		Expect: []string{"an unknown spec field is refused"},
	},
	{
		ID:   "queue-unknown-field",
		Rule: "AtLeastOnceQueue 0.2.0 @spec-validation (Q-INPUT-7, Q-UNK-1)",
		What: "accept an unknown spec field (the queue spec schema's additionalProperties is true)",
		Edits: []edit{{
			File:    "schemas/atleastoncequeue-0.2.0.spec.json",
			Search:  `"additionalProperties": false`,
			Replace: `"additionalProperties": true`,
		}},
		Tags: "@spec-validation",
		Expect: []string{
			"an unknown spec field is refused, not ignored or stored",
			"an update with an unknown spec field is refused and changes nothing",
		},
	},
	{
		ID:   "integer-literal",
		Rule: "QueueConsumer 0.3.0 / AtLeastOnceQueue 0.2.0 @spec-validation (QC-INPUT-1, Q-INPUT-1)",
		What: "accept 5.0 (a fraction or exponent literal) as an integer",
		Edits: []edit{{
			File:    "schemas/validate.go",
			Mark:    "integer-literal",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags: "@spec-validation",
		Expect: []string{
			"a consumer setting out of range or not an integer is invalid_spec",
			"an out-of-range, missing or converted integer is invalid_spec",
		},
	},
	{
		ID:   "dlq-cycle-long",
		Rule: "QueueConsumer 0.3.0 @dead-letter-cycles (QC-DELIV-34, QC-OWN-4)",
		What: "detect only a self-referencing dead-letter queue, not cycles of length >= 2",
		Edits: []edit{{
			File:    "controller/form_consumer.go",
			Mark:    "dlq-cycle-long",
			Search:  "\tok, err := walk(q)\n",
			Replace: "\tok, err := dlq == q, error(nil)\n\tif ok {\n\t\tpath = []string{q}\n\t}\n",
		}},
		Tags: "@dead-letter-cycles",
		Expect: []string{
			"a cycle of length 2 is refused on create",
			"a cycle of length 3 is refused on create",
			"a cycle of length 3 is refused on update, and the consumer keeps its settings",
		},
	},
	{
		ID:   "cross-space-reference",
		Rule: "QueueConsumer 0.3.0 @references (QC-DELIV-2, Q-REF-3)",
		What: "resolve a reference in every space, not only the consumer's own",
		Edits: []edit{{
			File:    "controller/space.go",
			Mark:    "cross-space-reference",
			Search:  "&& r.Space",
			Replace: "&& false && r.Space",
		}},
		Tags:   "@references",
		Expect: []string{"a queue of another space is refused like a missing one"},
	},
	{
		ID:   "reference-read-permission",
		Rule: "QueueConsumer 0.3.0 / AtLeastOnceQueue 0.2.0 @authorization (QC-OWN-9, Q-REF-6)",
		What: "skip the read-permission check on referenced resources (a reference grants permission)",
		Edits: []edit{{
			File:    "controller/admission.go",
			Mark:    "reference-read-permission",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags:   "@authorization",
		Expect: []string{"a reference grants no permission: an editor of versions who cannot read queues cannot bind one"},
	},
	{
		ID:   "send-authorised-at-call",
		Rule: "AtLeastOnceQueue 0.2.0 @producer-binding (Q-REF-6, Q-BIND-13)",
		What: "skip the call-time send authorisation of the principal the version runs as",
		Edits: []edit{{
			File:    "host/wiring.go",
			Mark:    "send-authorised-at-call",
			Search:  "!p.Can(space, form, auth.Write",
			Replace: "(false && !p.Can(space, form, auth.Write)",
		}},
		Tags:   "@authorization",
		Expect: []string{"producer calls are authorised at call time for the principal the version runs as"},
	},
	{
		ID:   "unselected-version-binding",
		Rule: "AtLeastOnceQueue 0.2.0 @deletion (Q-OPS-15, Q-BIND-17)",
		What: "allow deleting a queue named only by a WorkerVersion that no ModuleWorker selects",
		Edits: []edit{{
			File:    "controller/admission.go",
			Mark:    "unselected-version-binding",
			Search:  "\tif len(deps) > 0 {\n",
			Replace: "\tkept := deps[:0]\n\tfor _, d := range deps {\n\t\tby, _ := c.space(space, uid, p).ReferencedBy(ctx, d.Resource.UID)\n\t\tsel := d.Resource.FormURL != schemas.FormWorkerVersion\n\t\tfor _, w := range by {\n\t\t\tsel = sel || w.Resource.FormURL == schemas.FormModuleWorker\n\t\t}\n\t\tif sel {\n\t\t\tkept = append(kept, d)\n\t\t}\n\t}\n\tdeps = kept\n\tif len(deps) > 0 {\n",
		}},
		Tags:   "@deletion",
		Expect: []string{"a queue named by an unselected, never-run WorkerVersion is dependency_conflict"},
	},
	{
		ID:   "send-batch-101",
		Rule: "AtLeastOnceQueue 0.2.0 @producer-binding (Q-BIND-8, Q-BIND-13)",
		What: "sendBatch accepts 101 messages",
		Edits: []edit{{
			File:    "runtime/js/bindings.go",
			Mark:    "send-batch-101-1",
			Search:  "MaxSendBatch",
			Replace: "MaxSendBatch+1",
		}, {
			File:    "runtime/delivery/engine.go",
			Mark:    "send-batch-101-2",
			Search:  "MaxSendBatch",
			Replace: "MaxSendBatch+1",
		}},
		Tags:   "@producer-binding",
		Expect: []string{"sendBatch of 0 or 101 messages is batch_too_large"},
	},
	{
		ID:   "send-batch-not-atomic",
		Rule: "AtLeastOnceQueue 0.2.0 @producer-binding (Q-BIND-8, Q-UNK-4)",
		What: "sendBatch sends the messages before the first invalid one and resolves with their IDs (not atomic)",
		Edits: []edit{{
			File:    "runtime/js/bindings.go",
			Mark:    "send-batch-not-atomic",
			Search:  "\t\t\tif err != nil {\n\t\t\t\treturn in.rejected(in.codeError(fmt.Errorf(\"sendBatch: message %d: %w\", i, err)))\n\t\t\t}",
			Replace: "\t\t\tif err != nil {\n\t\t\t\treturn in.send(b, msgs[:i], true)\n\t\t\t}",
		}},
		Tags:   "@producer-binding",
		Expect: []string{"sendBatch is atomic: one bad message sends nothing"},
	},
	{
		ID:   "message-too-large",
		Rule: "AtLeastOnceQueue 0.2.0 @producer-binding (Q-BIND-11)",
		What: "accept a body of 127001 bytes (limit off by one)",
		Edits: []edit{{
			File:    "runtime/js/bindings.go",
			Mark:    "message-too-large-1",
			Search:  "MaxBodyBytes",
			Replace: "MaxBodyBytes+1",
		}, {
			File:    "runtime/delivery/engine.go",
			Mark:    "message-too-large-2",
			Search:  "MaxBodyBytes",
			Replace: "MaxBodyBytes+1",
		}},
		Tags:   "@producer-binding",
		Expect: []string{"a body of 127001 bytes is message_too_large, counting UTF-8 bytes of a string"},
	},
	{
		ID:   "send-options-open",
		Rule: "AtLeastOnceQueue 0.2.0 @producer-binding (Q-BIND-6, Q-UNK-4)",
		What: "ignore unknown members of send's options",
		Edits: []edit{{
			File:    "runtime/js/bindings.go",
			Mark:    "send-options-open",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags:   "@producer-binding",
		Expect: []string{"send options are closed and delaySeconds is an integer in 0..43200"},
	},
	{
		ID:   "send-delay-loses",
		Rule: "AtLeastOnceQueue 0.2.0 @delivery-delay (Q-INPUT-3, Q-BIND-10)",
		What: "the queue's deliveryDelaySeconds wins over a send's delaySeconds",
		Edits: []edit{{
			File:    "runtime/delivery/engine.go",
			Mark:    "send-delay-loses",
			Search:  "if m.Delay != nil {\n\t\t\tdelay = *m.Delay",
			Replace: "if m.Delay != nil && defDelay == 0 {\n\t\t\tdelay = *m.Delay",
		}},
		Tags:   "@delivery-delay",
		Expect: []string{"a send's delaySeconds wins over the queue's deliveryDelaySeconds"},
	},
	{
		ID:   "delay-update-retimes",
		Rule: "AtLeastOnceQueue 0.2.0 @delivery-delay (Q-OPS-9)",
		What: "an update of deliveryDelaySeconds re-times the messages already accepted",
		Edits: []edit{{
			File:    "runtime/delivery/engine.go",
			Mark:    "delay-update-retimes",
			Search:  "\tq.cfg = cfg\n\tq.sendDelay.Store(int32(cfg.DeliveryDelaySeconds))\n",
			Replace: "\tvar retime []*msg\n\tfor m := q.delayed.pop(); m != nil; m = q.delayed.pop() {\n\t\tretime = append(retime, m)\n\t}\n\tfor _, m := range retime {\n\t\tm.visGen++\n\t\tm.visibleAt = m.acceptedAt + int64(cfg.DeliveryDelaySeconds)*1000\n\t\tq.delayed.push(m)\n\t}\n\tq.cfg = cfg\n\tq.sendDelay.Store(int32(cfg.DeliveryDelaySeconds))\n",
		}},
		Tags:   "@delivery-delay",
		Expect: []string{"an update of deliveryDelaySeconds affects only later sends"},
	},
	{
		ID:   "idempotency-fingerprint",
		Rule: "Host API v2 @idempotency (QC-CRUD-18)",
		What: "replay an Idempotency-Key regardless of the request body",
		Edits: []edit{{
			File:    "controller/admission.go",
			Mark:    "idempotency-fingerprint",
			Search:  "if ",
			Replace: "if false && ",
		}},
		Tags:   "@idempotency",
		Expect: []string{"the same key with another body is idempotency_key_reuse"},
	},
	{
		ID:   "batch-no-wait",
		Rule: "QueueConsumer 0.3.0 @batch (QC-INPUT-8)",
		What: "deliver a batch at once instead of waiting up to maxBatchTimeoutSeconds for it to fill",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "batch-no-wait",
			Search:  "c.cfg.MaxBatchTimeoutSeconds) * 1000",
			Replace: "0) * int64(c.cfg.MaxBatchTimeoutSeconds)",
		}},
		Tags: "@batch",
		Expect: []string{
			"sends spread over less than maxBatchTimeoutSeconds arrive as one batch",
			"a lone message waits for maxBatchTimeoutSeconds before it is delivered",
		},
	},
	{
		ID:   "ackall-reverses-retry",
		Rule: "QueueConsumer 0.3.0 @settlement (QC-DELIV-22, QC-DELIV-23)",
		What: "acknowledgeAll also acknowledges a message retried earlier in the same batch",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "ackall-reverses-retry",
			Search:  "unsettled ",
			Replace: "unsettled || (s.Kind == abi.AcknowledgeAll && bm.st == settled) ",
		}},
		Tags: "@settlement",
		Expect: []string{
			"acknowledgeAll after a retry in the same batch does not reverse the retry",
			"acknowledgeAll after a retryAll in the same batch finds nothing to reverse",
		},
	},
	{
		ID:   "detach-acks-unsettled",
		Rule: "QueueConsumer 0.3.0 @deletion (QC-CRUD-11, QC-CRUD-23)",
		What: "a batch still running when its consumer is deleted acknowledges what its handler left unsettled",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "detach-acks-unsettled",
			Search:  "\tif out == outSuccess && b.noAck {\n\t\tout = outClose\n\t}\n",
			Replace: "\tif b.noAck {\n\t\tout = outSuccess\n\t}\n",
		}},
		Tags:   "@deletion",
		Expect: []string{"deleting a consumer while its handler runs does not acknowledge what the handler left unsettled"},
	},
	{
		ID:   "update-before-checks",
		Rule: "QueueConsumer 0.3.0 @consumer-rules (QC-CRUD-7)",
		What: "apply a consumer update to delivery before the update's own checks (consumer rules, dead-letter cycle) refuse it",
		Edits: []edit{{
			File:    "controller/admission.go",
			Mark:    "update-before-checks",
			Search:  "\tnext := cur\n\tnext.Spec = spec\n\tif err := f.Admit(ctx, sp, next, true); err != nil {\n",
			Replace: "\tnext := cur\n\tnext.Spec = spec\n\tif cur.FormURL == schemas.FormQueueConsumer {\n\t\tif cfg, err := consumerConfigOf(next); err == nil {\n\t\t\tc.env.Engine.UpdateConsumer(ctx, cfg)\n\t\t}\n\t}\n\tif err := f.Admit(ctx, sp, next, true); err != nil {\n",
		}},
		Tags:   "@consumer-rules",
		Expect: []string{"a refused settings update is not applied to delivery, not even before its checks refuse it"},
	},
	{
		ID:   "dlq-cycle-2-update",
		Rule: "QueueConsumer 0.3.0 @dead-letter-cycles (QC-DELIV-34, QC-OWN-4)",
		What: "accept a dead-letter cycle of length 2 when an update closes it",
		Edits: []edit{{
			File:    "controller/form_consumer.go",
			Mark:    "dlq-cycle-2-update-1",
			Search:  "rec store.Resource, _ bool",
			Replace: "rec store.Resource, update bool",
		}, {
			File:    "controller/form_consumer.go",
			Mark:    "dlq-cycle-2-update-2",
			Search:  "return noDeadLetterCycle(ctx, sp, q, spec.DeadLetterQueue.ResourceUid)",
			Replace: "if err := noDeadLetterCycle(ctx, sp, q, spec.DeadLetterQueue.ResourceUid); err != nil && !(update && strings.Count(err.Error(), \" -> \") == 2) { return err }; return nil",
		}},
		Tags:   "@dead-letter-cycles",
		Expect: []string{"a cycle of length 2 is refused on update, and the consumer keeps its settings"},
	},
	{
		ID:   "retention-from-delivery",
		Rule: "AtLeastOnceQueue 0.2.0 @retention (Q-OPS-10, Q-OPS-22)",
		What: "count retention from the message's latest visible time (its last retry) instead of its accept time",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "retention-from-delivery",
			Search:  "m.acceptedAt",
			Replace: "max(m.acceptedAt, m.visibleAt)",
		}},
		Tags:   "@retention",
		Slow:   true,
		Expect: []string{"retention counts from the accept time across retries: a message retried past it is gone, one accepted later is not"},
	},
	{
		ID:   "retention-lazy",
		Rule: "AtLeastOnceQueue 0.2.0 @retention (Q-OPS-22)",
		What: "expire due messages only when something else happens on the queue (no timer for the retention deadline)",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "retention-lazy",
			Search:  "\tif m := q.expiry.peek(); m != nil {\n\t\tconsider(q.expireAt(m))\n\t}\n",
			Replace: "",
		}},
		Tags:   "@retention",
		Slow:   true,
		Expect: []string{"a message expires at its retention deadline without any other activity on the queue"},
	},
	{
		ID:   "ack-before-durable",
		Rule: "QueueConsumer 0.3.0 @checker (QC-CRUD-14, QC-CRUD-15, QC-DELIV-16)",
		What: "an acknowledgement resolves although its write failed (the host acknowledges before the write is durable)",
		Edits: []edit{{
			File:    "runtime/delivery/batch.go",
			Mark:    "ack-before-durable",
			Search:  "\tif err != nil {\n\t\treturn fmt.Errorf(\"%w: %w\", abi.ErrBackendUnavailable, err)\n\t}\n\treturn nil\n}\n\nvar _ abi.Settler",
			Replace: "\treturn nil\n}\n\nvar _ abi.Settler",
		}},
		Tags:   "@checker",
		Expect: []string{"2 queues of 300 messages each while settlements fail for a while"},
	},
	{
		ID:   "serial-two-batches",
		Rule: "host extension @ext-serialized (spec/peers.md §Serialized queues: at most one batch in flight)",
		What: "a serialized queue starts a second batch while one is in flight (up to two at once)",
		Edits: []edit{{
			File:    "runtime/delivery/serial.go",
			Mark:    "serial-two-batches",
			Search:  "len(q.batches) == 0",
			Replace: "len(q.batches) < 2",
		}},
		Tags: "@ext-serialized",
		Expect: []string{
			"one batch at a time, in accept order, whatever maxConcurrency",
			"sends that follow one another are delivered in that order, even while batches run",
			"an explicitly retried head, with its own delay, stays the head",
		},
	},
	{
		ID:   "serial-retry-to-back",
		Rule: "host extension @ext-serialized (spec/peers.md §Serialized queues: a retried head stays the head)",
		What: "a serialized queue orders its messages by visible time, so a retried (or delayed) head goes behind the messages already visible",
		Edits: []edit{{
			File:    "runtime/delivery/engine.go",
			Mark:    "serial-retry-to-back",
			Search:  "bySeq: cfg.Serialized",
			Replace: "",
		}},
		Tags: "@ext-serialized",
		Expect: []string{
			"a thrown head stays the head and is delivered again before the rest",
			"an explicitly retried head, with its own delay, stays the head",
			"a head that exhausts its deliveries is dead-lettered, and the next becomes the head",
			"a delayed send blocks the messages sent after it until it is delivered",
		},
	},
	{
		ID:   "serial-restart-order",
		Rule: "host extension @ext-serialized (spec/peers.md §Serialized queues: the order survives restarts)",
		What: "a serialized queue's IDs carry the accept sequence after random digits, so a restart orders the queue at random",
		Edits: []edit{{
			File:    "runtime/delivery/serial.go",
			Mark:    "serial-restart-order",
			Search:  `fmt.Sprintf("%016x", first+uint64(i)) + hex.EncodeToString(raw[8*i:8*i+8])`,
			Replace: `hex.EncodeToString(raw[8*i:8*i+8]) + fmt.Sprintf("%016x", first+uint64(i))`,
		}},
		Tags:   "@ext-serialized",
		Expect: []string{"accept order survives a restart"},
	},
	{
		ID:   "serial-dlq-restart",
		Rule: "host extension @ext-serialized (spec/peers.md §Serialized queues: a serialized dead-letter queue keeps the order of the moves)",
		What: "a dead-letter move into a serialized queue gives the moved messages random IDs (ordered in memory, not after a restart)",
		Edits: []edit{{
			File:    "runtime/delivery/queue.go",
			Mark:    "serial-dlq-restart",
			Search:  "serialIDs(dlq, first",
			Replace: "newMessageIDs(dlq",
		}},
		Tags:   "@ext-serialized",
		Expect: []string{"dead-lettered messages keep their order in a serialized dead-letter queue across a restart"},
	},
	{
		ID:   "observed-before-observing",
		Rule: "AtLeastOnceQueue 0.2.0 and QueueConsumer 0.3.0 @observed (Q-OBS-2, QC-OBS-1)",
		What: "report a definite observed before the first observation: a queue is created with {queueExists: true, messageCount: 0} and a consumer with every member true, assumed instead of observed",
		Edits: []edit{{
			File:    "controller/admission.go",
			Mark:    "observed-before-observing-1",
			Search:  "emptyObject",
			Replace: "func() json.RawMessage { switch f.URL() { case schemas.FormAtLeastOnceQueue: return json.RawMessage(`{\"queueExists\":true,\"messageCount\":0}`); case schemas.FormQueueConsumer: return json.RawMessage(`{\"queueExists\":true,\"workerExists\":true,\"consumerAttached\":true}`) }; return emptyObject }()",
		}, {
			File:    "controller/admission.go",
			Mark:    "observed-before-observing-2",
			Search:  "\t\"context\"\n\t\"errors\"\n",
			Replace: "\t\"context\"\n\t\"encoding/json\"\n\t\"errors\"\n",
		}},
		Tags:   "@observed",
		Expect: []string{"observed stays {} until the host's first observation, though the Operations succeeded"},
	},
}
