package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

func (s *Server) GetOpenAPI(ctx context.Context, _ api.GetOpenAPIRequestObject) (api.GetOpenAPIResponseObject, error) {
	return api.GetOpenAPI200JSONResponse(s.openapi), nil
}

func resourcesPath(space string) string { return "/v2/spaces/" + space + "/resources" }

func operationPath(space, id string) string { return "/v2/spaces/" + space + "/operations/" + id }

func accepted(op store.Operation, replayed bool) api.OperationAcceptedJSONResponse {
	out := api.OperationAcceptedJSONResponse{Body: toAPIOperation(op), Headers: api.OperationAcceptedResponseHeaders{Location: operationPath(op.Space, op.ID)}}
	if replayed {
		t := "true"
		out.Headers.IdempotentReplayed = &t
	}
	return out
}

// loadResource finds uid in space: a resource of another space, a deleted
// one and a missing one all read as 404.
func (s *Server) loadResource(ctx context.Context, space, uid string) (store.Resource, error) {
	r, err := s.st.Resource(ctx, uid)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Space != space) {
		return store.Resource{}, notFound("no resource with this UID exists in this space")
	}
	if err != nil {
		return store.Resource{}, unavailable(err)
	}
	return r, nil
}

func compact(raw []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

func rawPI(p *json.RawMessage) []byte {
	if p == nil {
		return nil
	}
	return *p
}

func specProblem(vs []schemas.Violation, err error) error {
	if err != nil {
		if errors.Is(err, schemas.ErrNotJSON) {
			return invalidRequest("the request body is not JSON")
		}
		return err
	}
	if len(vs) > 0 {
		return fromViolations(http.StatusUnprocessableEntity, CodeInvalidSpec, "the spec or privateInputs do not satisfy the Form", vs)
	}
	return nil
}

func (s *Server) CreateResource(ctx context.Context, req api.CreateResourceRequestObject) (api.CreateResourceResponseObject, error) {
	op, replayed, err := s.createResource(ctx, req)
	if err != nil {
		return nil, err
	}
	if !replayed {
		op = s.start(ctx, op)
	}
	return api.CreateResource202JSONResponse{OperationAcceptedJSONResponse: accepted(op, replayed)}, nil
}

func (s *Server) createResource(ctx context.Context, req api.CreateResourceRequestObject) (store.Operation, bool, error) {
	ri := info(ctx)
	p, space, body := ri.principal, req.Space, req.Body
	idem, err := newIdemRequest(req.Params.IdempotencyKey, p.Name, space, http.MethodPost, resourcesPath(space), ri.body)
	if err != nil {
		return store.Operation{}, false, err
	}
	if op, err := s.replay(ctx, idem); err != nil || op != nil {
		return deref(op), op != nil, err
	}
	// 3. Form and offering.
	form := body.FormUrl
	if !schemas.KnownForm(form) {
		return store.Operation{}, false, unprocessable(CodeUnknownForm, "this host serves no Form with this URL (matched exactly, trailing slash included)").
			withPointer("/formUrl", "unknown Form URL")
	}
	offering := OfferingEmbedded
	if body.Offering != nil && *body.Offering != OfferingEmbedded {
		return store.Operation{}, false, unprocessable(CodeUnknownOffering, "the only offering is %q", OfferingEmbedded).
			withPointer("/offering", "unknown offering")
	}
	// 1, narrowed to the Form now that it is known.
	if !p.Can(space, form, auth.Write) {
		return store.Operation{}, false, forbidden("the principal may not create %s resources in this space", formNames[form])
	}
	// 4. spec and privateInputs.
	spec, pi := compact(body.Spec), rawPI(body.PrivateInputs)
	if err := specProblem(schemas.ValidateResource(form, spec, pi)); err != nil {
		return store.Operation{}, false, err
	}
	var storedPI []byte
	if form == schemas.FormWorkerVersion && pi != nil && !sameJSON(pi, emptyObject) {
		storedPI = compact(pi)
	}
	uid := newID("r-")
	var comp compiled
	if form == schemas.FormWorkerVersion {
		comp = s.compileVersion(ctx, uid, space, p.Name, spec, storedPI)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if op, err := s.replay(ctx, idem); err != nil || op != nil {
		return deref(op), op != nil, err
	}
	// 6. Name.
	if other, err := s.st.ResourceByName(ctx, space, body.Name); err == nil {
		// While an Operation on the resource of this name is unresolved
		// (a create, or a delete that is reconciling), no second resource
		// of the name is created: operation_in_progress, not name_conflict
		// (spec/host-api.md §Operations).
		if f, busy := s.inflight[other.UID]; busy {
			return store.Operation{}, false, conflict(CodeOperationInProgress, "Operation %s on the resource of this name has not finished", f.id).withPointer("/name", "busy")
		}
		return store.Operation{}, false, conflict(CodeNameConflict, "a resource of this name exists in this space").withPointer("/name", "name in use")
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Operation{}, false, unavailable(err)
	}
	a, err := s.snapshot(ctx, p, space, uid)
	if err != nil {
		return store.Operation{}, false, err
	}
	if len(a.list) >= s.opts.MaxResourcesPerSpace {
		return store.Operation{}, false, unprocessable(CodeLimitExceeded, "a space holds at most %d resources", s.opts.MaxResourcesPerSpace)
	}
	// 7, 8. References.
	if err := a.references(form, spec); err != nil {
		return store.Operation{}, false, err
	}
	// 9. Form rules.
	switch form {
	case schemas.FormQueueConsumer:
		err = a.consumerRules(spec)
	case schemas.FormModuleWorker:
		err = a.workerRules(spec, false)
	case schemas.FormWorkerVersion:
		err = comp.err
	}
	if err != nil {
		return store.Operation{}, false, err
	}
	now := s.now().UTC()
	rec := store.Resource{
		UID: uid, Space: space, Name: body.Name, FormURL: form, Offering: offering,
		Spec: spec, PrivateInputs: storedPI, Observed: emptyObject, State: store.StateCreating,
		Generation: 1, ETag: etagOf(1, spec), CreateTime: now, UpdateTime: now,
		Exports: comp.exports, Creator: p.Name,
	}
	desired := rec
	desired.State, desired.PrivateInputs = store.StateActive, nil
	pl := plan{kind: KindCreate, space: space, uid: uid, formURL: form, principal: p.Name, record: rec, desired: &desired, key: idem.key, idem: idem.record()}
	op, err := s.accept(ctx, pl)
	return op, false, err
}

func deref(op *store.Operation) store.Operation {
	if op == nil {
		return store.Operation{}
	}
	return *op
}

func (s *Server) UpdateResource(ctx context.Context, req api.UpdateResourceRequestObject) (api.UpdateResourceResponseObject, error) {
	op, replayed, err := s.updateResource(ctx, req)
	if err != nil {
		return nil, err
	}
	if !replayed {
		op = s.start(ctx, op)
	}
	return api.UpdateResource202JSONResponse{OperationAcceptedJSONResponse: accepted(op, replayed)}, nil
}

func (s *Server) updateResource(ctx context.Context, req api.UpdateResourceRequestObject) (store.Operation, bool, error) {
	ri := info(ctx)
	p, space, uid := ri.principal, req.Space, req.Uid
	idem, err := newIdemRequest(req.Params.IdempotencyKey, p.Name, space, http.MethodPut, resourcesPath(space)+"/"+uid, ri.body)
	if err != nil {
		return store.Operation{}, false, err
	}
	if op, err := s.replay(ctx, idem); err != nil || op != nil {
		return deref(op), op != nil, err
	}
	cur, err := s.loadResource(ctx, space, uid)
	if err != nil {
		return store.Operation{}, false, err
	}
	if !p.Can(space, cur.FormURL, auth.Write) {
		return store.Operation{}, false, forbidden("the principal may not update %s resources in this space", formNames[cur.FormURL])
	}
	if err := ifMatch(req.Params.IfMatch, cur.ETag); err != nil {
		return store.Operation{}, false, err
	}
	spec, pi := compact(req.Body.Spec), rawPI(req.Body.PrivateInputs)
	// 4, 5.
	if err := specProblem(schemas.ValidateResource(cur.FormURL, spec, pi)); err != nil {
		return store.Operation{}, false, err
	}
	if err := immutables(cur, spec, pi); err != nil {
		return store.Operation{}, false, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	cur, a, prior, err := s.recheck(ctx, idem, p, space, uid, req.Params.IfMatch)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	if err := a.references(cur.FormURL, spec); err != nil {
		return store.Operation{}, false, err
	}
	switch cur.FormURL {
	case schemas.FormQueueConsumer:
		err = a.consumerRules(spec)
	case schemas.FormModuleWorker:
		err = a.workerRules(spec, true)
	}
	if err != nil {
		return store.Operation{}, false, err
	}
	// 10.
	if f, busy := s.inflight[uid]; busy {
		return store.Operation{}, false, conflict(CodeOperationInProgress, "Operation %s on this resource has not finished", f.id)
	}
	pl := plan{kind: KindUpdate, space: space, uid: uid, formURL: cur.FormURL, principal: p.Name, key: idem.key, idem: idem.record()}
	if cur.State == store.StateActive && sameJSON(cur.Spec, spec) {
		pl.noop = true
	} else {
		desired := cur
		desired.Spec, desired.Generation = spec, cur.Generation+1
		desired.ETag = etagOf(desired.Generation, spec)
		desired.State, desired.PrivateInputs = store.StateActive, nil
		pl.desired = &desired
		pl.record = cur
		pl.record.State = store.StateUpdating
	}
	op, err := s.accept(ctx, pl)
	return op, false, err
}

func (s *Server) DeleteResource(ctx context.Context, req api.DeleteResourceRequestObject) (api.DeleteResourceResponseObject, error) {
	op, replayed, err := s.deleteResource(ctx, req)
	if err != nil {
		return nil, err
	}
	if !replayed {
		op = s.start(ctx, op)
	}
	return api.DeleteResource202JSONResponse{OperationAcceptedJSONResponse: accepted(op, replayed)}, nil
}

func (s *Server) deleteResource(ctx context.Context, req api.DeleteResourceRequestObject) (store.Operation, bool, error) {
	p, space, uid := principal(ctx), req.Space, req.Uid
	idem, err := newIdemRequest(req.Params.IdempotencyKey, p.Name, space, http.MethodDelete, resourcesPath(space)+"/"+uid, nil)
	if err != nil {
		return store.Operation{}, false, err
	}
	if op, err := s.replay(ctx, idem); err != nil || op != nil {
		return deref(op), op != nil, err
	}
	cur, err := s.loadResource(ctx, space, uid)
	if err != nil {
		return store.Operation{}, false, err
	}
	if !p.Can(space, cur.FormURL, auth.Write) {
		return store.Operation{}, false, forbidden("the principal may not delete %s resources in this space", formNames[cur.FormURL])
	}
	if err := ifMatch(req.Params.IfMatch, cur.ETag); err != nil {
		return store.Operation{}, false, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	cur, a, prior, err := s.recheck(ctx, idem, p, space, uid, req.Params.IfMatch)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	if deps := a.dependents(cur); len(deps) > 0 {
		pr := conflict(CodeDependencyConflict, "resources still reference this one; delete them first (nothing is deleted in cascade)")
		for _, d := range deps {
			pr.withPointer("", "referenced by "+d)
		}
		return store.Operation{}, false, pr
	}
	if f, busy := s.inflight[uid]; busy {
		return store.Operation{}, false, conflict(CodeOperationInProgress, "Operation %s on this resource has not finished", f.id)
	}
	rec := cur
	rec.State = store.StateDeleting
	pl := plan{kind: KindDelete, space: space, uid: uid, formURL: cur.FormURL, principal: p.Name, record: rec, key: idem.key, idem: idem.record()}
	op, err := s.accept(ctx, pl)
	return op, false, err
}

func (s *Server) GetResource(ctx context.Context, req api.GetResourceRequestObject) (api.GetResourceResponseObject, error) {
	p := principal(ctx)
	r, err := s.loadResource(ctx, req.Space, req.Uid)
	if err != nil {
		return nil, err
	}
	if !p.Can(req.Space, r.FormURL, auth.Read) {
		return nil, forbidden("the principal may not read %s resources in this space", formNames[r.FormURL])
	}
	et := r.ETag
	return api.GetResource200JSONResponse{Body: toAPIResource(r), Headers: api.GetResource200ResponseHeaders{ETag: &et}}, nil
}

func (s *Server) ListResources(ctx context.Context, req api.ListResourcesRequestObject) (api.ListResourcesResponseObject, error) {
	p := principal(ctx)
	form := ""
	if req.Params.FormUrl != nil {
		form = *req.Params.FormUrl
	}
	list, err := s.st.Resources(ctx, req.Space, form)
	if err != nil {
		return nil, unavailable(err)
	}
	out := api.ListResources200JSONResponse{Items: []api.Resource{}}
	for _, r := range list {
		if p.Can(req.Space, r.FormURL, auth.Read) {
			out.Items = append(out.Items, toAPIResource(r))
		}
	}
	return out, nil
}

func (s *Server) GetOperation(ctx context.Context, req api.GetOperationRequestObject) (api.GetOperationResponseObject, error) {
	p := principal(ctx)
	wait := 0
	if req.Params.Wait != nil {
		wait = *req.Params.Wait
		if wait < 0 || wait > MaxWaitSeconds {
			return nil, invalidRequest("wait must be an integer from 0 to %d", MaxWaitSeconds)
		}
	}
	op, err := s.st.Operation(ctx, req.Id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && op.Space != req.Space) {
		return nil, notFound("no Operation with this ID exists in this space")
	}
	if err != nil {
		return nil, unavailable(err)
	}
	form := opFormURL(op)
	if form == "" {
		// Journaled before Operations had a FormURL and Done (so without
		// its intent): the resource's Form if it still exists, else the
		// principal must be able to read every Form.
		if r, err := s.st.Resource(ctx, op.ResourceUID); err == nil {
			form = r.FormURL
		}
	}
	if form == "" {
		for f := range formNames {
			if !p.Can(req.Space, f, auth.Read) {
				return nil, forbidden("the principal may not read every Form in this space, which reading this Operation needs")
			}
		}
	} else if !p.Can(req.Space, form, auth.Read) {
		return nil, forbidden("the principal may not read %s resources in this space", formNames[form])
	}
	if wait > 0 && !op.Done() {
		op, err = s.waitOp(ctx, op.ID, secondsDuration(wait), false)
		if err != nil {
			return nil, unavailable(err)
		}
	}
	out := api.GetOperation200JSONResponse{Body: toAPIOperation(op)}
	if !op.Done() {
		one := 1
		out.Headers.RetryAfter = &one
	}
	return out, nil
}

// recheck repeats, under s.mu, what an update or delete checked before
// taking the lock (the key may have been used, the resource changed or
// gone meanwhile) and takes the admission snapshot of the space. prior is
// the Operation to replay, if any.
func (s *Server) recheck(ctx context.Context, idem idemRequest, p *auth.Principal, space, uid string, ifMatchHeader *string) (store.Resource, *admission, *store.Operation, error) {
	if op, err := s.replay(ctx, idem); err != nil || op != nil {
		return store.Resource{}, nil, op, err
	}
	cur, err := s.loadResource(ctx, space, uid)
	if err != nil {
		return store.Resource{}, nil, nil, err
	}
	if err := ifMatch(ifMatchHeader, cur.ETag); err != nil {
		return store.Resource{}, nil, nil, err
	}
	a, err := s.snapshot(ctx, p, space, uid)
	if err != nil {
		return store.Resource{}, nil, nil, err
	}
	return cur, a, nil, nil
}
