package journal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"testing"
)

// The fuzz corpora use a fixed salt, so that their frames validate.
const (
	fuzzSalt = 0x0123456789abcdef
	fuzzOff  = SegmentHeaderSize // where FuzzDecodeFrame's input lies
)

// fuzzSegment builds a segment of fuzzSalt holding the frames of payloads.
func fuzzSegment(payloads ...string) []byte {
	b := AppendSegmentHeader(nil, fuzzSalt)
	for _, p := range payloads {
		b = AppendFrame(b, fuzzSalt, int64(len(b)), []byte(p))
	}
	return b
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(AppendFrame(nil, fuzzSalt, fuzzOff, []byte("hello")))
	f.Add(AppendFrame(AppendFrame(nil, fuzzSalt, fuzzOff, []byte{1}), fuzzSalt, fuzzOff+HeaderSize+1, []byte("second")))
	f.Add(AppendFrame(nil, fuzzSalt+1, fuzzOff, []byte("other salt")))
	f.Add(AppendFrame(nil, fuzzSalt, fuzzOff+1, []byte("other offset")))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		payload, n, err := DecodeFrame(b, fuzzSalt, fuzzOff)
		if err != nil {
			if !errors.Is(err, ErrShortFrame) && !errors.Is(err, ErrBadLength) && !errors.Is(err, ErrChecksum) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n != HeaderSize+len(payload) || n > len(b) || len(payload) == 0 {
			t.Fatalf("n=%d payload=%d len=%d", n, len(payload), len(b))
		}
		if !bytes.Equal(AppendFrame(nil, fuzzSalt, fuzzOff, payload), b[:n]) {
			t.Fatal("re-encoding differs")
		}
		if _, _, err := DecodeFrame(b, fuzzSalt, fuzzOff+1); err == nil {
			t.Fatal("frame also valid one byte further on")
		}
	})
}

// FuzzParseSegmentHeader: a header parses only as what AppendSegmentHeader
// wrote.
func FuzzParseSegmentHeader(f *testing.F) {
	f.Add(AppendSegmentHeader(nil, fuzzSalt))
	f.Add(AppendSegmentHeader(nil, 0)[:SegmentHeaderSize-1])
	f.Add(make([]byte, SegmentHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		salt, err := ParseSegmentHeader(b)
		if err != nil {
			if !errors.Is(err, ErrSegmentHeader) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if !bytes.Equal(AppendSegmentHeader(nil, salt), b[:SegmentHeaderSize]) {
			t.Fatal("re-encoding differs")
		}
	})
}

// FuzzReplay feeds arbitrary bytes as the last segment file (after one valid
// sealed segment). Open must either fail with a CorruptError or recover a
// prefix of valid frames, after which reopening is clean and appends work.
func FuzzReplay(f *testing.F) {
	f.Add(fuzzSegment("one", "two"))
	f.Add(append(fuzzSegment("one"), 7, 0, 0))
	f.Add(append(fuzzSegment("one"), make([]byte, 50)...))
	torn := fuzzSegment("one", "two-two-two")
	f.Add(torn[:len(torn)-3])
	flipped := fuzzSegment("one", "two")
	flipped[SegmentHeaderSize+9] ^= 1
	f.Add(flipped)
	// A payload holding a verbatim frame of the segment, in a torn tail.
	inner := fuzzSegment("one")[SegmentHeaderSize:]
	framed := fuzzSegment("one", "xx"+string(inner)+"yy")
	f.Add(framed[:len(framed)-1])
	f.Add(fuzzSegment()[:10])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, last []byte) {
		mem := NewMemFS(1)
		mem.MkdirAll("/j", 0o755)
		write := func(id uint64, b []byte) {
			fl, _ := mem.OpenFile(join("/j", SegmentName(id)), os.O_RDWR|os.O_CREATE, 0o644)
			fl.WriteAt(b, 0)
			fl.Close()
		}
		write(1, AppendFrame(AppendSegmentHeader(nil, 7), 7, SegmentHeaderSize, []byte("sealed")))
		write(2, last)
		// The manifest as a rotation to segment 2 wrote it: segment 1 is
		// acknowledged, nothing of segment 2 yet.
		fl, _ := mem.OpenFile(join("/j", ManifestName), os.O_RDWR|os.O_CREATE, 0o600)
		fl.WriteAt([]byte(`{"format":3,"segments":[1,2],"acked":{"segment":2,"offset":0}}`), 0)
		fl.Close()
		var got [][]byte
		replay := func(p Pos, b []byte) error { got = append(got, bytes.Clone(b)); return nil }
		j, rep, err := Open(context.Background(), "/j", Options{FS: mem, Logger: quiet}, replay)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.File != join("/j", SegmentName(2)) {
				t.Fatalf("Open = %v", err)
			}
			return
		}
		if len(got) == 0 || string(got[0]) != "sealed" {
			t.Fatalf("sealed segment not replayed first: %q", got)
		}
		// What segment 2 replayed ends at end; after it the file holds
		// either what the report says was cut, or only zeros (kept).
		end := SegmentHeaderSize + rep.Bytes - HeaderSize - int64(len("sealed"))
		if len(last) < SegmentHeaderSize {
			end = int64(len(last))
			if rep.Truncated {
				end = 0
			}
		}
		if rep.Truncated && rep.Offset == 0 {
			// A torn segment header: the whole file was rewritten.
			if rep.Dropped != int64(len(last)) || rep.Bytes != HeaderSize+int64(len("sealed")) {
				t.Fatalf("report %+v for a torn header of %d bytes", rep, len(last))
			}
		} else if rep.Truncated {
			if rep.Offset != end || rep.Dropped != int64(len(last))-rep.Offset || rep.Offset < SegmentHeaderSize {
				t.Fatalf("report %+v for %d bytes (data to %d)", rep, len(last), end)
			}
		} else if end > int64(len(last)) || slices.ContainsFunc(last[end:], func(b byte) bool { return b != 0 }) {
			t.Fatalf("report %+v: %d bytes after the data at %d are kept but are not all zeros", rep, int64(len(last))-end, end)
		}
		if _, err := j.Append(context.Background(), []byte("appended"), nil); err != nil {
			t.Fatal(err)
		}
		j.Close()
		first := got
		got = nil
		j, rep, err = Open(context.Background(), "/j", Options{FS: mem, Logger: quiet}, replay)
		if err != nil || rep.Truncated {
			t.Fatalf("second Open = %v, %+v", err, rep)
		}
		j.Close()
		if len(got) != len(first)+1 || string(got[len(got)-1]) != "appended" {
			t.Fatalf("second replay %q, first %q", got, first)
		}
	})
}
