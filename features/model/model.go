// Package model is an executable model of one AtLeastOnceQueue 0.2.0 and its
// QueueConsumer 0.3.0, with a dead-letter queue, on a virtual clock. It is
// written from the Forms (the seeds), spec/runtime-abi.md, spec/peers.md and
// the project's contract decisions alone, not from the delivery engine, so
// that a test can drive the engine and the model with the same operations
// and compare what each lets a worker or an operator see.
//
// # Why a model
//
// Scenarios check the rules one example at a time; a model checks them
// together, on sequences nobody wrote down: a retry delay counted from the
// call, a message expiring while a handler holds it, the last retry of a
// message that is also past retention, a purge while a batch runs. A
// property test (runtime/delivery's model_test.go) generates the sequences
// and shrinks a failing one to a minimal sequence.
//
// # What it decides and where the Forms leave a choice
//
// The model is pure and deterministic: time moves only through AdvanceTo,
// IDs are "m1", "m2", ... in accept order, batches "b1", "b2", ... The rules,
// each from its source:
//
//   - send (Q §producer Binding): accepted now; visible after the message's
//     delaySeconds, or, when it gives none, the queue's deliveryDelaySeconds
//     (an explicit 0 is no delay).
//   - batching (QC §入力, runtime-abi §Delivery engine choices 2, 3, 11): a
//     batch starts when fewer than maxConcurrency batches run, the queue is
//     active (ext-pause), and either maxBatchSize messages are visible or
//     the first visible one has been visible for maxBatchTimeoutSeconds. It
//     takes up to maxBatchSize messages in the order visible time, accept
//     time, accept order. The Forms promise no order; runtime-abi.md fixes
//     this one, and a driver that compares order should say it relies on it.
//   - attempts (Q §producer Binding): 1 on the first delivery, +1 on each,
//     counted when the batch starts (contract decisions: recorded before the
//     handler sees it).
//   - settlement (QC §配信とInterface操作): acknowledge / retry settle one
//     message, the first settlement wins (already_settled), an ID outside the
//     batch is unknown_message, a batch whose invocation ended is
//     unknown_batch; acknowledgeAll / retryAll settle what is unsettled. A
//     handler that returns acknowledges the unsettled, one that throws (or
//     passes the time limit) retries them after retryDelaySeconds.
//   - retry delay (runtime-abi §The queue handler): visible again
//     delaySeconds (or retryDelaySeconds) after the call.
//   - exhaustion (QC §配信とInterface操作): a message retried after 1+maxRetries
//     deliveries is moved to the dead-letter queue as a new message (new ID,
//     accepted now, attempts back to 0 so its first delivery is 1, visible
//     after the dead-letter queue's own deliveryDelaySeconds) or discarded.
//   - retention (Q §操作、失敗、復旧, runtime-abi choice 5): a message
//     expires at accept time + messageRetentionSeconds, boundary included,
//     delivered or not; one in a running batch stays there and is removed
//     as expired when it would return to the queue (an acknowledgement
//     still wins). Expiry comes before delivery and before dead-lettering:
//     an expired message is never delivered and never moved.
//   - restart (runtime-abi §Delivery semantics): running batches end with
//     nothing acknowledged; their unsettled messages are visible at once, or
//     dead-lettered/discarded when their deliveries are used up: "instead"
//     of being delivered, so at the point where a batch would take it (not
//     while the queue is paused or no batch is due; the Forms leave the
//     moment open, spec/runtime-abi.md says only "instead"). "At once"
//     leaves a message's visible time as it was when it was delivered (the
//     Forms do not say; this keeps it ahead of what became visible later,
//     and a backlog is not held back by maxBatchTimeoutSeconds).
//     The visible time of such a "released" message is the host's (at most
//     now); a checker does not rely on it (Message.Released).
//   - detach (QC §CRUD、拒否、障害復旧, runtime-abi choice 7): deleting the
//     consumer acknowledges nothing; what a returning handler left is
//     deliverable again at once, what a throwing one left is retried.
//   - updates (Q §入力, QC §入力, runtime-abi choice 9): a new
//     deliveryDelaySeconds applies to later sends, a new retention at once
//     (nothing expired comes back); consumer settings apply to the next
//     decision and the next batch.
//   - refused sends (Q §WorkerVersionのproducer Binding): 0 or more than 100
//     messages, an empty body, a body over 127000 bytes or a delay outside
//     0..43200 refuse the whole send.
//   - pause, purge, redrive, serialized (spec/peers.md): pause stops new
//     batches only; purge removes every held message, a running batch's
//     included (its later settlements resolve and change nothing); redrive
//     moves the dead-letter queue's messages back as new messages, oldest
//     first; a serialized queue delivers one batch at a time, the head and
//     the visible messages right behind it in accept order.
//
// # Two uses
//
// On its own (SetManual(false), the default) the model forms batches
// itself: an oracle for scenarios. As a checker (SetManual(true)) it
// accepts every batch the Forms and spec/ allow the implementation to
// start (StartBatch) and says when one is owed (Due), because the moment a
// batch starts can depend on the implementation's own timing (a slot that
// frees before a settlement write ends, runtime-abi choice 11).
package model

