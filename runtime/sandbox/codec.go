package sandbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
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
	fStartBy
)

// appendFrame appends f, length first, to b.
//
// Every byte is written once, into a buffer grown once to its final size.
// A length-delimited value's length comes before it, so each is measured
// before it is written (as protobuf marshalers size a message first): the
// encoder in sizing mode counts what it would append. Writing a value first
// and then moving it up to put its length in front, as this encoder did at
// first, copied a batch of 100 bodies of 127,000 B once per level it is
// nested in, into a buffer grown by doubling: with 16 sendBatch calls at
// once, enough copies to take a sandbox over its 512 MiB.
func appendFrame(b []byte, f *frame) []byte {
	e := encoder{b: b}
	e.frame(f)
	return e.b
}

// frameSegments encodes f as appendFrame does, in pieces to be written one
// after the other: a bytes field (a message body) of at least direct bytes
// is not copied but is a piece of its own, between the encoded pieces
// around it, which go into buf (grown once to their size). It returns the
// pieces, appended to segs, and buf, emptied, to reuse.
//
// Why: a frame carrying a batch of 100 bodies of 127,000 B is 12.7 MB, and
// building it copied every body once more while the bodies themselves
// were still held; 16 such sendBatch calls at once took a sandbox over its
// 512 MiB cap. Written in pieces, a frame costs its bodies only.
func frameSegments(buf []byte, f *frame, direct int, segs [][]byte) ([][]byte, []byte) {
	e := encoder{b: buf[:0], direct: direct, segs: segs}
	buf = e.frame(f)
	if len(e.b) > 0 {
		e.segs = append(e.segs, e.b)
	}
	return e.segs, buf[:0]
}

// frame appends f, length first, measured first, to e.b grown once to take
// it (less the bytes fields that go to e.segs uncopied). It returns e.b as
// grown, before f: frameSegments reuses it.
func (e *encoder) frame(f *frame) (grown []byte) {
	m := encoder{sizing: true, direct: e.direct}
	m.fields(f)
	e.b = grow(e.b, protowire.SizeBytes(m.n)-m.skipped)
	grown = e.b
	e.b = appendVarint(e.b, uint64(m.n))
	e.fields(f)
	return grown
}

// grow returns b with room for n more bytes. An empty b without the room is
// replaced by a buffer of exactly n bytes; one holding frames already (a
// connection's coalesced writes) grows as append grows it, so that frames
// appended one by one do not each move all of it to a new buffer.
func grow(b []byte, n int) []byte {
	switch {
	case cap(b)-len(b) >= n:
		return b
	case len(b) == 0:
		return make([]byte, 0, n)
	}
	return slices.Grow(b, n)
}

// encoder appends fields to b, zero values left out; in sizing mode it
// appends nothing and counts in n the bytes it would append.
type encoder struct {
	b      []byte
	n      int
	sizing bool
	// With direct > 0, bytes fields of direct bytes or more go to segs
	// uncopied (frameSegments), and sizing counts them in skipped
	// too.
	direct  int
	segs    [][]byte
	skipped int
}

// nested appends field n holding the structure v: its length, measured
// first, then its fields. (A structure is measured again by each one it is
// nested in, adding up lengths, not copying bytes: frames nest three deep.)
func (e *encoder) nested(n protowire.Number, v any) {
	if e.sizing {
		start := e.n
		e.fields(v)
		e.n += protowire.SizeTag(n) + protowire.SizeVarint(uint64(e.n-start))
		return
	}
	e.sizing, e.n = true, 0
	e.fields(v)
	e.sizing = false
	e.b = appendVarint(e.b, protowire.EncodeTag(n, protowire.BytesType))
	e.b = appendVarint(e.b, uint64(e.n))
	e.fields(v)
}

// strEntry and header are the entries of a map[string]string and of an
// http.Header, as nested structures.
type strEntry struct{ k, v string }

type header struct {
	name   string
	values []string
}

