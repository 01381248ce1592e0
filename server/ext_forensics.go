package server

import (
	"context"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/forensics"
	"github.com/takoform/queuehost/runtime/store"
)

// The forensics extensions (spec/peers.md §Attempt history, §Dead-letter
// groups).

func (s *Server) ListDeadLetterGroups(ctx context.Context, req api.ListDeadLetterGroupsRequestObject) (api.ListDeadLetterGroupsResponseObject, error) {
	buckets, bucketSeconds := controller.DefaultGroupBuckets, controller.DefaultBucketSeconds
	if req.Params.Buckets != nil {
		buckets = *req.Params.Buckets
	}
	if req.Params.BucketSeconds != nil {
		bucketSeconds = *req.Params.BucketSeconds
	}
	g, err := s.ctl.GroupDeadLetters(ctx, principal(ctx), req.Space, req.Uid, buckets, bucketSeconds)
	if err != nil {
		return nil, err
	}
	out := api.ListDeadLetterGroups200JSONResponse{Groups: make([]api.QueueDeadLetterGroup, len(g.Groups)),
		DeadLetters: g.DeadLetters, BucketMillis: g.BucketMillis, EndMillis: g.EndMillis}
	for i, gr := range g.Groups {
		out.Groups[i] = groupView(gr)
	}
	return out, nil
}

func groupView(g forensics.Group) api.QueueDeadLetterGroup {
	v := api.QueueDeadLetterGroup{Fingerprint: g.Fingerprint, Title: g.Title, Outcome: g.Cause.Outcome, Count: g.Count,
		FirstSeenMillis: g.FirstSeen, LastSeenMillis: g.LastSeen, ExampleMessageId: g.Example,
		ErrorName: optString(g.Cause.ErrorName), Message: optString(g.Cause.Message)}
	if len(g.Cause.Frames) > 0 {
		f := g.Cause.Frames
		v.Frames = &f
	}
	if g.ExampleError != nil {
		a := attemptView(*g.ExampleError)
		v.ExampleAttempt = &a
	}
	if g.Histogram != nil {
		h := g.Histogram
		v.Histogram = &h
	}
	return v
}

// attemptViews is a listed message's attempt history, nil when it has
// none.
func attemptViews(h []store.Attempt) *[]api.QueueAttempt {
	if len(h) == 0 {
		return nil
	}
	out := make([]api.QueueAttempt, len(h))
	for i, a := range h {
		out[i] = attemptView(a)
	}
	return &out
}

func attemptView(a store.Attempt) api.QueueAttempt {
	d := a.DelaySeconds
	return api.QueueAttempt{Attempt: a.Attempt, StartedAtMillis: a.StartedAt, DurationMillis: a.DurationMs,
		Host: optString(a.Host), WorkerVersionUid: optString(a.WorkerVersion), Outcome: api.QueueAttemptOutcome(a.Outcome),
		DelaySeconds: &d, ErrorName: optString(a.ErrorName), ErrorMessage: optString(a.ErrorMessage), ErrorStack: optString(a.ErrorStack)}
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
