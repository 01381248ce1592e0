package host

import (
	"context"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/takoform/queuehost/schemas"
)

// TestChurnReturnsToLive is the measurement: create and delete a
// WorkerVersion of 4 MiB over and over. Memory must come back to what the
// live resources need (the Operations keep no copy of the version, the
// runtime no program of a deleted version), and the data directory must
// stay within the journal's bound (a head segment and what compaction has
// not yet reclaimed), not grow with the number of cycles.
func TestChurnReturnsToLive(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 120 MiB of versions")
	}
	dir := filepath.Join(t.TempDir(), "data")
	h := startHost(t, dir)
	defer h.Shutdown(context.Background())
	c := newClient(t, h.URL(), h.AdminToken())
	w := c.create("w", schemas.FormModuleWorker, map[string]any{"handlers": []string{"fetch"}})
	module := "export default { async fetch() { return new Response('ok'); } };\n// " + strings.Repeat("x", 4<<20-100) + "\n"
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	cycle := func() {
		t.Helper()
		v := c.create("w-v", schemas.FormWorkerVersion, map[string]any{
			"worker": map[string]any{"resourceUid": w}, "mainModule": "main.js",
			"modules": []any{map[string]any{"name": "main.js", "content": module}},
		})
		if err := c.c.Delete(t.Context(), "demo", v); err != nil {
			t.Fatal(err)
		}
	}
	// One cycle first, so that what is allocated once (caches, buffers)
	// is in the baseline.
	cycle()
	before := heap()
	const cycles = 30
	for range cycles {
		cycle()
	}
	after := heap()
	var disk int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				disk += info.Size()
			}
		}
		return nil
	})
	t.Logf("heap %d MiB before, %d MiB after %d cycles of a 4 MiB version; data directory %d MiB", before>>20, after>>20, cycles, disk>>20)
	if after > before+24<<20 {
		t.Errorf("heap grew from %d to %d MiB over %d create+delete cycles", before>>20, after>>20, cycles)
	}
	// 30 cycles journal about 480 MiB; compaction keeps the sealed
	// segments mostly live, and the head is at most one 64 MiB segment.
	if disk > 200<<20 {
		t.Errorf("data directory %d MiB after %d create+delete cycles", disk>>20, cycles)
	}
}
