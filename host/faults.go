package host

// Fault injection, for tests only.
//
// Why this exists: the Forms' rules for failures (QC-CRUD-19 to QC-CRUD-25,
// Q-OPS-21 to Q-OPS-27) — backend failures are
// explicit, an unknown outcome is reported unknown/reconciling and never
// none, no second resource while an outcome is unknown, an unknown
// settlement is not treated as done — can only be checked when the backend
// fails on command. The conformance kit's @store-faults scenarios and the host's
// own tests use this hook; nothing else does.
//
// It is off unless a Go caller sets Config.Faults (the conformance runner's
// in-process mode, tests). cmd/takohost never sets it and there is no flag,
// environment variable, file or route that does: the public API cannot
// enable it.
//
// A rule makes the next Count Apply calls that match it fail in one of two
// ways:
//
//   - FailWrites: nothing is applied and Apply returns store.ErrUnavailable,
//     as a full disk would (the Store contract).
//   - UnknownOutcome: the mutations are applied (durably) and Apply returns
//     an error anyway, as a backend does whose commit acknowledgement is lost
//     (a dropped database connection after COMMIT). This deliberately breaks
//     the Store promise "on error nothing was applied": the host cannot
//     know, and must treat the outcome as unknown.
//
// Rules speak the kit's host-neutral fault vocabulary (features/README.md
// §fault control), not this host's Go types: a rule names targets — what a
// write does in the Forms' terms ("sends", "settlements", "operations", ...)
// — and targetsOf maps each store mutation onto one. An Apply matches a rule
// when one of its mutations is of one of the rule's Targets (any when
// empty) and, on that same mutation, names the rule's Scope (any when
// empty) as its space, resource UID or queue UID. The first Skip matching
// Applies pass untouched.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/takoform/queuehost/runtime/store"
)

// FaultMode is what a rule does to a matching Apply.
type FaultMode int

// Fault modes.
const (
	FailWrites     FaultMode = iota + 1 // nothing applied, store.ErrUnavailable
	UnknownOutcome                      // applied, error returned anyway
)

// FaultTargets are the targets of the kit's fault vocabulary, in the
// Forms' terms (features/README.md §fault control):
//
//	sends             accepting messages (send, sendBatch, dead-lettering into a queue)
//	deliveries        recording that messages were handed to a handler (their attempts)
//	settlements       acknowledgements, retries and other removals of messages (expiry, discard)
//	message-deletion  deleting all of a queue's messages when the queue is deleted
//	resources         writing or deleting a resource's record
//	operations        writing or dropping an Operation's record
//	idempotency       writing or dropping an Idempotency-Key record
var FaultTargets = []string{
	"sends", "deliveries", "settlements", "message-deletion", "resources", "operations", "idempotency",
}

// FaultRule is one armed fault.
type FaultRule struct {
	Mode    FaultMode
	Count   int      // matching Applies to affect, at least 1
	Targets []string // of FaultTargets; empty: any
	Scope   string   // a space, resource UID or queue UID; "": any
	Skip    int      // matching Applies let through before the first affected one
	// hit, when set (the host's own tests), is sent to, without blocking,
	// each time the rule affects an Apply: the event a test waits for
	// instead of polling or sleeping.
	hit chan<- struct{}
}

// Faults is the set of armed rules. The zero value has none; it is safe for
// concurrent use and may be shared across a restart (host.New with the same
// Config.Faults), so that armed rules survive it.
type Faults struct {
	mu    sync.Mutex
	rules []*FaultRule
	// paused are the scopes (a space or a resource UID; "" for every
	// resource) in which the host makes no observation
	// (pause-observation), until cleared.
	paused []string
}

// PauseObservation stops the host's observation of the resources of scope
// (a space or a resource UID; every resource when ""): the controller
// makes no observation of them, so observed keeps what was confirmed
// before ({} for a resource created since), until Clear of that scope.
func (f *Faults) PauseObservation(scope string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.paused, scope) {
		f.paused = append(f.paused, scope)
	}
}

// ObservationPaused reports whether observation of the resource uid of
// space is paused (controller.Options.ObservationPaused).
func (f *Faults) ObservationPaused(space, uid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.paused {
		if s == "" || s == space || s == uid {
			return true
		}
	}
	return false
}

