package server

import (
	"context"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
)

// The queue extensions of spec/peers.md: HTTP only, the meaning is the
// controller's (controller/ext_delivery.go).

func (s *Server) GetQueueDelivery(ctx context.Context, req api.GetQueueDeliveryRequestObject) (api.GetQueueDeliveryResponseObject, error) {
	st, err := s.ctl.Delivery(ctx, principal(ctx), req.Space, req.Uid)
	if err != nil {
		return nil, err
	}
	return api.GetQueueDelivery200JSONResponse(toAPIDelivery(st)), nil
}

func (s *Server) SetQueueDelivery(ctx context.Context, req api.SetQueueDeliveryRequestObject) (api.SetQueueDeliveryResponseObject, error) {
	if req.Body == nil {
		return nil, invalidRequest("a body {\"active\": true|false} is required")
	}
	st, err := s.ctl.SetDelivery(ctx, principal(ctx), req.Space, req.Uid, req.Body.Active)
	if err != nil {
		return nil, err
	}
	return api.SetQueueDelivery200JSONResponse(toAPIDelivery(st)), nil
}

func toAPIDelivery(st controller.DeliveryState) api.QueueDelivery {
	return api.QueueDelivery{QueueUid: st.QueueUID, Active: st.Active}
}
