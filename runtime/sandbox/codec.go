package sandbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/takoform/queuehost/abi"
)

// The frame codec. On the connection a frame is its length (an unsigned
// varint) followed by its fields in the protocol-buffer wire format,
// written and read with protowire: each field is a numbered tag and a
// value, nested structures are length-delimited, zero values are left
// out (as gob left them out: an empty slice or map arrives as nil).
//
// Why not gob, which the protocol used first: gob reflects over every
// field of every frame, and at a 100-message sendBatch its encoding and
// decoding on both sides cost about 1 µs per message, an eighth of what
// the whole send costs in-process. Why not generated protobuf: the frame
// is one closed set of Go structs owned by this package, and a .proto file
// with generated code would be a second definition of it to keep in step.
// TestCodecRoundTripsEveryField fills every field of every struct below by
// reflection and fails when one is added here without its codec.
//
// The host decodes frames written by untrusted code: a length over
// maxFrameBytes, a truncated field, a wrong wire type or a field that does
// not fit its Go type ends the connection (and so the sandbox), and a frame
// is read into memory as its bytes arrive, not allocated at its claimed
// length up front.

// maxFrameBytes bounds one frame: bodies are bounded at 16 MiB
// (js.DefaultMaxBodyBytes), a batch at 100 messages of 128 KB.
const maxFrameBytes = 64 << 20

// Field numbers of frame.
const (
	fID protowire.Number = iota + 1
	fReply
	fOp
	fInv
	fInit
	fVersion
	fVersionUID
	fDeadline
	fBatch
	fHTTP
	fPath
	fQueueUID
	fMessages
	fSettlement
	fBatchID
	fIDs
	fHandlers
	fLog
	fErr
)

// appendFrame appends f, length first, to b.
func appendFrame(b []byte, f *frame) []byte {
	e := encoder{b: b}
	top := e.begin(0)
	e.uint(fID, f.ID)
	e.bool(fReply, f.Reply)
	e.str(fOp, f.Op)
	e.uint(fInv, f.Inv)
	if m := f.Init; m != nil {
		at := e.begin(fInit)
		e.int(1, int64(m.InvocationTimeout))
		e.int(2, int64(m.StartupTimeout))
		e.strs(3, m.AllowedFetchHosts)
		e.int(4, m.MemoryLimit)
		e.int(5, m.AddressSpace)
		e.int(6, int64(m.MaxStack))
		e.int(7, int64(m.Lanes))
		e.end(at)
	}
	if v := f.Version; v != nil {
		at := e.begin(fVersion)
		e.version(v)
		e.end(at)
	}
	e.str(fVersionUID, f.VersionUID)
	if !f.Deadline.IsZero() { // written even at the epoch (0)
		e.b = protowire.AppendTag(e.b, fDeadline, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(f.Deadline.UnixNano()))
	}
	if m := f.Batch; m != nil {
		at := e.begin(fBatch)
		e.str(1, m.ID)
		e.str(2, m.Queue)
		for i := range m.Messages {
			msg := &m.Messages[i]
			at := e.begin(3)
			e.str(1, msg.ID)
			e.int(2, msg.TimestampMillis)
			e.bytes(3, msg.Body)
			e.int(4, int64(msg.Attempts))
			e.end(at)
		}
		e.end(at)
	}
	if m := f.HTTP; m != nil {
		at := e.begin(fHTTP)
		e.str(1, m.Method)
		e.str(2, m.URL)
		e.str(3, m.Host)
		e.bool(4, m.TLS)
		for k, vs := range m.Header {
			at := e.begin(5)
			e.str(1, k)
			e.strs(2, vs)
			e.end(at)
		}
		e.bytes(6, m.Body)
		e.int(7, int64(m.Status))
		e.str(8, m.StatusText)
		e.end(at)
	}
	e.str(fPath, f.Path)
	e.str(fQueueUID, f.QueueUID)
	for i := range f.Messages {
		m := &f.Messages[i]
		at := e.begin(fMessages)
		e.bytes(1, m.Body)
		e.bool(2, m.HasDelay)
		e.int(3, int64(m.Delay))
		e.end(at)
	}
	if s := f.Settlement; s != nil {
		at := e.begin(fSettlement)
		e.int(1, int64(s.Kind))
		e.str(2, s.MessageID)
		e.bool(3, s.HasDelay)
		e.int(4, int64(s.Delay))
		e.end(at)
	}
	e.str(fBatchID, f.BatchID)
	e.strs(fIDs, f.IDs)
	e.strs(fHandlers, f.Handlers)
	if l := f.Log; l != nil {
		at := e.begin(fLog)
		e.str(1, l.Worker)
		e.str(2, l.Version)
		e.str(3, l.Level)
		e.str(4, l.Message)
		e.end(at)
	}
	if w := f.Err; w != nil {
		at := e.begin(fErr)
		e.str(1, w.Kind)
		e.str(2, w.Code)
		e.str(3, w.Message)
		e.str(4, w.File)
		e.int(5, int64(w.Line))
		e.int(6, int64(w.Column))
		e.end(at)
	}
	e.end(top)
	return e.b
}

