package harness

import (
	"context"
	"fmt"
)

// Topology is the small graph every scenario uses: a work queue whose
// consumer dead-letters into dlq, a dlq consumer, one ModuleWorker with
// one WorkerVersion (worker.js) that has a producer Binding WORK on the
// work queue.
type Topology struct {
	Space                  string
	Queue, DLQ             string // UIDs
	QueueName, DLQName     string
	Worker, Version        string
	Consumer, DLQConsumer  string
	QueueSpec              map[string]any
	ConsumerSpec, DLQCSpec map[string]any
}

// TopologyOptions tunes the topology.
type TopologyOptions struct {
	Space       string
	RecorderURL string
	Scope       string
	// MaxRetries of the work consumer (2 when zero; -1 for 0).
	MaxRetries   int
	MaxBatchSize int // 5 when zero
	Concurrency  int // 2 when zero
	// Secrets, when set, are the version's privateInputs.secrets.
	Secrets map[string]string
	// NoConsumers skips both consumers.
	NoConsumers bool
	// Offering, when set, is the offering of both queues ("serialized").
	Offering string
}

// QueueSpec is a valid AtLeastOnceQueue spec.
func QueueSpec(delay int) map[string]any {
	return map[string]any{"deliveryDelaySeconds": delay, "messageRetentionSeconds": 86400}
}

// CreateTopology creates the topology and waits for every Operation.
func CreateTopology(ctx context.Context, c *Client, o TopologyOptions) (*Topology, error) {
	if o.MaxRetries == 0 {
		o.MaxRetries = 2
	} else if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.MaxBatchSize == 0 {
		o.MaxBatchSize = 5
	}
	if o.Concurrency == 0 {
		o.Concurrency = 2
	}
	t := &Topology{Space: o.Space, QueueName: "work", DLQName: "dead"}
	var err error
	t.QueueSpec = QueueSpec(0)
	if t.Queue, err = c.CreateIn(ctx, o.Space, t.QueueName, FormQueue, o.Offering, t.QueueSpec, nil); err != nil {
		return nil, err
	}
	if t.DLQ, err = c.CreateIn(ctx, o.Space, t.DLQName, FormQueue, o.Offering, QueueSpec(0), nil); err != nil {
		return nil, err
	}
	if t.Worker, err = c.Create(ctx, o.Space, "w", FormWorker, map[string]any{"handlers": []string{"fetch", "queue"}}, nil); err != nil {
		return nil, err
	}
	vspec := map[string]any{
		"worker":     Ref(t.Worker),
		"mainModule": "worker.js",
		"modules":    []any{map[string]any{"name": "worker.js", "content": WorkerJS}},
		"vars":       map[string]any{"RECORDER": o.RecorderURL, "SCOPE": o.Scope, "DLQ": t.DLQName},
		"queueProducerBindings": []any{
			map[string]any{"name": "WORK", "resource": Ref(t.Queue)},
			map[string]any{"name": "DEAD", "resource": Ref(t.DLQ)},
		},
	}
	var private any
	if len(o.Secrets) > 0 {
		private = map[string]any{"secrets": o.Secrets}
	}
	if t.Version, err = c.Create(ctx, o.Space, "w-v1", FormVersion, vspec, private); err != nil {
		return nil, err
	}
	if err = c.Put(ctx, o.Space, t.Worker, map[string]any{"handlers": []string{"fetch", "queue"}, "version": Ref(t.Version)}); err != nil {
		return nil, fmt.Errorf("select version: %w", err)
	}
	if o.NoConsumers {
		return t, nil
	}
	t.ConsumerSpec = map[string]any{
		"queue": Ref(t.Queue), "worker": Ref(t.Worker),
		"maxBatchSize": o.MaxBatchSize, "maxBatchTimeoutSeconds": 0, "maxConcurrency": o.Concurrency,
		"maxRetries": o.MaxRetries, "retryDelaySeconds": 0, "deadLetterQueue": Ref(t.DLQ),
	}
	if t.Consumer, err = c.Create(ctx, o.Space, "work-consumer", FormConsumer, t.ConsumerSpec, nil); err != nil {
		return nil, err
	}
	t.DLQCSpec = map[string]any{
		"queue": Ref(t.DLQ), "worker": Ref(t.Worker),
		"maxBatchSize": 10, "maxBatchTimeoutSeconds": 0, "maxConcurrency": 1,
		"maxRetries": 100, "retryDelaySeconds": 0,
	}
	if t.DLQConsumer, err = c.Create(ctx, o.Space, "dead-consumer", FormConsumer, t.DLQCSpec, nil); err != nil {
		return nil, err
	}
	return t, nil
}

// SendResult is the worker's answer to a /send fetch.
type SendResult struct {
	OK      bool     `json:"ok"`
	IDs     []string `json:"ids"`
	Name    string   `json:"name"`
	Message string   `json:"message"`
}

// Send sends bodies through the worker's fetch route and binding. The
// error is non-nil when the fetch itself did not answer 200 (then the
// outcome is unknown); res.OK false means the Binding rejected.
func Send(ctx context.Context, c *Client, space, worker, binding string, bodies []string) (*SendResult, *Response, error) {
	r, err := c.Do(ctx, "POST", "/v2/spaces/"+space+"/resources/"+worker+"/fetch/send",
		map[string]any{"binding": binding, "bodies": bodies}, nil)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != 200 {
		return nil, r, fmt.Errorf("fetch /send: %s", r)
	}
	var sr SendResult
	if err := r.JSON(&sr); err != nil {
		return nil, r, err
	}
	return &sr, r, nil
}
