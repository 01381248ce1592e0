package js

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// LogEntry is one line of a worker's log stream: a console.* call or an
// uncaught error of a handler invocation.
type LogEntry struct {
	Seq        int64  `json:"seq"`        // per worker, increasing (see LogBook)
	TimeMillis int64  `json:"timeMillis"` // UTC epoch milliseconds
	Level      string `json:"level"`      // "log", "info", "warn", "error" or "debug"
	Message    string `json:"message"`    // at most 16 KiB, cut at a rune boundary with "…" appended
	VersionUID string `json:"versionUID"`
}

// Logs returns up to limit entries of the worker's log with Seq > after,
// oldest first (after 0: from the oldest kept). limit <= 0 means 100.
func (rt *Runtime) Logs(workerUID string, after int64, limit int) []LogEntry {
	return rt.logs.List(workerUID, after, limit)
}

// Log adds a line to a worker's log on behalf of the host (delivery
// events such as messages dead-lettered).
func (rt *Runtime) Log(workerUID, versionUID, level, msg string) {
	rt.logs.Add(workerUID, versionUID, level, msg)
}

// DefaultLogBytes bounds the message bytes a worker's log keeps, besides
// its entry count (Options.LogEntries).
const DefaultLogBytes = 256 << 10

// NewLogBook makes a LogBook in memory keeping size entries per worker
// (default DefaultLogEntries when size <= 0). Its entries are gone when the
// process ends; see OpenLogBook for one that survives.
func NewLogBook(size int) *LogBook {
	if size <= 0 {
		size = DefaultLogEntries
	}
	return newLogBook(size)
}

// OpenLogBook makes a LogBook that keeps each worker's log in a file of
// dir (created if missing), one JSON LogEntry per line, so that a host
// restart keeps the log and its seq. size bounds the entries of a worker
// (default DefaultLogEntries), DefaultLogBytes their message bytes; the
// oldest go first. A worker's file holds at most about twice that before
// it is rewritten with only the kept entries, and Forget removes it.
//
// Lines are written to the file as they are added and never synced: a
// killed host loses none, a power failure may lose the last ones. Seq
// increases by 1 per entry; when a log is reopened it goes on at the
// larger of the last seq + 1 and the time in microseconds, so that lines
// lost from an unsynced tail are never numbered again and a client that
// reads with after= the last seq it saw misses nothing written later.
func OpenLogBook(dir string, size int) (*LogBook, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	b := NewLogBook(size)
	b.dir = dir
	return b, nil
}

// LogBook holds one log per worker. A Runtime keeps one (see Runtime.Logs,
// Options.Logs); a host that runs workers out of process keeps its own and
// adds the entries its sandboxes report (Options.LogSink).
type LogBook struct {
	size     int
	maxBytes int
	dir      string // "" keeps logs in memory only
	mu       sync.Mutex
	ring     map[string]*logRing
	open     int                 // rings with an open file
	gone     map[string]struct{} // forgotten workers: late lines are dropped
	goneList []string
	now      func() time.Time
	// WriteErrors counts lines a file could not take (they stay in memory).
	writeErrors int64
}

type logRing struct {
	entries   []LogEntry // oldest first
	bytes     int        // message bytes of entries
	nextSeq   int64
	wake      chan struct{} // closed by the next Add
	f         *os.File
	fileLines int
	fileBytes int64
	lastUse   int64
}

const maxOpenLogFiles = 64

func newLogBook(size int) *LogBook {
	return &LogBook{size: size, maxBytes: DefaultLogBytes, ring: map[string]*logRing{}, gone: map[string]struct{}{}, now: time.Now}
}

// fileName is the worker's log file: its UID when that is a plain name,
// hex otherwise.
func (s *LogBook) fileName(worker string) string {
	plain := worker != ""
	for _, c := range worker {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			plain = false
			break
		}
	}
	if !plain {
		worker = "x" + hex.EncodeToString([]byte(worker))
	}
	return filepath.Join(s.dir, worker+".log")
}

// get returns the worker's ring, loading it from its file the first time.
// s.mu is held.
func (s *LogBook) get(worker string) *logRing {
	if r := s.ring[worker]; r != nil {
		return r
	}
	r := &logRing{nextSeq: max(1, s.now().UnixMicro())}
	if s.dir != "" {
		s.load(worker, r)
	}
	s.ring[worker] = r
	return r
}

// load reads the worker's file into r, dropping a torn last line.
func (s *LogBook) load(worker string, r *logRing) {
	raw, err := os.ReadFile(s.fileName(worker))
	if err != nil {
		return
	}
	good := 0
	for off := 0; off < len(raw); {
		nl := bytes.IndexByte(raw[off:], '\n')
		if nl < 0 {
			break
		}
		var e LogEntry
		if json.Unmarshal(raw[off:off+nl], &e) == nil && e.Seq > 0 {
			s.keep(r, e)
			r.nextSeq = max(r.nextSeq, e.Seq+1)
			r.fileLines++
		}
		off += nl + 1
		good = off
	}
	r.fileBytes = int64(good)
	if good < len(raw) {
		_ = os.Truncate(s.fileName(worker), int64(good))
	}
}

// keep appends e to r's entries, evicting the oldest beyond the bounds.
func (s *LogBook) keep(r *logRing, e LogEntry) {
	r.entries = append(r.entries, e)
	r.bytes += len(e.Message)
	drop := 0
	for len(r.entries)-drop > s.size || (r.bytes > s.maxBytes && len(r.entries)-drop > 1) {
		r.bytes -= len(r.entries[drop].Message)
		drop++
	}
	if drop > 0 {
		r.entries = r.entries[drop:]
	}
}

