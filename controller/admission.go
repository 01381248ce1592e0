package controller

import (
	"context" // mutate:observed-before-observing-2
	"errors"
	"fmt"
	"strings"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// Idempotency is a mutation's Idempotency-Key (empty when it has none), in
// its scope (principal, space, method, path), with the fingerprint of the
// request body (see Fingerprint).
type Idempotency struct{ Key, Scope, Fingerprint string }

// record is what the Operation's first write stores for the key, or nil.
func (ir Idempotency) record() *store.IdempotencyRecord {
	if ir.Key == "" {
		return nil
	}
	return &store.IdempotencyRecord{Scope: ir.Scope, Key: ir.Key, Fingerprint: ir.Fingerprint}
}

// CreateRequest is a create of a resource.
type CreateRequest struct {
	Principal     *auth.Principal
	Space, Name   string
	FormURL       string
	Offering      *string
	Spec          []byte
	PrivateInputs []byte // nil when absent
	Idempotency   Idempotency
}

// UpdateRequest is a replacement of a resource's spec.
type UpdateRequest struct {
	Principal     *auth.Principal
	Space, UID    string
	IfMatch       *string
	Spec          []byte
	PrivateInputs []byte
	Idempotency   Idempotency
}

// DeleteRequest is a delete of a resource.
type DeleteRequest struct {
	Principal   *auth.Principal
	Space, UID  string
	IfMatch     *string
	Idempotency Idempotency
	// IfIdle is the host extension "conditional delete" (spec/peers.md):
	// a queue is deleted only when it holds no message and no batch of it
	// runs, else queue_not_idle.
	IfIdle bool
}

// Create admits a create (spec/host-api.md §Admission, steps 1 to 9, in
// order) and journals its Operation. replayed: the Idempotency-Key named an
// earlier Operation, returned as it is now. Run drives the Operation.
func (c *Controller) Create(ctx context.Context, req CreateRequest) (op store.Operation, replayed bool, err error) {
	p, space := req.Principal, req.Space
	if op, err := c.replay(ctx, req.Idempotency); err != nil || op != nil {
		return deref(op), op != nil, err
	}
	// 3. Form and offering.
	f, ok := c.forms.Form(req.FormURL)
	if !ok {
		return store.Operation{}, false, problem.Unprocessable(problem.CodeUnknownForm, "this host serves no Form with this URL (matched exactly, trailing slash included)").
			WithPointer("/formUrl", "unknown Form URL")
	}
	offerings := f.Offerings()
	offering := offerings[0]
	if req.Offering != nil {
		if !contains(offerings, *req.Offering) {
			pr := problem.Unprocessable(problem.CodeUnknownOffering, "%s is served in the offerings %s", f.Name(), quoted(offerings))
			if len(offerings) == 1 {
				pr = problem.Unprocessable(problem.CodeUnknownOffering, "the only offering is %q", offerings[0])
			}
			return store.Operation{}, false, pr.WithPointer("/offering", "unknown offering")
		}
		offering = *req.Offering
	}
	// 1, narrowed to the Form now that it is known.
	if !p.Can(space, f.URL(), auth.Write) {
		return store.Operation{}, false, problem.Forbidden("the principal may not create %s resources in this space", f.Name())
	}
	// 4. spec and privateInputs.
	spec := compact(req.Spec)
	if err := specProblem(f.Validate(spec, req.PrivateInputs)); err != nil {
		return store.Operation{}, false, err
	}
	now := c.now().UTC()
	rec := store.Resource{
		UID: newID("r-"), Space: space, Name: req.Name, FormURL: f.URL(), Offering: offering,
		Spec: spec, Observed: emptyObject, State: store.StateCreating, // mutate:observed-before-observing-1
		Generation: 1, ETag: etagOf(1, spec), CreateTime: now, UpdateTime: now, Creator: p.ID,
	}
	prepErr := f.Prepare(ctx, c.env, &rec, req.PrivateInputs)

	unlock, prior, err := c.lockSpace(ctx, space, req.Idempotency)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	defer unlock()
	// 6. Name.
	other, err := c.st.ResourceByName(ctx, space, req.Name)
	if uid, ok := c.pending.name(space, req.Name); ok {
		other, err = store.Resource{UID: uid}, nil
	}
	if err == nil {
		// While an Operation on the resource of this name is unresolved
		// (a create, or a delete that is reconciling), no second resource
		// of the name is created: operation_in_progress, not name_conflict
		// (spec/host-api.md §Operations).
		if fl, busy := c.busy(ctx, other.UID); busy {
			return store.Operation{}, false, problem.Conflict(problem.CodeOperationInProgress, "Operation %s on the resource of this name has not finished", fl.id).WithPointer("/name", "busy")
		}
		return store.Operation{}, false, problem.Conflict(problem.CodeNameConflict, "a resource of this name exists in this space").WithPointer("/name", "name in use")
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Operation{}, false, problem.Unavailable(err)
	}
	n, err := c.countResources(ctx, space)
	n += c.pending.createsIn(space)
	if err != nil {
		return store.Operation{}, false, problem.Unavailable(err)
	}
	if n >= c.opts.MaxResourcesPerSpace {
		return store.Operation{}, false, problem.Unprocessable(problem.CodeLimitExceeded, "a space holds at most %d resources", c.opts.MaxResourcesPerSpace)
	}
	sp := c.space(space, rec.UID, p)
	// 7, 8. References, and the queues whose messages the code would run on.
	if err := c.checkReferences(ctx, sp, f, spec); err != nil {
		return store.Operation{}, false, err
	}
	if err := c.checkQueueAuthority(ctx, sp, f, nil, spec); err != nil {
		return store.Operation{}, false, err
	}
	// 9. Form rules.
	if prepErr != nil {
		return store.Operation{}, false, prepErr
	}
	if err := f.Admit(ctx, sp, rec, false); err != nil {
		return store.Operation{}, false, err
	}
	desired := rec
	desired.State, desired.PrivateInputs = store.StateActive, nil
	pl := plan{kind: KindCreate, space: space, uid: rec.UID, formURL: f.URL(), principal: p.ID, record: rec, desired: &desired, idem: req.Idempotency}
	op, err = c.accept(ctx, pl, unlock)
	return op, false, err
}

// Update admits an update and journals its Operation.
func (c *Controller) Update(ctx context.Context, req UpdateRequest) (store.Operation, bool, error) {
	p, space, uid := req.Principal, req.Space, req.UID
	cur, prior, err := c.target(ctx, p, space, uid, req.IfMatch, req.Idempotency, "update")
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	f, err := c.formOf(cur)
	if err != nil {
		return store.Operation{}, false, err
	}
	spec := compact(req.Spec)
	// 4, 5.
	if err := specProblem(f.Validate(spec, req.PrivateInputs)); err != nil {
		return store.Operation{}, false, err
	}
	if err := f.CheckUpdate(cur, spec, req.PrivateInputs); err != nil {
		return store.Operation{}, false, err
	}

	unlock, prior, err := c.lockSpace(ctx, space, req.Idempotency)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	defer unlock()
	if cur, err = c.recheck(ctx, space, uid, req.IfMatch); err != nil {
		return store.Operation{}, false, err
	}
	sp := c.space(space, uid, p)
	if err := c.checkReferences(ctx, sp, f, spec); err != nil {
		return store.Operation{}, false, err
	}
	if err := c.checkQueueAuthority(ctx, sp, f, &cur, spec); err != nil {
		return store.Operation{}, false, err
	}
	next := cur // mutate:update-before-checks
	next.Spec = spec
	if err := f.Admit(ctx, sp, next, true); err != nil {
		return store.Operation{}, false, err
	}
	// 10.
	if fl, busy := c.busy(ctx, uid); busy {
		return store.Operation{}, false, problem.Conflict(problem.CodeOperationInProgress, "Operation %s on this resource has not finished", fl.id)
	}
	pl := plan{kind: KindUpdate, space: space, uid: uid, formURL: cur.FormURL, principal: p.ID, idem: req.Idempotency}
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
	op, err := c.accept(ctx, pl, unlock)
	return op, false, err
}

// Delete admits a delete and journals its Operation.
func (c *Controller) Delete(ctx context.Context, req DeleteRequest) (store.Operation, bool, error) {
	p, space, uid := req.Principal, req.Space, req.UID
	cur, prior, err := c.target(ctx, p, space, uid, req.IfMatch, req.Idempotency, "delete")
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}

	unlock, prior, err := c.lockSpace(ctx, space, req.Idempotency)
	if err != nil || prior != nil {
		return deref(prior), prior != nil, err
	}
	defer unlock()
	if cur, err = c.recheck(ctx, space, uid, req.IfMatch); err != nil {
		return store.Operation{}, false, err
	}
	// The request's own condition first (a host extension).
	if req.IfIdle {
		if err := c.checkIdle(ctx, cur); err != nil {
			return store.Operation{}, false, err
		}
	}
	// Nothing is deleted in cascade: a resource that others reference
	// stays (spec/host-api.md §Operations, deletion rules).
	deps, err := c.space(space, uid, p).ReferencedBy(ctx, uid)
	if err != nil {
		return store.Operation{}, false, err
	}
	if len(deps) > 0 { // mutate:unselected-version-binding
		pr := problem.Conflict(problem.CodeDependencyConflict, "resources still reference this one; delete them first (nothing is deleted in cascade)")
		for _, d := range deps {
			r := d.Resource
			pr.WithPointer("", fmt.Sprintf("referenced by %s %q (%s)", c.forms.Name(r.FormURL), r.Name, r.UID))
		}
		return store.Operation{}, false, pr
	}
	if fl, busy := c.busy(ctx, uid); busy {
		return store.Operation{}, false, problem.Conflict(problem.CodeOperationInProgress, "Operation %s on this resource has not finished", fl.id)
	}
	rec := cur
	rec.State = store.StateDeleting
	pl := plan{kind: KindDelete, space: space, uid: uid, formURL: cur.FormURL, principal: p.ID, record: rec, idem: req.Idempotency}
	op, err := c.accept(ctx, pl, unlock)
	return op, false, err
}

