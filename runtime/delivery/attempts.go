package delivery

import (
	"context"
	"errors"
	"sync"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/forensics"
	"github.com/takoform/queuehost/runtime/store"
)

// Attempt history (store.Attempt, spec/peers.md §Attempt history): the
// engine is where a delivery's end is known, so it writes each attempt
// that does not remove its message with the RetryMessage of the retry, and
// a dead-lettered message's history (what the store kept, then the last
// attempt) with the move. It keeps none of it in memory: a history is
// read from the store only for a dead-letter move. An acknowledged attempt
// removes its message and is only counted.

// attemptOf is the template of the attempt batch b ended with outcome
// (store.Outcome*), for the messages it settles: their delivery counts
// are filled in by attemptFor. delay is the retry delay it ends with. q.mu
// held (b's fields).
func (e *Engine) attemptOf(b *batch, outcome string, delay int) *store.Attempt {
	end := b.endedMs
	if end == 0 {
		end = e.nowMs()
	}
	a := &store.Attempt{StartedAt: b.startedMs, DurationMs: max(0, end-b.startedMs), Host: e.hostID,
		WorkerVersion: b.version, Outcome: outcome, DelaySeconds: delay}
	if outcome == store.OutcomeThrown || outcome == store.OutcomeSandboxEnded {
		a.ErrorName, a.ErrorMessage, a.ErrorStack = b.errName, b.errMessage, b.errStack
	}
	return a
}

// failed records how b's handler failed (its error), for attemptOf; it
// returns the outcome that failure gives the unsettled messages. q.mu
// held.
func (b *batch) failed(herr error) string {
	class, name, message, stack := abi.Describe(herr)
	b.errName, b.errMessage, b.errStack = name, message, stack
	switch class {
	case abi.FailureSandboxEnded:
		b.failOutcome = store.OutcomeSandboxEnded
	case abi.FailureTimeLimit:
		b.failOutcome = store.OutcomeTimeLimit
	default:
		b.failOutcome = store.OutcomeThrown
	}
	return b.failOutcome
}

// attemptFor is p's attempt for m (its delivery count filled in), nil when
// p settles no delivery (an exhausted message found after a restart).
func (p *plan) attemptFor(m *msg) *store.Attempt {
	if p.attempt == nil {
		return nil
	}
	a := *p.attempt
	a.Attempt = m.attempts
	return &a
}

// histories reads the stored attempt history of each of ms (nil for a
// message the store no longer holds), for a dead-letter move.
func (e *Engine) histories(ctx context.Context, queue string, ms []*msg) ([][]store.Attempt, error) {
	out := make([][]store.Attempt, len(ms))
	for i, m := range ms {
		sm, err := e.store.Message(ctx, queue, m.id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = sm.History
	}
	return out, nil
}

// movedHistory is the history a dead-lettered m carries into the DLQ:
// what the store kept, then p's last attempt, newest store.MaxAttempts.
func (p *plan) movedHistory(m *msg, kept []store.Attempt) []store.Attempt {
	if a := p.attemptFor(m); a != nil {
		return store.AppendAttempt(kept, *a)
	}
	return kept
}

// Attempt outcomes counted per queue (QueueCounters.Outcomes).
var outcomeNames = [...]string{store.OutcomeAcknowledged, store.OutcomeRetried, store.OutcomeThrown, store.OutcomeTimeLimit, store.OutcomeSandboxEnded}

func outcomeIndex(o string) int {
	for i, n := range outcomeNames {
		if n == o {
			return i
		}
	}
	return -1
}

// maxCauseGroups bounds the causes a queue counts dead letters by (the
// metrics' label set); later causes are counted as OtherCause.
const maxCauseGroups = 50

// OtherCause is the group of the dead letters of a queue past its first
// maxCauseGroups causes.
const OtherCause = "other"

// causeCounts counts a source queue's dead-lettered messages by cause
// since the engine started.
type causeCounts struct {
	mu sync.Mutex
	by map[string]*CauseCount
}

// CauseCount is the dead letters of one cause (QueueCounters.DeadLetteredBy).
type CauseCount struct {
	Fingerprint string
	ErrorName   string // the cause's error name, or its outcome when it has none
	Count       uint64
}

func (c *causeCounts) add(h []store.Attempt) {
	cause := forensics.CauseOf(h)
	fp := cause.Fingerprint()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]*CauseCount{}
	}
	cc := c.by[fp]
	if cc == nil {
		if len(c.by) >= maxCauseGroups {
			fp = OtherCause
			if cc = c.by[fp]; cc == nil {
				cc = &CauseCount{Fingerprint: OtherCause, ErrorName: OtherCause}
				c.by[fp] = cc
			}
		} else {
			name := cause.ErrorName
			if name == "" {
				name = cause.Outcome
			}
			cc = &CauseCount{Fingerprint: fp, ErrorName: name}
			c.by[fp] = cc
		}
	}
	cc.Count++
}

func (c *causeCounts) snapshot() []CauseCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CauseCount, 0, len(c.by))
	for _, cc := range c.by {
		out = append(out, *cc)
	}
	return out
}

// countAttempts counts the attempts a committed plan ended, and its dead
// letters by cause. mu held.
func (q *queue) countAttempts(p *plan) {
	if p.attempt != nil {
		n := len(p.ack) + len(p.retry) + len(p.dead) + len(p.discard) + len(p.expire)
		if i := outcomeIndex(p.attempt.Outcome); i >= 0 && n > 0 {
			q.count.outcomes[i].Add(uint64(n))
		}
	}
	for _, h := range p.deadHistory {
		q.count.causes.add(h)
	}
}

func (c *counters) outcomeMap() map[string]uint64 {
	out := make(map[string]uint64, len(outcomeNames))
	for i, n := range outcomeNames {
		out[n] = c.outcomes[i].Load()
	}
	return out
}

// settledDelay is the retry delay a retry settlement asks for: its own,
// or the consumer's retryDelaySeconds.
func settledDelay(s abi.Settlement, cfg ConsumerConfig) int {
	if s.Delay != nil {
		return *s.Delay
	}
	return cfg.RetryDelaySeconds
}