// Add arms a rule.
func (f *Faults) Add(r FaultRule) error {
	if r.Mode != FailWrites && r.Mode != UnknownOutcome {
		return errors.New("faults: unknown mode")
	}
	if r.Count < 1 || r.Skip < 0 {
		return errors.New("faults: count must be at least 1 and skip at least 0")
	}
	for _, t := range r.Targets {
		if !slices.Contains(FaultTargets, t) {
			return fmt.Errorf("faults: unknown target %q (one of %s)", t, strings.Join(FaultTargets, ", "))
		}
	}
	r.Targets = slices.Clone(r.Targets)
	f.mu.Lock()
	f.rules = append(f.rules, &r)
	f.mu.Unlock()
	return nil
}

// Clear disarms the rules of scope and resumes its observation, or does
// so for every rule and pause when scope is "".
func (f *Faults) Clear(scope string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = slices.DeleteFunc(f.rules, func(r *FaultRule) bool { return scope == "" || r.Scope == scope })
	f.paused = slices.DeleteFunc(f.paused, func(s string) bool { return scope == "" || s == scope })
}

// Command runs one verb of the kit's fault-control contract
// (features/README.md §host-control):
//
//	fail-writes N [TARGETS] [scope=S] [skip=M]
//	unknown-outcome N [TARGETS] [scope=S] [skip=M]
//	pause-observation [scope=S]   (the observation-control capability)
//	clear [scope=S]
//
// TARGETS is a comma-separated list of FaultTargets, or "any".
func (f *Faults) Command(args []string) error {
	if len(args) == 0 {
		return errors.New("faults: no verb")
	}
	var r FaultRule
	switch args[0] {
	case "pause-observation":
		scope := ""
		for _, a := range args[1:] {
			v, ok := strings.CutPrefix(a, "scope=")
			if !ok {
				return fmt.Errorf("faults: pause-observation takes only scope=S, not %q", a)
			}
			scope = v
		}
		f.PauseObservation(scope)
		return nil
	case "fail-writes":
		r.Mode = FailWrites
	case "unknown-outcome":
		r.Mode = UnknownOutcome
	case "clear":
		scope := ""
		for _, a := range args[1:] {
			v, ok := strings.CutPrefix(a, "scope=")
			if !ok {
				return fmt.Errorf("faults: clear takes only scope=S, not %q", a)
			}
			scope = v
		}
		f.Clear(scope)
		return nil
	default:
		return fmt.Errorf("faults: unknown verb %q", args[0])
	}
	if len(args) < 2 {
		return fmt.Errorf("faults: %s needs a count", args[0])
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("faults: count %q: %w", args[1], err)
	}
	r.Count = n
	for _, a := range args[2:] {
		switch {
		case strings.HasPrefix(a, "scope="):
			r.Scope = strings.TrimPrefix(a, "scope=")
		case strings.HasPrefix(a, "skip="):
			if r.Skip, err = strconv.Atoi(strings.TrimPrefix(a, "skip=")); err != nil {
				return fmt.Errorf("faults: %q: %w", a, err)
			}
		case a == "any":
		default:
			r.Targets = append(r.Targets, strings.Split(a, ",")...)
		}
	}
	return f.Add(r)
}

// take finds the first armed rule the Apply matches and consumes one use.
func (f *Faults) take(muts []store.Mutation) FaultMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if !r.matches(muts) {
			continue
		}
		if r.Skip > 0 {
			r.Skip--
			continue
		}
		if r.Count--; r.Count == 0 {
			f.rules = slices.Delete(f.rules, i, i+1)
		}
		if r.hit != nil {
			select {
			case r.hit <- struct{}{}:
			default:
			}
		}
		return r.Mode
	}
	return 0
}

func (r *FaultRule) matches(muts []store.Mutation) bool {
	for _, m := range muts {
		target, names := targetsOf(m)
		if (len(r.Targets) == 0 || slices.Contains(r.Targets, target)) && (r.Scope == "" || slices.Contains(names, r.Scope)) {
			return true
		}
	}
	return false
}

