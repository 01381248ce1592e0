package server

import (
	"context"
	"errors"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
)

// Principals is the live set of principals the admin routes manage
// (*auth.Registry is one).
type Principals interface {
	List() []auth.Principal
	Create(name string, grants []auth.Grant) (auth.Principal, string, error)
	Revoke(idOrName string) (auth.Principal, error)
}

func (s *Server) ListPrincipals(ctx context.Context, _ api.ListPrincipalsRequestObject) (api.ListPrincipalsResponseObject, error) {
	out := api.ListPrincipals200JSONResponse{Items: []api.Principal{}}
	for _, p := range s.principals.List() {
		out.Items = append(out.Items, toAPIPrincipal(p))
	}
	return out, nil
}

func (s *Server) CreatePrincipal(ctx context.Context, req api.CreatePrincipalRequestObject) (api.CreatePrincipalResponseObject, error) {
	var grants []auth.Grant
	for _, g := range req.Body.Grants {
		gr := auth.Grant{Space: g.Space, Role: string(g.Role)}
		if g.Forms != nil {
			gr.Forms = *g.Forms
		}
		if g.Queues != nil {
			gr.Queues = *g.Queues
		}
		grants = append(grants, gr)
	}
	p, tok, err := s.principals.Create(req.Body.Name, grants)
	if err != nil {
		return nil, principalProblem(err)
	}
	s.log.Info("principal created", "principal", p.ID, "name", p.Name, "by", principal(ctx).ID)
	return api.CreatePrincipal201JSONResponse{Principal: toAPIPrincipal(p), Token: tok}, nil
}

func (s *Server) RevokePrincipal(ctx context.Context, req api.RevokePrincipalRequestObject) (api.RevokePrincipalResponseObject, error) {
	p, err := s.principals.Revoke(req.Principal)
	if err != nil {
		return nil, principalProblem(err)
	}
	s.log.Info("principal revoked", "principal", p.ID, "name", p.Name, "by", principal(ctx).ID)
	return api.RevokePrincipal200JSONResponse(toAPIPrincipal(p)), nil
}

func principalProblem(err error) error {
	switch {
	case errors.Is(err, auth.ErrInvalidPrincipal):
		return invalidRequest("%s", err.Error())
	case errors.Is(err, auth.ErrPrincipalExists):
		return problem.Conflict(problem.CodeNameConflict, "%s", err.Error())
	case errors.Is(err, auth.ErrNoPrincipal):
		return problem.NotFound("%s", err.Error())
	case errors.Is(err, auth.ErrLastAdmin):
		return problem.Conflict(problem.CodeLastAdmin, "%s: create another principal with an editor grant on \"*\" first", err.Error())
	}
	return problem.Unavailable(err)
}

func toAPIPrincipal(p auth.Principal) api.Principal {
	out := api.Principal{Id: p.ID, Name: p.Name, Grants: []api.Grant{}}
	for _, g := range p.Grants {
		ag := api.Grant{Space: g.Space, Role: api.GrantRole(g.Role)}
		if len(g.Forms) > 0 {
			forms := append([]string(nil), g.Forms...)
			ag.Forms = &forms
		}
		if len(g.Queues) > 0 {
			queues := append([]string(nil), g.Queues...)
			ag.Queues = &queues
		}
		out.Grants = append(out.Grants, ag)
	}
	return out
}
