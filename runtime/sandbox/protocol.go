package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/runtime/membudget"
)

// Operations of the protocol. Host to sandbox: opInit (first frame),
// opProbe, opLoad, opQueue, opFetch (requests), opCancel, opEvict (one-way).
// Sandbox to host: opSend, opSettle, opOutbound (requests), opLog (one-way).
const (
	opInit     = "init"
	opProbe    = "probe"
	opLoad     = "load"
	opQueue    = "queue"
	opFetch    = "fetch"
	opCancel   = "cancel"
	opEvict    = "evict"
	opSend     = "send"
	opSettle   = "settle"
	opOutbound = "outbound"
	opLog      = "log"
)

// frame is the one message type on the connection (codec.go). A request has
// an ID (unique per direction) and Op; its reply has the same ID and Reply
// set. One-way frames have ID 0. Only the fields an operation uses are set.
type frame struct {
	ID    uint64
	Reply bool
	Op    string
	Inv   uint64 // opSend, opSettle, opOutbound, opCancel: the host's call ID of the invocation

	Init       *initMsg
	Version    *abi.Version // opProbe, opLoad, opQueue, opFetch: the first time this sandbox sees the version
	VersionUID string
	Deadline   time.Time // the invocation's deadline
	// StartBy (opQueue): the machine's CLOCK_MONOTONIC, in nanoseconds,
	// after which the sandbox must not start the batch (0: no limit);
	// see abi.WithStartBy and monoNow.
	StartBy    int64
	Batch      *batchMsg
	HTTP       *httpMsg // opFetch, opOutbound request and reply
	Path       string   // opFetch
	QueueUID   string
	Messages   []wireOutgoing
	Settlement *wireSettlement
	BatchID    string
	IDs        []string
	Handlers   []string
	Log        *logMsg
	Err        *wireErr

	batch *abi.Batch // host side only (not encoded): the batch of an opQueue call
}

type initMsg struct {
	InvocationTimeout time.Duration
	StartupTimeout    time.Duration
	AllowedFetchHosts []string
	MemoryLimit       int64
	AddressSpace      int64
	MaxStack          int
	Lanes             int // lanes at laneFD(0), laneFD(1), ...
}

// wireOutgoing and wireSettlement carry an optional delay explicitly: the
// codec drops zero values, so a *int pointing at 0 would arrive as nil (the
// queue's default) instead of "no delay".
type wireOutgoing struct {
	Body     []byte
	HasDelay bool
	Delay    int
}

type wireSettlement struct {
	Kind      abi.SettleKind
	MessageID string
	HasDelay  bool
	Delay     int
}

func delayOf(has bool, d int) *int {
	if !has {
		return nil
	}
	return &d
}

func toWireOutgoing(msgs []abi.OutgoingMessage) []wireOutgoing {
	out := make([]wireOutgoing, len(msgs))
	for i, m := range msgs {
		out[i].Body = m.Body
		if m.Delay != nil {
			out[i].HasDelay, out[i].Delay = true, *m.Delay
		}
	}
	return out
}

func fromWireOutgoing(msgs []wireOutgoing) []abi.OutgoingMessage {
	out := make([]abi.OutgoingMessage, len(msgs))
	for i, m := range msgs {
		out[i] = abi.OutgoingMessage{Body: m.Body, Delay: delayOf(m.HasDelay, m.Delay)}
	}
	return out
}

func toWireSettlement(s abi.Settlement) *wireSettlement {
	w := &wireSettlement{Kind: s.Kind, MessageID: s.MessageID}
	if s.Delay != nil {
		w.HasDelay, w.Delay = true, *s.Delay
	}
	return w
}

func (w *wireSettlement) settlement() abi.Settlement {
	return abi.Settlement{Kind: w.Kind, MessageID: w.MessageID, Delay: delayOf(w.HasDelay, w.Delay)}
}

type batchMsg struct {
	ID       string
	Queue    string
	Messages []abi.Message
}

