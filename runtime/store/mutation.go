package store

// Mutation is one change to the store's state. The set is closed: every
// backend must understand each of these types, and nothing else.
type Mutation interface{ mutation() }

// PutResource creates or replaces a resource record (full replacement).
type PutResource struct{ Resource Resource }

// DeleteResource removes a resource record; its name is free again.
type DeleteResource struct{ UID string }

// PutOperation creates or replaces an Operation record.
type PutOperation struct{ Operation Operation }

// DeleteOperation forgets a finished Operation (see Store.ExpireRecords).
type DeleteOperation struct{ ID string }

// PutIdempotency creates or replaces an idempotency record.
type PutIdempotency struct{ Record IdempotencyRecord }

// DeleteIdempotency forgets an expired idempotency record.
type DeleteIdempotency struct{ Scope, Key string }

// AcceptMessage stores a new message with its body. Message.Size must equal
// len(Body). Accepting an ID that already exists in the queue replaces it
// (compaction rewrites live messages this way).
type AcceptMessage struct {
	Message Message
	Body    []byte
}

// DeliverMessages records one delivery of each message to a batch: attempts
// is incremented and Lease set to Batch. Unknown IDs are skipped. A
// VisibleAt other than 0 also sets the messages' visible time: a pull
// consumer's lease (spec/peers.md §Pull consumers) records its expiry
// there, so that a restart keeps the lease until then.
type DeliverMessages struct {
	Queue     string
	Batch     string
	IDs       []string
	VisibleAt int64
}

// ExtendLease moves the visible time of the listed messages still leased
// by Lease to VisibleAt (a pull lease extended while work runs). Messages
// unknown or leased by another batch are skipped; attempts are unchanged.
type ExtendLease struct {
	Queue     string
	Lease     string
	IDs       []string
	VisibleAt int64
}

// RetryMessage releases a message's lease and makes it visible again at
// VisibleAt (UTC epoch milliseconds). Attempt, when set, is the delivery
// that ended so, appended to the message's history (AppendAttempt).
type RetryMessage struct {
	Queue     string
	ID        string
	VisibleAt int64
	Attempt   *Attempt
}

// Removal reasons, kept for logs and counters.
const (
	RemovedAcknowledged = "acknowledged"
	RemovedExpired      = "expired"
	RemovedDiscarded    = "discarded"     // retries exhausted, no dead-letter queue
	RemovedDeadLettered = "dead_lettered" // moved; the AcceptMessage for the new one is in the same Apply
	RemovedRedriven     = "redriven"      // moved back by a redrive; the AcceptMessage for the new one is in the same Apply
)

// RemoveMessages deletes messages from a queue for Reason.
type RemoveMessages struct {
	Queue  string
	IDs    []string
	Reason string
}

// DropQueue deletes every message of a queue (the queue was deleted).
type DropQueue struct{ Queue string }

func (PutResource) mutation()       {}
func (DeleteResource) mutation()    {}
func (PutOperation) mutation()      {}
func (DeleteOperation) mutation()   {}
func (PutIdempotency) mutation()    {}
func (DeleteIdempotency) mutation() {}
func (AcceptMessage) mutation()     {}
func (DeliverMessages) mutation()   {}
func (ExtendLease) mutation()       {}
func (RetryMessage) mutation()      {}
func (RemoveMessages) mutation()    {}
func (DropQueue) mutation()         {}