// target is the first checks of an update or a delete, before the space's
// lock: the key's replay (prior), the resource, the principal's role on its
// Form (verb says for what) and If-Match.
func (c *Controller) target(ctx context.Context, p *auth.Principal, space, uid string, ifMatchHeader *string, idem Idempotency, verb string) (cur store.Resource, prior *store.Operation, err error) {
	if prior, err = c.replay(ctx, idem); err != nil || prior != nil {
		return store.Resource{}, prior, err
	}
	if cur, err = c.load(ctx, space, uid); err != nil {
		return store.Resource{}, nil, err
	}
	if !p.Can(space, cur.FormURL, auth.Write) {
		return store.Resource{}, nil, problem.Forbidden("the principal may not %s %s resources in this space", verb, c.forms.Name(cur.FormURL))
	}
	if err := ifMatch(ifMatchHeader, cur.ETag); err != nil {
		return store.Resource{}, nil, err
	}
	return cur, nil, nil
}

// checkReferences is steps 7 (each reference resolves by UID to a usable
// resource of the expected Form in this space) and 8 (the principal may
// read the referenced Form).
func (c *Controller) checkReferences(ctx context.Context, sp *Space, f Form, spec []byte) error {
	refs, err := f.References(spec)
	if err != nil {
		return err
	}
	var bad *problem.Problem
	for _, rf := range refs {
		detail := ""
		r, ok, err := sp.Get(ctx, rf.UID)
		if err != nil {
			return err
		}
		kind := ""
		if ok {
			if fl, busy := c.busy(ctx, r.UID); busy {
				kind = fl.kind
			}
		}
		switch {
		case !ok || rf.UID == sp.self:
			// Another space's UID reads exactly like a missing one.
			detail = fmt.Sprintf("no %s resource with this UID exists in this space", c.forms.Name(rf.FormURL))
		case r.FormURL != rf.FormURL:
			detail = fmt.Sprintf("the resource is not a %s", c.forms.Name(rf.FormURL))
		case r.State == store.StateDeleting:
			detail = "the resource is being deleted"
		case kind == KindCreate || kind == KindDelete:
			detail = "the resource's create or delete has not finished"
		}
		if detail != "" {
			if bad == nil {
				bad = problem.Unprocessable(problem.CodeInvalidReference, "a reference does not name a usable resource")
			}
			bad.WithPointer(rf.Pointer, detail)
		}
	}
	if bad != nil {
		return bad
	}
	var denied *problem.Problem
	for _, rf := range refs {
		if !sp.principal.Can(sp.name, rf.FormURL, auth.Read) { // mutate:reference-read-permission
			if denied == nil {
				denied = problem.Forbidden("a reference grants no permission: the principal may not read the referenced resource's Form")
			}
			denied.WithPointer(rf.Pointer, fmt.Sprintf("read permission on %s is required", c.forms.Name(rf.FormURL)))
		}
	}
	if denied != nil {
		return denied
	}
	return nil
}