type httpMsg struct {
	Method     string
	URL        string
	Host       string
	TLS        bool
	Header     map[string][]string
	Body       []byte
	Status     int
	StatusText string
}

type logMsg struct {
	Worker, Version, Level, Message string
}

// wireErr carries an error across the connection with enough to rebuild the
// sentinel the other side tests with errors.Is/As.
type wireErr struct {
	Kind    string // errKind*
	Code    string // for errKindCode: abi.Code
	Message string
	File    string
	Line    int
	Column  int
	// Name and Stack: for errKindScript, the exception's (Message is its
	// message), so that the host can tell an operator what was thrown.
	Name  string
	Stack string
}

const (
	errKindCompile        = "compile"
	errKindCode           = "code"
	errKindNoQueueHandler = "no_queue_handler"
	errKindNoFetchHandler = "no_fetch_handler"
	errKindTooLarge       = "request_too_large"
	errKindExhausted      = "exhausted"
	errKindTimeout        = "timeout"
	errKindNoVersion      = "no_version"
	errKindOther          = "other"
	errKindBudget         = "memory_budget"
	errKindScript         = "script"
)

var codeErrs = map[string]error{
	"unknown_batch":       abi.ErrUnknownBatch,
	"unknown_message":     abi.ErrUnknownMessage,
	"already_settled":     abi.ErrAlreadySettled,
	"invalid_body":        abi.ErrInvalidBody,
	"message_too_large":   abi.ErrMessageTooLarge,
	"batch_too_large":     abi.ErrBatchTooLarge,
	"RangeError":          abi.ErrInvalidDelay,
	"backend_unavailable": abi.ErrBackendUnavailable,
	"not_started":         abi.ErrNotStarted,
}

func toWire(err error) *wireErr {
	if err == nil {
		return nil
	}
	w := &wireErr{Kind: errKindOther, Message: err.Error()}
	var ce *abi.CompileError
	var se *js.ScriptError
	switch {
	case errors.As(err, &se) && err == error(se):
		w.Kind, w.Name, w.Message, w.Stack = errKindScript, se.Name, se.Message, se.Stack
	case errors.As(err, &ce):
		w.Kind, w.Message, w.File, w.Line, w.Column = errKindCompile, ce.Message, ce.File, ce.Line, ce.Column
	case errors.Is(err, js.ErrNoQueueHandler):
		w.Kind = errKindNoQueueHandler
	case errors.Is(err, js.ErrNoFetchHandler):
		w.Kind = errKindNoFetchHandler
	case errors.Is(err, js.ErrRequestTooLarge):
		w.Kind = errKindTooLarge
	case errors.Is(err, js.ErrRuntimeExhausted):
		w.Kind = errKindExhausted
	case errors.Is(err, js.ErrTimeout):
		w.Kind = errKindTimeout
	case errors.Is(err, errVersionNotSent):
		w.Kind = errKindNoVersion
	case errors.Is(err, membudget.ErrBusy):
		w.Kind = errKindBudget
	default:
		for code, sentinel := range codeErrs {
			if errors.Is(err, sentinel) {
				w.Kind, w.Code = errKindCode, code
			}
		}
	}
	return w
}

// wireError is an error that came over the connection: its text as the other
// side had it, unwrapping to the matching sentinel.
type wireError struct {
	msg      string
	sentinel error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.sentinel }

func (w *wireErr) err() error {
	if w == nil {
		return nil
	}
	var sentinel error
	switch w.Kind {
	case errKindCompile:
		return &abi.CompileError{File: w.File, Line: w.Line, Column: w.Column, Message: w.Message}
	case errKindNoQueueHandler:
		sentinel = js.ErrNoQueueHandler
	case errKindNoFetchHandler:
		sentinel = js.ErrNoFetchHandler
	case errKindTooLarge:
		sentinel = js.ErrRequestTooLarge
	case errKindExhausted:
		sentinel = js.ErrRuntimeExhausted
	case errKindTimeout:
		sentinel = js.ErrTimeout
	case errKindNoVersion:
		sentinel = errVersionNotSent
	case errKindCode:
		sentinel = codeErrs[w.Code]
	case errKindBudget:
		sentinel = membudget.ErrBusy
	case errKindScript:
		return &js.ScriptError{Name: w.Name, Message: w.Message, Stack: w.Stack}
	}
	return &wireError{msg: w.Message, sentinel: sentinel}
}

