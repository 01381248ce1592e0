package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/store"
)

func (s *Server) GetOpenAPI(ctx context.Context, _ api.GetOpenAPIRequestObject) (api.GetOpenAPIResponseObject, error) {
	return api.GetOpenAPI200JSONResponse(s.openapi), nil
}

// GetCapabilities serves the host's capabilities document for the
// conformance kit (features/capabilities.schema.json).
func (s *Server) GetCapabilities(ctx context.Context, _ api.GetCapabilitiesRequestObject) (api.GetCapabilitiesResponseObject, error) {
	if s.caps == nil {
		return api.GetCapabilities200JSONResponse{"capabilities": []string{}}, nil
	}
	return api.GetCapabilities200JSONResponse(s.caps), nil
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

// run drives an admitted Operation unless it was replayed.
func (s *Server) run(ctx context.Context, op store.Operation, replayed bool) store.Operation {
	if replayed {
		return op
	}
	return s.ctl.Run(ctx, op)
}

func rawPI(p *json.RawMessage) []byte {
	if p == nil {
		return nil
	}
	return *p
}

func (s *Server) CreateResource(ctx context.Context, req api.CreateResourceRequestObject) (api.CreateResourceResponseObject, error) {
	ri := info(ctx)
	idem, err := newIdempotency(req.Params.IdempotencyKey, ri.principal.ID, req.Space, http.MethodPost, resourcesPath(req.Space), ri.body)
	if err != nil {
		return nil, err
	}
	op, replayed, err := s.ctl.Create(ctx, controller.CreateRequest{
		Principal: ri.principal, Space: req.Space, Name: req.Body.Name, FormURL: req.Body.FormUrl, Offering: req.Body.Offering,
		Spec: req.Body.Spec, PrivateInputs: rawPI(req.Body.PrivateInputs), Idempotency: idem,
	})
	if err != nil {
		return nil, err
	}
	return api.CreateResource202JSONResponse{OperationAcceptedJSONResponse: accepted(s.run(ctx, op, replayed), replayed)}, nil
}

func (s *Server) UpdateResource(ctx context.Context, req api.UpdateResourceRequestObject) (api.UpdateResourceResponseObject, error) {
	ri := info(ctx)
	idem, err := newIdempotency(req.Params.IdempotencyKey, ri.principal.ID, req.Space, http.MethodPut, resourcesPath(req.Space)+"/"+req.Uid, ri.body)
	if err != nil {
		return nil, err
	}
	op, replayed, err := s.ctl.Update(ctx, controller.UpdateRequest{
		Principal: ri.principal, Space: req.Space, UID: req.Uid, IfMatch: req.Params.IfMatch,
		Spec: req.Body.Spec, PrivateInputs: rawPI(req.Body.PrivateInputs), Idempotency: idem,
	})
	if err != nil {
		return nil, err
	}
	return api.UpdateResource202JSONResponse{OperationAcceptedJSONResponse: accepted(s.run(ctx, op, replayed), replayed)}, nil
}

func (s *Server) DeleteResource(ctx context.Context, req api.DeleteResourceRequestObject) (api.DeleteResourceResponseObject, error) {
	p := principal(ctx)
	var cond []byte
	if req.Params.IfIdle != nil && *req.Params.IfIdle {
		cond = []byte("ifIdle") // a key reused with another condition is idempotency_key_reuse
	}
	idem, err := newIdempotency(req.Params.IdempotencyKey, p.ID, req.Space, http.MethodDelete, resourcesPath(req.Space)+"/"+req.Uid, cond)
	if err != nil {
		return nil, err
	}
	op, replayed, err := s.ctl.Delete(ctx, controller.DeleteRequest{
		Principal: p, Space: req.Space, UID: req.Uid, IfMatch: req.Params.IfMatch, Idempotency: idem,
		IfIdle: req.Params.IfIdle != nil && *req.Params.IfIdle,
	})
	if err != nil {
		return nil, err
	}
	return api.DeleteResource202JSONResponse{OperationAcceptedJSONResponse: accepted(s.run(ctx, op, replayed), replayed)}, nil
}

func (s *Server) GetResource(ctx context.Context, req api.GetResourceRequestObject) (api.GetResourceResponseObject, error) {
	r, err := s.ctl.Resource(ctx, principal(ctx), req.Space, req.Uid)
	if err != nil {
		return nil, err
	}
	et := r.ETag
	return api.GetResource200JSONResponse{Body: toAPIResource(r), Headers: api.GetResource200ResponseHeaders{ETag: &et}}, nil
}

func (s *Server) ListResources(ctx context.Context, req api.ListResourcesRequestObject) (api.ListResourcesResponseObject, error) {
	form := ""
	if req.Params.FormUrl != nil {
		form = *req.Params.FormUrl
	}
	limit := controller.DefaultPageSize
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
		if limit < 1 || limit > controller.MaxPageSize {
			return nil, invalidRequest("limit must be an integer from 1 to %d", controller.MaxPageSize)
		}
	}
	token := ""
	if req.Params.PageToken != nil {
		token = *req.Params.PageToken
	}
	full := false
	if req.Params.View != nil {
		switch *req.Params.View {
		case api.Basic:
		case api.Full:
			full = true
		default:
			return nil, invalidRequest("view must be basic or full")
		}
	}
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	list, next, err := s.ctl.ResourcePage(ctx, principal(ctx), req.Space, form, token, limit)
	if err != nil {
		return nil, err
	}
	out := api.ListResources200JSONResponse{Items: make([]api.Resource, 0, len(list))}
	bytes := 0
	for i, r := range list {
		item := toAPIResource(r)
		if !full {
			item.Spec = s.ctl.ListedSpec(r)
		}
		if bytes += len(item.Spec); i > 0 && bytes > MaxPageBytes {
			// The page ends here, whatever limit said: a page of large
			// versions with view=full must not build a response of
			// hundreds of megabytes.
			next = controller.PageTokenAfter(list[i-1])
			break
		}
		out.Items = append(out.Items, item)
	}
	if next != "" {
		out.NextPageToken = &next
	}
	return heavyResourcePage{out, release}, nil
}

