package js

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/takoform/queuehost/abi"
)

// FuzzSendArguments drives a producer Binding's send with arguments the
// fuzzer chooses (a string, ArrayBuffer, typed-array or DataView view at an
// offset, or a value of another type; options valid, out of range, of the
// wrong type or with an unknown member) and checks the outcome against an
// independent reading of the same bytes: a valid call reaches the Sender
// with exactly the expected bytes and delay and resolves with its ID; an
// invalid one rejects with the Form's Error.name and sends nothing.
func FuzzSendArguments(f *testing.F) {
	f.Add([]byte{0, 0, 0, 'h', 'i'})
	f.Add([]byte{0, 0, 0, 0xe9, 0xff})
	f.Add([]byte{1, 1, 10, 1, 2, 3})
	f.Add([]byte{2, 0, 2, 1, 2, 3, 4})
	f.Add([]byte{3, 5, 1, 9, 8})
	f.Add([]byte{2, 0, 9, 1})
	f.Add([]byte{4, 0, 0})
	f.Add([]byte{5, 2, 0, 1})
	f.Add([]byte{6, 3, 0, 1})
	f.Add([]byte{1, 4, 0, 1})
	f.Add([]byte{1, 1, 255, 1})
	f.Add(append([]byte{1, 0, 0}, make([]byte, 127001)...))

	snd := &fakeSender{}
	rt := New(Options{Sender: snd})
	defer rt.Close()
	v := loadVersion(f, "fuzzsend", "v-fuzzsend")
	v.Bindings = []abi.Binding{{Name: "OUT", QueueUID: "queue-out"}}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, in []byte) {
		before := len(snd.sent())
		id := n.Add(1)
		if err := runBodies(t, rt, newFakeSettler(), v, fmt.Sprintf("b%d", id), string(in)); err != nil {
			t.Fatalf("handler: %v", err)
		}
		logs := rt.Logs(v.WorkerUID, 0, 100000)
		var out struct {
			OK   bool   `json:"ok"`
			ID   string `json:"id"`
			Name string `json:"name"`
		}
		if len(logs) == 0 || !strings.HasPrefix(logs[len(logs)-1].Message, "FUZZ ") {
			t.Fatalf("no outcome logged: %+v", logs)
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(logs[len(logs)-1].Message, "FUZZ ")), &out); err != nil {
			t.Fatal(err)
		}
		calls := snd.sent()[before:]
		want, delay, names := expectSend(in)
		if len(names) == 0 {
			if !out.OK || len(calls) != 1 || len(calls[0].Msgs) != 1 || calls[0].Msgs[0].Body == nil {
				t.Fatalf("want a send of %d bytes, got %+v and calls %+v", len(want), out, calls)
			}
			m := calls[0].Msgs[0]
			if !bytes.Equal(m.Body, want) || !sameDelay(m.Delay, delay) || out.ID == "" {
				t.Fatalf("sent %x delay %v (id %q), want %x delay %v", m.Body, m.Delay, out.ID, want, delay)
			}
			return
		}
		if out.OK || len(calls) != 0 || !contains(names, out.Name) {
			t.Fatalf("want a rejection named %v and nothing sent, got %+v and calls %+v", names, out, calls)
		}
	})
}

// expectSend reads the fuzz input as the fixture does and says what the
// Binding must do: send want with delay, or reject with one of names (two
// when the body and the options are both wrong in different ways).
func expectSend(in []byte) (want []byte, delay *int, names []string) {
	at := func(i int) int {
		if i < len(in) {
			return int(in[i])
		}
		return 0
	}
	kind, opt, off := at(0)%7, at(1)%6, at(2)
	rest := in[min(3, len(in)):]
	o := min(off, len(rest))
	bodyErr := ""
	switch kind {
	case 0:
		for _, b := range rest {
			want = utf8.AppendRune(want, rune(b))
		}
	case 1:
		want = rest
	case 2, 3:
		want = rest[o:]
	default:
		bodyErr = "invalid_body"
	}
	if bodyErr == "" && len(want) == 0 {
		bodyErr = "invalid_body"
	}
	if bodyErr == "" && len(want) > 127000 {
		bodyErr = "message_too_large"
	}
	optErr := ""
	switch opt {
	case 1:
		if d := off * 200; d <= 43200 {
			delay = &d
		} else {
			optErr = "invalid_body"
		}
	case 2, 3, 4:
		optErr = "invalid_body"
	}
	for _, e := range []string{bodyErr, optErr} {
		if e != "" && !contains(names, e) {
			names = append(names, e)
		}
	}
	return append([]byte(nil), want...), delay, names
}

func sameDelay(a, b *int) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
