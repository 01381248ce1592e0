package delivery

// QueueConfig is what the engine needs of an AtLeastOnceQueue 0.2.0 resource.
type QueueConfig struct {
	UID                     string
	Name                    string // the resource name; batches carry it
	DeliveryDelaySeconds    int
	MessageRetentionSeconds int
	// Paused is the host extension "inactive delivery" (spec/peers.md):
	// sends are accepted and retention runs, but no batch starts; batches
	// already running finish and settle as usual (retries and
	// dead-lettering included). Clearing it resumes delivery at once.
	Paused bool
	// Serialized is the host extension "serialized queue" (the Offering
	// "serialized", spec/peers.md §Serialized queues): messages are
	// delivered strictly in accept order, one batch at a time, taken from
	// the head only when no batch of the queue is in flight; a retried
	// head stays the head. Fixed when the queue is added.
	Serialized bool
	// External is set for a queue whose messages live on a broker
	// (runtime/broker): messages can reach it without a send through
	// this engine (another producer, a copy an earlier run left), and
	// are added with Adopt, so the engine indexes them by ID.
	External bool
}

// ConsumerConfig is what the engine needs of a QueueConsumer 0.3.0 resource.
type ConsumerConfig struct {
	UID                    string
	Name                   string // the resource name; dead-letter metadata records it
	QueueUID               string
	WorkerUID              string
	MaxBatchSize           int
	MaxBatchTimeoutSeconds int
	MaxConcurrency         int
	MaxRetries             int
	RetryDelaySeconds      int
	DeadLetterQueueUID     string // empty: discard after the last retry
	// Pull makes it a pull consumer (spec/peers.md §Pull consumers): no
	// worker (WorkerUID empty); batches are formed only by Lease, of up to
	// the size asked, and MaxBatchSize, MaxBatchTimeoutSeconds and
	// MaxConcurrency are not used (give 1, 0, 1).
	Pull bool
}