// MaxPageBytes bounds the specs of one page of a list: a page ends early
// (with a nextPageToken) once its items' specs exceed it, and always holds
// at least one item.
const MaxPageBytes = 16 << 20

func (s *Server) ListOperations(ctx context.Context, req api.ListOperationsRequestObject) (api.ListOperationsResponseObject, error) {
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	var state, resource, token string
	if req.Params.State != nil {
		state = string(*req.Params.State)
	}
	if req.Params.ResourceUid != nil {
		resource = *req.Params.ResourceUid
	}
	if req.Params.PageToken != nil {
		token = *req.Params.PageToken
	}
	limit := controller.DefaultOperationPageSize
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
		if limit < 1 || limit > controller.MaxOperationPageSize {
			return nil, invalidRequest("limit must be an integer from 1 to %d", controller.MaxOperationPageSize)
		}
	}
	list, next, err := s.ctl.OperationPage(ctx, principal(ctx), req.Space, state, resource, token, limit)
	if err != nil {
		return nil, err
	}
	out := api.ListOperations200JSONResponse{Items: make([]api.Operation, 0, len(list))}
	for _, op := range list {
		out.Items = append(out.Items, toAPIOperation(op))
	}
	if next != "" {
		out.NextPageToken = &next
	}
	return heavyOperationPage{out, release}, nil
}

func (s *Server) GetOperation(ctx context.Context, req api.GetOperationRequestObject) (api.GetOperationResponseObject, error) {
	wait := 0
	if req.Params.Wait != nil {
		wait = *req.Params.Wait
		if wait < 0 || wait > MaxWaitSeconds {
			return nil, invalidRequest("wait must be an integer from 0 to %d", MaxWaitSeconds)
		}
	}
	op, err := s.ctl.Operation(ctx, principal(ctx), req.Space, req.Id, secondsDuration(wait))
	if rerr := revokedWhileWaiting(ctx); rerr != nil {
		return nil, rerr
	}
	if err != nil {
		return nil, err
	}
	out := api.GetOperation200JSONResponse{Body: toAPIOperation(op)}
	if !op.Done() {
		one := 1
		out.Headers.RetryAfter = &one
	}
	return out, nil
}

var emptyObject = json.RawMessage(`{}`)

func toAPIResource(r store.Resource) api.Resource {
	observed := r.Observed
	if len(observed) == 0 {
		observed = emptyObject
	}
	return api.Resource{
		Uid: r.UID, Name: r.Name, Space: r.Space, FormUrl: r.FormURL, Offering: r.Offering,
		Spec: r.Spec, Observed: observed, Output: emptyObject,
		State: api.ResourceState(r.State), Generation: r.Generation, Etag: r.ETag,
		CreateTime: r.CreateTime, UpdateTime: r.UpdateTime,
	}
}

func toAPIOperation(op store.Operation) api.Operation {
	out := api.Operation{
		Id: op.ID, Kind: api.OperationKind(op.Kind), ResourceUid: op.ResourceUID,
		State: api.OperationState(op.State), Effect: api.OperationEffect(op.Effect),
		CreateTime: op.CreateTime, UpdateTime: op.UpdateTime,
		Progress: operationProgress(op.Progress),
	}
	if op.IdempotencyKey != "" {
		k := op.IdempotencyKey
		out.IdempotencyKey = &k
	}
	if len(op.Error) > 0 {
		var p api.Problem
		if json.Unmarshal(op.Error, &p) == nil {
			out.Error = &p
		}
	}
	return out
}

// parseIdempotencyKey accepts 1..255 visible ASCII characters, bare or as
// an RFC 8941 string.
func parseIdempotencyKey(v *string) (string, error) {
	if v == nil {
		return "", nil
	}
	raw := *v
	key := raw
	if strings.HasPrefix(raw, `"`) {
		if len(raw) < 2 || !strings.HasSuffix(raw, `"`) {
			return "", invalidRequest("Idempotency-Key: unterminated structured-field string")
		}
		var b strings.Builder
		in := raw[1 : len(raw)-1]
		for i := 0; i < len(in); i++ {
			c := in[i]
			switch {
			case c == '\\':
				if i+1 >= len(in) || (in[i+1] != '"' && in[i+1] != '\\') {
					return "", invalidRequest(`Idempotency-Key: in a structured-field string only \" and \\ are escapes`)
				}
				i++
				b.WriteByte(in[i])
			case c == '"':
				return "", invalidRequest("Idempotency-Key: unescaped quote in a structured-field string")
			default:
				b.WriteByte(c)
			}
		}
		key = b.String()
	}
	if len(key) < 1 || len(key) > 255 {
		return "", invalidRequest("Idempotency-Key must be 1 to 255 characters")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", invalidRequest("Idempotency-Key must be visible ASCII characters")
		}
	}
	return key, nil
}

// newIdempotency parses the Idempotency-Key header of a request by
// principal to method path with body, in its scope.
func newIdempotency(header *string, principal, space, method, path string, body []byte) (controller.Idempotency, error) {
	key, err := parseIdempotencyKey(header)
	if err != nil || key == "" {
		return controller.Idempotency{}, err
	}
	scope := principal + "\x00" + space + "\x00" + method + "\x00" + path
	return controller.Idempotency{Key: key, Scope: scope, Fingerprint: controller.Fingerprint(body)}, nil
}