func (e *encoder) version(v *abi.Version) {
	e.str(1, v.UID)
	e.str(2, v.Space)
	e.str(3, v.WorkerUID)
	e.str(4, v.Principal)
	e.str(5, v.MainModule)
	for _, m := range v.Modules {
		at := e.begin(6)
		e.str(1, m.Name)
		e.str(2, m.Content)
		e.end(at)
	}
	e.strMap(7, v.Vars)
	e.strMap(8, v.Secrets)
	for _, b := range v.Bindings {
		at := e.begin(9)
		e.str(1, b.Name)
		e.str(2, b.QueueUID)
		e.end(at)
	}
}

// encoder appends fields to b; zero values are left out.
type encoder struct{ b []byte }

func (e *encoder) uint(n protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, v)
	}
}

func (e *encoder) int(n protowire.Number, v int64) { e.uint(n, uint64(v)) }

func (e *encoder) bool(n protowire.Number, v bool) {
	if v {
		e.uint(n, 1)
	}
}

func (e *encoder) str(n protowire.Number, s string) {
	if s != "" {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendString(e.b, s)
	}
}

func (e *encoder) bytes(n protowire.Number, v []byte) {
	if len(v) > 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v)
	}
}

// strs appends a repeated string field. An empty string in the list is
// kept (it is a field of length 0, not a missing field).
func (e *encoder) strs(n protowire.Number, ss []string) {
	for _, s := range ss {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendString(e.b, s)
	}
}

func (e *encoder) strMap(n protowire.Number, m map[string]string) {
	for k, v := range m {
		at := e.begin(n)
		e.str(1, k)
		e.str(2, v)
		e.end(at)
	}
}

// begin starts a length-delimited field n (n 0: the frame itself, which
// has no tag): what is appended until end(at) is its value.
func (e *encoder) begin(n protowire.Number) (at int) {
	if n != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	}
	return len(e.b)
}

// end puts the length of the value begun at at in front of it (moving
// the value up to make room).
func (e *encoder) end(at int) {
	size := len(e.b) - at
	k := protowire.SizeVarint(uint64(size))
	e.b = append(e.b, make([]byte, k)...)
	copy(e.b[at+k:], e.b[at:at+size])
	protowire.AppendVarint(e.b[at:at], uint64(size))
}

// errFrame is what a malformed frame fails with.
var errFrame = errors.New("sandbox: a malformed frame")

