package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/takoform/queuehost/abi"
)

// fill sets every exported field reachable from v to a value that is not
// its zero value, differently for each field (seed), with negative numbers
// where the type allows: slices and maps get two elements.
func fill(t *testing.T, v reflect.Value, seed *int) {
	*seed++
	s := *seed
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d-é", s))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(s) * int64(time.Millisecond))
			return
		}
		v.SetInt(int64(-s * 1000003))
	case reflect.Uint64:
		v.SetUint(uint64(s) << 40)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(fmt.Sprintf("bytes %d \x00\xff", s)))
			return
		}
		sl := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, sl.Index(i), seed)
		}
		v.Set(sl)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			fill(t, k, seed)
			fill(t, e, seed)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), seed)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Unix(0, int64(s)*1e15+123)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), seed)
			}
		}
	default:
		t.Fatalf("fill: no value for %s (%s): teach the codec and this test the new type", v.Type(), v.Kind())
	}
}

func roundTrip(t *testing.T, f *frame) *frame {
	t.Helper()
	b := appendFrame(nil, f)
	var got frame
	if err := readFrame(bufio.NewReader(bytes.NewReader(b)), &got); err != nil {
		t.Fatalf("decoding %+v: %v", f, err)
	}
	return &got
}

// TestCodecRoundTripsEveryField: a frame with every exported field of
// every struct it holds set (found by reflection, so a field added to
// frame, initMsg, abi.Version, abi.Message, httpMsg or the others without
// its codec fails here) decodes to what was encoded; so does the zero
// frame, and the optional delay of 0 stays distinct from none.
func TestCodecRoundTripsEveryField(t *testing.T) {
	seed := 0
	var f frame
	fill(t, reflect.ValueOf(&f).Elem(), &seed)
	if got := roundTrip(t, &f); !reflect.DeepEqual(got, &f) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, &f)
	}
	if got := roundTrip(t, &frame{}); !reflect.DeepEqual(got, &frame{}) {
		t.Fatalf("the zero frame came back as %+v", got)
	}
	zero := &frame{Messages: toWireOutgoing([]abi.OutgoingMessage{{Body: []byte("a"), Delay: new(int)}, {Body: []byte("b")}})}
	got := fromWireOutgoing(roundTrip(t, zero).Messages)
	if got[0].Delay == nil || *got[0].Delay != 0 || got[1].Delay != nil {
		t.Fatalf("delays %v %v, want 0 and none", got[0].Delay, got[1].Delay)
	}
}

