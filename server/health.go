package server

import (
	"context"
	"net/http"

	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
)

// GetHealth is the liveness probe: it answers while the process serves
// HTTP and reads nothing, so a slow store never makes a live host look
// dead.
func (s *Server) GetHealth(context.Context, api.GetHealthRequestObject) (api.GetHealthResponseObject, error) {
	return api.GetHealth200JSONResponse{Status: api.Ok}, nil
}

// GetReadiness is the readiness probe: 503 backend_unavailable, saying
// what the host waits for, until Options.Ready reports the host started,
// and again once it shuts down.
func (s *Server) GetReadiness(context.Context, api.GetReadinessRequestObject) (api.GetReadinessResponseObject, error) {
	if s.ready != nil {
		if err := s.ready(); err != nil {
			return nil, problem.New(http.StatusServiceUnavailable, problem.CodeBackendUnavailable, "not ready: %v", err)
		}
	}
	return api.GetReadiness200JSONResponse{Status: api.Ok}, nil
}