import (
	"fmt"
	"slices"
	"sort"
)

// Queue names the two queues of the model.
type Queue int

const (
	Main Queue = iota // the consumed queue
	DLQ               // its dead-letter queue (no consumer)
)

func (q Queue) String() string {
	if q == DLQ {
		return "dlq"
	}
	return "main"
}

// QueueConfig is an AtLeastOnceQueue's spec.
type QueueConfig struct {
	DeliveryDelaySeconds    int
	MessageRetentionSeconds int
	// Serialized is the Offering "serialized" (spec/peers.md §Serialized
	// queues): strictly accept order, one batch at a time, from the head.
	Serialized bool
}

// ConsumerConfig is the QueueConsumer's spec and the host's handler limit.
type ConsumerConfig struct {
	MaxBatchSize           int
	MaxBatchTimeoutSeconds int
	MaxConcurrency         int
	MaxRetries             int
	RetryDelaySeconds      int
	DeadLetter             bool // deadLetterQueue names the model's DLQ; false: discard
	// HandlerLimitMillis is the host's handler time limit: an invocation
	// that runs this long ends as a throw. 0: no limit.
	HandlerLimitMillis int64
}

// Message is one message a queue holds.
type Message struct {
	ID         string
	Body       string
	AcceptedAt int64 // virtual ms
	VisibleAt  int64 // virtual ms; meaningful while not in a batch
	Attempts   int
	// Batch is the running batch holding it, "" when none.
	Batch string
	// Retried: its current invisibility is a retry's delay (inspection's
	// retryWaiting), not a send's.
	Retried bool
	// Expired: found past retention while a batch held it; removed when
	// it would return to the queue.
	Expired bool
	// Released: a batch the host closed (restart, detach) left it
	// unsettled; it is visible "at once", at a visible time the Forms do
	// not fix (at most now), so its place in batch order is the host's.
	Released bool
	// DeadLetter is set on a message moved to the DLQ.
	DeadLetter *DeadLetter

	seq        uint64 // accept order
	returnedAt int64  // when it last came back from a batch
	reloaded   bool   // held across a restart: ties are broken by orderKey
	orderKey   string
}

// DeadLetter is where a dead-lettered message came from (spec/peers.md
// §Dead-letter metadata).
type DeadLetter struct {
	SourceID string
	Attempts int   // deliveries it had in the source queue
	At       int64 // virtual ms
}

// Message states of the inspection extension (spec/peers.md §Inspection).
const (
	Available    = "available"
	Delayed      = "delayed"
	RetryWaiting = "retry_waiting"
	InFlight     = "in_flight"
)

// Batch is one delivery.
type Batch struct {
	ID       string
	Started  int64
	Messages []Delivered
	settled  map[string]bool
	ended    bool
}

// Delivered is one message of a batch as the handler sees it.
type Delivered struct {
	ID         string
	Body       string
	AcceptedAt int64
	Attempts   int
}

// Counts are the removals the host reports per queue (runtime/delivery's
// events).
type Counts struct{ Expired, Discarded, DeadLettered int }

// Model is one queue, its consumer and its dead-letter queue.
type Model struct {
	now      int64
	queues   [2]QueueConfig
	C        ConsumerConfig
	paused   bool
	detached bool // the consumer is deleted (QueueConsumer delete)
	manual   bool
	// settledAt is the last instant a batch ended or a message was
	// given up.
	settledAt int64

	msgs    [2]map[string]*Message
	batches map[string]*Batch
	running []string // running batch IDs, in start order
	started []*Batch // batches started since the last TakeStarted
	counts  [2]Counts
	seq     uint64
	nextID  int
	nextB   int
}

// New returns a model at virtual time now.
func New(now int64, main, dlq QueueConfig, c ConsumerConfig) *Model {
	m := &Model{now: now, queues: [2]QueueConfig{main, dlq}, C: c, batches: map[string]*Batch{}}
	m.msgs[Main] = map[string]*Message{}
	m.msgs[DLQ] = map[string]*Message{}
	return m
}

