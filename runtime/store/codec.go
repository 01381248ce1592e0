package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/takoform/queuehost/runtime/journal"
)

// The payload of one journal frame is one Apply:
//
//	u8 version | uvarint count | count × (u8 type | fields)
//
// Fields are uvarint-length-prefixed strings and byte slices (slices that
// may be nil carry length+1, 0 meaning nil, so that a record reads back
// exactly as written), varints for integers, and times as varint Unix
// seconds + uvarint nanoseconds (UTC). A message body is the last field of
// its record, so the store can remember where in the segment it lies and
// read it back with one ReadAt. Binary rather than JSON: bodies are bytes,
// and replaying a large backlog is dominated by decoding.
const codecVersion = 1

const (
	recPutResource byte = 1 + iota
	recDeleteResource
	recPutOperation
	recPutIdempotency
	recDeleteIdempotency
	recAcceptMessage
	recDeliverMessages
	recRetryMessage
	recRemoveMessages
	recDropQueue
	// recPutOperation2 is recPutOperation with the Operation's FormURL
	// after Principal; recPutOperation is still read (FormURL "").
	recPutOperation2
	recDeleteOperation
	// recPutResource2 is recPutResource with the resource's Paused flag
	// (u8) after Creator; recPutResource is still read (Paused false).
	recPutResource2
	// recAcceptMessage2 is recAcceptMessage with the message's dead-letter
	// metadata (Message.DeadLetter) after Lease; written only for a
	// message that has it.
	recAcceptMessage2
	// recPutOperation3 is recPutOperation2 with the Operation's Progress
	// after FormURL; written only for an Operation that has it.
	recPutOperation3
	// recAcceptMessage3 is recAcceptMessage with a byte of flags after
	// Lease (1: dead-letter metadata follows, as in recAcceptMessage2;
	// 2: then the message's TraceParent; 4: then its attempt history,
	// a uvarint count and the attempts); written only for a message that
	// has a TraceParent or a history, so a host that does not trace
	// writes the records it always did for a message never retried.
	recAcceptMessage3
	// recRetryMessage2 is recRetryMessage with the attempt that ended so
	// after VisibleAt; written only when there is one.
	recRetryMessage2
	// recDeliverMessages2 is recDeliverMessages with VisibleAt (varint)
	// after the IDs; written only for a delivery that sets it (a pull
	// lease).
	recDeliverMessages2
	// recExtendLease is ExtendLease: queue, lease, IDs, VisibleAt.
	recExtendLease
)

// Flags of recAcceptMessage3.
const (
	acceptHasDeadLetter byte = 1 << iota
	acceptHasTrace
	acceptHasHistory
)

// recMeta is what the encoder learns about each record that the state
// needs: where an AcceptMessage body lies in the payload, and the size of
// the record for live-byte accounting.
type recMeta struct {
	bodyOff int32
	size    int32
	crc     uint32 // of the body
}

type encoder struct{ b []byte }

func (e *encoder) u8(v byte)        { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(b []byte) {
	if b == nil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(len(b)) + 1)
	e.b = append(e.b, b...)
}
func (e *encoder) strs(ss []string) {
	if ss == nil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(len(ss)) + 1)
	for _, s := range ss {
		e.str(s)
	}
}
func (e *encoder) ids(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}
func (e *encoder) time(t time.Time) {
	e.varint(t.Unix())
	e.uvarint(uint64(t.Nanosecond()))
}

