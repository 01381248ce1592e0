// Package forensics answers "why did this message fail?" from the attempt
// history the store keeps with each message (store.Attempt): it gives a
// dead-lettered message an error fingerprint and groups a dead-letter
// queue's messages by it (spec/peers.md §Dead-letter groups).
//
// # Why a fingerprint
//
// A dead-letter queue of ten thousand messages usually holds a handful of
// causes. Sentry and Rollbar group error events by a fingerprint of the
// error's type, its message with the varying parts taken out, and the top
// frames of its stack; none of the queue systems we compared (Cloudflare
// Queues, SQS, RabbitMQ, River, Oban, pgmq, NATS) group dead letters at
// all. The fingerprint here is that: the last attempt's outcome and error
// name, its message with numbers, UUIDs, long hex and quoted strings
// replaced by placeholders, and its top three stack frames without line
// and column numbers (so that the same failure in the next deployment of
// the worker stays in its group). It is a pure function of the attempt, so
// every host computes the same group for the same history, and a change of
// the rules regroups messages already dead-lettered on the next read.
package forensics

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"

	"github.com/takoform/queuehost/runtime/store"
)

// TopFrames is how many stack frames take part in a fingerprint.
const TopFrames = 3

var (
	uuidRe   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	hexRe    = regexp.MustCompile(`(?i)\b(0x)?[0-9a-f]{8,}\b`)
	quotedRe = regexp.MustCompile(`"[^"]*"|'[^']*'|` + "`[^`]*`")
	numRe    = regexp.MustCompile(`\d+(\.\d+)?`)
	spaceRe  = regexp.MustCompile(`\s+`)
	// lineColRe is a frame's position: main.js:3:9 or main.js:3.
	lineColRe = regexp.MustCompile(`:\d+(:\d+)?`)
)

// Normalize takes the varying parts out of an error message: UUIDs,
// hexadecimal runs of 8 or more digits (with at least one decimal digit),
// quoted strings and numbers become <uuid>, <hex>, <str> and <n>, and
// whitespace runs one space.
func Normalize(msg string) string {
	s := uuidRe.ReplaceAllString(msg, "<uuid>")
	s = hexRe.ReplaceAllStringFunc(s, func(h string) string {
		if strings.IndexAny(h, "0123456789") < 0 {
			return h // a word such as "defaced"
		}
		return "<hex>"
	})
	s = quotedRe.ReplaceAllString(s, "<str>")
	s = numRe.ReplaceAllString(s, "<n>")
	return strings.TrimSpace(spaceRe.ReplaceAllString(s, " "))
}

// Frames is the top n frames of a stack ("at f (main.js:3:9)" lines, as
// goja and V8 write them), without positions.
func Frames(stack string, n int) []string {
	var out []string
	for line := range strings.SplitSeq(stack, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "at ") {
			continue
		}
		out = append(out, lineColRe.ReplaceAllString(line, ""))
		if len(out) == n {
			break
		}
	}
	return out
}

// Cause is what a fingerprint is made of, and what a group shows.
type Cause struct {
	// Outcome of the last attempt (store.Outcome*), "" when the message
	// has no history (dead-lettered by a host that kept none).
	Outcome string `json:"outcome"`
	// ErrorName and Message (normalized) of the last attempt's error.
	ErrorName string   `json:"errorName,omitempty"`
	Message   string   `json:"message,omitempty"`
	Frames    []string `json:"frames,omitempty"`
}

// CauseOf is the cause of a message with history h: its last attempt's.
func CauseOf(h []store.Attempt) Cause {
	if len(h) == 0 {
		return Cause{}
	}
	a := h[len(h)-1]
	c := Cause{Outcome: a.Outcome}
	switch a.Outcome {
	case store.OutcomeThrown, store.OutcomeSandboxEnded:
		c.ErrorName, c.Message, c.Frames = a.ErrorName, Normalize(a.ErrorMessage), Frames(a.ErrorStack, TopFrames)
	}
	return c
}

