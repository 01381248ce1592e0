package server

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// observeAll refreshes observed for every resource of every space.
func (s *Server) observeAll(ctx context.Context) {
	all, err := s.st.Resources(ctx, "", "")
	if err != nil {
		return
	}
	bySpace := map[string][]store.Resource{}
	for _, r := range all {
		bySpace[r.Space] = append(bySpace[r.Space], r)
	}
	for _, list := range bySpace {
		s.observeList(ctx, list)
	}
}

// observeAfter refreshes the space of a finished Operation: its resource
// and whatever observes it (a consumer observes its queue and worker).
func (s *Server) observeAfter(ctx context.Context, op store.Operation, _ intent) {
	list, err := s.st.Resources(ctx, op.Space, "")
	if err != nil {
		return
	}
	s.observeList(ctx, list)
}

// observeList computes observations outside the lock (the engine may be
// slow), then writes those that changed in one Apply. A value the host
// cannot confirm keeps the last observation.
func (s *Server) observeList(ctx context.Context, list []store.Resource) {
	byUID := make(map[string]store.Resource, len(list))
	for _, r := range list {
		byUID[r.UID] = r
	}
	obs := map[string]json.RawMessage{}
	for _, r := range list {
		if o, ok := s.observation(ctx, r, byUID); ok {
			obs[r.UID] = o
		}
	}
	if len(obs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var muts []store.Mutation
	for uid, o := range obs {
		cur, err := s.st.Resource(ctx, uid)
		if err != nil || sameJSON(cur.Observed, o) {
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

func (s *Server) observation(ctx context.Context, r store.Resource, byUID map[string]store.Resource) (json.RawMessage, bool) {
	switch r.FormURL {
	case schemas.FormAtLeastOnceQueue:
		n, err := s.eng.QueueStats(ctx, r.UID)
		var o api.AtLeastOnceQueueObserved
		switch {
		case err == nil:
			t := true
			o.QueueExists, o.MessageCount = &t, &n
		case errors.Is(err, delivery.ErrUnknownQueue):
			f := false
			o.QueueExists = &f
		default:
			return nil, false
		}
		b, _ := json.Marshal(o)
		return b, true
	case schemas.FormQueueConsumer:
		sp, err := decodeSpec[api.QueueConsumerSpec](r)
		if err != nil {
			return nil, false
		}
		q, qok := byUID[sp.Queue.ResourceUid]
		w, wok := byUID[sp.Worker.ResourceUid]
		qe, we := usable(q, qok, schemas.FormAtLeastOnceQueue), usable(w, wok, schemas.FormModuleWorker)
		o := api.QueueConsumerObserved{QueueExists: &qe, WorkerExists: &we}
		if ar, ok := s.eng.(AttachedReporter); ok {
			if att, err := ar.ConsumerAttached(ctx, r.UID); err == nil {
				o.ConsumerAttached = &att
			}
		} else {
			att := s.isAttached(r.UID)
			o.ConsumerAttached = &att
		}
		b, _ := json.Marshal(o)
		return b, true
	}
	return nil, false
}
