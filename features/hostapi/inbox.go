package hostapi

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Stamped is a report a test worker POSTs: the inbox numbers it in arrival
// order and notes when it arrived (the test's clock).
type Stamped interface {
	Stamp(seq int, recv time.Time)
}

// Inbox receives the reports test workers POST to /event, decoded as E, and
// keeps them by a key (the kit's scenario scope; one key for a test that has
// none). It is the one recorder of the kit and the host's end-to-end tests:
// each defines its report (what its worker.js sends) and builds on it.
// Other requests go to Other, when set (the end-to-end tests' outbound fetch
// targets); else they are 404.
type Inbox[E any, P interface {
	*E
	Stamped
}] struct {
	key     func(P) string
	onEvent func(P)
	mu      sync.Mutex
	events  map[string][]P
	seq     int
	srv     *http.Server
	ln      net.Listener
}

// InboxOptions are an Inbox's optional parts.
type InboxOptions[P any] struct {
	// Key files each report; "" for every report when nil.
	Key func(P) string
	// OnEvent is called, outside the inbox's lock, for every report.
	OnEvent func(P)
	// Other answers every request that is not POST /event.
	Other http.Handler
	// MaxBody bounds a report's body; 64 MiB when zero.
	MaxBody int64
}

// StartInbox listens on addr ("127.0.0.1:0" for a free port).
func StartInbox[E any, P interface {
	*E
	Stamped
}](addr string, o InboxOptions[P]) (*Inbox[E, P], error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	in := &Inbox[E, P]{key: o.Key, onEvent: o.OnEvent, events: map[string][]P{}, ln: ln}
	limit := o.MaxBody
	if limit == 0 {
		limit = 64 << 20
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /event", func(w http.ResponseWriter, req *http.Request) { in.receive(w, req, limit) })
	if o.Other != nil {
		mux.Handle("/", o.Other)
	}
	in.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go in.srv.Serve(ln)
	return in, nil
}

func (in *Inbox[E, P]) receive(w http.ResponseWriter, req *http.Request, limit int64) {
	b, err := io.ReadAll(io.LimitReader(req.Body, limit))
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	e := P(new(E))
	if err := json.Unmarshal(b, e); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	k := ""
	if in.key != nil {
		k = in.key(e)
	}
	in.mu.Lock()
	in.seq++
	e.Stamp(in.seq, time.Now())
	in.events[k] = append(in.events[k], e)
	in.mu.Unlock()
	if in.onEvent != nil {
		in.onEvent(e)
	}
	w.WriteHeader(204)
}

// Addr is the host:port the inbox listens on.
func (in *Inbox[E, P]) Addr() string { return in.ln.Addr().String() }

// Close stops the inbox.
func (in *Inbox[E, P]) Close() error { return in.srv.Close() }

// Events is a copy of key's reports in arrival order.
func (in *Inbox[E, P]) Events(key string) []P {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]P(nil), in.events[key]...)
}

// Len is the number of key's reports.
func (in *Inbox[E, P]) Len(key string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.events[key])
}

// Forget drops key's reports.
func (in *Inbox[E, P]) Forget(key string) {
	in.mu.Lock()
	delete(in.events, key)
	in.mu.Unlock()
}