// TestCodecStream: frames written back to back (as coalesced writes put
// them) read back one by one, and the stream's end is io.EOF between
// frames and io.ErrUnexpectedEOF inside one.
func TestCodecStream(t *testing.T) {
	var b []byte
	for i := range 50 {
		b = appendFrame(b, &frame{ID: uint64(i + 1), Op: opSend, Messages: []wireOutgoing{{Body: bytes.Repeat([]byte{byte(i)}, i*100)}}})
	}
	r := bufio.NewReader(bytes.NewReader(b))
	for i := range 50 {
		var f frame
		if err := readFrame(r, &f); err != nil || f.ID != uint64(i+1) || len(f.Messages) != 1 || len(f.Messages[0].Body) != i*100 {
			t.Fatalf("frame %d: %+v %v", i, f, err)
		}
	}
	if err := readFrame(r, &frame{}); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
	r = bufio.NewReader(bytes.NewReader(b[:len(b)-3]))
	for i := range 50 {
		err := readFrame(r, &frame{})
		if i < 49 && err != nil || i == 49 && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("the stream cut inside its last frame, frame %d: %v", i, err)
		}
	}
	cut := b[:10]
	r = bufio.NewReader(bytes.NewReader(cut))
	if err := readFrame(r, &frame{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestCodecRefusesMalformedFrames: what an untrusted sandbox might write
// instead of a frame is an error (which ends its connection), never a
// panic or an allocation of the claimed size.
func TestCodecRefusesMalformedFrames(t *testing.T) {
	big := appendFrame(nil, &frame{ID: 1})
	big = append([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, big...) // 4 GiB claimed
	for name, b := range map[string][]byte{
		"over the limit":  big,
		"wrong wire type": {3, 0x0a, 0x01, 'x'},        // ID as bytes
		"truncated field": {3, 0x1a, 0x09, 'x'},        // Op of 9 bytes, 1 there
		"bad nested":      {4, 0x2a, 0x02, 0x08, 0x80}, // Init with a cut varint
		"bad group":       {2, 0xa6, 0x01},             // an unknown field 20 of wire type end-group
		"cut length":      {0x80},
	} {
		err := readFrame(bufio.NewReader(bytes.NewReader(b)), &frame{})
		if !errors.Is(err, errFrame) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v, want a malformed-frame error", name, err)
		}
	}
	// The claimed 4 GiB with only a few bytes behind it: an error when the
	// bytes run out, and nothing near the claim allocated.
	huge := append(protowire.AppendVarint(nil, maxFrameBytes), bytes.Repeat([]byte{0}, 100)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := readFrame(bufio.NewReader(bytes.NewReader(huge)), &frame{})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame claiming %d bytes with 100 there: %v", maxFrameBytes, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("reading it allocated %d bytes", grew)
	}
}

func FuzzCodec(f *testing.F) {
	seed := 0
	var full frame
	fill(&testing.T{}, reflect.ValueOf(&full).Elem(), &seed)
	f.Add(appendFrame(nil, &full))
	f.Add(appendFrame(nil, &frame{ID: 3, Op: opFetch, HTTP: &httpMsg{Method: "GET", Header: map[string][]string{"A": {"b"}}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got frame
		if err := readFrame(bufio.NewReader(bytes.NewReader(b)), &got); err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again := roundTrip(t, &got)
		if !reflect.DeepEqual(again, &got) {
			t.Fatalf("re-encoding changed the frame:\n%+v\n%+v", again, &got)
		}
		// And to what the reference encoder writes (of the same length
		// when a map of more than one entry may come out in another order).
		b, want := appendFrame(nil, &got), refAppendFrame(nil, &got)
		if len(b) != len(want) || !bytes.Equal(b, want) && mapsOfOne(&got) {
			t.Fatalf("encoded as\n%x\nnot as the reference\n%x", b, want)
		}
	})
}

// BenchmarkCodecBatch encodes and decodes the frames of one
// sendBatch(100) of 100 B bodies: the request and its reply of 100 IDs.
func BenchmarkCodecBatch(b *testing.B) {
	msgs := make([]wireOutgoing, 100)
	ids := make([]string, 100)
	for i := range msgs {
		msgs[i].Body = make([]byte, 100)
		ids[i] = "01JABCDEFGHJKMNPQRSTVWXYZ0"
	}
	fs := []*frame{
		{ID: 9, Op: opSend, Inv: 7, QueueUID: "q-0123456789", Messages: msgs},
		{ID: 9, Reply: true, IDs: ids},
	}
	var buf []byte
	for b.Loop() {
		for _, f := range fs {
			buf = appendFrame(buf[:0], f)
			var g frame
			if err := readFrame(bufio.NewReader(bytes.NewReader(buf)), &g); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// bigFrames are the frames of a sendBatch(100) of 127,000 B bodies (sandbox
// to host) and of a queue delivery of as many (host to sandbox, a level
// deeper); smallSend is a send of one 100 B message.
func bigFrames() (send, queue *frame) {
	out := make([]wireOutgoing, 100)
	in := make([]abi.Message, 100)
	for i := range out {
		out[i].Body = bytes.Repeat([]byte{byte(i)}, 127000)
		in[i] = abi.Message{ID: fmt.Sprintf("01JABCDEFGHJKMNPQRSTVWX%03d", i), TimestampMillis: 1700000000000 + int64(i), Body: out[i].Body, Attempts: 1}
	}
	send = &frame{ID: 9, Op: opSend, Inv: 7, QueueUID: "q-0123456789", Messages: out}
	queue = &frame{ID: 10, Op: opQueue, VersionUID: "v-0123456789", Deadline: time.Unix(1700000000, 5), Batch: &batchMsg{ID: "b-01", Queue: "q", Messages: in}}
	return send, queue
}

func smallSend() *frame {
	return &frame{ID: 9, Op: opSend, Inv: 7, QueueUID: "q-0123456789", Messages: []wireOutgoing{{Body: make([]byte, 100)}}}
}

// BenchmarkAppendFrame encodes the frames of bigFrames and smallSend into
// a new buffer (as a lane does for a frame over its buffer's size), and
// smallSend into a reused one (as a lane does otherwise).
func BenchmarkAppendFrame(b *testing.B) {
	send, queue := bigFrames()
	for _, bc := range []struct {
		name  string
		f     *frame
		reuse bool
	}{
		{"send-100x127000", send, false},
		{"queue-100x127000", queue, false},
		{"send-1x100", smallSend(), false},
		{"send-1x100-reuse", smallSend(), true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(appendFrame(nil, bc.f))))
			var buf []byte
			for b.Loop() {
				if bc.reuse {
					buf = appendFrame(buf[:0], bc.f)
				} else {
					buf = appendFrame(nil, bc.f)
				}
			}
		})
	}
}

// TestCodecWireFormatUnchanged: appendFrame writes, byte for byte, what
// refAppendFrame (the encoder it replaced) wrote, for frames with every
// field set, with values whose lengths cross the varint size boundaries
// (so do the nested values holding them), and for the frames of a send and
// a queue delivery; and what it writes decodes to the frame. Maps are kept
// to one entry where bytes are compared: with more, their order on the
// wire is Go's map order, and only the lengths are compared.
func TestCodecWireFormatUnchanged(t *testing.T) {
	seed := 0
	var full frame
	fill(t, reflect.ValueOf(&full).Elem(), &seed)
	if a, b := appendFrame(nil, &full), refAppendFrame(nil, &full); len(a) != len(b) {
		t.Fatalf("every field set (maps of 2): %d bytes, want %d", len(a), len(b))
	}
	one := full
	one.Version = new(abi.Version)
	*one.Version = *full.Version
	one.HTTP = new(httpMsg)
	*one.HTTP = *full.HTTP
	one.Version.Vars = map[string]string{"k": "v"}
	one.Version.Secrets = map[string]string{"": "secret"}
	one.HTTP.Header = map[string][]string{"Content-Type": {"text/plain", ""}}

	send, queue := bigFrames()
	frames := map[string]*frame{
		"zero":                          {},
		"every field set":               &one,
		"send of one":                   smallSend(),
		"send of 100 x 127000 B":        send,
		"queue batch of 100 x 127000 B": queue,
		"deadline at the epoch":         {Deadline: time.Unix(0, 0)},
		"deadline before the epoch":     {Deadline: time.Unix(-5, 0)},
		"empty strings in lists":        {IDs: []string{"", "a", ""}, Handlers: []string{""}, Init: &initMsg{AllowedFetchHosts: []string{""}}},
		"empty nested values":           {Init: &initMsg{}, Version: &abi.Version{Modules: []abi.Module{{}}, Bindings: []abi.Binding{{}}}, Batch: &batchMsg{Messages: []abi.Message{{}}}, HTTP: &httpMsg{Header: map[string][]string{"": nil}}, Messages: []wireOutgoing{{}}, Settlement: &wireSettlement{}, Log: &logMsg{}, Err: &wireErr{}},
		"negative numbers":              {Init: &initMsg{InvocationTimeout: -1, MemoryLimit: -1 << 62, MaxStack: -3}, Err: &wireErr{Line: -1, Column: -2}, Settlement: &wireSettlement{Kind: -1, HasDelay: true, Delay: -9}},
	}
	// Bodies of lengths around each varint boundary, alone and nested one
	// and two levels down: each length, and each nested value's, is written
	// in 1, 2, 3 and 4 bytes.
	for _, n := range []int{0, 1, 100, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 16360, 16370, 16375, 16380, 16383, 16384, 16385, 1<<21 - 20, 1<<21 - 1, 1 << 21} {
		var body []byte // nil at 0, as it decodes
		if n > 0 {
			body = bytes.Repeat([]byte{'x'}, n)
		}
		frames[fmt.Sprintf("bodies of %d B", n)] = &frame{
			Messages: []wireOutgoing{{Body: body}, {Body: body, HasDelay: true, Delay: 1}},
			Batch:    &batchMsg{ID: "b", Messages: []abi.Message{{ID: "m", Body: body}, {Body: body, Attempts: 300}}},
			HTTP:     &httpMsg{Body: body, Header: map[string][]string{"H": {string(body)}}},
			Log:      &logMsg{Message: string(body)},
			Version:  &abi.Version{Modules: []abi.Module{{Name: "m.js", Content: string(body)}}, Vars: map[string]string{"V": string(body)}},
		}
	}
	prefix := []byte("frames before it ")
	for name, f := range frames {
		want := refAppendFrame(nil, f)
		if got := appendFrame(nil, f); !bytes.Equal(got, want) {
			t.Errorf("%s: appendFrame wrote %d bytes, not the reference's %d (or not the same):\n got %.200x\nwant %.200x", name, len(got), len(want), got, want)
			continue
		}
		if got := appendFrame(bytes.Clone(prefix), f); !bytes.Equal(got, append(bytes.Clone(prefix), want...)) {
			t.Errorf("%s: appended to %q, it wrote %.200x", name, prefix, got)
		}
		if got := roundTrip(t, f); !reflect.DeepEqual(got, f) {
			t.Errorf("%s: decoded to something else", name)
		}
	}
}

// mapsOfOne: no map in f has more than one entry.
func mapsOfOne(f *frame) bool {
	return (f.HTTP == nil || len(f.HTTP.Header) <= 1) && (f.Version == nil || len(f.Version.Vars) <= 1 && len(f.Version.Secrets) <= 1)
}

// TestCodecAllocatesOnce: a frame is encoded into a buffer allocated once,
// at its exact size, or into the room the buffer given has.
func TestCodecAllocatesOnce(t *testing.T) {
	seed := 0
	var full frame // maps of 2 entries, the encoder's map entries included
	fill(t, reflect.ValueOf(&full).Elem(), &seed)
	send, queue := bigFrames()
	for name, f := range map[string]*frame{"send": send, "queue": queue, "small send": smallSend(), "every field set": &full} {
		b := appendFrame(nil, f)
		if cap(b) != len(b) {
			t.Errorf("%s: a buffer of capacity %d for a frame of %d bytes", name, cap(b), len(b))
		}
		if n := testing.AllocsPerRun(3, func() { appendFrame(nil, f) }); n != 1 {
			t.Errorf("%s: %v allocations, want 1", name, n)
		}
		buf := make([]byte, 0, len(b))
		if n := testing.AllocsPerRun(3, func() { buf = appendFrame(buf[:0], f) }); n != 0 {
			t.Errorf("%s: %v allocations into a buffer with room, want 0", name, n)
		}
	}
}

// refAppendFrame is the encoder appendFrame replaced, kept as the
// reference of the wire format: it wrote each length-delimited value first
// and then moved it up to put its length in front.
func refAppendFrame(b []byte, f *frame) []byte {
	e := refEncoder{b: b}
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
		e.end(at)
	}
	e.str(fVersionUID, f.VersionUID)
	if !f.Deadline.IsZero() {
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
		// Added after the replacement: a thrown exception's name and
		// stack (the attempt history), new fields, the old ones as they
		// were.
		e.str(7, w.Name)
		e.str(8, w.Stack)
		e.end(at)
	}
	e.int(fStartBy, f.StartBy)
	e.end(top)
	return e.b
}

type refEncoder struct{ b []byte }

func (e *refEncoder) uint(n protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, v)
	}
}

func (e *refEncoder) int(n protowire.Number, v int64) { e.uint(n, uint64(v)) }

func (e *refEncoder) bool(n protowire.Number, v bool) {
	if v {
		e.uint(n, 1)
	}
}

func (e *refEncoder) str(n protowire.Number, s string) {
	if s != "" {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendString(e.b, s)
	}
}

func (e *refEncoder) bytes(n protowire.Number, v []byte) {
	if len(v) > 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v)
	}
}

