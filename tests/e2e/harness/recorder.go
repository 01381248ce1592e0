package harness

import (
	_ "embed"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/features/hostapi"
)

// WorkerJS is the test worker's single module (worker.js).
//
//go:embed worker.js
var WorkerJS string

// Event is one report a test worker POSTed.
type Event struct {
	Scope    string      `json:"scope"`
	Kind     string      `json:"kind"` // "delivery" or "settled"
	BatchID  string      `json:"batchId"`
	Queue    string      `json:"queue"`
	Messages []EventMsg  `json:"messages"`
	Acked    []string    `json:"acked"`
	Failed   []FailedMsg `json:"failed"`
	Threw    bool        `json:"threw"`

	Seq  int       `json:"-"`
	Recv time.Time `json:"-"`
}

// EventMsg is one message as the handler saw it.
type EventMsg struct {
	ID       string  `json:"id"`
	Attempts int     `json:"attempts"`
	TS       float64 `json:"ts"`
	K        string  `json:"k"`
	Step     string  `json:"step"`
}

// FailedMsg is a settlement call that rejected.
type FailedMsg struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Stamp numbers the event and notes when it arrived (hostapi.Stamped).
func (e *Event) Stamp(seq int, recv time.Time) { e.Seq, e.Recv = seq, recv }

// Recorder receives the workers' reports on loopback: the kit's inbox
// (features/hostapi), with every other path a sink that counts its
// requests (the sandbox and secrets tests' outbound fetch targets).
type Recorder struct {
	in *hostapi.Inbox[Event, *Event]
	// OnEvent, when set, is called (outside the lock) for every event.
	OnEvent func(*Event)

	mu      sync.Mutex
	sinks   map[string]int // requests to other paths, by path
	sinkHdr []http.Header
	gate    func(*http.Request) // SetGate
}

// StartRecorder listens on a free loopback port.
func StartRecorder() (*Recorder, error) {
	r := &Recorder{sinks: map[string]int{}}
	in, err := hostapi.StartInbox[Event]("127.0.0.1:0", hostapi.InboxOptions[*Event]{
		MaxBody: 16 << 20,
		Other:   http.HandlerFunc(r.sink),
		OnEvent: func(e *Event) {
			r.mu.Lock()
			cb := r.OnEvent
			r.mu.Unlock()
			if cb != nil {
				cb(e)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	r.in = in
	return r, nil
}

// SetGate makes f answer every request to /gate/... (by returning): the
// gate:NAME and hog directives of worker.js wait for that answer.
func (r *Recorder) SetGate(f func(*http.Request)) {
	r.mu.Lock()
	r.gate = f
	r.mu.Unlock()
}

// Addr is host:port.
func (r *Recorder) Addr() string { return r.in.Addr() }

// URL is the base URL workers use.
func (r *Recorder) URL() string { return "http://" + r.Addr() }

// Close stops the recorder.
func (r *Recorder) Close() error { return r.in.Close() }

func (r *Recorder) sink(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, 16<<20))
	if req.URL.Path == "/redirect" {
		r.mu.Lock()
		r.sinks[req.URL.Path]++
		r.mu.Unlock()
		http.Redirect(w, req, req.URL.Query().Get("to"), http.StatusFound)
		return
	}
	r.mu.Lock()
	r.sinks[req.URL.Path]++
	r.sinkHdr = append(r.sinkHdr, req.Header.Clone())
	gate := r.gate
	r.mu.Unlock()
	if gate != nil && strings.HasPrefix(req.URL.Path, "/gate/") {
		gate(req)
	}
	w.Write([]byte("sink ok"))
}

// Events is a copy of every event so far, in arrival order.
func (r *Recorder) Events() []*Event { return r.in.Events("") }

// Len is the number of events so far.
func (r *Recorder) Len() int { return r.in.Len("") }

// Sink is how many requests reached path.
func (r *Recorder) Sink(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sinks[path]
}

// SinkHeaders are the headers of every sink request.
func (r *Recorder) SinkHeaders() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.sinkHdr...)
}

// Deliveries lists (seq, queue, message) of every delivery of key k.
func (r *Recorder) Deliveries(k string) []Seen {
	var out []Seen
	for _, e := range r.Events() {
		if e.Kind != "delivery" {
			continue
		}
		for _, m := range e.Messages {
			if m.K == k {
				out = append(out, Seen{Seq: e.Seq, Queue: e.Queue, BatchID: e.BatchID, Msg: m, Recv: e.Recv})
			}
		}
	}
	return out
}

// Seen is one delivery of one message.
type Seen struct {
	Seq     int
	Queue   string
	BatchID string
	Msg     EventMsg
	Recv    time.Time // when the recorder received the report
}
