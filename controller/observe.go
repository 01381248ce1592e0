package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// resourceViewer is optionally implemented by a Store that can list
// resources without copying them: the records share their byte slices with
// the store, which never changes them in place, and the caller must not
// change them either. The list is in no particular order.
type resourceViewer interface {
	ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error)
}

// observer holds what observation may reuse between passes. Its mutex
// serialises observation passes, so that an Operation's observation and the
// dependency index it reads agree with the store (lock order: observer.mu,
// then a space's lock).
type observer struct {
	mu sync.Mutex
	// epoch counts full passes; entries a full pass did not touch are gone.
	epoch uint64
	// reads holds, per observed resource, the resources its last
	// observation read (a consumer reads its queue and worker).
	reads map[string]readSet
	// deps maps a resource UID to the resources whose observation read it.
	// It is complete once indexed is set.
	deps    map[string]map[string]struct{}
	indexed bool
	// same holds, per resource, a stored observation found equal in value
	// to the one computed while its bytes differ (written by another
	// encoder), so that it is neither rewritten nor compared value by value
	// again.
	same map[string]sameObs
	// gone, when set, is told of every resource the observer forgets.
	gone func(uid string)

	// dirty holds the resources whose observation may have changed since
	// they were last observed: their record was written (and, through
	// deps, what observes them), their last observation failed or could
	// not be recorded. dmu is a leaf lock, so that marking never waits for
	// a pass.
	dmu   sync.Mutex
	dirty map[string]struct{}
}

// mark queues uids for the next changed-only pass.
func (o *observer) mark(uids ...string) {
	o.dmu.Lock()
	if o.dirty == nil {
		o.dirty = map[string]struct{}{}
	}
	for _, u := range uids {
		o.dirty[u] = struct{}{}
	}
	o.dmu.Unlock()
}

// takeDirty returns the marked resources and starts a new set.
func (o *observer) takeDirty() map[string]struct{} {
	o.dmu.Lock()
	d := o.dirty
	o.dirty = nil
	o.dmu.Unlock()
	return d
}

type readSet struct {
	uids  []string
	epoch uint64
}

type sameObs struct{ stored, doc json.RawMessage }

func (o *observer) init() {
	if o.reads == nil {
		o.reads = map[string]readSet{}
		o.deps = map[string]map[string]struct{}{}
		o.same = map[string]sameObs{}
	}
}

// setReads records what uid's observation read, keeping deps in step.
func (o *observer) setReads(uid string, uids []string) {
	old, ok := o.reads[uid]
	if ok && uids != nil && slices.Equal(old.uids, uids) {
		// The common case of a full pass: the same reads as last time.
		o.reads[uid] = readSet{uids: old.uids, epoch: o.epoch}
		return
	}
	if ok {
		for _, r := range old.uids {
			if m := o.deps[r]; m != nil {
				delete(m, uid)
				if len(m) == 0 {
					delete(o.deps, r)
				}
			}
		}
	}
	for _, r := range uids {
		m := o.deps[r]
		if m == nil {
			m = map[string]struct{}{}
			o.deps[r] = m
		}
		m[uid] = struct{}{}
	}
	o.reads[uid] = readSet{uids: uids, epoch: o.epoch}
}

func (o *observer) forget(uid string) {
	o.setReads(uid, nil)
	delete(o.reads, uid)
	delete(o.same, uid)
	if o.gone != nil {
		o.gone(uid)
	}
}

// unchanged reports whether stored, r's recorded observation, holds the
// value of doc, its observation now.
func (o *observer) unchanged(uid string, stored, doc json.RawMessage) bool {
	if bytes.Equal(stored, doc) {
		return true
	}
	if s, ok := o.same[uid]; ok && bytes.Equal(s.stored, stored) && bytes.Equal(s.doc, doc) {
		return true
	}
	if !sameJSON(stored, doc) {
		return false
	}
	o.same[uid] = sameObs{stored: stored, doc: doc}
	return true
}

// prune drops the entries of resources the last full pass did not see.
func (o *observer) prune() {
	for uid, rs := range o.reads {
		if rs.epoch != o.epoch {
			o.forget(uid)
		}
	}
}

func (c *Controller) listResources(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	if v, ok := c.st.(resourceViewer); ok {
		return v.ResourcesView(ctx, space, formURL)
	}
	return c.st.Resources(ctx, space, formURL)
}

