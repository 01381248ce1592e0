package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
)

// The purge and redrive extensions (spec/peers.md §Purge, §Redrive).

func (s *Server) PurgeQueue(ctx context.Context, req api.PurgeQueueRequestObject) (api.PurgeQueueResponseObject, error) {
	p := principal(ctx)
	path := resourcesPath(req.Space) + "/" + req.Uid + "/purge"
	idem, err := newIdempotency(req.Params.IdempotencyKey, p.ID, req.Space, http.MethodPost, path, nil)
	if err != nil {
		return nil, err
	}
	op, replayed, err := s.ctl.Purge(ctx, controller.QueueOpRequest{Principal: p, Space: req.Space, UID: req.Uid, Idempotency: idem})
	if err != nil {
		return nil, err
	}
	return api.PurgeQueue202JSONResponse{OperationAcceptedJSONResponse: accepted(s.run(ctx, op, replayed), replayed)}, nil
}

func (s *Server) RedriveQueue(ctx context.Context, req api.RedriveQueueRequestObject) (api.RedriveQueueResponseObject, error) {
	ri := info(ctx)
	path := resourcesPath(req.Space) + "/" + req.Uid + "/redrive"
	idem, err := newIdempotency(req.Params.IdempotencyKey, ri.principal.ID, req.Space, http.MethodPost, path, ri.body)
	if err != nil {
		return nil, err
	}
	r := controller.QueueOpRequest{Principal: ri.principal, Space: req.Space, UID: req.Uid, Idempotency: idem}
	if b := req.Body; b != nil {
		if b.TargetQueue != nil {
			r.Target = b.TargetQueue.ResourceUid
		}
		if b.MaxMessagesPerSecond != nil {
			r.Rate = *b.MaxMessagesPerSecond
		}
		if b.Group != nil {
			r.Group = *b.Group
		}
		if b.DryRun != nil {
			r.DryRun = *b.DryRun
		}
	}
	op, replayed, err := s.ctl.Redrive(ctx, r)
	if err != nil {
		return nil, err
	}
	return api.RedriveQueue202JSONResponse{OperationAcceptedJSONResponse: accepted(s.run(ctx, op, replayed), replayed)}, nil
}

func (s *Server) CancelOperation(ctx context.Context, req api.CancelOperationRequestObject) (api.CancelOperationResponseObject, error) {
	op, err := s.ctl.CancelOperation(ctx, principal(ctx), req.Space, req.Id)
	if err != nil {
		return nil, err
	}
	return api.CancelOperation200JSONResponse(toAPIOperation(op)), nil
}

// operationProgress is an Operation's progress (a purge's or a
// redrive's), nil for the Forms' Operations.
func operationProgress(raw json.RawMessage) *api.QueueOperationProgress {
	if len(raw) == 0 {
		return nil
	}
	var p api.QueueOperationProgress
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	return &p
}
