package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// WorkerForm is ModuleWorker 0.3.0: the handlers a worker declares and the
// WorkerVersion it selects. It has no effect outside the store: the engine
// and the fetch route resolve the selected version at call time (Versions).
type WorkerForm struct{}

var (
	_ Form           = WorkerForm{}
	_ QueueAuthority = WorkerForm{}
)

// QueueClaims: selecting another version of a worker a consumer feeds
// changes the code that runs on the messages of the queues it consumes (a
// new worker has no consumer yet).
func (WorkerForm) QueueClaims(ctx context.Context, sp *Space, prev *store.Resource, spec []byte) ([]QueueClaim, error) {
	if prev == nil {
		return nil, nil
	}
	nw, err := decodeSpec[api.ModuleWorkerSpec](spec)
	if err != nil {
		return nil, err
	}
	old, err := decodeSpec[api.ModuleWorkerSpec](prev.Spec)
	if err != nil {
		return nil, err
	}
	if nw.Version == nil || (old.Version != nil && old.Version.ResourceUid == nw.Version.ResourceUid) {
		return nil, nil // the code does not change
	}
	qs, err := sp.ConsumedQueues(ctx, sp.Self())
	if err != nil {
		return nil, err
	}
	return []QueueClaim{{"/spec/version/resourceUid", "a QueueConsumer feeds this worker: selecting another version changes the code that runs on the queue's messages, so editor on the queues it consumes is required", qs}}, nil
}

func (WorkerForm) URL() string         { return schemas.FormModuleWorker }
func (WorkerForm) Name() string        { return "ModuleWorker 0.3.0" }
func (WorkerForm) Offerings() []string { return []string{OfferingEmbedded} }

func (WorkerForm) Validate(spec, pi []byte) ([]schemas.Violation, error) {
	return schemas.ValidateResource(schemas.FormModuleWorker, spec, pi)
}

func (WorkerForm) References(spec []byte) ([]Reference, error) {
	sp, err := decodeSpec[api.ModuleWorkerSpec](spec)
	if err != nil {
		return nil, err
	}
	if sp.Version != nil {
		return []Reference{{"/spec/version/resourceUid", sp.Version.ResourceUid, schemas.FormWorkerVersion}}, nil
	}
	return nil, nil
}

func (WorkerForm) Prepare(context.Context, *Env, *store.Resource, []byte) error { return nil }

func (WorkerForm) CheckUpdate(store.Resource, []byte, []byte) error { return nil }

// Admit: the selected version belongs to this worker and exports every
// declared handler; while a consumer references the worker, it keeps
// providing queue.
func (WorkerForm) Admit(ctx context.Context, sp *Space, rec store.Resource, update bool) error {
	spec, err := decodeSpec[api.ModuleWorkerSpec](rec.Spec)
	if err != nil {
		return err
	}
	handlers := handlersOf(spec)
	var exports []string
	if spec.Version != nil {
		v, _, err := sp.Get(ctx, spec.Version.ResourceUid)
		if err != nil {
			return err
		}
		vsp, err := decodeSpec[api.WorkerVersionSpec](v.Spec)
		if err != nil {
			return err
		}
		if vsp.Worker.ResourceUid != sp.Self() {
			return problem.Unprocessable(problem.CodeInvalidReference, "the version belongs to another worker").
				WithPointer("/spec/version/resourceUid", "a ModuleWorker can select only its own WorkerVersions")
		}
		exports = v.Exports
		var missing []string
		for _, h := range handlers {
			if !slices.Contains(exports, h) {
				missing = append(missing, h)
			}
		}
		if len(missing) > 0 {
			return problem.Unprocessable(problem.CodeMissingHandler, "the selected version does not export %s", strings.Join(missing, ", ")).
				WithPointer("/spec/version/resourceUid", "the WorkerVersion must export every declared handler")
		}
	}
	if !update {
		return nil
	}
	users, err := sp.ReferencedBy(ctx, sp.Self())
	if err != nil {
		return err
	}
	for _, u := range users {
		c := u.Resource
		if c.FormURL != schemas.FormQueueConsumer {
			continue
		}
		if !slices.Contains(handlers, "queue") {
			return problem.Unprocessable(problem.CodeMissingHandler, "QueueConsumer %s uses this worker's queue handler", c.UID).
				WithPointer("/spec/handlers", `"queue" cannot be removed while a QueueConsumer references the worker`)
		}
		if spec.Version == nil || !slices.Contains(exports, "queue") {
			return problem.Unprocessable(problem.CodeMissingHandler, "QueueConsumer %s uses this worker's queue handler", c.UID).
				WithPointer("/spec/version", "while a QueueConsumer references the worker, the selected version must export queue")
		}
	}
	return nil
}