// fields appends the fields of v: the frame, or a structure nested in it
// (a pointer to it). One switch over the structures, rather than a
// function value or an interface method for each, keeps the encoder and
// the map entries (which such calls would leak) on the stack, as does the
// panic's not formatting v.
func (e *encoder) fields(v any) {
	switch v := v.(type) {
	case *frame:
		e.uint(fID, v.ID)
		e.bool(fReply, v.Reply)
		e.str(fOp, v.Op)
		e.uint(fInv, v.Inv)
		if v.Init != nil {
			e.nested(fInit, v.Init)
		}
		if v.Version != nil {
			e.nested(fVersion, v.Version)
		}
		e.str(fVersionUID, v.VersionUID)
		if !v.Deadline.IsZero() { // written even at the epoch (0)
			e.varint(fDeadline, uint64(v.Deadline.UnixNano()))
		}
		if v.Batch != nil {
			e.nested(fBatch, v.Batch)
		}
		if v.HTTP != nil {
			e.nested(fHTTP, v.HTTP)
		}
		e.str(fPath, v.Path)
		e.str(fQueueUID, v.QueueUID)
		for i := range v.Messages {
			e.nested(fMessages, &v.Messages[i])
		}
		if v.Settlement != nil {
			e.nested(fSettlement, v.Settlement)
		}
		e.str(fBatchID, v.BatchID)
		e.strs(fIDs, v.IDs)
		e.strs(fHandlers, v.Handlers)
		if v.Log != nil {
			e.nested(fLog, v.Log)
		}
		if v.Err != nil {
			e.nested(fErr, v.Err)
		}
		if v.StartBy != 0 {
			e.int(fStartBy, v.StartBy)
		}
	case *initMsg:
		e.int(1, int64(v.InvocationTimeout))
		e.int(2, int64(v.StartupTimeout))
		e.strs(3, v.AllowedFetchHosts)
		e.int(4, v.MemoryLimit)
		e.int(5, v.AddressSpace)
		e.int(6, int64(v.MaxStack))
		e.int(7, int64(v.Lanes))
	case *abi.Version:
		e.str(1, v.UID)
		e.str(2, v.Space)
		e.str(3, v.WorkerUID)
		e.str(4, v.Principal)
		e.str(5, v.MainModule)
		for i := range v.Modules {
			e.nested(6, &v.Modules[i])
		}
		e.strMap(7, v.Vars)
		e.strMap(8, v.Secrets)
		for i := range v.Bindings {
			e.nested(9, &v.Bindings[i])
		}
	case *abi.Module:
		e.str(1, v.Name)
		e.str(2, v.Content)
	case *abi.Binding:
		e.str(1, v.Name)
		e.str(2, v.QueueUID)
	case *strEntry:
		e.str(1, v.k)
		e.str(2, v.v)
	case *batchMsg:
		e.str(1, v.ID)
		e.str(2, v.Queue)
		for i := range v.Messages {
			e.nested(3, &v.Messages[i])
		}
	case *abi.Message:
		e.str(1, v.ID)
		e.int(2, v.TimestampMillis)
		e.bytes(3, v.Body)
		e.int(4, int64(v.Attempts))
	case *httpMsg:
		e.str(1, v.Method)
		e.str(2, v.URL)
		e.str(3, v.Host)
		e.bool(4, v.TLS)
		var h header // one for every entry, on the stack (see strMap)
		for k, vs := range v.Header {
			h = header{k, vs}
			e.nested(5, &h)
		}
		e.bytes(6, v.Body)
		e.int(7, int64(v.Status))
		e.str(8, v.StatusText)
	case *header:
		e.str(1, v.name)
		e.strs(2, v.values)
	case *wireOutgoing:
		e.bytes(1, v.Body)
		e.bool(2, v.HasDelay)
		e.int(3, int64(v.Delay))
	case *wireSettlement:
		e.int(1, int64(v.Kind))
		e.str(2, v.MessageID)
		e.bool(3, v.HasDelay)
		e.int(4, int64(v.Delay))
	case *logMsg:
		e.str(1, v.Worker)
		e.str(2, v.Version)
		e.str(3, v.Level)
		e.str(4, v.Message)
	case *wireErr:
		e.str(1, v.Kind)
		e.str(2, v.Code)
		e.str(3, v.Message)
		e.str(4, v.File)
		e.int(5, int64(v.Line))
		e.int(6, int64(v.Column))
		e.str(7, v.Name)
		e.str(8, v.Stack)
	default:
		panic("sandbox: no codec for " + reflect.TypeOf(v).String())
	}
}