// encodeGroup appends the payload of muts to dst.
func encodeGroup(dst []byte, muts []Mutation) ([]byte, []recMeta, error) {
	e := encoder{b: dst}
	e.u8(codecVersion)
	e.uvarint(uint64(len(muts)))
	meta := make([]recMeta, len(muts))
	for i, m := range muts {
		start := len(e.b)
		meta[i].bodyOff = -1
		switch m := m.(type) {
		case PutResource:
			r := &m.Resource
			e.u8(recPutResource2)
			e.str(r.UID)
			e.str(r.Space)
			e.str(r.Name)
			e.str(r.FormURL)
			e.str(r.Offering)
			e.bytes(r.Spec)
			e.bytes(r.PrivateInputs)
			e.bytes(r.Observed)
			e.str(r.State)
			e.varint(r.Generation)
			e.str(r.ETag)
			e.time(r.CreateTime)
			e.time(r.UpdateTime)
			e.strs(r.Exports)
			e.str(r.Creator)
			if r.Paused {
				e.u8(1)
			} else {
				e.u8(0)
			}
		case DeleteResource:
			e.u8(recDeleteResource)
			e.str(m.UID)
		case PutOperation:
			o := &m.Operation
			if o.Progress != nil {
				e.u8(recPutOperation3)
			} else {
				e.u8(recPutOperation2)
			}
			e.str(o.ID)
			e.str(o.Space)
			e.str(o.Kind)
			e.str(o.ResourceUID)
			e.str(o.State)
			e.str(o.Effect)
			e.bytes(o.Error)
			e.str(o.IdempotencyKey)
			e.str(o.Principal)
			e.str(o.FormURL)
			if o.Progress != nil {
				e.bytes(o.Progress)
			}
			e.bytes(o.Intent)
			e.time(o.CreateTime)
			e.time(o.UpdateTime)
		case DeleteOperation:
			e.u8(recDeleteOperation)
			e.str(m.ID)
		case PutIdempotency:
			r := &m.Record
			e.u8(recPutIdempotency)
			e.str(r.Scope)
			e.str(r.Key)
			e.str(r.Fingerprint)
			e.str(r.OperationID)
			e.time(r.CreateTime)
		case DeleteIdempotency:
			e.u8(recDeleteIdempotency)
			e.str(m.Scope)
			e.str(m.Key)
		case AcceptMessage:
			msg := &m.Message
			if len(m.Body) > journal.MaxPayload {
				return nil, nil, fmt.Errorf("store: message body of %d bytes is too large", len(m.Body))
			}
			switch {
			case msg.TraceParent != "" || len(msg.History) > 0:
				e.u8(recAcceptMessage3)
			case msg.DeadLetter != nil:
				e.u8(recAcceptMessage2)
			default:
				e.u8(recAcceptMessage)
			}
			e.str(msg.Queue)
			e.str(msg.ID)
			e.varint(msg.AcceptedAt)
			e.varint(msg.VisibleAt)
			e.uvarint(uint64(max(msg.Attempts, 0)))
			e.str(msg.Lease)
			if msg.TraceParent != "" || len(msg.History) > 0 {
				var flags byte
				if msg.TraceParent != "" {
					flags |= acceptHasTrace
				}
				if len(msg.History) > 0 {
					flags |= acceptHasHistory
				}
				if msg.DeadLetter != nil {
					flags |= acceptHasDeadLetter
				}
				e.u8(flags)
			}
			if dl := msg.DeadLetter; dl != nil {
				e.str(dl.SourceQueue)
				e.str(dl.SourceQueueName)
				e.str(dl.Consumer)
				e.str(dl.ConsumerName)
				e.str(dl.Reason)
				e.uvarint(uint64(max(dl.Attempts, 0)))
				e.str(dl.OriginalID)
				e.varint(dl.DeadLetteredAt)
			}
			if msg.TraceParent != "" {
				e.str(msg.TraceParent)
			}
			if len(msg.History) > 0 {
				e.uvarint(uint64(len(msg.History)))
				for _, a := range msg.History {
					e.attempt(a)
				}
			}
			meta[i].crc = journal.Checksum(m.Body)
			e.b = binary.LittleEndian.AppendUint32(e.b, meta[i].crc)
			e.uvarint(uint64(len(m.Body)))
			meta[i].bodyOff = int32(len(e.b))
			e.b = append(e.b, m.Body...)
		case DeliverMessages:
			if m.VisibleAt != 0 {
				e.u8(recDeliverMessages2)
			} else {
				e.u8(recDeliverMessages)
			}
			e.str(m.Queue)
			e.str(m.Batch)
			e.ids(m.IDs)
			if m.VisibleAt != 0 {
				e.varint(m.VisibleAt)
			}
		case ExtendLease:
			e.u8(recExtendLease)
			e.str(m.Queue)
			e.str(m.Lease)
			e.ids(m.IDs)
			e.varint(m.VisibleAt)
		case RetryMessage:
			if m.Attempt != nil {
				e.u8(recRetryMessage2)
			} else {
				e.u8(recRetryMessage)
			}
			e.str(m.Queue)
			e.str(m.ID)
			e.varint(m.VisibleAt)
			if m.Attempt != nil {
				e.attempt(*m.Attempt)
			}
		case RemoveMessages:
			e.u8(recRemoveMessages)
			e.str(m.Queue)
			e.ids(m.IDs)
			e.str(m.Reason)
		case DropQueue:
			e.u8(recDropQueue)
			e.str(m.Queue)
		default:
			return nil, nil, fmt.Errorf("store: cannot encode mutation %T", m)
		}
		meta[i].size = int32(len(e.b) - start)
	}
	if len(e.b) > journal.MaxPayload {
		return nil, nil, fmt.Errorf("store: an Apply of %d bytes is too large", len(e.b))
	}
	return e.b, meta, nil
}