// Now is the virtual time in ms.
func (m *Model) Now() int64 { return m.now }

// Paused reports whether delivery is inactive (ext-pause).
func (m *Model) Paused() bool { return m.paused }

func (m *Model) newID() string { m.nextID++; return fmt.Sprintf("m%d", m.nextID) }

func (m *Model) accept(q Queue, body string, delaySeconds int, dl *DeadLetter) *Message {
	m.seq++
	msg := &Message{ID: m.newID(), Body: body, AcceptedAt: m.now, VisibleAt: m.now + int64(delaySeconds)*1000, seq: m.seq, DeadLetter: dl}
	m.msgs[q][msg.ID] = msg
	return msg
}

// Outgoing is one message of a send; Delay nil means the queue's
// deliveryDelaySeconds.
type Outgoing struct {
	Body  string
	Delay *int
}

// Producer Binding limits (Q §WorkerVersionのproducer Binding).
const (
	MaxSendBatch    = 100
	MaxBodyBytes    = 127000
	MaxDelaySeconds = 43200
)

// Send refusals (Error.name; an out-of-range delay is a RangeError,
// spec/runtime-abi.md §Producer Bindings).
const (
	BatchTooLarge   = "batch_too_large"
	MessageTooLarge = "message_too_large"
	InvalidBody     = "invalid_body"
	InvalidDelay    = "RangeError"
)

// CheckSend is what a send of msgs is refused with, OK when it is
// accepted; a refused send accepts nothing. An empty body is refused
// (spec/runtime-abi.md, decided there).
func CheckSend(msgs []Outgoing) string {
	if len(msgs) == 0 || len(msgs) > MaxSendBatch {
		return BatchTooLarge
	}
	for _, o := range msgs {
		switch {
		case len(o.Body) == 0:
			return InvalidBody
		case len(o.Body) > MaxBodyBytes:
			return MessageTooLarge
		case o.Delay != nil && (*o.Delay < 0 || *o.Delay > MaxDelaySeconds):
			return InvalidDelay
		}
	}
	return OK
}

// Send accepts messages into the main queue atomically and returns their
// IDs in input order, or the refusal of CheckSend and no IDs.
func (m *Model) Send(msgs []Outgoing) ([]string, string) {
	if code := CheckSend(msgs); code != OK {
		return nil, code
	}
	ids := make([]string, len(msgs))
	for i, o := range msgs {
		d := m.queues[Main].DeliveryDelaySeconds
		if o.Delay != nil {
			d = *o.Delay
		}
		ids[i] = m.accept(Main, o.Body, d, nil).ID
	}
	m.pump()
	return ids, OK
}

func (m *Model) expiry(q Queue, msg *Message) int64 {
	return msg.AcceptedAt + int64(m.queues[q].MessageRetentionSeconds)*1000
}

// NextEvent is the earliest virtual time after now at which the model
// changes on its own (a message becomes visible or expires, a batch is
// due, a handler reaches its limit); ok false when nothing is pending.
func (m *Model) NextEvent() (t int64, ok bool) {
	consider := func(x int64) {
		if x > m.now && (!ok || x < t) {
			t, ok = x, true
		}
	}
	for q := range m.msgs {
		for _, msg := range m.msgs[q] {
			if !msg.Expired {
				consider(m.expiry(Queue(q), msg))
			}
			if msg.Batch == "" && Queue(q) == Main {
				consider(msg.VisibleAt)
			}
		}
	}
	if m.serial() {
		if run := m.headRun(); len(run) > 0 && !m.paused && !m.detached && len(m.running) == 0 {
			consider(run[0].VisibleAt + int64(m.C.MaxBatchTimeoutSeconds)*1000)
		}
	} else if avail := m.available(); len(avail) > 0 && !m.paused && !m.detached && len(m.running) < m.C.MaxConcurrency {
		consider(avail[0].VisibleAt + int64(m.C.MaxBatchTimeoutSeconds)*1000)
	}
	if m.C.HandlerLimitMillis > 0 {
		for _, id := range m.running {
			consider(m.batches[id].Started + m.C.HandlerLimitMillis)
		}
	}
	return t, ok
}

// AdvanceTo moves the virtual time to t, processing every event on the
// way at its own time.
func (m *Model) AdvanceTo(t int64) {
	for {
		next, ok := m.NextEvent()
		if !ok || next > t {
			break
		}
		m.now = next
		m.pump()
	}
	if t > m.now {
		m.now = t
	}
	m.pump()
}