// observe computes r's observation with get, recording what it read.
// The caller holds c.obs.mu.
func (c *Controller) observe(ctx context.Context, r store.Resource, get Lookup) (json.RawMessage, bool) {
	f, ok := c.forms.Form(r.FormURL)
	if !ok {
		return nil, false
	}
	if n, ok := f.(Unobserved); ok && n.Unobserved() {
		return nil, false
	}
	if p := c.opts.ObservationPaused; p != nil && p(r.Space, r.UID) {
		c.obs.mark(r.UID) // observed once the pause ends
		return nil, false
	}
	var read []string
	doc, ok := f.Observe(ctx, c.env, r, func(uid string) (store.Resource, bool) {
		read = append(read, uid)
		return get(uid)
	})
	c.obs.setReads(r.UID, read)
	if !ok {
		// The host could not confirm it now: the record keeps its last
		// observation, and the next pass tries again.
		c.obs.mark(r.UID)
	}
	return doc, ok
}

// ObserveAll refreshes observed for every resource of every space: the
// first pass at start, then a resynchronisation every fullObserveEvery
// periods (ObserveChanged does the periodic work).
func (c *Controller) ObserveAll(ctx context.Context) {
	o := &c.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	c.observeAll(ctx)
}

// observeAll is ObserveAll with c.obs.mu held.
func (c *Controller) observeAll(ctx context.Context) {
	o := &c.obs
	// What changed until now is in this pass: taken before the records
	// are read, so that a change after the read stays marked.
	queues := c.env.Engine.ChangedQueues()
	marked := o.takeDirty()
	all, err := c.listResources(ctx, "", "")
	if err != nil {
		o.mark(queues...)
		for u := range marked {
			o.mark(u)
		}
		return
	}
	o.epoch++
	// One map for the pass: a lookup answers only within the observed
	// resource's space (UIDs are unique host-wide).
	byUID := make(map[string]int, len(all))
	for i, r := range all {
		byUID[r.UID] = i
	}
	obs := map[string]json.RawMessage{}
	spaces := map[string]string{}
	for _, r := range all {
		c.index(r)
		get := func(uid string) (store.Resource, bool) {
			i, ok := byUID[uid]
			if !ok || all[i].Space != r.Space {
				return store.Resource{}, false
			}
			return all[i], true
		}
		if d, ok := c.observe(ctx, r, get); ok && !o.unchanged(r.UID, r.Observed, d) {
			obs[r.UID] = d
			spaces[r.UID] = r.Space
		}
	}
	o.prune()
	o.indexed = true
	c.record(ctx, obs, spaces)
}

// ObserveChanged refreshes observed for the resources whose inputs changed
// since the last pass, and only those: the queues whose message count or
// existence the engine reports changed (Engine.ChangedQueues), the
// resources the controller marked (a record written by an Operation, an
// observation that failed or was not recorded) and what observes a marked
// record (a consumer observes its queue and worker). The observer runs it
// every ObserveInterval, so an idle host does no work per resource; every
// other value an observation holds comes from a record, and every record
// write marks it. Before the first full pass it makes one.
func (c *Controller) ObserveChanged(ctx context.Context) {
	o := &c.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if !o.indexed {
		c.observeAll(ctx)
		return
	}
	queues := c.env.Engine.ChangedQueues()
	marked := o.takeDirty()
	if len(queues) == 0 && len(marked) == 0 {
		return
	}
	set := make(map[string]struct{}, len(queues)+len(marked))
	uids := make([]string, 0, len(queues)+len(marked))
	add := func(u string) {
		if _, ok := set[u]; !ok {
			set[u] = struct{}{}
			uids = append(uids, u)
		}
	}
	// A message count is read by the queue's own observation only.
	for _, u := range queues {
		add(u)
	}
	for u := range marked {
		add(u)
		for d := range o.deps[u] {
			add(d)
		}
	}
	c.observeUIDs(ctx, uids)
}

// fullObserveEvery: ObserveChanged leaves nothing behind that the Forms'
// rules need, but once every so many periods the observer still makes a
// full pass, as a resynchronisation against whatever changed the store
// or the engine without going through this controller. At the default
// period that is one full pass every ten minutes.
const fullObserveEvery = 60