func (e *encoder) strMap(n protowire.Number, m map[string]string) {
	var ent strEntry // not &strEntry{k, v} in the loop, which the compiler puts on the heap
	for k, v := range m {
		ent = strEntry{k, v}
		e.nested(n, &ent)
	}
}

// varint appends the varint field n, even of v 0.
func (e *encoder) varint(n protowire.Number, v uint64) {
	if e.sizing {
		e.n += protowire.SizeTag(n) + protowire.SizeVarint(v)
		return
	}
	e.b = appendVarint(e.b, protowire.EncodeTag(n, protowire.VarintType))
	e.b = appendVarint(e.b, v)
}

func (e *encoder) uint(n protowire.Number, v uint64) {
	if v != 0 {
		e.varint(n, v)
	}
}

func (e *encoder) int(n protowire.Number, v int64) { e.uint(n, uint64(v)) }

func (e *encoder) bool(n protowire.Number, v bool) {
	if v {
		e.varint(n, 1)
	}
}

func (e *encoder) str(n protowire.Number, s string) {
	if s != "" {
		e.strField(n, s)
	}
}

// strs appends a repeated string field. An empty string in the list is
// kept (it is a field of length 0, not a missing field).
func (e *encoder) strs(n protowire.Number, ss []string) {
	for _, s := range ss {
		e.strField(n, s)
	}
}

// strField appends the string field n, even of s "".
func (e *encoder) strField(n protowire.Number, s string) {
	if e.sizing {
		e.n += protowire.SizeTag(n) + protowire.SizeBytes(len(s))
		return
	}
	e.b = appendVarint(e.b, protowire.EncodeTag(n, protowire.BytesType))
	e.b = appendVarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) bytes(n protowire.Number, v []byte) {
	if len(v) == 0 {
		return
	}
	direct := e.direct > 0 && len(v) >= e.direct
	if e.sizing {
		e.n += protowire.SizeTag(n) + protowire.SizeBytes(len(v))
		if direct {
			e.skipped += len(v)
		}
		return
	}
	e.b = appendVarint(e.b, protowire.EncodeTag(n, protowire.BytesType))
	e.b = appendVarint(e.b, uint64(len(v)))
	if direct {
		// What was encoded so far is a piece, the body the next; the
		// encoding goes on in the rest of the buffer.
		e.segs = append(e.segs, e.b, v)
		e.b = e.b[len(e.b):]
		return
	}
	e.b = append(e.b, v...)
}

// appendVarint is protowire.AppendVarint with its one-byte case (the tags
// of fields 1 to 15, most lengths and numbers) inlined.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
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
	// Allocate the claimed size (at most maxFrameBytes) only once its
	// first MiB has arrived: a peer that claims much and sends little holds
	// 1 MiB; a large frame costs 1 MiB more than its size, not the 15 MiB
	// that growing by doubling to 8 MiB allocated.
	buf := make([]byte, 0, min(size, 1<<20))
	for uint64(len(buf)) < size {
		if len(buf) == cap(buf) {
			buf = append(make([]byte, 0, size), buf...)
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
		case fStartBy:
			f.StartBy = d.int()
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
				case 7:
					w.Name = s.str()
				case 8:
					w.Stack = s.str()
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