// Fingerprint is the cause's group key: 16 hex digits of its SHA-256.
func (c Cause) Fingerprint() string {
	h := sha256.New()
	for _, s := range append([]string{c.Outcome, c.ErrorName, c.Message}, c.Frames...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Title is one line that names the cause: "TypeError: x is <n>",
// "time_limit", "sandbox_ended: ...".
func (c Cause) Title() string {
	switch {
	case c.Outcome == "":
		return "no attempt history"
	case c.ErrorName != "" && c.Message != "":
		return c.ErrorName + ": " + c.Message
	case c.ErrorName != "":
		return c.ErrorName
	case c.Message != "":
		return c.Outcome + ": " + c.Message
	}
	return c.Outcome
}

// Fingerprint is the group key of a message with history h.
func Fingerprint(h []store.Attempt) string { return CauseOf(h).Fingerprint() }

// Group is the dead-lettered messages of one cause in one queue.
type Group struct {
	Fingerprint string `json:"fingerprint"`
	Title       string `json:"title"`
	Cause       Cause  `json:"cause"`
	Count       int    `json:"count"`
	// FirstSeen and LastSeen are the earliest and latest dead-letter
	// times (UTC epoch ms; the accept time for a message without
	// dead-letter metadata).
	FirstSeen int64 `json:"firstSeen"`
	LastSeen  int64 `json:"lastSeen"`
	// Example is the ID of the newest message of the group; ExampleError
	// its last attempt's error as it was, not normalized.
	Example      string         `json:"example"`
	ExampleError *store.Attempt `json:"exampleAttempt,omitempty"`
	// Histogram counts the group's messages per bucket of
	// GroupOptions.Bucket milliseconds, the last bucket ending at
	// LastSeen of the newest group (for a chart); nil unless asked for.
	Histogram []int `json:"histogram,omitempty"`
}

// when is a message's dead-letter time.
func when(m store.Message) int64 {
	if m.DeadLetter != nil {
		return m.DeadLetter.DeadLetteredAt
	}
	return m.AcceptedAt
}

// GroupOptions: Buckets > 0 asks for each group's histogram of that many
// buckets of Bucket milliseconds each, ending at End (UTC epoch ms).
type GroupOptions struct {
	Buckets int
	Bucket  int64
	End     int64
}

// Groups groups msgs by fingerprint, largest group first (then newest).
func Groups(msgs []store.Message, opt GroupOptions) []Group {
	by := map[string]*Group{}
	for _, m := range msgs {
		c := CauseOf(m.History)
		fp := c.Fingerprint()
		g := by[fp]
		t := when(m)
		if g == nil {
			g = &Group{Fingerprint: fp, Title: c.Title(), Cause: c, FirstSeen: t, LastSeen: t}
			if opt.Buckets > 0 {
				g.Histogram = make([]int, opt.Buckets)
			}
			by[fp] = g
		}
		g.Count++
		g.FirstSeen = min(g.FirstSeen, t)
		if t >= g.LastSeen || g.Example == "" {
			g.LastSeen = max(g.LastSeen, t)
			g.Example = m.ID
			if len(m.History) > 0 {
				a := m.History[len(m.History)-1]
				g.ExampleError = &a
			}
		}
		if opt.Buckets > 0 && opt.Bucket > 0 {
			start := opt.End - int64(opt.Buckets)*opt.Bucket
			if i := (t - start) / opt.Bucket; t >= start && i >= 0 && i < int64(opt.Buckets) {
				g.Histogram[i]++
			} else if t >= opt.End {
				g.Histogram[opt.Buckets-1]++
			}
		}
	}
	out := make([]Group, 0, len(by))
	for _, g := range by {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Group) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		if a.LastSeen != b.LastSeen {
			if a.LastSeen > b.LastSeen {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Fingerprint, b.Fingerprint)
	})
	return out
}