// observeAfter refreshes what a finished Operation may have changed: its
// resource and whatever observes it (a consumer observes its queue and
// worker).
func (c *Controller) observeAfter(ctx context.Context, op store.Operation) {
	o := &c.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if !o.indexed {
		// Before the first full pass the index is not complete: build it
		// from the references (what an observation reads is what the
		// spec references).
		all, err := c.listResources(ctx, "", "")
		if err != nil {
			c.observeSpace(ctx, op.Space)
			return
		}
		for _, r := range all {
			if _, seen := o.reads[r.UID]; seen {
				continue
			}
			refs, _ := c.refsOf(r)
			uids := make([]string, 0, len(refs))
			for _, rf := range refs {
				uids = append(uids, rf.UID)
			}
			o.setReads(r.UID, uids)
		}
		o.indexed = true
	}
	uids := []string{op.ResourceUID}
	for d := range o.deps[op.ResourceUID] {
		uids = append(uids, d)
	}
	c.observeUIDs(ctx, uids)
}

// observeUIDs observes the resources named, reading their records from the
// store, and forgets those that are gone. A lookup answers only within the
// observed resource's space. c.obs.mu held.
func (c *Controller) observeUIDs(ctx context.Context, uids []string) {
	o := &c.obs
	got := make(map[string]store.Resource, len(uids))
	read := func(uid string) (store.Resource, error) {
		if r, ok := got[uid]; ok {
			return r, nil
		}
		r, err := c.st.Resource(ctx, uid)
		if err == nil {
			got[uid] = r
		}
		return r, err
	}
	obs := map[string]json.RawMessage{}
	spaces := map[string]string{}
	for _, uid := range uids {
		r, err := read(uid)
		if err != nil {
			if isNotFound(err) {
				o.forget(uid)
			} else {
				o.mark(uid) // the store did not answer: next pass
			}
			continue
		}
		get := func(u string) (store.Resource, bool) {
			x, err := read(u)
			if err != nil || x.Space != r.Space {
				return store.Resource{}, false
			}
			return x, true
		}
		if d, ok := c.observe(ctx, r, get); ok && !o.unchanged(r.UID, r.Observed, d) {
			obs[r.UID] = d
			spaces[r.UID] = r.Space
		}
	}
	c.record(ctx, obs, spaces)
}

// observeSpace observes every resource of a space.
func (c *Controller) observeSpace(ctx context.Context, spaceName string) {
	o := &c.obs
	list, err := c.listResources(ctx, spaceName, "")
	if err != nil {
		return
	}
	space := make(map[string]store.Resource, len(list))
	for _, r := range list {
		space[r.UID] = r
	}
	get := func(uid string) (store.Resource, bool) { x, ok := space[uid]; return x, ok }
	obs := map[string]json.RawMessage{}
	spaces := map[string]string{}
	for _, r := range list {
		if d, ok := c.observe(ctx, r, get); ok && !o.unchanged(r.UID, r.Observed, d) {
			obs[r.UID] = d
			spaces[r.UID] = r.Space
		}
	}
	c.record(ctx, obs, spaces)
}

// record writes the observations that differ from what the records hold
// now, one Apply per space, holding the locks of the records it rewrites.
// Observations were computed without them (the engine may be slow); a
// value the host cannot confirm was left out and keeps the last
// observation.
func (c *Controller) record(ctx context.Context, obs map[string]json.RawMessage, spaces map[string]string) {
	bySpace := map[string][]string{}
	for uid := range obs {
		bySpace[spaces[uid]] = append(bySpace[spaces[uid]], uid)
	}
	for space, uids := range bySpace {
		slices.Sort(uids) // one lock order for every pass
		unlocks := make([]func(), 0, len(uids))
		for _, uid := range uids {
			unlocks = append(unlocks, c.resources.lock(uid))
		}
		var muts []store.Mutation
		for _, uid := range uids {
			o := obs[uid]
			cur, err := c.st.Resource(ctx, uid)
			if err != nil && !isNotFound(err) {
				c.obs.mark(uid)
			}
			if err != nil || bytes.Equal(cur.Observed, o) || sameJSON(cur.Observed, o) {
				continue
			}
			cur.Observed = o
			muts = append(muts, store.PutResource{Resource: cur})
		}
		if len(muts) > 0 {
			if err := c.st.Apply(ctx, muts...); err != nil {
				c.log.Warn("recording observations failed", "space", space, "err", err)
				c.obs.mark(uids...) // the next pass tries again
			}
		}
		for _, u := range unlocks {
			u()
		}
	}
}