// targetsOf maps one of this host's store mutations onto the target of
// the fault vocabulary it falls under, with the spaces and UIDs it names.
// This table is the reference host's whole adapter: another host maps its
// own writes onto the same targets.
func targetsOf(m store.Mutation) (string, []string) {
	switch m := m.(type) {
	case store.PutResource:
		return "resources", []string{m.Resource.Space, m.Resource.UID}
	case store.DeleteResource:
		return "resources", []string{m.UID}
	case store.PutOperation:
		return "operations", []string{m.Operation.Space, m.Operation.ResourceUID}
	case store.DeleteOperation:
		return "operations", nil
	case store.PutIdempotency, store.DeleteIdempotency:
		return "idempotency", nil
	case store.AcceptMessage:
		return "sends", []string{m.Message.Queue}
	case store.DeliverMessages:
		return "deliveries", []string{m.Queue}
	case store.ExtendLease:
		return "deliveries", []string{m.Queue}
	case store.RetryMessage:
		return "settlements", []string{m.Queue}
	case store.RemoveMessages:
		return "settlements", []string{m.Queue}
	case store.DropQueue:
		return "message-deletion", []string{m.Queue}
	}
	return fmt.Sprintf("%T", m), nil
}

// observationPaused is the controller's pause hook: nil without the fault
// hook, so that nothing but a Go caller that set Config.Faults can pause
// observation.
func observationPaused(f *Faults) func(space, uid string) bool {
	if f == nil {
		return nil
	}
	return f.ObservationPaused
}

// faultyStore is the store with the armed rules applied to Apply.
type faultyStore struct {
	store.Store
	f *Faults
}

func (s faultyStore) Apply(ctx context.Context, muts ...store.Mutation) error {
	switch s.f.take(muts) {
	case FailWrites:
		return fmt.Errorf("%w: injected fault (fail-writes): nothing was applied", store.ErrUnavailable)
	case UnknownOutcome:
		if err := s.Store.Apply(ctx, muts...); err != nil {
			return err
		}
		return fmt.Errorf("%w: injected fault (unknown-outcome): the write was applied but its acknowledgement was lost", store.ErrUnavailable)
	}
	return s.Store.Apply(ctx, muts...)
}

// ResourcesView passes the inner store's copy-free listing through (the
// observer's full pass uses it), or lists with copies when it has none.
func (s faultyStore) ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error) {
	if v, ok := s.Store.(interface {
		ResourcesView(ctx context.Context, space, formURL string) ([]store.Resource, error)
	}); ok {
		return v.ResourcesView(ctx, space, formURL)
	}
	return s.Store.Resources(ctx, space, formURL)
}

// Operations passes store.OperationLister through.
func (s faultyStore) Operations(ctx context.Context, q store.OperationQuery) ([]store.Operation, error) {
	if l, ok := s.Store.(store.OperationLister); ok {
		return l.Operations(ctx, q)
	}
	return nil, errors.New("host: the store does not list Operations")
}

// ResourcePage passes store.ResourceLister through, or pages a listing.
func (s faultyStore) ResourcePage(ctx context.Context, q store.ResourceQuery) ([]store.Resource, error) {
	if l, ok := s.Store.(store.ResourceLister); ok {
		return l.ResourcePage(ctx, q)
	}
	list, err := s.Store.Resources(ctx, q.Space, q.FormURL)
	if err != nil {
		return nil, err
	}
	return store.PageOf(list, q), nil
}

// CountResources passes store.ResourceCounter through, or counts a listing.
func (s faultyStore) CountResources(ctx context.Context, space string) (int, error) {
	if c, ok := s.Store.(store.ResourceCounter); ok {
		return c.CountResources(ctx, space)
	}
	list, err := s.Store.Resources(ctx, space, "")
	return len(list), err
}

// capabilities is the document GET /v2/capabilities serves: what the
// conformance kit may exercise on this host (features/README.md
// §Capabilities). Every reference host can be restarted on its data and has
// a handler time limit; only one with the test-only fault hook implements
// the fault vocabulary.
func capabilities(cfg Config) map[string]any {
	caps := []string{"restart", "handler-limit", "ext-pause", "ext-inspect", "ext-delete-if-idle", "ext-serialized", "ext-purge", "ext-redrive", "ext-publish", "ext-pull", "ext-forensics"}
	if cfg.Faults != nil {
		caps = append(caps, "store-faults", "observation-control")
	}
	return map[string]any{
		"host":                  map[string]any{"name": "takoform queuehost"},
		"capabilities":          caps,
		"handlerTimeoutSeconds": cfg.HandlerTimeout.Seconds(),
	}
}