// ErrBadRecord: a journal payload does not decode. Replay stops there.
var ErrBadRecord = errors.New("store: bad journal record")

type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w at byte %d: %s", ErrBadRecord, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) u8() byte {
	if d.err != nil || d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

// raw returns the next n bytes, aliasing the payload.
func (d *decoder) raw(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("length %d past the end", n)
		return nil
	}
	b := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}

func (d *decoder) str() string { return string(d.raw(d.uvarint())) }

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	return append([]byte{}, d.raw(n-1)...)
}

// count reads a count of items of at least one byte each, bounded by what
// is left so that a corrupt count cannot make the decoder allocate.
func (d *decoder) count(n uint64) int {
	if d.err == nil && n > uint64(len(d.b)-d.off) {
		d.fail("count %d exceeds the remaining bytes", n)
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *decoder) strs() []string {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return nil
	}
	c := d.count(n - 1)
	out := make([]string, 0, c)
	for range c {
		out = append(out, d.str())
	}
	return out
}

func (d *decoder) ids() []string {
	c := d.count(d.uvarint())
	if c == 0 {
		return nil
	}
	out := make([]string, 0, c)
	for range c {
		out = append(out, d.str())
	}
	return out
}

func (d *decoder) time() time.Time {
	sec := d.varint()
	nsec := d.uvarint()
	if nsec >= 1e9 {
		d.fail("nanoseconds %d out of range", nsec)
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// decodeGroup decodes a payload written by encodeGroup. Strings and byte
// slices are copies, except AcceptMessage bodies, which alias p (replay
// does not keep them; the state remembers where they are).
func decodeGroup(p []byte) ([]Mutation, []recMeta, error) {
	d := decoder{b: p}
	if v := d.u8(); d.err == nil && v != codecVersion {
		return nil, nil, fmt.Errorf("%w: version %d, this host reads version %d", ErrBadRecord, v, codecVersion)
	}
	n := d.count(d.uvarint())
	muts := make([]Mutation, 0, n)
	meta := make([]recMeta, 0, n)
	for range n {
		start := d.off
		m := recMeta{bodyOff: -1}
		switch t := d.u8(); t {
		case recPutResource, recPutResource2:
			var r Resource
			r.UID = d.str()
			r.Space = d.str()
			r.Name = d.str()
			r.FormURL = d.str()
			r.Offering = d.str()
			r.Spec = d.bytes()
			r.PrivateInputs = d.bytes()
			r.Observed = d.bytes()
			r.State = d.str()
			r.Generation = d.varint()
			r.ETag = d.str()
			r.CreateTime = d.time()
			r.UpdateTime = d.time()
			r.Exports = d.strs()
			r.Creator = d.str()
			if t == recPutResource2 {
				r.Paused = d.u8() == 1
			}
			muts = append(muts, PutResource{r})
		case recDeleteResource:
			muts = append(muts, DeleteResource{UID: d.str()})
		case recPutOperation, recPutOperation2, recPutOperation3:
			var o Operation
			o.ID = d.str()
			o.Space = d.str()
			o.Kind = d.str()
			o.ResourceUID = d.str()
			o.State = d.str()
			o.Effect = d.str()
			o.Error = d.bytes()
			o.IdempotencyKey = d.str()
			o.Principal = d.str()
			if t == recPutOperation2 || t == recPutOperation3 {
				o.FormURL = d.str()
			}
			if t == recPutOperation3 {
				o.Progress = d.bytes()
			}
			o.Intent = d.bytes()
			o.CreateTime = d.time()
			o.UpdateTime = d.time()
			muts = append(muts, PutOperation{o})
		case recDeleteOperation:
			muts = append(muts, DeleteOperation{ID: d.str()})
		case recPutIdempotency:
			var r IdempotencyRecord
			r.Scope = d.str()
			r.Key = d.str()
			r.Fingerprint = d.str()
			r.OperationID = d.str()
			r.CreateTime = d.time()
			muts = append(muts, PutIdempotency{r})
		case recDeleteIdempotency:
			scope := d.str()
			muts = append(muts, DeleteIdempotency{Scope: scope, Key: d.str()})
		case recAcceptMessage, recAcceptMessage2, recAcceptMessage3:
			var msg Message
			msg.Queue = d.str()
			msg.ID = d.str()
			msg.AcceptedAt = d.varint()
			msg.VisibleAt = d.varint()
			attempts := d.uvarint()
			if attempts > 1<<31-1 {
				d.fail("attempts %d out of range", attempts)
			}
			msg.Attempts = int(attempts)
			msg.Lease = d.str()
			var flags byte
			switch t {
			case recAcceptMessage2:
				flags = acceptHasDeadLetter
			case recAcceptMessage3:
				flags = d.u8()
				if flags&^(acceptHasDeadLetter|acceptHasTrace|acceptHasHistory) != 0 {
					d.fail("unknown message flags %#x", flags)
				}
			}
			if flags&acceptHasDeadLetter != 0 {
				var dl DeadLetter
				dl.SourceQueue = d.str()
				dl.SourceQueueName = d.str()
				dl.Consumer = d.str()
				dl.ConsumerName = d.str()
				dl.Reason = d.str()
				n := d.uvarint()
				if n > 1<<31-1 {
					d.fail("dead-letter attempts %d out of range", n)
				}
				dl.Attempts = int(n)
				dl.OriginalID = d.str()
				dl.DeadLetteredAt = d.varint()
				msg.DeadLetter = &dl
			}
			if flags&acceptHasTrace != 0 {
				msg.TraceParent = d.str()
			}
			if flags&acceptHasHistory != 0 {
				n := d.count(d.uvarint())
				msg.History = make([]Attempt, 0, n)
				for range n {
					msg.History = append(msg.History, d.attempt())
				}
			}
			crc := d.raw(4)
			size := d.uvarint()
			m.bodyOff = int32(d.off)
			body := d.raw(size)
			if d.err == nil {
				m.crc = binary.LittleEndian.Uint32(crc)
				if m.crc != journal.Checksum(body) {
					d.fail("message body checksum mismatch")
				}
			}
			msg.Size = len(body)
			muts = append(muts, AcceptMessage{Message: msg, Body: body})
		case recDeliverMessages:
			q := d.str()
			batch := d.str()
			muts = append(muts, DeliverMessages{Queue: q, Batch: batch, IDs: d.ids()})
		case recDeliverMessages2:
			q := d.str()
			batch := d.str()
			ids := d.ids()
			muts = append(muts, DeliverMessages{Queue: q, Batch: batch, IDs: ids, VisibleAt: d.varint()})
		case recExtendLease:
			q := d.str()
			lease := d.str()
			ids := d.ids()
			muts = append(muts, ExtendLease{Queue: q, Lease: lease, IDs: ids, VisibleAt: d.varint()})
		case recRetryMessage, recRetryMessage2:
			r := RetryMessage{Queue: d.str(), ID: d.str(), VisibleAt: d.varint()}
			if t == recRetryMessage2 {
				a := d.attempt()
				r.Attempt = &a
			}
			muts = append(muts, r)
		case recRemoveMessages:
			q := d.str()
			ids := d.ids()
			muts = append(muts, RemoveMessages{Queue: q, IDs: ids, Reason: d.str()})
		case recDropQueue:
			muts = append(muts, DropQueue{Queue: d.str()})
		default:
			if d.err == nil {
				d.fail("unknown record type %d", t)
			}
		}
		if d.err != nil {
			return nil, nil, d.err
		}
		m.size = int32(d.off - start)
		meta = append(meta, m)
	}
	if d.err == nil && d.off != len(p) {
		d.fail("%d bytes after the last record", len(p)-d.off)
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return muts, meta, nil
}

func (e *encoder) attempt(a Attempt) {
	e.uvarint(uint64(max(a.Attempt, 0)))
	e.varint(a.StartedAt)
	e.varint(a.DurationMs)
	e.str(a.Host)
	e.str(a.WorkerVersion)
	e.str(a.Outcome)
	e.varint(int64(a.DelaySeconds))
	e.str(a.ErrorName)
	e.str(a.ErrorMessage)
	e.str(a.ErrorStack)
}

func (d *decoder) attempt() Attempt {
	var a Attempt
	n := d.uvarint()
	if n > 1<<31-1 {
		d.fail("attempt %d out of range", n)
	}
	a.Attempt = int(n)
	a.StartedAt = d.varint()
	a.DurationMs = d.varint()
	a.Host = d.str()
	a.WorkerVersion = d.str()
	a.Outcome = d.str()
	delay := d.varint()
	if delay < 0 || delay > 1<<31-1 {
		d.fail("delay %d out of range", delay)
	}
	a.DelaySeconds = int(delay)
	a.ErrorName = d.str()
	a.ErrorMessage = d.str()
	a.ErrorStack = d.str()
	return a
}