// readFrame reads one frame from r into f. Byte fields of f alias the
// frame's own buffer, which is not reused.
func readFrame(r *bufio.Reader, f *frame) error {
	size, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if size > maxFrameBytes {
		return fmt.Errorf("%w: %d bytes, over the %d-byte limit", errFrame, size, maxFrameBytes)
	}
	// Grow with what arrives rather than allocate the claimed size.
	buf := make([]byte, 0, min(size, 1<<20))
	for uint64(len(buf)) < size {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		want := min(uint64(cap(buf)), size)
		n, err := io.ReadFull(r, buf[len(buf):want])
		buf = buf[:len(buf)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return decodeFrame(buf, f)
}

func decodeFrame(b []byte, f *frame) error {
	d := decoder{b: b}
	for d.next() {
		switch d.num {
		case fID:
			f.ID = d.uint()
		case fReply:
			f.Reply = d.bool()
		case fOp:
			f.Op = d.str()
		case fInv:
			f.Inv = d.uint()
		case fInit:
			m := &initMsg{}
			f.Init = m
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					m.InvocationTimeout = time.Duration(s.int())
				case 2:
					m.StartupTimeout = time.Duration(s.int())
				case 3:
					m.AllowedFetchHosts = append(m.AllowedFetchHosts, s.str())
				case 4:
					m.MemoryLimit = s.int()
				case 5:
					m.AddressSpace = s.int()
				case 6:
					m.MaxStack = s.intN()
				case 7:
					m.Lanes = s.intN()
				default:
					s.skip()
				}
			}
		case fVersion:
			v := &abi.Version{}
			f.Version = v
			for s := d.sub(); s.next() || d.done(s); {
				s.version(v)
			}
		case fVersionUID:
			f.VersionUID = d.str()
		case fDeadline:
			f.Deadline = time.Unix(0, d.int())
		case fBatch:
			m := &batchMsg{}
			f.Batch = m
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					m.ID = s.str()
				case 2:
					m.Queue = s.str()
				case 3:
					m.Messages = append(m.Messages, abi.Message{})
					msg := &m.Messages[len(m.Messages)-1]
					for t := s.sub(); t.next() || s.done(t); {
						switch t.num {
						case 1:
							msg.ID = t.str()
						case 2:
							msg.TimestampMillis = t.int()
						case 3:
							msg.Body = t.bytes()
						case 4:
							msg.Attempts = t.intN()
						default:
							t.skip()
						}
					}
				default:
					s.skip()
				}
			}
		case fHTTP:
			m := &httpMsg{}
			f.HTTP = m
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					m.Method = s.str()
				case 2:
					m.URL = s.str()
				case 3:
					m.Host = s.str()
				case 4:
					m.TLS = s.bool()
				case 5:
					var k string
					var vs []string
					for t := s.sub(); t.next() || s.done(t); {
						switch t.num {
						case 1:
							k = t.str()
						case 2:
							vs = append(vs, t.str())
						default:
							t.skip()
						}
					}
					if m.Header == nil {
						m.Header = map[string][]string{}
					}
					m.Header[k] = vs
				case 6:
					m.Body = s.bytes()
				case 7:
					m.Status = s.intN()
				case 8:
					m.StatusText = s.str()
				default:
					s.skip()
				}
			}
		case fPath:
			f.Path = d.str()
		case fQueueUID:
			f.QueueUID = d.str()
		case fMessages:
			f.Messages = append(f.Messages, wireOutgoing{})
			m := &f.Messages[len(f.Messages)-1]
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					m.Body = s.bytes()
				case 2:
					m.HasDelay = s.bool()
				case 3:
					m.Delay = s.intN()
				default:
					s.skip()
				}
			}
		case fSettlement:
			st := &wireSettlement{}
			f.Settlement = st
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					st.Kind = abi.SettleKind(s.intN())
				case 2:
					st.MessageID = s.str()
				case 3:
					st.HasDelay = s.bool()
				case 4:
					st.Delay = s.intN()
				default:
					s.skip()
				}
			}
		case fBatchID:
			f.BatchID = d.str()
		case fIDs:
			f.IDs = append(f.IDs, d.str())
		case fHandlers:
			f.Handlers = append(f.Handlers, d.str())
		case fLog:
			l := &logMsg{}
			f.Log = l
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					l.Worker = s.str()
				case 2:
					l.Version = s.str()
				case 3:
					l.Level = s.str()
				case 4:
					l.Message = s.str()
				default:
					s.skip()
				}
			}
		case fErr:
			w := &wireErr{}
			f.Err = w
			for s := d.sub(); s.next() || d.done(s); {
				switch s.num {
				case 1:
					w.Kind = s.str()
				case 2:
					w.Code = s.str()
				case 3:
					w.Message = s.str()
				case 4:
					w.File = s.str()
				case 5:
					w.Line = s.intN()
				case 6:
					w.Column = s.intN()
				default:
					s.skip()
				}
			}
		default:
			d.skip()
		}
	}
	return d.err
}

