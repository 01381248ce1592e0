package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
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
// then Server.mu).
type observer struct {
	mu sync.Mutex
	// epoch counts full passes; entries a full pass did not touch are gone.
	epoch uint64
	// refs holds each consumer's decoded references, per generation.
	refs map[string]consumerRefs
	// deps maps a queue or worker UID to the consumers that reference it.
	// It is complete once indexed is set: a consumer stored later is added
	// by the observation after its own Operation.
	deps    map[string]map[string]struct{}
	indexed bool
	// last holds the bytes of each resource's last computed observation.
	last map[string]lastObs
}

type consumerRefs struct {
	gen           int64
	queue, worker string
	epoch         uint64
}

// obsKey is everything an observation's document is made of.
type obsKey struct {
	form           uint8
	exists, qe, we bool
	attKnown, att  bool
	count          int
}

type lastObs struct {
	key obsKey
	doc json.RawMessage
	// same is a stored observation found equal in value to doc while its
	// bytes differ (written by another encoder), so that it is neither
	// rewritten nor compared value by value again.
	same  json.RawMessage
	epoch uint64
}

func (o *observer) init() {
	if o.refs == nil {
		o.refs = map[string]consumerRefs{}
		o.deps = map[string]map[string]struct{}{}
		o.last = map[string]lastObs{}
	}
}

// consumer returns r's references, decoding its spec only when its
// generation is new to the cache, and keeps deps in step.
func (o *observer) consumer(r store.Resource) (consumerRefs, bool) {
	c, ok := o.refs[r.UID]
	if !ok || c.gen != r.Generation {
		sp, err := decodeSpec[api.QueueConsumerSpec](r)
		if err != nil {
			return consumerRefs{}, false
		}
		if ok {
			o.unlink(r.UID, c)
		}
		c = consumerRefs{gen: r.Generation, queue: sp.Queue.ResourceUid, worker: sp.Worker.ResourceUid}
		o.link(r.UID, c)
	}
	c.epoch = o.epoch
	o.refs[r.UID] = c
	return c, true
}

func (o *observer) link(uid string, c consumerRefs) {
	for _, ref := range [2]string{c.queue, c.worker} {
		m := o.deps[ref]
		if m == nil {
			m = map[string]struct{}{}
			o.deps[ref] = m
		}
		m[uid] = struct{}{}
	}
}

func (o *observer) unlink(uid string, c consumerRefs) {
	for _, ref := range [2]string{c.queue, c.worker} {
		if m := o.deps[ref]; m != nil {
			delete(m, uid)
			if len(m) == 0 {
				delete(o.deps, ref)
			}
		}
	}
}

func (o *observer) forget(uid string) {
	if c, ok := o.refs[uid]; ok {
		o.unlink(uid, c)
		delete(o.refs, uid)
	}
	delete(o.last, uid)
}

// doc returns the document of k, reusing the last bytes made for uid.
func (o *observer) doc(uid string, k obsKey, marshal func() json.RawMessage) json.RawMessage {
	l, ok := o.last[uid]
	if !ok || l.key != k {
		l = lastObs{key: k, doc: marshal()}
	}
	l.epoch = o.epoch
	o.last[uid] = l
	return l.doc
}

// unchanged reports whether stored, r's recorded observation, holds the
// value of doc, its observation now.
func (o *observer) unchanged(uid string, stored, doc json.RawMessage) bool {
	if bytes.Equal(stored, doc) {
		return true
	}
	l, ok := o.last[uid]
	if !ok || !bytes.Equal(l.doc, doc) {
		return sameJSON(stored, doc)
	}
	if l.same != nil && bytes.Equal(stored, l.same) {
		return true
	}
	if !sameJSON(stored, doc) {
		return false
	}
	l.same = stored
	o.last[uid] = l
	return true
}

// prune drops the entries of resources the last full pass did not see.
func (o *observer) prune() {
	for uid, c := range o.refs {
		if c.epoch != o.epoch {
			o.unlink(uid, c)
			delete(o.refs, uid)
		}
	}
	for uid, l := range o.last {
		if l.epoch != o.epoch {
			delete(o.last, uid)
		}
	}
}

func (s *Server) listResources(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	if v, ok := s.st.(resourceViewer); ok {
		return v.ResourcesView(ctx, space, formURL)
	}
	return s.st.Resources(ctx, space, formURL)
}

// observeAll refreshes observed for every resource of every space.
func (s *Server) observeAll(ctx context.Context) {
	o := &s.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	all, err := s.listResources(ctx, "", "")
	if err != nil {
		return
	}
	o.epoch++
	bySpace := map[string]map[string]store.Resource{}
	for _, r := range all {
		m := bySpace[r.Space]
		if m == nil {
			m = map[string]store.Resource{}
			bySpace[r.Space] = m
		}
		m[r.UID] = r
	}
	obs := make(map[string]json.RawMessage, len(all))
	for _, r := range all {
		if d, ok := s.observation(ctx, r, bySpace[r.Space]); ok && !o.unchanged(r.UID, r.Observed, d) {
			obs[r.UID] = d
		}
	}
	o.prune()
	o.indexed = true
	s.record(ctx, obs)
}