func (e *refEncoder) strs(n protowire.Number, ss []string) {
	for _, s := range ss {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendString(e.b, s)
	}
}

func (e *refEncoder) strMap(n protowire.Number, m map[string]string) {
	for k, v := range m {
		at := e.begin(n)
		e.str(1, k)
		e.str(2, v)
		e.end(at)
	}
}

func (e *refEncoder) begin(n protowire.Number) (at int) {
	if n != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	}
	return len(e.b)
}

func (e *refEncoder) end(at int) {
	size := len(e.b) - at
	k := protowire.SizeVarint(uint64(size))
	e.b = append(e.b, make([]byte, k)...)
	copy(e.b[at+k:], e.b[at:at+size])
	protowire.AppendVarint(e.b[at:at], uint64(size))
}

// TestFrameSegments: a frame written in pieces (frameSegments) is the
// frame appendFrame encodes, byte for byte, with every body of at least
// direct bytes a piece of its own, uncopied, and the rest encoded into one
// buffer of exactly its size.
func TestFrameSegments(t *testing.T) {
	seed := 0
	var full frame
	fill(t, reflect.ValueOf(&full).Elem(), &seed)
	full.Version.Vars, full.Version.Secrets, full.HTTP.Header = nil, nil, nil // one encoding only
	send, queue := bigFrames()
	mixed := &frame{ID: 3, Op: opSend, Messages: []wireOutgoing{
		{Body: make([]byte, 15)}, {Body: make([]byte, 16), HasDelay: true, Delay: 5}, {Body: make([]byte, 17)}, {Body: make([]byte, 300)},
	}}
	const direct = 16
	for name, f := range map[string]*frame{"every field set": &full, "big send": send, "big batch": queue, "mixed": mixed, "zero": {}} {
		want := appendFrame(nil, f)
		segs, buf := frameSegments(nil, f, direct, nil)
		if got := bytes.Join(segs, nil); !bytes.Equal(got, want) {
			t.Fatalf("%s: the pieces join to %d bytes that differ from appendFrame's %d", name, len(got), len(want))
		}
		var bodies [][]byte
		for _, m := range f.Messages {
			bodies = append(bodies, m.Body)
		}
		if f.Batch != nil {
			for _, m := range f.Batch.Messages {
				bodies = append(bodies, m.Body)
			}
		}
		if f.HTTP != nil {
			bodies = append(bodies, f.HTTP.Body)
		}
		uncopied := 0
		for _, b := range bodies {
			if len(b) < direct {
				continue
			}
			uncopied += len(b)
			found := false
			for _, s := range segs {
				found = found || len(s) == len(b) && &s[0] == &b[0]
			}
			if !found {
				t.Fatalf("%s: a body of %d bytes was copied, not written as it is", name, len(b))
			}
		}
		if cap(buf) != len(want)-uncopied {
			t.Fatalf("%s: the encoded pieces' buffer holds %d bytes, want exactly %d", name, cap(buf), len(want)-uncopied)
		}
	}
}