// available is the main queue's visible messages in batch order.
func (m *Model) available() []*Message {
	var out []*Message
	for _, msg := range m.msgs[Main] {
		if msg.Batch == "" && msg.VisibleAt <= m.now {
			out = append(out, msg)
		}
	}
	sort.Slice(out, func(i, j int) bool { return less(out[i], out[j]) })
	return out
}

// less is the batch order: visible time, accept time, accept order (after
// a restart, the host's order within one accept millisecond: spec/peers.md
// §Inspection, the store loads by accept time then ID).
func less(a, b *Message) bool {
	if a.VisibleAt != b.VisibleAt {
		return a.VisibleAt < b.VisibleAt
	}
	if a.AcceptedAt != b.AcceptedAt {
		return a.AcceptedAt < b.AcceptedAt
	}
	if a.reloaded && b.reloaded {
		return a.orderKey < b.orderKey
	}
	if a.reloaded != b.reloaded {
		return a.reloaded
	}
	return a.seq < b.seq
}

// pump applies what is due at now: expiry, handler limits, new batches.
func (m *Model) pump() {
	for q := range m.msgs {
		for id, msg := range m.msgs[q] {
			if msg.Expired || m.now < m.expiry(Queue(q), msg) {
				continue
			}
			if msg.Batch != "" {
				msg.Expired = true
				continue
			}
			delete(m.msgs[q], id)
			m.counts[q].Expired++
		}
	}
	if m.C.HandlerLimitMillis > 0 {
		for _, id := range slices.Clone(m.running) {
			if b := m.batches[id]; m.now >= b.Started+m.C.HandlerLimitMillis {
				m.end(b, true)
			}
		}
	}
	for !m.manual && m.due() {
		if m.serial() {
			run := m.headRun()
			if run[0].Attempts >= 1+m.C.MaxRetries {
				m.giveUp(run[0])
				continue
			}
			m.start(run)
			continue
		}
		avail := m.available()
		var take []*Message
		for _, msg := range avail {
			if len(take) == m.C.MaxBatchSize {
				break
			}
			if msg.Attempts >= 1+m.C.MaxRetries {
				// left by a restart with its deliveries used up: given
				// up where it would have been delivered
				m.giveUp(msg)
				continue
			}
			take = append(take, msg)
		}
		if len(take) > 0 {
			m.start(take)
		}
	}
}

// due reports whether a batch would start now: the queue is active, a
// concurrency slot is free, and maxBatchSize messages are visible or the
// first has been visible for maxBatchTimeoutSeconds.
func (m *Model) due() bool {
	if m.paused || m.detached || len(m.running) >= m.C.MaxConcurrency {
		return false
	}
	if m.serial() {
		run := m.headRun()
		return len(m.running) == 0 && len(run) > 0 &&
			(len(run) >= m.C.MaxBatchSize || m.now >= run[0].VisibleAt+int64(m.C.MaxBatchTimeoutSeconds)*1000)
	}
	avail := m.available()
	return len(avail) > 0 && (len(avail) >= m.C.MaxBatchSize || m.now >= avail[0].VisibleAt+int64(m.C.MaxBatchTimeoutSeconds)*1000)
}

func (m *Model) serial() bool { return m.queues[Main].Serialized }

// headRun is a serialized queue's next batch: the head (the held message
// accepted first) and the messages right behind it, in accept order, up
// to maxBatchSize, stopping at the first one not yet visible; empty when
// the head is not visible or is in a batch (spec/peers.md §Serialized
// queues: delays do not reorder, a retried head stays the head). A head
// whose deliveries are used up is returned alone: it is given up, never
// delivered.
func (m *Model) headRun() []*Message {
	held := make([]*Message, 0, len(m.msgs[Main]))
	for _, msg := range m.msgs[Main] {
		held = append(held, msg)
	}
	sort.Slice(held, func(i, j int) bool { return held[i].seq < held[j].seq })
	var run []*Message
	for _, msg := range held {
		if msg.Batch != "" || msg.VisibleAt > m.now || len(run) == m.C.MaxBatchSize {
			break
		}
		if msg.Attempts >= 1+m.C.MaxRetries {
			if len(run) == 0 {
				return []*Message{msg}
			}
			break
		}
		run = append(run, msg)
	}
	return run
}

