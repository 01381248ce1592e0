package server

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
)

// DefaultHeavyReads is how many heavy reads (list pages of resources and
// of Operations) run at once: the cores, at least 2. The others wait
// their turn, holding nothing but their connection.
func DefaultHeavyReads() int { return max(2, runtime.GOMAXPROCS(0)) }

// heavyReads is the concurrency budget heavy reads share. A list page
// reads every record of a space and holds up to MaxPageBytes of specs;
// 64 of them at once over a space of large versions took minutes and
// hundreds of MB (issue 36). Bounded here, they cannot take the cores or
// the memory from the requests that are not lists (a resource, an
// Operation, the fetch route, sends), which never wait for them.
type heavyReads struct {
	slots      chan struct{}
	running    atomic.Int64
	peak       atomic.Int64
	waitedPeak atomic.Int64
	waiting    atomic.Int64
}

func newHeavyReads(n int) heavyReads { return heavyReads{slots: make(chan struct{}, n)} }

// acquire waits for a slot (until ctx ends: then a 503 problem) and
// returns its release, which runs once: when the caller calls it (once the
// page is written), or at the latest when ctx ends (the request is over).
func (h *heavyReads) acquire(ctx context.Context) (func(), error) {
	w := h.waiting.Add(1)
	if w > h.waitedPeak.Load() {
		h.waitedPeak.Store(w)
	}
	defer h.waiting.Add(-1)
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable,
			"the host is busy with other list requests and this one ended before its turn; retry later")
	}
	n := h.running.Add(1)
	for {
		p := h.peak.Load()
		if n <= p || h.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			h.running.Add(-1)
			<-h.slots
		})
	}
	context.AfterFunc(ctx, release)
	return release, nil
}

// Pages that keep their heavy-read slot until they are written: the page
// is held, and encoded, after the handler returns.
type (
	heavyResourcePage struct {
		api.ListResources200JSONResponse
		release func()
	}
	heavyOperationPage struct {
		api.ListOperations200JSONResponse
		release func()
	}
)

func (p heavyResourcePage) VisitListResourcesResponse(w http.ResponseWriter) error {
	defer p.release()
	return p.ListResources200JSONResponse.VisitListResourcesResponse(w)
}

func (p heavyOperationPage) VisitListOperationsResponse(w http.ResponseWriter) error {
	defer p.release()
	return p.ListOperations200JSONResponse.VisitListOperationsResponse(w)
}
