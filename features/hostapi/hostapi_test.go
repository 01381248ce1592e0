package hostapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

type report struct {
	Scope string `json:"scope"`
	N     int    `json:"n"`
	seq   int
	recv  time.Time
}

func (r *report) Stamp(seq int, recv time.Time) { r.seq, r.recv = seq, recv }

// The inbox numbers reports in arrival order, files them by key, calls
// OnEvent, refuses a body that is not JSON and hands other paths to Other.
func TestInbox(t *testing.T) {
	seen := make(chan int, 4)
	other := 0
	in, err := StartInbox[report]("127.0.0.1:0", InboxOptions[*report]{
		Key:     func(r *report) string { return r.Scope },
		OnEvent: func(r *report) { seen <- r.N },
		Other:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { other++; w.WriteHeader(299) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	post := func(body string) int {
		res, err := http.Post("http://"+in.Addr()+"/event", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, b := range []string{`{"scope":"a","n":1}`, `{"scope":"b","n":2}`, `{"scope":"a","n":3}`} {
		if st := post(b); st != 204 {
			t.Fatalf("%s: %d", b, st)
		}
	}
	if st := post(`{"scope":`); st != 400 {
		t.Fatalf("a body that is not JSON: %d", st)
	}
	a := in.Events("a")
	if len(a) != 2 || a[0].N != 1 || a[1].N != 3 || a[0].seq != 1 || a[1].seq != 3 || a[0].recv.IsZero() {
		t.Fatalf("scope a: %+v %+v", a[0], a[1])
	}
	if in.Len("b") != 1 || len(seen) != 3 {
		t.Fatalf("scope b: %d, OnEvent: %d", in.Len("b"), len(seen))
	}
	in.Forget("a")
	if in.Len("a") != 0 {
		t.Fatal("Forget kept scope a")
	}
	res, err := http.Get("http://" + in.Addr() + "/sink")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 299 || other != 1 {
		t.Fatalf("other path: %d, %d", res.StatusCode, other)
	}
}

// An Operation ends when it succeeded or failed; reconciling is unresolved
// (spec/host-api.md §Operations), whatever its pairing.
func TestTerminal(t *testing.T) {
	for state, want := range map[string]bool{"pending": false, "running": false, "reconciling": false, "succeeded": true, "failed": true} {
		if got := (&Operation{State: state}).Terminal(); got != want {
			t.Errorf("%s: Terminal %v", state, got)
		}
	}
	if !(&Operation{State: "reconciling", Effect: "unknown"}).PairOK() || (&Operation{State: "reconciling", Effect: "none"}).PairOK() {
		t.Error("reconciling pairs with unknown only")
	}
}
