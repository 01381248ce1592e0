// Package history is the checker of tools/jepsen: a pure function from a
// recorded history to a table of violations, apart from everything that
// produced the history. It knows nothing of the host; it sees what a user
// of the host could see — the sends it made and their answers, what each
// queue handler reported to an out-of-host recorder, and the faults the
// nemesis injected — all in one total order, the recorder's sequence.
//
// # The history
//
// Every event gets a sequence number from the one recorder that receives
// them (the harness's own events — sends, faults — go through the same
// counter). The order is the recorder's arrival order; no clock is read.
//
//   - send / send-ok / send-fail / send-info: a send call of numbered
//     messages, and its outcome: resolved with IDs, refused for sure
//     (nothing was accepted), or unknown (the call was cut or answered
//     backend_unavailable: it may have been accepted).
//   - deliver: a queue handler's first act, before it settles anything:
//     its batch, queue, the host that ran it, and every message's number,
//     ID, attempts and what the handler is about to do with it (ack,
//     retry, throw). The handler waits for the recorder's answer before
//     it settles anything, so everything the handler does to these
//     messages comes after this event's sequence number.
//   - settled: the same handler after its settlements: the IDs whose
//     acknowledge (or retry) PROMISE RESOLVED — the host's word that the
//     settlement is durable — and those that rejected.
//   - fault: what the nemesis did (kill, freeze, resume, pg-stop,
//     pg-start, terminate) and to which host.
//
// # The rules
//
// An acknowledge is RESOLVED at the sequence number of the settled event
// that lists it: the handler reports it only after its explicit
// acknowledge Promise fulfilled, which the worker ABI promises happens
// only once the settlement is durable, and a settlement is never reversed
// (spec/runtime-abi.md), so the handler's later return or throw does not
// change it. An acknowledge whose report never arrived (the host was
// killed first) is never counted resolved, nor is an acknowledge by the
// handler's return (the harness's worker never relies on one): such a
// message counts as settled only when the queues drained to zero.
//
//   - lost: a send that resolved, whose message has no resolved
//     acknowledge, never reached the dead-letter queue, was not discarded
//     after its last retry by rule (no dead-letter queue, the handler saw
//     or could have seen attempts 1+maxRetries), and whose last handler
//     did not try to acknowledge it (or reported that acknowledge
//     rejected) while the queues drained to zero — or that was never
//     delivered at all.
//   - acked-then-delivered: a deliver event of a message whose sequence
//     number is higher than a resolved acknowledge of the same message
//     from another batch. The handler announced the delivery after the
//     recorder knew the acknowledge was durable, and it processes the
//     message only after that announcement. (A worker may send one
//     announcement twice when its first report's answer is lost: the
//     first of a batch counts, the repeat is dropped.) One case is set apart
//     (late-frozen, not a violation): the later announcement is of an
//     EARLIER attempt (lower attempts than the acknowledged delivery) from
//     a host that was frozen before the acknowledge resolved and resumed
//     before the announcement — a handler started before the freeze whose
//     report the frozen host could only relay afterwards. A host that
//     starts a stale batch after resuming (the handler starting after the
//     acknowledge) lands there too when its attempts are lower: from
//     outside, the two cannot be told apart without a shared clock.
//   - attempts-repeated: two deliveries of one message (one queue, one
//     ID) by different batches, or twice in one batch, with the same
//     attempts. Attempts grow by one per delivery, so every value may be
//     handed to a handler at most once.
//   - attempts-jump: counted attempts no handler announced (counted once
//     per gap). Between two
//     consecutive announced attempts a < b of a message (and before the
//     first, from 0; and before its landing in the dead-letter queue, from
//     the last to 1+maxRetries), b-a-1 attempts were counted with no
//     handler seen. Each kill or freeze of a host in that window (between
//     the two events' sequence numbers) may excuse one: a handler that
//     started and died with its host, or whose report its frozen host
//     dropped. So may each database outage (a restart, from its pg-stop
//     to its pg-start) that overlaps the window: a delivery
//     whose write was committing when the server went down is in doubt
//     until the server is back, and by then the lease it was recorded
//     under may have run out, so that the host may neither start its
//     handler nor give the attempt back (the host is stalled on the
//     database as a frozen host is on its own clock). The rest are
//     violations.
//   - over-limit: a delivery with attempts above 1+maxRetries.
//   - unexpected: a delivery of a number no send call carried, a body
//     the harness did not write, or a number delivered under an ID other
//     than the one its resolved send returned.
//   - dlq-missing / dlq-duplicate / dlq-after-ack (with a dead-letter
//     queue): a message whose handler failed it at attempts 1+maxRetries
//     must land in the dead-letter queue once the queues drained; no number
//     may land there under two IDs; a message with a resolved acknowledge
//     must not land there.
//   - unsettled: the queues did not drain; every message that would be
//     lost if the run ended there is counted here instead of lost.
package history

