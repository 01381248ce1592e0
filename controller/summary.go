package controller

import (
	"encoding/json"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// maxSummaries bounds the summary cache: a summary is small (a version's
// module names), so a few thousand cost little.
const maxSummaries = 4096

// summaryCache keeps each record's list summary by UID for its ETag (a
// record never changes without a new ETag): a list shows a WorkerVersion
// of 4 MiB by its module names, and making that summary reads the whole
// spec. Made once per record version, not once per list: 64 concurrent
// lists of a space of 20 such versions made 1 280 summaries, ~115 s of
// decoding and hundreds of MB of garbage (issue 36). Concurrent lists wait
// for the one summary being made instead of each making it.
type summaryCache struct {
	mu sync.Mutex
	m  map[string]*summaryEntry
}

type summaryEntry struct {
	etag string
	once sync.Once
	out  json.RawMessage
}

func (c *summaryCache) get(r store.Resource, make func() json.RawMessage) json.RawMessage {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*summaryEntry{}
	}
	e := c.m[r.UID]
	if e == nil || e.etag != r.ETag {
		if len(c.m) >= maxSummaries {
			for k := range c.m { // drop an arbitrary tenth
				delete(c.m, k)
				if len(c.m) < maxSummaries*9/10 {
					break
				}
			}
		}
		e = &summaryEntry{etag: r.ETag}
		c.m[r.UID] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.out = make() })
	return e.out
}