// Add appends an entry to the worker's log, cutting msg to 16 KiB.
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
	if _, gone := s.gone[worker]; gone {
		return
	}
	r := s.get(worker)
	e := LogEntry{Seq: r.nextSeq, TimeMillis: s.now().UnixMilli(), Level: level, Message: msg, VersionUID: versionUID}
	r.nextSeq++
	s.keep(r, e)
	if s.dir != "" {
		s.write(worker, r, e)
	}
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

// write appends e to the worker's file, rewriting the file with the kept
// entries once it holds twice the bounds. s.mu is held.
func (s *LogBook) write(worker string, r *logRing, e LogEntry) {
	line, _ := json.Marshal(e)
	line = append(line, '\n')
	if r.fileLines+1 > 2*s.size || r.fileBytes+int64(len(line)) > int64(2*s.maxBytes)+maxLogMessageBytes+1024 {
		if s.rewrite(worker, r) == nil {
			return // the rewrite holds e, the newest kept entry
		}
	}
	if r.f == nil {
		if s.open >= maxOpenLogFiles {
			s.closeLeastUsed()
		}
		f, err := os.OpenFile(s.fileName(worker), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			s.writeErrors++
			return
		}
		r.f = f
		s.open++
	}
	r.lastUse = s.now().UnixNano()
	if _, err := r.f.Write(line); err != nil {
		s.writeErrors++
		return
	}
	r.fileLines++
	r.fileBytes += int64(len(line))
}

// rewrite replaces the worker's file by one holding r's entries. s.mu is
// held.
func (s *LogBook) rewrite(worker string, r *logRing) error {
	s.closeFile(r)
	var buf bytes.Buffer
	for _, e := range r.entries {
		line, _ := json.Marshal(e)
		buf.Write(line)
		buf.WriteByte('\n')
	}
	name := s.fileName(worker)
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		_ = os.Remove(tmp)
		s.writeErrors++
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		s.writeErrors++
		return err
	}
	r.fileLines, r.fileBytes = len(r.entries), int64(buf.Len())
	return nil
}

func (s *LogBook) closeFile(r *logRing) {
	if r.f != nil {
		_ = r.f.Close()
		r.f = nil
		s.open--
	}
}

func (s *LogBook) closeLeastUsed() {
	var lru *logRing
	for _, r := range s.ring {
		if r.f != nil && (lru == nil || r.lastUse < lru.lastUse) {
			lru = r
		}
	}
	if lru != nil {
		s.closeFile(lru)
	}
}

// List is Runtime.Logs on this book.
func (s *LogBook) List(worker string, after int64, limit int) []LogEntry {
	if limit <= 0 {
		limit = 100
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.gone[worker]; gone {
		return nil
	}
	r := s.get(worker)
	var out []LogEntry
	for _, e := range r.entries {
		if len(out) == limit {
			break
		}
		if e.Seq > after {
			out = append(out, e)
		}
	}
	return out
}

// Wait returns a channel that is closed once the worker's log holds an
// entry with Seq > after (at once if it does already), for a reader that
// follows the log. The channel of a forgotten worker is never closed.
func (s *LogBook) Wait(worker string, after int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, gone := s.gone[worker]; gone {
		return make(chan struct{})
	}
	r := s.get(worker)
	if n := len(r.entries); n > 0 && r.entries[n-1].Seq > after {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if r.wake == nil {
		r.wake = make(chan struct{})
	}
	return r.wake
}

// Forget drops a worker's log and removes its file (once the worker is
// deleted). Lines that still arrive for it are dropped.
func (s *LogBook) Forget(worker string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.ring[worker]; r != nil {
		s.closeFile(r)
		delete(s.ring, worker)
	}
	if _, gone := s.gone[worker]; !gone {
		s.gone[worker] = struct{}{}
		s.goneList = append(s.goneList, worker)
		if len(s.goneList) > 4096 {
			delete(s.gone, s.goneList[0])
			s.goneList = s.goneList[1:]
		}
	}
	if s.dir != "" {
		_ = os.Remove(s.fileName(worker))
	}
}

// Sweep removes the files of workers for which keep reports false (deleted
// while the host was not running), and returns how many it removed.
func (s *LogBook) Sweep(keep func(worker string) bool) (int, error) {
	if s.dir == "" {
		return 0, nil
	}
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, de := range des {
		name := de.Name()
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(filepath.Join(s.dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		worker := strings.TrimSuffix(name, ".log")
		if strings.HasPrefix(worker, "x") {
			if raw, err := hex.DecodeString(worker[1:]); err == nil && s.fileName(string(raw)) == filepath.Join(s.dir, name) {
				worker = string(raw)
			}
		}
		if !keep(worker) {
			s.mu.Lock()
			if r := s.ring[worker]; r != nil {
				s.closeFile(r)
				delete(s.ring, worker)
			}
			s.mu.Unlock()
			if os.Remove(filepath.Join(s.dir, name)) == nil {
				n++
			}
		}
	}
	return n, nil
}

// WriteErrors is the number of lines the book's files could not take
// (they were kept in memory only).
func (s *LogBook) WriteErrors() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeErrors
}

// Close closes the book's open files; it stays usable (files reopen).
func (s *LogBook) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, r := range s.ring {
		if r.f != nil {
			errs = append(errs, r.f.Close())
			r.f = nil
		}
	}
	s.open = 0
	return errors.Join(errs...)
}