// SetManual switches batch formation to the caller (a checker of another
// implementation): the model then starts no batch by itself; StartBatch
// checks and applies one the implementation started, and Due says whether
// one is owed. A host may form batches at moments the model cannot
// predict (runtime-abi choice 11: a batch's slot frees before its
// settlement write ends, so the next batch can start without the
// messages that write returns), so a checker accepts every batch the
// Forms allow rather than the one the model would form.
func (m *Model) SetManual(manual bool) {
	m.manual = manual
	m.pump()
}

// Due reports whether a batch is owed now (the implementation, quiet,
// must have started it).
func (m *Model) Due() bool { return m.due() }

// StartBatch checks that a batch of these messages (in this order) may
// start now and applies it: the queue is active, a slot is free, 1 to
// maxBatchSize messages, each held, visible, not in a batch, not expired,
// deliveries not used up, in batch order, and the batch is due (full, or
// its first message has been visible for maxBatchTimeoutSeconds).
//
// others are the messages of the other batches the implementation started
// at this instant, not yet given to StartBatch: batches started together
// may be checked in any order.
func (m *Model) StartBatch(ids, others []string) (*Batch, error) {
	switch {
	case m.paused:
		return nil, fmt.Errorf("a batch started while the queue is paused")
	case m.detached:
		return nil, fmt.Errorf("a batch started while the queue has no consumer")
	case len(m.running) >= m.C.MaxConcurrency:
		return nil, fmt.Errorf("a batch started with %d batches running (maxConcurrency %d)", len(m.running), m.C.MaxConcurrency)
	case len(ids) == 0 || len(ids) > m.C.MaxBatchSize:
		return nil, fmt.Errorf("a batch of %d messages (maxBatchSize %d)", len(ids), m.C.MaxBatchSize)
	}
	if m.serial() {
		return m.startSerial(ids)
	}
	// The batch is the front of the batch order: a visible message that
	// comes before one of it may be left out only if it came back from a
	// batch at this very instant (its settlement write may not have
	// ended when the slot freed) or its deliveries are used up.
	for _, y := range m.available() {
		if slices.Contains(ids, y.ID) || slices.Contains(others, y.ID) || y.returnedAt == m.now || y.Released || y.Attempts >= 1+m.C.MaxRetries {
			continue
		}
		for _, id := range ids {
			if x := m.msgs[Main][id]; x != nil && !x.Released && less(y, x) {
				return nil, fmt.Errorf("%s is in the batch, %s before it in batch order is not", id, y.ID)
			}
		}
	}
	var take []*Message
	for i, id := range ids {
		msg := m.msgs[Main][id]
		switch {
		case msg == nil:
			return nil, fmt.Errorf("%s is not in the queue", id)
		case msg.Batch != "":
			return nil, fmt.Errorf("%s is already in batch %s", id, msg.Batch)
		case msg.VisibleAt > m.now:
			return nil, fmt.Errorf("%s is not visible until +%d ms", id, msg.VisibleAt-m.now)
		case msg.Attempts >= 1+m.C.MaxRetries:
			return nil, fmt.Errorf("%s has had its %d deliveries", id, msg.Attempts)
		case i > 0 && !take[i-1].Released && !msg.Released && !less(take[i-1], msg):
			return nil, fmt.Errorf("%s comes before %s in batch order", id, take[i-1].ID)
		}
		take = append(take, msg)
	}
	// maxBatchTimeoutSeconds is a longest wait: at an instant when a
	// batch ended or a message was given up, a host may have counted
	// messages on their way out (or back) towards filling a batch, so a
	// partial batch may start early then; at any other instant it waits.
	// A released message's visible time is the host's (at most the
	// model's), so its fill timeout may have passed earlier.
	released := slices.ContainsFunc(take, func(x *Message) bool { return x.Released })
	if m.settledAt != m.now && !released && len(take) < m.C.MaxBatchSize && m.now < take[0].VisibleAt+int64(m.C.MaxBatchTimeoutSeconds)*1000 {
		return nil, fmt.Errorf("a batch of %d < maxBatchSize started %d ms before its fill timeout", len(take), take[0].VisibleAt+int64(m.C.MaxBatchTimeoutSeconds)*1000-m.now)
	}
	b := m.start(take)
	m.started = nil
	return b, nil
}