// version decodes the field s is at into v.
func (s *decoder) version(v *abi.Version) {
	switch s.num {
	case 1:
		v.UID = s.str()
	case 2:
		v.Space = s.str()
	case 3:
		v.WorkerUID = s.str()
	case 4:
		v.Principal = s.str()
	case 5:
		v.MainModule = s.str()
	case 6:
		var m abi.Module
		for t := s.sub(); t.next() || s.done(t); {
			switch t.num {
			case 1:
				m.Name = t.str()
			case 2:
				m.Content = t.str()
			default:
				t.skip()
			}
		}
		v.Modules = append(v.Modules, m)
	case 7:
		v.Vars = s.strMapEntry(v.Vars)
	case 8:
		v.Secrets = s.strMapEntry(v.Secrets)
	case 9:
		var b abi.Binding
		for t := s.sub(); t.next() || s.done(t); {
			switch t.num {
			case 1:
				b.Name = t.str()
			case 2:
				b.QueueUID = t.str()
			default:
				t.skip()
			}
		}
		v.Bindings = append(v.Bindings, b)
	default:
		s.skip()
	}
}

func (s *decoder) strMapEntry(m map[string]string) map[string]string {
	var k, v string
	for t := s.sub(); t.next() || s.done(t); {
		switch t.num {
		case 1:
			k = t.str()
		case 2:
			v = t.str()
		default:
			t.skip()
		}
	}
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// decoder walks the fields of one structure: next reads a tag (num, typ),
// the value methods check its wire type and consume it, and the first
// error stops the walk and is kept in err. A nested structure is walked
// by a decoder from sub, whose error done passes up:
//
//	for s := d.sub(); s.next() || d.done(s); { switch s.num { ... } }
type decoder struct {
	b   []byte
	typ protowire.Type
	num protowire.Number
	err error
}

// next reads the next field's tag; false at the end or after an error.
func (d *decoder) next() bool {
	if d.err != nil || len(d.b) == 0 {
		return false
	}
	num, typ, n := protowire.ConsumeTag(d.b)
	if n < 0 {
		d.fail(protowire.ParseError(n))
		return false
	}
	d.b, d.num, d.typ = d.b[n:], num, typ
	return true
}

// sub is a decoder of the length-delimited value of the current field.
func (d *decoder) sub() decoder {
	return decoder{b: d.bytes(), err: d.err}
}

// done ends the walk of s (a decoder from d.sub), keeping its error as
// d's: it always returns false.
func (d *decoder) done(s decoder) bool {
	if s.err != nil && d.err == nil {
		d.err = s.err
		d.b = nil
	}
	return false
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: field %d: %v", errFrame, d.num, err)
	}
	d.b = nil
}

func (d *decoder) want(t protowire.Type) bool {
	if d.typ != t {
		d.fail(fmt.Errorf("wire type %d, want %d", d.typ, t))
		return false
	}
	return true
}

func (d *decoder) uint() uint64 {
	if !d.want(protowire.VarintType) {
		return 0
	}
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		d.fail(protowire.ParseError(n))
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 { return int64(d.uint()) }

// intN is a field of Go type int (its value must fit).
func (d *decoder) intN() int {
	v := d.int()
	if int64(int(v)) != v {
		d.fail(fmt.Errorf("%d does not fit an int", v))
		return 0
	}
	return int(v)
}

func (d *decoder) bool() bool { return d.uint() != 0 }

func (d *decoder) bytes() []byte {
	if !d.want(protowire.BytesType) {
		return nil
	}
	v, n := protowire.ConsumeBytes(d.b)
	if n < 0 {
		d.fail(protowire.ParseError(n))
		return nil
	}
	d.b = d.b[n:]
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}

func (d *decoder) str() string { return string(d.bytes()) }

// skip consumes the value of a field this side does not know (a newer
// peer's), whatever its wire type.
func (d *decoder) skip() {
	n := protowire.ConsumeFieldValue(d.num, d.typ, d.b)
	if n < 0 {
		d.fail(protowire.ParseError(n))
		return
	}
	d.b = d.b[n:]
}
