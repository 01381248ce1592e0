package js

import (
	"sync"
	"time"
	"unicode/utf8"
)

// LogEntry is one line of a worker's log stream: a console.* call or an
// uncaught error of a handler invocation.
type LogEntry struct {
	Seq        int64  `json:"seq"`        // per worker, +1 per entry from a time-based start (see LogBook.Add)
	TimeMillis int64  `json:"timeMillis"` // UTC epoch milliseconds
	Level      string `json:"level"`      // "log", "info", "warn", "error" or "debug"
	Message    string `json:"message"`    // at most 16 KiB, cut at a rune boundary with "…" appended
	VersionUID string `json:"versionUID"`
}

// Logs returns up to limit entries of the worker's log with Seq > after,
// oldest first (after 0: from the oldest kept). limit <= 0 means 100. The
// ring keeps Options.LogEntries entries per worker; older ones are gone.
func (rt *Runtime) Logs(workerUID string, after int64, limit int) []LogEntry {
	return rt.logs.List(workerUID, after, limit)
}

// Log adds a line to a worker's log on behalf of the host (delivery
// events such as messages dead-lettered).
func (rt *Runtime) Log(workerUID, versionUID, level, msg string) {
	rt.logs.Add(workerUID, versionUID, level, msg)
}

// NewLogBook makes a LogBook keeping size entries per worker (default
// DefaultLogEntries when size <= 0).
func NewLogBook(size int) *LogBook {
	if size <= 0 {
		size = DefaultLogEntries
	}
	return newLogBook(size)
}

// LogBook holds one log ring per worker. A Runtime keeps one (see
// Runtime.Logs); a host that runs workers out of process keeps its own and
// adds the entries its sandboxes report (Options.LogSink).
type LogBook struct {
	size int
	mu   sync.Mutex
	ring map[string]*logRing
	now  func() time.Time
}

type logRing struct {
	entries []LogEntry // circular, len <= size
	start   int
	nextSeq int64
}

func newLogBook(size int) *LogBook {
	return &LogBook{size: size, ring: map[string]*logRing{}, now: time.Now}
}

// Add appends an entry to the worker's ring, cutting msg to 16 KiB.
func (s *LogBook) Add(worker, versionUID, level, msg string) {
	if len(msg) > maxLogMessageBytes {
		cut := maxLogMessageBytes
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ring[worker]
	if r == nil {
		// A ring's first seq is the time it starts in microseconds (about
		// 1.7e15, exact in a JavaScript number), and each entry adds 1: a
		// client reading with after= the last seq it saw goes on reading
		// after the host restarts (the ring is memory, so it starts again,
		// above every seq of the previous run unless that run logged more
		// than one line per microsecond, or the clock stepped back), rather
		// than waiting forever for seq to pass a number it counted to
		// before.
		r = &logRing{nextSeq: max(1, s.now().UnixMicro())}
		s.ring[worker] = r
	}
	e := LogEntry{Seq: r.nextSeq, TimeMillis: s.now().UnixMilli(), Level: level, Message: msg, VersionUID: versionUID}
	r.nextSeq++
	if len(r.entries) < s.size {
		r.entries = append(r.entries, e)
		return
	}
	r.entries[r.start] = e
	r.start = (r.start + 1) % s.size
}

// List is Runtime.Logs on this book.
func (s *LogBook) List(worker string, after int64, limit int) []LogEntry {
	if limit <= 0 {
		limit = 100
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ring[worker]
	if r == nil {
		return nil
	}
	var out []LogEntry
	n := len(r.entries)
	for i := 0; i < n && len(out) < limit; i++ {
		e := r.entries[(r.start+i)%n]
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out
}

// Forget drops a worker's ring (for example once the worker is deleted).
func (s *LogBook) Forget(worker string) {
	s.mu.Lock()
	delete(s.ring, worker)
	s.mu.Unlock()
}
