package server

import (
	"context"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
)

// ListWorkerInvocations answers a ModuleWorker's recent queue handler
// invocations (a host extension for the web console), for its viewers.
func (s *Server) ListWorkerInvocations(ctx context.Context, req api.ListWorkerInvocationsRequestObject) (api.ListWorkerInvocationsResponseObject, error) {
	wr, err := s.ctl.Worker(ctx, principal(ctx), req.Space, req.Uid, auth.Read)
	if err != nil {
		return nil, err
	}
	limit := 50
	if req.Params.Limit != nil {
		if limit = *req.Params.Limit; limit < 1 || limit > 50 {
			return nil, invalidRequest("limit must be an integer from 1 to 50")
		}
	}
	items := s.workers.Invocations(wr.UID, limit)
	if items == nil {
		items = []api.Invocation{}
	}
	return api.ListWorkerInvocations200JSONResponse{Items: items}, nil
}
