package steps

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// A time window of the kit is a declared limit (a queue's
// maxBatchTimeoutSeconds, the host's handler time limit, a retry's delay)
// plus a slack, and the slack is measured, not fixed: on a loaded machine
// every timer of the host fires late by about as much as its answers to
// the kit's requests take, so a fixed second would fail a correct host on a
// busy machine and hide a wrong one on an idle one.
//
// The slack is three times the 90th percentile of how long the host took
// to answer the kit's recent requests (those that do not long-poll),
// bounded below by minSlack and above by maxSlack. The bound above keeps a
// window able to tell a host that honours a limit from one that uses
// another value (a maxBatchTimeoutSeconds of 0 taken for the default 5 s,
// say): a machine slower than that fails the scenario, and the failure
// says which slack it used.
const (
	minSlack    = 500 * time.Millisecond
	maxSlack    = 2500 * time.Millisecond
	slackWindow = 64 // the requests the percentile is taken over
)

// latencies records how long the host took to answer the kit's requests.
type latencies struct {
	mu   sync.Mutex
	ring [slackWindow]time.Duration
	n    int
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ring[l.n%slackWindow] = d
	l.n++
	l.mu.Unlock()
}

// slack is the measured slack (see above).
func (l *latencies) slack() time.Duration {
	l.mu.Lock()
	ds := slices.Clone(l.ring[:min(l.n, slackWindow)])
	l.mu.Unlock()
	if len(ds) == 0 {
		return minSlack
	}
	slices.Sort(ds)
	p90 := ds[(len(ds)*9+9)/10-1]
	return min(max(3*p90, minSlack), maxSlack)
}

// timedTransport measures every request that does not long-poll (an
// Operation read with ?wait= answers when the Operation ends).
type timedTransport struct {
	next http.RoundTripper
	lat  *latencies
}

func (t *timedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	res, err := t.next.RoundTrip(req)
	if err == nil && !req.URL.Query().Has("wait") {
		t.lat.add(time.Since(start))
	}
	return res, err
}

// Slack is the kit's measured slack now.
func (k *Kit) Slack() time.Duration { return k.lat.slack() }