// checkQueueAuthority is the rest of step 8: code that a consumer runs on
// a queue's messages reads them and settles them (an acknowledgement
// deletes a message, a retry can move it to the dead-letter queue), so
// whoever decides what that code is needs editor on the queues it reads or
// dead-letters into (spec/host-api.md §Authentication and authorisation).
// Which changes decide it is each Form's rule (QueueAuthority: creating a
// QueueConsumer or giving one another dead-letter queue, creating a
// WorkerVersion of a worker a consumer feeds, selecting another version of
// such a worker). prev is the stored record on an update, nil on a create.
func (c *Controller) checkQueueAuthority(ctx context.Context, sp *Space, f Form, prev *store.Resource, spec []byte) error {
	qa, ok := f.(QueueAuthority)
	if !ok {
		return nil
	}
	claims, err := qa.QueueClaims(ctx, sp, prev, spec)
	if err != nil {
		return err
	}
	var denied *problem.Problem
	for _, cl := range claims {
		if sp.mayEdit(ctx, cl.Queues) {
			continue
		}
		if denied == nil {
			denied = problem.Forbidden("changing the code that consumes a queue needs editor on %s for the queues it consumes", c.forms.Name(c.forms.DefaultQueue()))
		}
		denied.WithPointer(cl.Pointer, cl.Why)
	}
	if denied != nil {
		return denied
	}
	return nil
}

