package steps

import (
	"fmt"
	"time"

	"github.com/takoform/queuehost/features/hostapi"
)

// Event is one observation a test worker POSTed to the recorder.
type Event struct {
	Scope        string   `json:"scope"`
	Kind         string   `json:"kind"` // "start" or "end" of a queue handler invocation
	BatchID      any      `json:"batchId"`
	Queue        any      `json:"queue"`
	Messages     []Msg    `json:"messages"`
	Results      []Result `json:"results"`
	Threw        bool     `json:"threw"`
	WorkerMillis float64  `json:"workerMillis"`
	StartMillis  float64  `json:"startMillis"`

	Recv time.Time `json:"-"` // when the recorder received it (kit clock)
	Seq  int       `json:"-"`
}

// BatchIDString is the batch ID when it is a string.
func (e *Event) BatchIDString() string { s, _ := e.BatchID.(string); return s }

// QueueName is the batch's queue name when it is a string.
func (e *Event) QueueName() string { s, _ := e.Queue.(string); return s }

// Msg is one message as the handler saw it.
type Msg struct {
	ID                any      `json:"id"`
	IDType            string   `json:"idType"`
	TimestampMillis   any      `json:"timestampMillis"`
	Attempts          any      `json:"attempts"`
	BodyIsArrayBuffer bool     `json:"bodyIsArrayBuffer"`
	BodyLength        float64  `json:"bodyLength"`
	Body              string   `json:"body"` // base64
	Tag               string   `json:"tag"`
	Step              string   `json:"step"`
	Keys              []string `json:"keys"`
}

// IDString is the message ID when it is a string.
func (m *Msg) IDString() string { s, _ := m.ID.(string); return s }

// Result is one settlement call's outcome.
type Result struct {
	Op    string `json:"op"`
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Name  string `json:"name"`
	Value string `json:"value"`
	// At is the worker's Date.now() when the call resolved or rejected
	// (the host's clock).
	At float64 `json:"at"`
}

// Stamp numbers the event and notes when it arrived (hostapi.Stamped).
func (e *Event) Stamp(seq int, recv time.Time) { e.Seq, e.Recv = seq, recv }

// Recorder receives the test workers' outbound fetches on loopback (or any
// address the host can reach) and lets steps wait for them: the shared
// inbox (hostapi.Inbox), its reports filed by scenario scope.
type Recorder struct {
	*hostapi.Inbox[Event, *Event]
}

// StartRecorder listens on addr ("127.0.0.1:0" for a free port).
func StartRecorder(addr string) (*Recorder, error) {
	in, err := hostapi.StartInbox[Event](addr, hostapi.InboxOptions[*Event]{Key: func(e *Event) string { return e.Scope }})
	if err != nil {
		return nil, err
	}
	return &Recorder{in}, nil
}

// Delivery is one delivery of one message: the start event of the batch
// it came in, the message as seen, and the batch's end event if any.
type Delivery struct {
	Start *Event
	Msg   Msg
	End   *Event
}

// Deliveries lists every delivery of the messages tagged tag, in arrival order.
func (r *Recorder) Deliveries(scope, tag string) []Delivery {
	evs := r.Events(scope)
	ends := map[string]*Event{}
	for _, e := range evs {
		if e.Kind == "end" {
			ends[e.BatchIDString()] = e
		}
	}
	var out []Delivery
	for _, e := range evs {
		if e.Kind != "start" {
			continue
		}
		for _, m := range e.Messages {
			if m.Tag == tag {
				out = append(out, Delivery{Start: e, Msg: m, End: ends[e.BatchIDString()]})
			}
		}
	}
	return out
}

// Poll calls check every interval until it returns nil or the deadline
// passes; it returns check's last error then.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if s, ok := err.(godogStop); ok {
			return s.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Consistently calls check every interval for the whole window and fails on
// the first error: how the kit shows that something does not happen.
func Consistently(window time.Duration, check func() error) error {
	deadline := time.Now().Add(window)
	for {
		if err := check(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
