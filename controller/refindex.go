package controller

import (
	"context"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// refIndex maps each resource to the resources whose stored specs
// reference it, so that admission's dependency checks (one consumer per
// queue, the dead-letter graph, what keeps a resource from being deleted)
// read the referrers and nothing else of the space.
//
// The controller is the only writer of resource records, so it keeps the
// index in step with every record it writes (under the space's lock) and
// rebuilds it at start. It may hold a stale referrer (after a write whose
// outcome was lost): ReferencedBy reads each referrer's record and keeps
// only the references its stored spec still makes. Every full observation
// pass re-indexes what changed, so that nothing stays missing.
//
// # Why an entry is only ever replaced whole, and never by an older one
//
// An extra referrer costs a read; a missing one lets admission accept what
// it must refuse (a second consumer of a queue, a dead-letter cycle, the
// delete of a resource still referenced). So the index may say too much,
// never too little, at any moment, and that must hold while it is written:
// in a cluster (spec/cluster.md) another host's write reaches the index
// through Reindex, on a notification, without the space's lock and while
// an admission of the space reads it. put therefore replaces a resource's
// references in one step under mu (never a drop followed by a put, between
// which a reader would find the resource naming nothing), a failed read
// leaves the entry as it is, and only a record found gone is dropped. A
// record read before a later write and indexed after it would put back
// older references: put keeps the later generation (a record's spec, and
// so its references, changes only with its generation, which never goes
// back).
type refIndex struct {
	mu sync.Mutex
	// out holds each resource's references, per generation.
	out map[string]outRefs
	// in maps a referenced UID to the UIDs of the resources naming it.
	in map[string]map[string]struct{}
}

type outRefs struct {
	gen  int64
	uids []string
}

func (x *refIndex) init() {
	if x.out == nil {
		x.out = map[string]outRefs{}
		x.in = map[string]map[string]struct{}{}
	}
}

// put records the references (refs, decoded from its spec) of uid at
// generation gen, replacing those indexed in one step; it changes nothing
// when a later generation of uid is indexed.
func (x *refIndex) put(uid string, gen int64, refs []Reference) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.init()
	if o, ok := x.out[uid]; ok && o.gen > gen {
		return
	}
	x.dropLocked(uid)
	uids := make([]string, 0, len(refs))
	for _, rf := range refs {
		uids = append(uids, rf.UID)
		m := x.in[rf.UID]
		if m == nil {
			m = map[string]struct{}{}
			x.in[rf.UID] = m
		}
		m[uid] = struct{}{}
	}
	x.out[uid] = outRefs{gen: gen, uids: uids}
}

// has reports whether uid is indexed at generation gen or a later one.
func (x *refIndex) has(uid string, gen int64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	o, ok := x.out[uid]
	return ok && o.gen >= gen
}

func (x *refIndex) drop(uid string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.init()
	x.dropLocked(uid)
}

func (x *refIndex) dropLocked(uid string) {
	o, ok := x.out[uid]
	if !ok {
		return
	}
	for _, r := range o.uids {
		if m := x.in[r]; m != nil {
			delete(m, uid)
			if len(m) == 0 {
				delete(x.in, r)
			}
		}
	}
	delete(x.out, uid)
}

// referrers lists the UIDs of the resources naming uid.
func (x *refIndex) referrers(uid string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]string, 0, len(x.in[uid]))
	for r := range x.in[uid] {
		out = append(out, r)
	}
	return out
}

// index records r's references unless they are indexed for its generation
// (or a later one) already.
func (c *Controller) index(r store.Resource) {
	if c.refs.has(r.UID, r.Generation) {
		return
	}
	refs, err := c.refsOf(r)
	if err != nil {
		c.log.Warn("indexing a resource's references failed", "resource", r.UID, "err", err)
	}
	c.refs.put(r.UID, r.Generation, refs)
}

// indexApplied keeps the index in step with mutations just applied.
// The records written are marked for the observer's next changed-only
// pass (with what observes them).
func (c *Controller) indexApplied(muts []store.Mutation) {
	for _, m := range muts {
		switch m := m.(type) {
		case store.PutResource:
			c.index(m.Resource)
			c.obs.mark(m.Resource.UID)
		case store.DeleteResource:
			c.refs.drop(m.UID)
			c.obs.mark(m.UID)
		}
	}
}

// reindex indexes uid as its stored record says (after a write that was
// reserved and failed, or one another host made). It may run while an
// admission of uid's space reads the index: the entry is replaced in one
// step, dropped only when the record is gone, and kept as it is when the
// record cannot be read (the next full observation pass indexes the
// record as stored).
func (c *Controller) reindex(ctx context.Context, uid string) {
	r, err := c.st.Resource(ctx, uid)
	switch {
	case isNotFound(err):
		c.refs.drop(uid)
	case err != nil:
		c.log.Warn("re-reading a resource's references failed; its index entry stays as it was", "resource", uid, "err", err)
		return
	default:
		c.index(r)
	}
	c.obs.mark(uid)
}

// indexAll indexes every stored resource (at start).
func (c *Controller) indexAll(ctx context.Context) error {
	all, err := c.listResources(ctx, "", "")
	if err != nil {
		return err
	}
	for _, r := range all {
		c.index(r)
	}
	return nil
}

// referencedBy lists the resources of space whose stored specs reference
// uid, with those references.
func (c *Controller) referencedBy(ctx context.Context, space, uid string) ([]Referrer, error) {
	var out []Referrer
	for _, ruid := range c.refs.referrers(uid) {
		r, err := c.readRecord(ctx, ruid)
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return nil, err
		}
		if r.Space != space {
			continue
		}
		refs, err := c.refsOf(r)
		if err != nil {
			continue
		}
		var hit []Reference
		for _, rf := range refs {
			if rf.UID == uid {
				hit = append(hit, rf)
			}
		}
		if len(hit) > 0 {
			out = append(out, Referrer{Resource: r, Refs: hit})
		}
	}
	return out, nil
}
