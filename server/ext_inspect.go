package server

import (
	"context"
	"github.com/takoform/queuehost/runtime/store"
	"strings"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
)

func (s *Server) GetQueueStats(ctx context.Context, req api.GetQueueStatsRequestObject) (api.GetQueueStatsResponseObject, error) {
	in, err := s.ctl.InspectQueue(ctx, principal(ctx), req.Space, req.Uid)
	if err != nil {
		return nil, err
	}
	out := api.GetQueueStats200JSONResponse{
		QueueUid: req.Uid, Messages: in.Messages, Bytes: in.Bytes, OldestAgeSeconds: in.OldestAge.Seconds(),
		BatchesInFlight: in.Batches, Active: !in.Paused,
	}
	out.ByState.Available = in.ByState["available"]
	out.ByState.Delayed = in.ByState["delayed"]
	out.ByState.RetryWaiting = in.ByState["retry_waiting"]
	out.ByState.InFlight = in.ByState["in_flight"]
	out.ByState.Removing = in.ByState["removing"]
	if in.InFlight != nil {
		bs := make([]api.QueueBatchInfo, len(in.InFlight))
		for i, b := range in.InFlight {
			bs[i] = api.QueueBatchInfo{Id: b.ID, ConsumerUid: b.ConsumerUID, Messages: b.Messages, FormTimeMillis: b.Formed, State: api.QueueBatchInfoState(b.State)}
		}
		out.Batches = &bs
	}
	if c := in.SinceStart; c != nil {
		out.SinceStart = &struct {
			Accepted     int64 `json:"accepted"`
			Acknowledged int64 `json:"acknowledged"`
			DeadLettered int64 `json:"deadLettered"`
			Delivered    int64 `json:"delivered"`
			Discarded    int64 `json:"discarded"`
			Expired      int64 `json:"expired"`
			Retried      int64 `json:"retried"`
		}{Accepted: int64(c.Accepted), Acknowledged: int64(c.Acknowledged), DeadLettered: int64(c.DeadLettered),
			Delivered: int64(c.Delivered), Discarded: int64(c.Discarded), Expired: int64(c.Expired), Retried: int64(c.Retried)}
	}
	return out, nil
}

func (s *Server) ListQueueMessages(ctx context.Context, req api.ListQueueMessagesRequestObject) (api.ListQueueMessagesResponseObject, error) {
	limit := controller.DefaultMessagePage
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
		if limit < 1 || limit > controller.MaxMessagePage {
			return nil, invalidRequest("limit must be an integer from 1 to %d", controller.MaxMessagePage)
		}
	}
	token := ""
	if req.Params.PageToken != nil {
		token = *req.Params.PageToken
	}
	page, next, err := s.ctl.QueueMessages(ctx, principal(ctx), req.Space, req.Uid, token, limit)
	if err != nil {
		return nil, err
	}
	out := api.ListQueueMessages200JSONResponse{Items: make([]api.QueueMessageInfo, len(page))}
	for i, m := range page {
		out.Items[i] = api.QueueMessageInfo{
			Id: m.ID, AcceptTimeMillis: m.AcceptedAt, VisibleAtMillis: m.VisibleAt, Attempts: m.Attempts, Size: m.Size,
			State: api.QueueMessageInfoState(m.State), BodyPreview: m.Preview, BodyTruncated: m.Truncated,
			DeadLetter: deadLetterView(m.DeadLetter), AttemptHistory: attemptViews(m.History), DeadLetterGroup: optString(m.Group),
		}
		if id := traceID(m.TraceParent); id != "" {
			out.Items[i].TraceId = &id
			if s.traceURL != "" {
				u := strings.ReplaceAll(s.traceURL, "{traceId}", id)
				out.Items[i].TraceUrl = &u
			}
		}
	}
	if next != "" {
		out.NextPageToken = &next
	}
	return out, nil
}

// deadLetterView is a listed message's dead-letter metadata
// (spec/peers.md §Dead-letter metadata), nil when it has none.
func deadLetterView(dl *store.DeadLetter) *api.QueueDeadLetter {
	if dl == nil {
		return nil
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	return &api.QueueDeadLetter{
		SourceQueueUid: dl.SourceQueue, SourceQueueName: opt(dl.SourceQueueName),
		ConsumerUid: opt(dl.Consumer), ConsumerName: opt(dl.ConsumerName),
		Reason: api.QueueDeadLetterReason(dl.Reason), Attempts: dl.Attempts,
		OriginalMessageId: opt(dl.OriginalID), DeadLetteredAtMillis: dl.DeadLetteredAt,
	}
}

// GetQueueHistory answers a queue's figures over the last hour as the host
// sampled them (console/README.md), for the queue's viewers.
func (s *Server) GetQueueHistory(ctx context.Context, req api.GetQueueHistoryRequestObject) (api.GetQueueHistoryResponseObject, error) {
	ps, err := s.ctl.QueueHistory(ctx, principal(ctx), req.Space, req.Uid)
	if err != nil {
		return nil, err
	}
	out := api.GetQueueHistory200JSONResponse{QueueUid: req.Uid, IntervalSeconds: float32(controller.HistoryInterval.Seconds()),
		Points: make([]api.QueueHistoryPoint, len(ps))}
	for i, p := range ps {
		out.Points[i] = api.QueueHistoryPoint{TimeMillis: p.TimeMillis, Messages: p.Messages, Bytes: p.Bytes, InFlightBatches: p.InFlightBatches,
			Accepted: int64(p.Accepted), Delivered: int64(p.Delivered), Acknowledged: int64(p.Acknowledged), Retried: int64(p.Retried), DeadLettered: int64(p.DeadLettered)}
	}
	return out, nil
}

// traceID is the trace ID of a W3C traceparent ("00-TRACEID-SPANID-FLAGS"),
// "" when tp is empty or not one (an all-zero ID is invalid).
func traceID(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	for _, c := range parts[1] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return parts[1]
}