// observeAfter refreshes what a finished Operation may have changed: its
// resource and whatever observes it (a consumer observes its queue and
// worker).
func (s *Server) observeAfter(ctx context.Context, op store.Operation, _ intent) {
	o := &s.obs
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	if !o.indexed {
		cs, err := s.listResources(ctx, "", schemas.FormQueueConsumer)
		if err != nil {
			s.observeSpace(ctx, op.Space)
			return
		}
		for _, r := range cs {
			o.consumer(r)
		}
		o.indexed = true
	}
	// The resource and its dependents, with the resources their
	// observations read; an absent one reads as absent.
	uids := []string{op.ResourceUID}
	for c := range o.deps[op.ResourceUID] {
		uids = append(uids, c)
	}
	byUID := map[string]store.Resource{}
	lookup := func(uid string) (store.Resource, bool) {
		if r, ok := byUID[uid]; ok {
			return r, true
		}
		r, err := s.st.Resource(ctx, uid)
		if err != nil {
			return store.Resource{}, false
		}
		byUID[uid] = r
		return r, true
	}
	var list []store.Resource
	for _, uid := range uids {
		r, ok := lookup(uid)
		if !ok {
			o.forget(uid)
			continue
		}
		if r.Space != op.Space {
			continue
		}
		list = append(list, r)
		if r.FormURL == schemas.FormQueueConsumer {
			if c, ok := o.consumer(r); ok {
				lookup(c.queue)
				lookup(c.worker)
			}
		}
	}
	space := map[string]store.Resource{}
	for uid, r := range byUID {
		if r.Space == op.Space {
			space[uid] = r
		}
	}
	obs := map[string]json.RawMessage{}
	for _, r := range list {
		if d, ok := s.observation(ctx, r, space); ok && !o.unchanged(r.UID, r.Observed, d) {
			obs[r.UID] = d
		}
	}
	s.record(ctx, obs)
}

// observeSpace observes every resource of a space.
func (s *Server) observeSpace(ctx context.Context, spaceName string) {
	o := &s.obs
	list, err := s.listResources(ctx, spaceName, "")
	if err != nil {
		return
	}
	space := make(map[string]store.Resource, len(list))
	for _, r := range list {
		space[r.UID] = r
	}
	obs := map[string]json.RawMessage{}
	for _, r := range list {
		if d, ok := s.observation(ctx, r, space); ok && !o.unchanged(r.UID, r.Observed, d) {
			obs[r.UID] = d
		}
	}
	s.record(ctx, obs)
}

// record writes, in one Apply, the observations that differ from what the
// records hold now. Observations were computed outside Server.mu (the engine
// may be slow); a value the host cannot confirm was left out and keeps the
// last observation.
func (s *Server) record(ctx context.Context, obs map[string]json.RawMessage) {
	if len(obs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var muts []store.Mutation
	for uid, o := range obs {
		cur, err := s.st.Resource(ctx, uid)
		if err != nil || bytes.Equal(cur.Observed, o) || sameJSON(cur.Observed, o) {
			continue
		}
		cur.Observed = o
		muts = append(muts, store.PutResource{Resource: cur})
	}
	if len(muts) == 0 {
		return
	}
	if err := s.st.Apply(ctx, muts...); err != nil {
		s.log.Warn("recording observations failed", "err", err)
	}
}

func usable(r store.Resource, ok bool, form string) bool {
	return ok && r.FormURL == form && r.State != store.StateDeleting
}

// observation computes r's observation; space holds the resources of r's
// space that it may read (a consumer reads its queue and worker). The caller
// holds s.obs.mu.
func (s *Server) observation(ctx context.Context, r store.Resource, space map[string]store.Resource) (json.RawMessage, bool) {
	o := &s.obs
	switch r.FormURL {
	case schemas.FormAtLeastOnceQueue:
		n, err := s.eng.QueueStats(ctx, r.UID)
		k := obsKey{form: 1}
		switch {
		case err == nil:
			k.exists, k.count = true, n
		case errors.Is(err, abi.ErrUnknownQueue):
		default:
			return nil, false
		}
		return o.doc(r.UID, k, func() json.RawMessage {
			ex, n := k.exists, k.count
			v := api.AtLeastOnceQueueObserved{QueueExists: &ex}
			if ex {
				v.MessageCount = &n
			}
			b, _ := json.Marshal(v)
			return b
		}), true
	case schemas.FormQueueConsumer:
		c, ok := o.consumer(r)
		if !ok {
			return nil, false
		}
		q, qok := space[c.queue]
		w, wok := space[c.worker]
		k := obsKey{form: 2, qe: usable(q, qok, schemas.FormAtLeastOnceQueue), we: usable(w, wok, schemas.FormModuleWorker)}
		if ar, ok := s.eng.(AttachedReporter); ok {
			if att, err := ar.ConsumerAttached(ctx, r.UID); err == nil {
				k.attKnown, k.att = true, att
			}
		} else {
			k.attKnown, k.att = true, s.isAttached(r.UID)
		}
		return o.doc(r.UID, k, func() json.RawMessage {
			qe, we, att := k.qe, k.we, k.att
			v := api.QueueConsumerObserved{QueueExists: &qe, WorkerExists: &we}
			if k.attKnown {
				v.ConsumerAttached = &att
			}
			b, _ := json.Marshal(v)
			return b
		}), true
	}
	return nil, false
}