// mayEdit reports whether the principal may write every queue of queues
// (one that does not exist is judged by the queue Form's grant).
func (sp *Space) mayEdit(ctx context.Context, queues []string) bool {
	for _, q := range queues {
		r, ok, err := sp.Get(ctx, q)
		form := sp.c.forms.DefaultQueue()
		if err == nil && ok {
			form = r.FormURL
		}
		if !sp.principal.Can(sp.name, form, auth.Write) {
			return false
		}
	}
	return true
}

// ConsumedQueues lists the queues (consumed and dead-letter) of the
// consumers that feed worker: what a change of the worker's code reaches.
func (sp *Space) ConsumedQueues(ctx context.Context, worker string) ([]string, error) {
	users, err := sp.ReferencedBy(ctx, worker)
	if err != nil {
		return nil, err
	}
	var qs []string
	for _, u := range users {
		if !sp.c.forms.IsConsumer(u.Resource.FormURL) {
			continue
		}
		cfg, err := sp.c.forms.ConsumerConfig(u.Resource)
		if err != nil {
			return nil, err
		}
		qs = append(qs, cfg.QueueUID)
		if cfg.DeadLetterQueueUID != "" {
			qs = append(qs, cfg.DeadLetterQueueUID)
		}
	}
	return qs, nil
}

// countResources is the number of resources space holds.
func (c *Controller) countResources(ctx context.Context, space string) (int, error) {
	if rc, ok := c.st.(store.ResourceCounter); ok {
		return rc.CountResources(ctx, space)
	}
	list, err := c.st.Resources(ctx, space, "")
	return len(list), err
}

// recheck repeats, under the space's lock, what an update or delete
// checked before taking it (the resource may have changed or gone
// meanwhile).
func (c *Controller) recheck(ctx context.Context, space, uid string, ifMatchHeader *string) (store.Resource, error) {
	cur, err := c.load(ctx, space, uid)
	if err != nil {
		return store.Resource{}, err
	}
	if err := ifMatch(ifMatchHeader, cur.ETag); err != nil {
		return store.Resource{}, err
	}
	return cur, nil
}

// replay looks the key up: the same fingerprint returns the recorded
// Operation, another fingerprint is idempotency_key_reuse.
func (c *Controller) replay(ctx context.Context, ir Idempotency) (*store.Operation, error) {
	if ir.Key == "" {
		return nil, nil
	}
	rec, err := c.st.Idempotency(ctx, ir.Scope, ir.Key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	if rec.Fingerprint != ir.Fingerprint { // mutate:idempotency-fingerprint
		return nil, problem.Unprocessable(problem.CodeIdempotencyKeyReuse, "this Idempotency-Key was used for a different request body")
	}
	op, err := c.st.Operation(ctx, rec.OperationID)
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	return &op, nil
}

func ifMatch(h *string, etag string) error {
	if h == nil {
		return nil
	}
	for _, t := range strings.Split(*h, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || t == etag {
			return nil
		}
	}
	return problem.PreconditionFailed()
}

func specProblem(vs []schemas.Violation, err error) error {
	if err != nil {
		if errors.Is(err, schemas.ErrNotJSON) {
			return problem.InvalidRequest("the request body is not JSON")
		}
		return err
	}
	if len(vs) > 0 {
		return problem.FromViolations(422, problem.CodeInvalidSpec, "the spec or privateInputs do not satisfy the Form", vs)
	}
	return nil
}

func deref(op *store.Operation) store.Operation {
	if op == nil {
		return store.Operation{}
	}
	return *op
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func quoted(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
