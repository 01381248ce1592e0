package steps

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestSlackIsMeasuredAndBounded(t *testing.T) {
	var l latencies
	if got := l.slack(); got != minSlack {
		t.Fatalf("no request yet: slack %s, want the minimum %s", got, minSlack)
	}
	for range slackWindow {
		l.add(300 * time.Millisecond)
	}
	if got := l.slack(); got != 900*time.Millisecond {
		t.Fatalf("every answer 300 ms: slack %s, want 3 × 300 ms", got)
	}
	// The tenth of slowest answers does not count: the 90th percentile.
	for range slackWindow / 10 {
		l.add(5 * time.Second)
	}
	if got := l.slack(); got != 900*time.Millisecond {
		t.Fatalf("a few very slow answers: slack %s, want 900 ms", got)
	}
	for range slackWindow {
		l.add(2 * time.Second)
	}
	if got := l.slack(); got != maxSlack {
		t.Fatalf("a loaded host: slack %s, want the bound %s", got, maxSlack)
	}
	for range slackWindow {
		l.add(time.Millisecond)
	}
	if got := l.slack(); got != minSlack {
		t.Fatalf("an idle host: slack %s, want the minimum %s (older answers forgotten)", got, minSlack)
	}
}

func TestTimedTransportLeavesLongPollsOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("wait") {
			time.Sleep(200 * time.Millisecond)
		}
	}))
	defer srv.Close()
	var l latencies
	c := &http.Client{Transport: &timedTransport{next: http.DefaultTransport, lat: &l}}
	for _, u := range []string{"/a", "/op?wait=5", "/b"} {
		res, err := c.Get(srv.URL + u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	if l.n != 2 {
		t.Fatalf("%d requests measured, want 2 (the long poll left out)", l.n)
	}
	for _, d := range l.ring[:2] {
		if d >= 200*time.Millisecond {
			t.Fatalf("a measured request took %s: the long poll was counted", d)
		}
	}
}