// startSerial checks a batch of a serialized queue: no other batch runs,
// and it is exactly the head run, due.
func (m *Model) startSerial(ids []string) (*Batch, error) {
	if len(m.running) > 0 {
		return nil, fmt.Errorf("a batch of a serialized queue started while batch %s runs", m.running[0])
	}
	run := m.headRun()
	want := make([]string, len(run))
	for i, msg := range run {
		want[i] = msg.ID
	}
	if len(run) == 0 || run[0].Attempts >= 1+m.C.MaxRetries || !slices.Equal(ids, want) {
		return nil, fmt.Errorf("a serialized queue's batch is its head run %v", want)
	}
	if !run[0].Released && len(run) < m.C.MaxBatchSize && m.now < run[0].VisibleAt+int64(m.C.MaxBatchTimeoutSeconds)*1000 {
		return nil, fmt.Errorf("a batch of %d < maxBatchSize started %d ms before its head's fill timeout", len(run), run[0].VisibleAt+int64(m.C.MaxBatchTimeoutSeconds)*1000-m.now)
	}
	b := m.start(run)
	m.started = nil
	return b, nil
}

func (m *Model) start(take []*Message) *Batch {
	m.nextB++
	b := &Batch{ID: fmt.Sprintf("b%d", m.nextB), Started: m.now, settled: map[string]bool{}}
	for _, msg := range take {
		msg.Attempts++
		msg.Batch = b.ID
		msg.Retried = false
		msg.Released = false
		b.Messages = append(b.Messages, Delivered{ID: msg.ID, Body: msg.Body, AcceptedAt: msg.AcceptedAt, Attempts: msg.Attempts})
	}
	m.batches[b.ID] = b
	m.running = append(m.running, b.ID)
	m.started = append(m.started, b)
	return b
}

// Before reports whether message a comes before b in batch order.
func (m *Model) Before(a, b string) bool {
	x, y := m.msgs[Main][a], m.msgs[Main][b]
	return x != nil && y != nil && less(x, y)
}

// PendingGiveUp returns the messages left by a restart with their
// deliveries used up, not yet given up (see Restart).
func (m *Model) PendingGiveUp() []string {
	var ids []string
	for _, msg := range m.Messages(Main) {
		if msg.Batch == "" && msg.Attempts >= 1+m.C.MaxRetries {
			ids = append(ids, msg.ID)
		}
	}
	return ids
}

// GiveUp dead-letters or discards (or expires) one message of
// PendingGiveUp now: a checker calls it when the implementation did.
func (m *Model) GiveUp(id string) bool {
	msg := m.msgs[Main][id]
	if msg == nil || msg.Batch != "" || msg.Attempts < 1+m.C.MaxRetries {
		return false
	}
	m.giveUp(msg)
	return true
}

// TakeStarted returns the batches started since the last call, in start
// order.
func (m *Model) TakeStarted() []*Batch {
	s := m.started
	m.started = nil
	return s
}

// Running returns the running batches' IDs in start order.
func (m *Model) Running() []string { return slices.Clone(m.running) }

// Batch returns a batch by ID.
func (m *Model) Batch(id string) *Batch { return m.batches[id] }

// Settled reports whether a message of the batch has been settled.
func (b *Batch) Settled(id string) bool { return b.settled[id] }

// Ended reports whether the batch's invocation has ended.
func (b *Batch) Ended() bool { return b.ended }

// Settlement error codes (Error.name).
const (
	OK             = ""
	UnknownBatch   = "unknown_batch"
	UnknownMessage = "unknown_message"
	AlreadySettled = "already_settled"
)

func (m *Model) settleOne(b *Batch, id string) (*Message, string) {
	if b == nil || b.ended {
		return nil, UnknownBatch
	}
	if !slices.ContainsFunc(b.Messages, func(d Delivered) bool { return d.ID == id }) {
		return nil, UnknownMessage
	}
	if b.settled[id] {
		return nil, AlreadySettled
	}
	b.settled[id] = true
	msg := m.msgs[Main][id]
	if msg == nil || msg.Batch != b.ID {
		return nil, OK // removed meanwhile (purge): resolves, changes nothing
	}
	return msg, OK
}

// Acknowledge settles one message of a running batch as delivered.
func (m *Model) Acknowledge(batch, id string) string {
	msg, code := m.settleOne(m.batches[batch], id)
	if msg != nil {
		delete(m.msgs[Main], id)
	}
	return code
}

// Retry settles one message of a running batch for redelivery after delay
// seconds (nil: retryDelaySeconds), counted from now.
func (m *Model) Retry(batch, id string, delay *int) string {
	msg, code := m.settleOne(m.batches[batch], id)
	if msg != nil {
		m.retry(msg, m.retryDelay(delay))
		m.pump()
	}
	return code
}

func (m *Model) retryDelay(delay *int) int {
	if delay != nil {
		return *delay
	}
	return m.C.RetryDelaySeconds
}