import (
	"fmt"
	"sort"
	"strings"
)

// Kind is the kind of an event.
type Kind string

// The event kinds.
const (
	Send     Kind = "send"      // a send call starts: Numbers
	SendOK   Kind = "send-ok"   // it resolved: Numbers, IDs (in order)
	SendFail Kind = "send-fail" // it was refused for sure: nothing accepted
	SendInfo Kind = "send-info" // its outcome is unknown
	Deliver  Kind = "deliver"   // a handler announced a batch: Queue, Batch, Host, Msgs
	Settled  Kind = "settled"   // the handler settled: Acked, Retried (resolved), Failed
	Fault    Kind = "fault"     // the nemesis: Fault, Host
)

// Fault names.
const (
	FaultKill      = "kill"      // SIGKILL of a host
	FaultFreeze    = "freeze"    // SIGSTOP of a host (or its process group)
	FaultResume    = "resume"    // SIGCONT
	FaultPGStop    = "pg-stop"   // PostgreSQL stopped
	FaultPGStart   = "pg-start"  // PostgreSQL started
	FaultTerminate = "terminate" // pg_terminate_backend of the hosts' connections
)

// Msg is one message of a deliver event.
type Msg struct {
	N        int    `json:"n"` // the number its body carries; -1: a body the harness did not write
	ID       string `json:"id"`
	Attempts int    `json:"attempts"`
	Act      string `json:"act"` // "ack", "retry" or "throw"
}

// Event is one entry of the history.
type Event struct {
	Seq     int      `json:"seq"`
	Kind    Kind     `json:"kind"`
	Numbers []int    `json:"numbers,omitempty"`
	IDs     []string `json:"ids,omitempty"`
	Queue   string   `json:"queue,omitempty"`
	Batch   string   `json:"batch,omitempty"`
	Host    string   `json:"host,omitempty"`
	Msgs    []Msg    `json:"msgs,omitempty"`
	Acked   []string `json:"acked,omitempty"`
	Retried []string `json:"retried,omitempty"`
	Failed  []string `json:"failed,omitempty"` // IDs whose settlement rejected
	Fault   string   `json:"fault,omitempty"`
	Note    string   `json:"note,omitempty"`
}

// Config is what the checker must know of the run.
type Config struct {
	Queue      string // the work queue's name
	DLQ        string // the dead-letter queue's name; "" when the consumer has none
	MaxRetries int
	// Drained says both queues were observed empty at the end, after
	// the last event.
	Drained bool
}

// The violation classes, in the table's order.
const (
	Lost              = "lost"
	AckedThenDeliver  = "acked-then-delivered"
	AttemptsRepeated  = "attempts-repeated"
	AttemptsJump      = "attempts-jump"
	OverLimit         = "over-limit"
	Unexpected        = "unexpected"
	DLQMissing        = "dlq-missing"
	DLQDuplicate      = "dlq-duplicate"
	DLQAfterAck       = "dlq-after-ack"
	Unsettled         = "unsettled"
	maxExamplesPerKey = 8
)

