package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// VersionForm is WorkerVersion 0.5.0: a worker's immutable ES modules,
// vars, secrets and producer Bindings. Admission compiles the modules; the
// runtime loads them when a handler is invoked.
type VersionForm struct{}

var (
	_ Form           = VersionForm{}
	_ QueueAuthority = VersionForm{}
)

// QueueClaims: a version of a worker a consumer feeds may run on the
// messages of the queues it consumes.
func (VersionForm) QueueClaims(ctx context.Context, sp *Space, _ *store.Resource, spec []byte) ([]QueueClaim, error) {
	vs, err := decodeSpec[api.WorkerVersionSpec](spec)
	if err != nil {
		return nil, err
	}
	qs, err := sp.ConsumedQueues(ctx, vs.Worker.ResourceUid)
	if err != nil {
		return nil, err
	}
	return []QueueClaim{{"/spec/worker/resourceUid", "a QueueConsumer feeds this worker: a version of it may run on the queue's messages, so editor on the queues it consumes is required", qs}}, nil
}

func (VersionForm) URL() string         { return schemas.FormWorkerVersion }
func (VersionForm) Name() string        { return "WorkerVersion 0.5.0" }
func (VersionForm) Offerings() []string { return []string{OfferingEmbedded} }

func (VersionForm) Validate(spec, pi []byte) ([]schemas.Violation, error) {
	return schemas.ValidateResource(schemas.FormWorkerVersion, spec, pi)
}

func (VersionForm) References(spec []byte) ([]Reference, error) {
	sp, err := decodeSpec[api.WorkerVersionSpec](spec)
	if err != nil {
		return nil, err
	}
	out := []Reference{{"/spec/worker/resourceUid", sp.Worker.ResourceUid, schemas.FormModuleWorker}}
	if sp.QueueProducerBindings != nil {
		for i, b := range *sp.QueueProducerBindings {
			out = append(out, Reference{"/spec/queueProducerBindings/" + strconv.Itoa(i) + "/resource/resourceUid", b.Resource.ResourceUid, schemas.FormAtLeastOnceQueue})
		}
	}
	return out, nil
}

// Prepare keeps the private inputs (the secrets) and compiles the modules
// before the space's lock is taken, recording the handlers the main module
// exports; modules that do not load are invalid_spec.
func (VersionForm) Prepare(ctx context.Context, env *Env, rec *store.Resource, pi []byte) error {
	if pi != nil && !sameJSON(pi, emptyObject) {
		rec.PrivateInputs = compact(pi)
	}
	sp, err := decodeSpec[api.WorkerVersionSpec](rec.Spec)
	if err != nil {
		return err
	}
	total := 0
	for _, m := range sp.Modules {
		total += len(m.Content)
	}
	if total > MaxModuleBytes {
		return problem.Unprocessable(problem.CodeInvalidSpec, "the modules total %d bytes; at most %d (4 MiB) are allowed", total, MaxModuleBytes).
			WithPointer("/spec/modules", "the modules are too large")
	}
	v, err := VersionFromResource(*rec)
	if err != nil {
		return err
	}
	exports, err := env.Workers.Compile(ctx, v)
	if err != nil {
		var ce *abi.CompileError
		if errors.As(err, &ce) {
			p := problem.Unprocessable(problem.CodeInvalidSpec, "the modules do not load: %s", ce.Error())
			ptr := "/spec/modules"
			for i, m := range sp.Modules {
				if m.Name == ce.File {
					ptr = "/spec/modules/" + strconv.Itoa(i) + "/content"
				}
			}
			return p.WithPointer(ptr, ce.Error())
		}
		return fmt.Errorf("compiling version: %w", err)
	}
	slices.Sort(exports)
	rec.Exports = slices.Compact(exports)
	return nil
}

// CheckUpdate: no field of a WorkerVersion can change.
func (VersionForm) CheckUpdate(cur store.Resource, spec, pi []byte) error {
	if !sameJSON(cur.Spec, spec) {
		return problem.Unprocessable(problem.CodeInvalidSpec, "a WorkerVersion is immutable: create a new version and select it").
			WithPointer("/spec", "no field of a WorkerVersion can change")
	}
	if pi != nil && !sameJSON(cur.PrivateInputs, pi) {
		return problem.Unprocessable(problem.CodeInvalidSpec, "a WorkerVersion is immutable: create a new version and select it").
			WithPointer("/privateInputs", "the private inputs of a WorkerVersion cannot change")
	}
	return nil
}

func (VersionForm) Admit(context.Context, *Space, store.Resource, bool) error { return nil }

// Apply: a deleted version is evicted from the runtime's cache.
func (VersionForm) Apply(_ context.Context, env *Env, ch Change) ([]store.Mutation, error) {
	if ch.Kind == KindDelete {
		env.Workers.Evict(ch.UID)
	}
	return nil, nil
}

func (VersionForm) Undo(context.Context, *Env, Change) Failure { return FailUnknown }

func (VersionForm) Observe(context.Context, *Env, store.Resource, Lookup) (json.RawMessage, bool) {
	return nil, false
}

// Unobserved: a Version's observed stays {}.
func (VersionForm) Unobserved() bool { return true }

func (VersionForm) Rebuild(context.Context, *Env, store.Resource, string) error { return nil }

// Summary is a WorkerVersion spec with the content of its modules left out
// (each keeps its name): what a list item shows unless view=full, so that
// listing a space of large versions does not send (and copy) every module.
// A spec that does not decode is returned as it is.
func (VersionForm) Summary(spec json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(spec, &m) != nil {
		return spec
	}
	// Only the names are decoded: the content is scanned, not copied.
	var mods []struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(m["modules"], &mods) != nil {
		return spec
	}
	b, err := json.Marshal(mods)
	if err != nil {
		return spec
	}
	m["modules"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return spec
	}
	return out
}

// VersionFromResource is what the runtime needs of a WorkerVersion 0.5.0
// record: its modules, vars, secrets, bindings, worker and principal.
func VersionFromResource(r store.Resource) (*abi.Version, error) {
	if r.FormURL != schemas.FormWorkerVersion {
		return nil, fmt.Errorf("controller: %s is not a WorkerVersion", r.UID)
	}
	sp, err := decodeSpec[api.WorkerVersionSpec](r.Spec)
	if err != nil {
		return nil, err
	}
	v := &abi.Version{
		UID: r.UID, Space: r.Space, WorkerUID: sp.Worker.ResourceUid, Principal: r.Creator,
		MainModule: sp.MainModule, Vars: map[string]string{}, Secrets: map[string]string{},
	}
	for _, m := range sp.Modules {
		v.Modules = append(v.Modules, abi.Module{Name: m.Name, Content: m.Content})
	}
	if sp.Vars != nil {
		for k, val := range *sp.Vars {
			v.Vars[k] = val
		}
	}
	if sp.QueueProducerBindings != nil {
		for _, b := range *sp.QueueProducerBindings {
			v.Bindings = append(v.Bindings, abi.Binding{Name: b.Name, QueueUID: b.Resource.ResourceUid})
		}
	}
	if len(r.PrivateInputs) > 0 {
		var pi api.WorkerVersionPrivateInputs
		if err := json.Unmarshal(r.PrivateInputs, &pi); err != nil {
			return nil, err
		}
		if pi.Secrets != nil {
			for k, val := range *pi.Secrets {
				v.Secrets[k] = val
			}
		}
	}
	return v, nil
}