// Apply: a deleted worker's log is dropped from the runtime.
func (WorkerForm) Apply(_ context.Context, env *Env, ch Change) ([]store.Mutation, error) {
	if ch.Kind == KindDelete {
		env.Workers.ForgetWorker(ch.UID)
	}
	return nil, nil
}

func (WorkerForm) Undo(context.Context, *Env, Change) Failure { return FailUnknown }

func (WorkerForm) Observe(context.Context, *Env, store.Resource, Lookup) (json.RawMessage, bool) {
	return nil, false
}

// Unobserved: a Worker's observed stays {}.
func (WorkerForm) Unobserved() bool { return true }

func (WorkerForm) Rebuild(context.Context, *Env, store.Resource, string) error { return nil }

// workerSpecOf is the spec of w, a stored ModuleWorker; an error when w is
// of another Form.
func workerSpecOf(w store.Resource) (api.ModuleWorkerSpec, error) {
	if w.FormURL != schemas.FormModuleWorker {
		return api.ModuleWorkerSpec{}, fmt.Errorf("controller: %s is not a ModuleWorker", w.UID)
	}
	return decodeSpec[api.ModuleWorkerSpec](w.Spec)
}

func handlersOf(sp api.ModuleWorkerSpec) []string {
	out := make([]string, 0, len(sp.Handlers))
	for _, h := range sp.Handlers {
		out = append(out, string(h))
	}
	return out
}

// Worker reads a ModuleWorker of space that p may act on with action:
// not_found when uid names no ModuleWorker there, forbidden when p lacks the
// role.
func (c *Controller) Worker(ctx context.Context, p *auth.Principal, space, uid string, action auth.Action) (store.Resource, error) {
	if !p.Can(space, schemas.FormModuleWorker, action) {
		verb := "reading a worker's log needs read"
		if action == auth.Write {
			verb = "invoking a worker needs editor"
		}
		return store.Resource{}, problem.Forbidden("%s on %s", verb, WorkerForm{}.Name())
	}
	r, err := c.load(ctx, space, uid)
	if err == nil && r.FormURL != schemas.FormModuleWorker {
		err = problem.NotFound("no ModuleWorker with this UID exists in this space")
	}
	return r, err
}

// FetchTarget is the version whose fetch handler serves the worker uid's
// fetch route: not_found when the worker declares no fetch handler, selects
// no version, or its version does not export fetch.
func (c *Controller) FetchTarget(ctx context.Context, p *auth.Principal, space, uid string) (*abi.Version, error) {
	w, err := c.Worker(ctx, p, space, uid, auth.Write)
	if err != nil {
		return nil, err
	}
	wsp, err := c.env.Versions.workerSpec(w)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(handlersOf(wsp), "fetch") {
		return nil, problem.NotFound("the worker does not declare a fetch handler")
	}
	v, exports, err := c.env.Versions.of(ctx, wsp)
	if errors.Is(err, ErrNoVersion) {
		return nil, problem.NotFound("the worker has no selected version")
	}
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	if !slices.Contains(exports, "fetch") {
		return nil, problem.NotFound("the worker's selected version does not export fetch")
	}
	return v, nil
}
