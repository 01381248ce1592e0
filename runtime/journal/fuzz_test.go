package journal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
)

func FuzzDecodeFrame(f *testing.F) {
	f.Add(AppendFrame(nil, []byte("hello")))
	f.Add(AppendFrame(AppendFrame(nil, []byte{1}), []byte("second")))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 1, 2, 3, 4, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		payload, n, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrShortFrame) && !errors.Is(err, ErrBadLength) && !errors.Is(err, ErrChecksum) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n != HeaderSize+len(payload) || n > len(b) || len(payload) == 0 {
			t.Fatalf("n=%d payload=%d len=%d", n, len(payload), len(b))
		}
		if !bytes.Equal(AppendFrame(nil, payload), b[:n]) {
			t.Fatal("re-encoding differs")
		}
	})
}

// FuzzReplay feeds arbitrary bytes as the last segment (after one valid
// sealed segment). Open must either fail with a CorruptError or recover a
// prefix of valid frames, after which reopening is clean and appends work.
func FuzzReplay(f *testing.F) {
	f.Add(AppendFrame(AppendFrame(nil, []byte("one")), []byte("two")))
	f.Add(append(AppendFrame(nil, []byte("one")), 7, 0, 0))
	f.Add(append(AppendFrame(nil, []byte("one")), make([]byte, 50)...))
	torn := AppendFrame(AppendFrame(nil, []byte("one")), []byte("two-two-two"))
	f.Add(torn[:len(torn)-3])
	flipped := AppendFrame(AppendFrame(nil, []byte("one")), []byte("two"))
	flipped[9] ^= 1
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, last []byte) {
		mem := NewMemFS(1)
		mem.MkdirAll("/j", 0o755)
		write := func(id uint64, b []byte) {
			fl, _ := mem.OpenFile(join("/j", SegmentName(id)), os.O_RDWR|os.O_CREATE, 0o644)
			fl.Write(b)
			fl.Close()
		}
		write(1, AppendFrame(nil, []byte("sealed")))
		write(2, last)
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
		valid := int64(len(last))
		if rep.Truncated {
			valid = rep.Offset
			if rep.Offset >= int64(len(last)) || rep.Dropped != int64(len(last))-rep.Offset {
				t.Fatalf("report %+v for %d bytes", rep, len(last))
			}
		}
		if rep.Bytes != HeaderSize+int64(len("sealed"))+valid {
			t.Fatalf("report %+v: replayed bytes do not add up to %d", rep, valid)
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
