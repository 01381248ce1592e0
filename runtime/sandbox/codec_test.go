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
