package delivery

// QueueConfig is what the engine needs of an AtLeastOnceQueue 0.2.0 resource.
type QueueConfig struct {
	UID                     string
	Name                    string // the resource name; batches carry it
	DeliveryDelaySeconds    int
	MessageRetentionSeconds int
}

// ConsumerConfig is what the engine needs of a QueueConsumer 0.3.0 resource.
type ConsumerConfig struct {
	UID                    string
	QueueUID               string
	WorkerUID              string
	MaxBatchSize           int
	MaxBatchTimeoutSeconds int
	MaxConcurrency         int
	MaxRetries             int
	RetryDelaySeconds      int
	DeadLetterQueueUID     string // empty: discard after the last retry
}
