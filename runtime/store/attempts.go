package store

import "unicode/utf8"

// Attempt history (spec/peers.md §Attempt history): the last few
// deliveries of a message and how each ended, so that an operator can see
// why a message is being retried or was dead-lettered. River and Oban keep
// an error array per job for the same reason; RabbitMQ's x-death only a
// reason. It is host-side bookkeeping like DeadLetter: durable with the
// message, carried into the dead-letter queue by the move, read through
// the Host API, never part of what a worker sees.
//
// It is bounded twice, so that a poison message cannot grow the state: at
// most MaxAttempts entries (the newest), and each text field cut to its
// own limit (TrimAttempt), which bounds an entry to about 2 KiB and a
// message's history to about 10 KiB. Only a message that has been retried
// or dead-lettered has one.

// Attempt outcomes. An acknowledged attempt removes its message, so it is
// only ever counted (metrics), never kept.
const (
	OutcomeAcknowledged = "acknowledged"
	// OutcomeRetried: the handler retried the message explicitly
	// (batch.retry, retryAll), with DelaySeconds.
	OutcomeRetried = "retried"
	// OutcomeThrown: the handler threw or rejected; ErrorName,
	// ErrorMessage and ErrorStack say what.
	OutcomeThrown = "thrown"
	// OutcomeTimeLimit: the handler ran past the host's time limit.
	OutcomeTimeLimit = "time_limit"
	// OutcomeSandboxEnded: the sandbox process running the handler ended
	// (memory cap, crash); ErrorMessage says why.
	OutcomeSandboxEnded = "sandbox_ended"
)

// Bounds of the attempt history.
const (
	MaxAttempts         = 5
	MaxErrorNameBytes   = 128
	MaxErrorMessageByte = 512
	MaxErrorStackBytes  = 1024
	MaxErrorStackFrames = 8
)

// Attempt is one delivery of a message and how it ended.
type Attempt struct {
	// Attempt is the message's delivery count this attempt was (1 for the
	// first delivery).
	Attempt int `json:"attempt"`
	// StartedAt is UTC epoch milliseconds; DurationMs how long the
	// handler ran, until the message was settled or the invocation ended.
	StartedAt  int64 `json:"startedAt"`
	DurationMs int64 `json:"durationMs"`
	// Host is the ID of the host that delivered it (its cluster ID, or
	// its host name); WorkerVersion the UID of the WorkerVersion whose
	// handler ran.
	Host          string `json:"host,omitempty"`
	WorkerVersion string `json:"workerVersion,omitempty"`
	Outcome       string `json:"outcome"`
	// DelaySeconds is the retry delay the attempt ended with.
	DelaySeconds int `json:"delaySeconds"`
	// The error that ended the attempt (thrown, sandbox_ended), trimmed.
	ErrorName    string `json:"errorName,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	ErrorStack   string `json:"errorStack,omitempty"`
}

// TrimAttempt cuts a's texts to their bounds: the stack to its first
// MaxErrorStackFrames lines, then each text to its byte limit, on a UTF-8
// boundary.
func TrimAttempt(a Attempt) Attempt {
	a.ErrorName = cut(a.ErrorName, MaxErrorNameBytes)
	a.ErrorMessage = cut(a.ErrorMessage, MaxErrorMessageByte)
	a.ErrorStack = cut(topLines(a.ErrorStack, MaxErrorStackFrames+1), MaxErrorStackBytes)
	a.Host = cut(a.Host, MaxErrorNameBytes)
	a.WorkerVersion = cut(a.WorkerVersion, MaxErrorNameBytes)
	a.Outcome = cut(a.Outcome, 32)
	return a
}

// AppendAttempt is history with a appended (trimmed), keeping the newest
// MaxAttempts. It returns a new slice.
func AppendAttempt(history []Attempt, a Attempt) []Attempt {
	start := max(0, len(history)+1-MaxAttempts)
	out := make([]Attempt, 0, min(len(history)+1, MaxAttempts))
	out = append(out, history[start:]...)
	return append(out, TrimAttempt(a))
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// topLines is the first n lines of s.
func topLines(s string, n int) string {
	lines := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			lines++
			if lines == n {
				return s[:i]
			}
		}
	}
	return s
}

func cloneAttempts(h []Attempt) []Attempt {
	if h == nil {
		return nil
	}
	return append([]Attempt(nil), h...)
}