// Classes lists the violation classes.
var Classes = []string{Lost, AckedThenDeliver, AttemptsRepeated, AttemptsJump, OverLimit, Unexpected, DLQMissing, DLQDuplicate, DLQAfterAck, Unsettled}

// Report is the checker's result.
type Report struct {
	// Counts of violations by class (Classes); Examples a few of each.
	Counts   map[string]int
	Examples map[string][]string
	// What the history holds (not violations).
	SentOK, SendFailed, SendUnknown int // messages
	Deliveries, Messages            int // deliveries; distinct main-queue messages delivered
	Redeliveries                    int // deliveries beyond the first of a message
	AcksResolved                    int // messages with a resolved acknowledge
	DeadLettered                    int // numbers that landed in the dead-letter queue
	Discarded                       int // dropped after the last retry by rule (no dead-letter queue)
	AckUnconfirmed                  int // last handler acknowledged, no report; settled by the drained queues
	LateFrozen                      int // announcements after a resolved acknowledge set apart (see the package doc)
	ExcusedHidden                   int // counted attempts with no handler seen, excused by a kill, freeze or database stop
	Faults                          map[string]int
}

// Violations is the total over every class.
func (r *Report) Violations() int {
	n := 0
	for _, c := range Classes {
		n += r.Counts[c]
	}
	return n
}

func (r *Report) add(class, format string, args ...any) {
	r.Counts[class]++
	if len(r.Examples[class]) < maxExamplesPerKey {
		r.Examples[class] = append(r.Examples[class], fmt.Sprintf(format, args...))
	}
}

// Table is the report as a fixed-width table, then the examples.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-22s %8s\n", "class", "count")
	for _, c := range Classes {
		mark := ""
		if r.Counts[c] > 0 {
			mark = "  FAIL"
		}
		fmt.Fprintf(&b, "  %-22s %8d%s\n", c, r.Counts[c], mark)
	}
	fmt.Fprintf(&b, "  sends: %d resolved, %d refused, %d unknown; deliveries %d of %d messages (%d redeliveries); acks resolved %d, unconfirmed %d (queues drained); dead-lettered %d, discarded %d; late-frozen %d; hidden attempts excused by faults %d\n",
		r.SentOK, r.SendFailed, r.SendUnknown, r.Deliveries, r.Messages, r.Redeliveries, r.AcksResolved, r.AckUnconfirmed, r.DeadLettered, r.Discarded, r.LateFrozen, r.ExcusedHidden)
	if len(r.Faults) > 0 {
		fmt.Fprintf(&b, "  faults: %s\n", fmtCounts(r.Faults))
	}
	for _, c := range Classes {
		for _, e := range r.Examples[c] {
			fmt.Fprintf(&b, "  %s: %s\n", c, e)
		}
	}
	return b.String()
}