func (m *Model) unsettled(b *Batch) []string {
	var ids []string
	for _, d := range b.Messages {
		if !b.settled[d.ID] {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// AcknowledgeAll acknowledges every unsettled message of the batch.
func (m *Model) AcknowledgeAll(batch string) string {
	b := m.batches[batch]
	if b == nil || b.ended {
		return UnknownBatch
	}
	for _, id := range m.unsettled(b) {
		m.Acknowledge(batch, id)
	}
	return OK
}

// RetryAll retries every unsettled message of the batch.
func (m *Model) RetryAll(batch string, delay *int) string {
	b := m.batches[batch]
	if b == nil || b.ended {
		return UnknownBatch
	}
	for _, id := range m.unsettled(b) {
		if msg, _ := m.settleOne(b, id); msg != nil {
			m.retry(msg, m.retryDelay(delay))
		}
	}
	m.pump()
	return OK
}

// Return ends a batch's invocation: threw false acknowledges the unsettled,
// true retries them after retryDelaySeconds. A batch already ended (by the
// time limit) is left as it is.
func (m *Model) Return(batch string, threw bool) {
	b := m.batches[batch]
	if b == nil || b.ended {
		return
	}
	m.end(b, threw)
	m.pump()
}

func (m *Model) end(b *Batch, threw bool) {
	for _, id := range m.unsettled(b) {
		msg, _ := m.settleOne(b, id)
		if msg == nil {
			continue
		}
		if threw {
			m.retry(msg, m.C.RetryDelaySeconds)
		} else {
			delete(m.msgs[Main], id)
		}
	}
	m.close(b)
}

func (m *Model) close(b *Batch) {
	m.settledAt = m.now
	b.ended = true
	m.running = slices.DeleteFunc(m.running, func(id string) bool { return id == b.ID })
}

// retry returns a message of a batch to the queue: removed as expired when
// past retention, dead-lettered or discarded when its deliveries are used
// up, else visible after delay seconds from now.
func (m *Model) retry(msg *Message, delay int) {
	msg.Batch = ""
	if m.giveUp(msg) {
		return
	}
	msg.VisibleAt = m.now + int64(delay)*1000
	msg.Retried = delay > 0
	msg.returnedAt = m.now
}

// giveUp removes msg from the main queue if it is expired or exhausted.
func (m *Model) giveUp(msg *Message) bool {
	switch {
	case msg.Expired || m.now >= m.expiry(Main, msg):
		delete(m.msgs[Main], msg.ID)
		m.counts[Main].Expired++
	case msg.Attempts >= 1+m.C.MaxRetries:
		delete(m.msgs[Main], msg.ID)
		if m.C.DeadLetter {
			m.counts[Main].DeadLettered++
			m.accept(DLQ, msg.Body, m.queues[DLQ].DeliveryDelaySeconds, &DeadLetter{SourceID: msg.ID, Attempts: msg.Attempts, At: m.now})
		} else {
			m.counts[Main].Discarded++
		}
	default:
		return false
	}
	m.settledAt = m.now
	return true
}

// Restart is a host restart at now: running batches end with nothing
// acknowledged (their settlements answer unknown_batch); their unsettled
// messages are visible at once, or given up when expired or exhausted.
// orderKey gives each held message's host ID: after a restart, messages
// with the same visible and accept time are ordered by it.
func (m *Model) Restart(orderKey func(id string) string) {
	for _, id := range slices.Clone(m.running) {
		m.release(m.batches[id], false)
	}
	for q := range m.msgs {
		for _, msg := range m.msgs[q] {
			msg.reloaded = true
			msg.orderKey = orderKey(msg.ID)
		}
	}
	m.pump()
}

// Unexpired reports whether a held message found expired while in a batch
// would not be expired under the current retention (retention was raised
// since).
func (m *Model) Unexpired() bool {
	for _, msg := range m.msgs[Main] {
		if msg.Expired && m.now < m.expiry(Main, msg) {
			return true
		}
	}
	return false
}

// Detach deletes the consumer (QC §CRUD、拒否、障害復旧): no batch starts
// until Attach; each running batch ends, its handler returning (threw[id]
// false) or throwing. Detaching acknowledges nothing: what a returning
// handler left unsettled is deliverable again at once (as after a restart,
// runtime-abi choice 7), what a throwing one left is retried as usual.
func (m *Model) Detach(threw map[string]bool) {
	m.detached = true
	for _, id := range slices.Clone(m.running) {
		b := m.batches[id]
		if threw[id] {
			m.end(b, true)
			continue
		}
		m.release(b, true)
	}
	m.pump()
}

// Attach attaches the consumer again.
func (m *Model) Attach() {
	m.detached = false
	m.pump()
}

// Detached reports whether the queue has no consumer.
func (m *Model) Detached() bool { return m.detached }

// release ends a batch the host closed (restart, detach): nothing is
// acknowledged; unsettled messages are visible at once; expired, they go
// now; exhausted, when a batch would take them (pump). "At once" is a
// visible time the Forms do not fix: after a restart a message keeps the
// one it was delivered at (its lease ended, no delay began; it comes
// before what became visible after it); after a detach (fromNow) it is
// visible from now, as a message its handler returned.
func (m *Model) release(b *Batch, fromNow bool) {
	for _, mid := range m.unsettled(b) {
		msg := m.msgs[Main][mid]
		if msg == nil || msg.Batch != b.ID {
			continue
		}
		msg.Batch = ""
		if msg.Expired || m.now >= m.expiry(Main, msg) {
			m.giveUp(msg)
			continue
		}
		msg.Released = true
		if fromNow {
			msg.VisibleAt = m.now
		}
	}
	m.close(b)
}

// UpdateQueue replaces a queue's spec (Q §入力, §操作、失敗、復旧): a new
// deliveryDelaySeconds applies to later sends only; a new
// messageRetentionSeconds applies at once to every held message, counted
// from its accept time, and restores nothing already expired (a message
// found expired in a running batch stays expired).
func (m *Model) UpdateQueue(q Queue, cfg QueueConfig) {
	m.queues[q] = cfg
	m.pump()
}

// UpdateConsumer replaces the consumer's spec (QC §入力: every setting but
// queue and worker can change). maxRetries, retryDelaySeconds and
// deadLetterQueue apply to the next decision, batch size, timeout and
// concurrency to the next batch (runtime-abi choice 9); a message that
// has had 1+maxRetries deliveries under the new setting is never
// delivered again. The handler limit is the host's and stays.
func (m *Model) UpdateConsumer(c ConsumerConfig) {
	c.HandlerLimitMillis = m.C.HandlerLimitMillis
	m.C = c
	m.pump()
}

// SetPaused pauses or resumes delivery (ext-pause).
func (m *Model) SetPaused(p bool) {
	m.paused = p
	m.pump()
}

// Purge removes every message of the main queue, those in running batches
// included, and returns how many.
func (m *Model) Purge() int {
	n := len(m.msgs[Main])
	m.msgs[Main] = map[string]*Message{}
	m.pump()
	return n
}

// RedriveCandidates are the DLQ's messages a redrive started now would
// move, oldest first.
func (m *Model) RedriveCandidates() []string {
	ms := m.Messages(DLQ)
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.AcceptedAt != b.AcceptedAt {
			return a.AcceptedAt < b.AcceptedAt
		}
		return less(&a, &b)
	})
	ids := make([]string, len(ms))
	for i, msg := range ms {
		ids[i] = msg.ID
	}
	return ids
}

// Move moves one DLQ message back to the main queue as a new message
// (redrive): accepted now, attempts 0, visible after the main queue's
// deliveryDelaySeconds. It returns the new ID, "" if id is not in the DLQ.
func (m *Model) Move(id string) string {
	msg := m.msgs[DLQ][id]
	if msg == nil {
		return ""
	}
	delete(m.msgs[DLQ], id)
	n := m.accept(Main, msg.Body, m.queues[Main].DeliveryDelaySeconds, nil)
	m.pump()
	return n.ID
}

// Messages returns the messages a queue lists (spec/peers.md §Inspection):
// those held and not found expired.
func (m *Model) Messages(q Queue) []Message {
	var out []Message
	for _, msg := range m.msgs[q] {
		if !msg.Expired {
			out = append(out, *msg)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// Message returns one held message.
func (m *Model) Message(q Queue, id string) (Message, bool) {
	msg, ok := m.msgs[q][id]
	if !ok {
		return Message{}, false
	}
	return *msg, true
}

// State is a held message's inspection state.
func (m *Model) State(msg Message) string {
	switch {
	case msg.Batch != "":
		return InFlight
	case msg.VisibleAt > m.now && msg.Retried:
		return RetryWaiting
	case msg.VisibleAt > m.now:
		return Delayed
	}
	return Available
}

// Count is the messages a queue holds (observed.messageCount): accepted
// and not yet acknowledged, moved, discarded or removed as expired; those
// in a running batch included, found expired or not.
func (m *Model) Count(q Queue) int { return len(m.msgs[q]) }

// Counts returns a queue's removals so far.
func (m *Model) Counts(q Queue) Counts { return m.counts[q] }
