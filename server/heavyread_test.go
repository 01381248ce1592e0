package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/takoform/queuehost/internal/loadprobe"
)

// 64 concurrent viewer lists of a space holding 20 versions of 4 MiB
// (#36): each answers, within the heavy-read budget, with the modules'
// names only; the Go heap stays bounded (the summaries are made once, not
// per list, and a bounded number of lists run at once) and a read of
// another resource answers promptly meanwhile.
func TestHeavyListsOfABigSpace(t *testing.T) {
	h := newHarness(t, nil)
	w := h.mustCreate("s1", "w", fWorker, map[string]any{"handlers": []string{"fetch"}})
	big := queueModule + "// " + strings.Repeat("x", 4<<20-200) + "\n"
	for i := range 20 {
		h.mustCreate("s1", fmt.Sprintf("w-v%d", i), fVersion, versionSpec(w, big))
	}
	q := h.mustCreate("s1", "q", fQueue, queueSpec())
	heap := loadprobe.Heap(10 * time.Millisecond)
	var worst atomic.Int64
	var others atomic.Int64
	stopReads := loadprobe.Every(50*time.Millisecond, func() {
		start := time.Now()
		r := h.do("GET", res("s1")+"/"+q, tViewer, nil)
		if r.status != 200 {
			t.Errorf("a read meanwhile: %d %s", r.status, r.body)
		}
		others.Add(1)
		if d := int64(time.Since(start)); d > worst.Load() {
			worst.Store(d)
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := h.do("GET", res("s1"), tViewer, nil)
			if r.status != 200 {
				t.Errorf("list: %d %.300s", r.status, r.body)
				return
			}
			items, _ := r.json["items"].([]any)
			if len(items) != 22 || strings.Contains(string(r.body), "xxxx") {
				t.Errorf("list: %d items, %d bytes", len(items), len(r.body))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	stopReads()
	base, peak := heap()
	grown := int64(peak) - int64(base)
	t.Logf("64 lists of 20 x 4 MiB versions in %v; at most %d at once (budget %d, up to %d waiting); Go heap %d MiB before, grew by %d MiB at most; %d other reads, worst %v",
		took, h.srv.heavy.peak.Load(), cap(h.srv.heavy.slots), h.srv.heavy.waitedPeak.Load(), base>>20, grown>>20, others.Load(), time.Duration(worst.Load()))
	if p, c := h.srv.heavy.peak.Load(), cap(h.srv.heavy.slots); p > int64(c) || p < 1 {
		t.Fatalf("%d heavy reads ran at once, the budget is %d", p, c)
	}
	if took > 30*time.Second || grown > 160<<20 || time.Duration(worst.Load()) > 2*time.Second {
		t.Fatalf("lists took %v, the heap grew by %d MiB, another read took up to %v", took, grown>>20, time.Duration(worst.Load()))
	}
}