func fmtCounts(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// span is a fault that may hide an attempt, from its start to its end
// (sequence numbers; equal for a kill or a freeze).
type span struct{ start, end int }

// seen is one message of one deliver event.
type seen struct {
	seq   int
	batch string
	host  string
	msg   Msg
}

// Check checks the history (in any order: it is sorted by Seq).
func Check(events []Event, cfg Config) *Report {
	evs := append([]Event(nil), events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	r := &Report{Counts: map[string]int{}, Examples: map[string][]string{}, Faults: map[string]int{}}
	limit := 1 + cfg.MaxRetries

	attempted := map[int]bool{} // numbers some send call carried
	sentID := map[int]string{}  // number -> ID of its resolved send
	sentAt := map[int]int{}     // number -> seq of its send call
	// hiding: kills, freezes and database outages, each of which may
	// hide one attempt: a kill or a freeze at its sequence number, an
	// outage from its pg-stop to its pg-start (end; 1<<62 while open).
	var hiding []span
	freezes := map[string][]int{} // host -> seqs of its freezes
	resumes := map[string][]int{} // host -> seqs of its resumes
	main := map[string][]seen{}   // main-queue ID -> deliveries
	dlq := map[int][]seen{}       // number -> dead-letter deliveries
	numIDs := map[int]map[string]bool{}
	ackAt := map[string]int{} // queue/ID -> seq of its first resolved acknowledge
	ackBatch := map[string]string{}
	announced := map[string]bool{} // queue/batch
	rejected := map[string]bool{}  // queue/batch/ID: a settlement that rejected

	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case Send:
			for _, n := range e.Numbers {
				attempted[n] = true
				if _, ok := sentAt[n]; !ok {
					sentAt[n] = e.Seq
				}
			}
		case SendOK:
			for k, n := range e.Numbers {
				r.SentOK++
				if k < len(e.IDs) {
					sentID[n] = e.IDs[k]
				}
			}
		case SendFail:
			r.SendFailed += len(e.Numbers)
		case SendInfo:
			r.SendUnknown += len(e.Numbers)
		case Fault:
			r.Faults[e.Fault]++
			switch e.Fault {
			case FaultKill:
				hiding = append(hiding, span{e.Seq, e.Seq})
			case FaultFreeze:
				hiding = append(hiding, span{e.Seq, e.Seq})
				freezes[e.Host] = append(freezes[e.Host], e.Seq)
			case FaultPGStop:
				hiding = append(hiding, span{e.Seq, 1 << 62})
			case FaultPGStart:
				for i := len(hiding) - 1; i >= 0; i-- {
					if hiding[i].end == 1<<62 {
						hiding[i].end = e.Seq
						break
					}
				}
			case FaultResume:
				resumes[e.Host] = append(resumes[e.Host], e.Seq)
			}
		case Settled:
			for _, id := range e.Failed {
				rejected[e.Queue+"/"+e.Batch+"/"+id] = true
			}
			for _, id := range e.Acked {
				k := e.Queue + "/" + id
				if _, ok := ackAt[k]; !ok {
					ackAt[k] = e.Seq
					ackBatch[k] = e.Batch
				}
			}
		case Deliver:
			if announced[e.Queue+"/"+e.Batch] {
				continue // the worker's retry of a report that got through
			}
			announced[e.Queue+"/"+e.Batch] = true
			for _, m := range e.Msgs {
				r.Deliveries++
				s := seen{seq: e.Seq, batch: e.Batch, host: e.Host, msg: m}
				if m.N < 0 || !attempted[m.N] {
					r.add(Unexpected, "%s: message %s (number %d, attempts %d, batch %s) was never sent", e.Queue, m.ID, m.N, m.Attempts, e.Batch)
					continue
				}
				if e.Queue == cfg.DLQ && cfg.DLQ != "" {
					dlq[m.N] = append(dlq[m.N], s)
					continue
				}
				if id, ok := sentID[m.N]; ok && id != m.ID {
					r.add(Unexpected, "number %d delivered as %s, its send resolved with %s", m.N, m.ID, id)
				}
				if numIDs[m.N] == nil {
					numIDs[m.N] = map[string]bool{}
				}
				numIDs[m.N][m.ID] = true
				main[m.ID] = append(main[m.ID], s)
				if m.Attempts > limit {
					r.add(OverLimit, "%s (number %d) delivered with attempts %d > 1+maxRetries (%d), batch %s", m.ID, m.N, m.Attempts, limit, e.Batch)
				}
			}
		}
	}
	for n, ids := range numIDs {
		if len(ids) > 1 {
			r.add(Unexpected, "number %d delivered under %d IDs (accepted more than once)", n, len(ids))
		}
	}

	// hidden counts the kills and freezes strictly between two sequence
	// numbers, and the database outages that overlap that window (a
	// pg-stop is recorded before the server goes down, and a send
	// recorded after it may still commit before it does).
	hidden := func(from, to int) int {
		c := 0
		for _, f := range hiding {
			if f.start < to && f.end > from {
				c++
			}
		}
		return c
	}
	// frozenAcross: host was frozen before seq a and resumed before seq b.
	frozenAcross := func(host string, a, b int) bool {
		for _, f := range freezes[host] {
			if f >= a {
				continue
			}
			for _, rs := range resumes[host] {
				if rs > f && rs < b {
					return true
				}
			}
		}
		return false
	}
	// jumps checks the gaps of one message's announced attempts; land, when
	// > 0, is the seq of its landing in the dead-letter queue (attempt
	// limit+1 for the check).
	jumps := func(what string, ss []seen, start, land int) {
		prevA, prevSeq := 0, start
		for _, s := range ss {
			if s.msg.Attempts <= prevA {
				continue // repeated (counted apart) or a late report
			}
			if gap := s.msg.Attempts - prevA - 1; gap > 0 {
				ex := min(gap, hidden(prevSeq, s.seq))
				r.ExcusedHidden += ex
				if gap > ex {
					r.add(AttemptsJump, "%s first announced with attempts %d after attempts %d (batch %s, host %s): %d counted attempts with no handler seen, %d excused by faults", what, s.msg.Attempts, prevA, s.batch, s.host, gap, ex)
				}
			}
			prevA, prevSeq = s.msg.Attempts, s.seq
		}
		if land > 0 && prevA < limit {
			gap := limit - prevA
			ex := min(gap, hidden(prevSeq, land))
			r.ExcusedHidden += ex
			if gap > ex {
				r.add(AttemptsJump, "%s dead-lettered after attempts %d was the last a handler announced: %d counted attempts with no handler seen, %d excused by faults", what, prevA, gap, ex)
			}
		}
	}

	// Per main-queue message.
	ids := make([]string, 0, len(main))
	for id := range main {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ss := main[id]
		n := ss[0].msg.N
		r.Messages++
		r.Redeliveries += len(ss) - 1
		byAttempts := append([]seen(nil), ss...)
		sort.SliceStable(byAttempts, func(i, j int) bool { return byAttempts[i].msg.Attempts < byAttempts[j].msg.Attempts })
		for i := 1; i < len(byAttempts); i++ {
			if byAttempts[i].msg.Attempts == byAttempts[i-1].msg.Attempts {
				r.add(AttemptsRepeated, "%s (number %d) delivered twice with attempts %d: batch %s on %s (seq %d) and batch %s on %s (seq %d)",
					id, n, byAttempts[i].msg.Attempts, byAttempts[i-1].batch, byAttempts[i-1].host, byAttempts[i-1].seq, byAttempts[i].batch, byAttempts[i].host, byAttempts[i].seq)
			}
		}
		k := cfg.Queue + "/" + id
		if at, ok := ackAt[k]; ok {
			var ackedAttempts int
			for _, s := range ss {
				if s.batch == ackBatch[k] {
					ackedAttempts = s.msg.Attempts
				}
			}
			for _, s := range ss {
				if s.seq <= at || s.batch == ackBatch[k] {
					continue
				}
				if s.msg.Attempts < ackedAttempts && frozenAcross(s.host, at, s.seq) {
					r.LateFrozen++
					continue
				}
				r.add(AckedThenDeliver, "%s (number %d) announced by batch %s on %s with attempts %d (seq %d) after its acknowledge by batch %s (attempts %d) resolved (seq %d)",
					id, n, s.batch, s.host, s.msg.Attempts, s.seq, ackBatch[k], ackedAttempts, at)
			}
		}
		land := 0
		if d := dlq[n]; len(d) > 0 {
			land = d[0].seq
		}
		start := sentAt[n]
		jumps(fmt.Sprintf("%s (number %d)", id, n), byAttempts, start, land)
	}
	for n, d := range dlq {
		r.DeadLettered++
		dids := map[string]bool{}
		for _, s := range d {
			dids[s.msg.ID] = true
		}
		if len(dids) > 1 {
			r.add(DLQDuplicate, "number %d landed in the dead-letter queue %d times (IDs %v)", n, len(dids), keys(dids))
		}
		for id := range numIDs[n] {
			if at, ok := ackAt[cfg.Queue+"/"+id]; ok {
				r.add(DLQAfterAck, "number %d (%s) landed in the dead-letter queue although its acknowledge resolved (seq %d)", n, id, at)
			}
		}
		// The dead-letter consumer acknowledges everything: announcing a
		// dead-letter message again after that resolved is a redelivery too.
		for _, s := range d {
			if at, ok := ackAt[cfg.DLQ+"/"+s.msg.ID]; ok && s.seq > at && s.batch != ackBatch[cfg.DLQ+"/"+s.msg.ID] {
				r.add(AckedThenDeliver, "dead-letter message %s (number %d) announced by batch %s on %s (seq %d) after its acknowledge resolved (seq %d)", s.msg.ID, n, s.batch, s.host, s.seq, at)
			}
		}
		if len(numIDs[n]) == 0 {
			// Dead-lettered without any announced delivery: every
			// attempt was hidden.
			jumps(fmt.Sprintf("number %d", n), nil, sentAt[n], d[0].seq)
		}
	}

	// Fates of the resolved sends.
	nums := make([]int, 0, len(sentID))
	for n := range sentID {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	gone := func(format string, args ...any) {
		if cfg.Drained {
			r.add(Lost, format, args...)
		} else {
			r.add(Unsettled, format, args...)
		}
	}
	for _, n := range nums {
		id := sentID[n]
		if _, ok := ackAt[cfg.Queue+"/"+id]; ok {
			r.AcksResolved++
			continue
		}
		dead := len(dlq[n]) > 0
		ss := main[id]
		if dead {
			if len(dlq[n]) > 0 {
				if _, ok := ackAt[cfg.DLQ+"/"+dlq[n][0].msg.ID]; !ok && !cfg.Drained {
					r.add(Unsettled, "number %d: its dead-letter message was not acknowledged yet", n)
				}
			}
			continue
		}
		if len(ss) == 0 {
			gone("number %d (%s): its send resolved and it was never delivered", n, id)
			continue
		}
		last := ss[0]
		for _, s := range ss {
			if s.msg.Attempts >= last.msg.Attempts {
				last = s
			}
		}
		if last.msg.Act == "ack" && rejected[cfg.Queue+"/"+last.batch+"/"+id] {
			gone("number %d (%s): its last handler's acknowledge rejected (batch %s on %s, attempts %d) and it was never delivered again", n, id, last.batch, last.host, last.msg.Attempts)
			continue
		}
		if last.msg.Act == "ack" {
			if cfg.Drained {
				r.AckUnconfirmed++
			} else {
				r.add(Unsettled, "number %d (%s): its last handler acknowledged it and never reported the acknowledge", n, id)
			}
			continue
		}
		// Its last announced handler failed it.
		exhausted := last.msg.Attempts >= limit
		if cfg.DLQ == "" {
			if exhausted {
				r.Discarded++
				continue
			}
			if cfg.Drained {
				// Discarded after attempts no handler ran, unless each
				// is excused by a fault after the last announcement.
				gap := limit - last.msg.Attempts
				if ex := hidden(last.seq, 1<<62); ex >= gap {
					r.Discarded++
					r.ExcusedHidden += gap
					continue
				}
			}
			gone("number %d (%s): failed by its handler at attempts %d (batch %s on %s) and never delivered again, maxRetries %d", n, id, last.msg.Attempts, last.batch, last.host, cfg.MaxRetries)
			continue
		}
		if exhausted {
			if cfg.Drained {
				r.add(DLQMissing, "number %d (%s): failed by its handler at attempts %d (the last) and never reached the dead-letter queue", n, id, last.msg.Attempts)
			} else {
				r.add(Unsettled, "number %d (%s): exhausted, not yet in the dead-letter queue", n, id)
			}
			continue
		}
		gone("number %d (%s): failed by its handler at attempts %d (batch %s on %s), never delivered again nor dead-lettered", n, id, last.msg.Attempts, last.batch, last.host)
	}
	return r
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