// conn multiplexes requests in both directions over one socket. Frames are
// written under a lock (each frame whole) and read by one goroutine, which
// hands replies to their waiting callers and requests to handle.
//
// Writes are coalesced: a frame is encoded into a buffer under the write
// lock, and the first writer to find no write in progress writes the
// buffer to the connection, and again whatever other writers appended while it
// wrote, until the buffer is empty. Under concurrent invocations one
// system call (and one wake-up of the peer) carries many frames; a lone
// frame is written at once by its own writer.
type conn struct {
	c   io.ReadWriteCloser
	wmu sync.Mutex
	// wbuf holds encoded frames not yet written; spare is the buffer the
	// last write used, reused for the next.
	wbuf, spare []byte
	writing     bool       // a writer is writing (the others only append)
	wcond       *sync.Cond // on wmu: the writer finished (for a frame written in pieces)
	werr        error      // the first write error: the connection is broken

	replies replies // this side's requests waiting for their replies
}

// replies matches the replies that come over a connection or a lane to
// the requests of this side waiting for them, by request ID. Once closed
// (the way ended) it registers nothing more and every waiting request is
// told with a nil reply.
type replies struct {
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]func(*frame) // called with the reply, or nil
	closed  error
}

// add gives f the next request ID and returns the channel its reply will
// come on (closed if the way ends first), or the error the way ended with.
func (r *replies) add(f *frame) (chan *frame, error) {
	ch := make(chan *frame, 1)
	err := r.addFunc(f, func(reply *frame) {
		if reply == nil {
			close(ch)
			return
		}
		ch <- reply
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// addFunc gives f the next request ID and registers fn, called once with
// its reply, or with nil when the way ends first, from the goroutine that
// reads the reply; or returns the error the way ended with.
func (r *replies) addFunc(f *frame, fn func(*frame)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed != nil {
		return r.closed
	}
	if r.pending == nil {
		r.pending = map[uint64]func(*frame){}
	}
	r.nextID++
	f.ID = r.nextID
	r.pending[f.ID] = fn
	return nil
}

// newID is a request ID that no request added will have.
func (r *replies) newID() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	return r.nextID
}

// deliver passes reply f to the request waiting for it; a reply nobody
// waits for any more is dropped.
func (r *replies) deliver(f *frame) {
	r.mu.Lock()
	fn := r.pending[f.ID]
	delete(r.pending, f.ID)
	r.mu.Unlock()
	if fn != nil {
		fn(f)
	}
}

// forget drops the request id: false if it was no longer waiting (its
// reply, or the way's end, came first).
func (r *replies) forget(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pending[id]
	delete(r.pending, id)
	return ok
}

// waiting is the number of requests waiting for their replies.
func (r *replies) waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// close ends the way with err: every waiting request is told (nil).
func (r *replies) close(err error) {
	r.mu.Lock()
	r.closed = err
	fns := make([]func(*frame), 0, len(r.pending))
	for id, fn := range r.pending {
		fns = append(fns, fn)
		delete(r.pending, id)
	}
	r.mu.Unlock()
	for _, fn := range fns {
		fn(nil)
	}
}

func (r *replies) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// readBufferSize is the read buffer of a conn: a frame of a batch of 100
// messages of 100 B is read in one system call.
const readBufferSize = 64 << 10

func newConn(c io.ReadWriteCloser) *conn {
	return &conn{c: c}
}

// write encodes f into the buffer and, unless another writer is writing
// (it will write f too), writes the buffer until it is empty. A frame
// carrying a body of readBufferSize or more is not copied into the buffer:
// its writer waits for the connection, then writes the frame in pieces,
// the body uncopied (frameSegments), and whatever others appended
// meanwhile. Coalesced, concurrent 8 MiB fetches were each copied into one
// buffer that grew to hold them all (issue 36).
func (c *conn) write(f *frame) error {
	c.wmu.Lock()
	if c.werr != nil {
		err := c.werr
		c.wmu.Unlock()
		return err
	}
	var segs [][]byte
	if hasLargeBody(f) {
		if c.wcond == nil {
			c.wcond = sync.NewCond(&c.wmu)
		}
		for c.writing && c.werr == nil {
			c.wcond.Wait()
		}
		if c.werr != nil {
			err := c.werr
			c.wmu.Unlock()
			return err
		}
		segs, _ = frameSegments(nil, f, readBufferSize, nil)
	} else {
		c.wbuf = appendFrame(c.wbuf, f)
		if c.writing {
			c.wmu.Unlock()
			return nil
		}
	}
	c.writing = true
	var err error
	for (len(c.wbuf) > 0 || segs != nil) && err == nil {
		buf := c.wbuf
		c.wbuf, c.spare = c.spare[:0], nil
		c.wmu.Unlock()
		if len(buf) > 0 {
			_, err = c.c.Write(buf)
		}
		for _, s := range segs {
			if err == nil {
				_, err = c.c.Write(s)
			}
		}
		segs = nil
		c.wmu.Lock()
		if cap(buf) <= readBufferSize {
			c.spare = buf[:0]
		}
	}
	c.writing = false
	if c.wcond != nil {
		c.wcond.Broadcast()
	}
	if err != nil && c.werr == nil {
		c.werr = err
	}
	c.wmu.Unlock()
	return err
}

// hasLargeBody reports whether f carries a body of readBufferSize or more
// (a fetch's request or response, a message of a batch or a send): the
// bodies frameSegments would leave uncopied.
func hasLargeBody(f *frame) bool {
	m := encoder{sizing: true, direct: readBufferSize}
	m.fields(f)
	return m.skipped > 0
}

// start registers a request and writes it; wait for the reply on the
// returned channel (closed without a value when the connection ends).
// before, when not nil, sees the request's ID before it is written.
func (c *conn) start(f *frame, before func(id uint64)) (uint64, chan *frame, error) {
	ch, err := c.replies.add(f)
	if err != nil {
		return 0, nil, err
	}
	if before != nil {
		before(f.ID)
	}
	if err := c.write(f); err != nil {
		c.replies.forget(f.ID)
		return 0, nil, fmt.Errorf("sandbox: writing to the sandbox connection: %w", err)
	}
	return f.ID, ch, nil
}

// newID is a request ID of this side that no request over the connection
// will have (for an invocation over a lane).
func (c *conn) newID() uint64 { return c.replies.newID() }

// call is start and a wait bounded by ctx.
func (c *conn) call(ctx context.Context, f *frame) (*frame, error) {
	id, ch, err := c.start(f, nil)
	if err != nil {
		return nil, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, c.err()
		}
		return r, nil
	case <-ctx.Done():
		c.replies.forget(id)
		return nil, context.Cause(ctx)
	}
}

func (c *conn) err() error { return c.replies.err() }

// readLoop reads frames until the connection ends, passing replies to their
// callers and everything else to handle (called on the read goroutine: it
// must not block on the connection's peer). It returns the read error, and
// fails every pending call with closedErr(err).
func (c *conn) readLoop(handle func(*frame), closedErr func(error) error) error {
	r := bufio.NewReaderSize(c.c, readBufferSize)
	var err error
	for {
		f := new(frame)
		if err = readFrame(r, f); err != nil {
			break
		}
		if f.Reply {
			c.replies.deliver(f)
			continue
		}
		handle(f)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
		err = io.EOF
	}
	c.replies.close(closedErr(err))
	return err
}

func (c *conn) reply(req *frame, r *frame) {
	r.ID, r.Reply = req.ID, true
	_ = c.write(r)
}
