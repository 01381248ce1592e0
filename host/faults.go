package host

// Fault injection, for tests only.
//
// Why this exists: the Forms' rules for failures (QueueConsumer §CRUD、拒否、
// 障害復旧, AtLeastOnceQueue §操作、失敗、復旧) — backend failures are
// explicit, an unknown outcome is reported unknown/reconciling and never
// none, no second resource while an outcome is unknown, an unknown
// settlement is not treated as done — can only be checked when the backend
// fails on command. The conformance kit's @fault scenarios and the host's
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
// An Apply matches a rule when one of its mutations is of one of the rule's
// Kinds (any kind when empty) and, on that same mutation, names the rule's
// Scope (any when empty) as its space, resource UID or queue UID. The first
// Skip matching Applies pass untouched.

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

// FaultKinds are the mutation kinds a rule may name (the store.Mutation
// type names).
var FaultKinds = []string{
	"PutResource", "DeleteResource", "PutOperation", "DeleteOperation", "PutIdempotency", "DeleteIdempotency",
	"AcceptMessage", "DeliverMessages", "RetryMessage", "RemoveMessages", "DropQueue",
}

// FaultRule is one armed fault.
type FaultRule struct {
	Mode  FaultMode
	Count int      // matching Applies to affect, at least 1
	Kinds []string // of FaultKinds; empty: any kind
	Scope string   // a space, resource UID or queue UID; "": any
	Skip  int      // matching Applies let through before the first affected one
}

// Faults is the set of armed rules. The zero value has none; it is safe for
// concurrent use and may be shared across a restart (host.New with the same
// Config.Faults), so that armed rules survive it.
type Faults struct {
	mu    sync.Mutex
	rules []*FaultRule
}

// Add arms a rule.
func (f *Faults) Add(r FaultRule) error {
	if r.Mode != FailWrites && r.Mode != UnknownOutcome {
		return errors.New("faults: unknown mode")
	}
	if r.Count < 1 || r.Skip < 0 {
		return errors.New("faults: count must be at least 1 and skip at least 0")
	}
	for _, k := range r.Kinds {
		if !slices.Contains(FaultKinds, k) {
			return fmt.Errorf("faults: unknown mutation kind %q (one of %s)", k, strings.Join(FaultKinds, ", "))
		}
	}
	r.Kinds = slices.Clone(r.Kinds)
	f.mu.Lock()
	f.rules = append(f.rules, &r)
	f.mu.Unlock()
	return nil
}

// Clear disarms the rules of scope, or every rule when scope is "".
func (f *Faults) Clear(scope string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = slices.DeleteFunc(f.rules, func(r *FaultRule) bool { return scope == "" || r.Scope == scope })
}

// Command runs one verb of the kit's fault-control contract
// (features/README.md §host-control):
//
//	fail-writes N [KINDS] [scope=S] [skip=M]
//	unknown-outcome N [KINDS] [scope=S] [skip=M]
//	clear [scope=S]
//
// KINDS is a comma-separated list of FaultKinds, or "any".
func (f *Faults) Command(args []string) error {
	if len(args) == 0 {
		return errors.New("faults: no verb")
	}
	var r FaultRule
	switch args[0] {
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
			r.Kinds = append(r.Kinds, strings.Split(a, ",")...)
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
		return r.Mode
	}
	return 0
}

func (r *FaultRule) matches(muts []store.Mutation) bool {
	for _, m := range muts {
		kind, names := describe(m)
		if (len(r.Kinds) == 0 || slices.Contains(r.Kinds, kind)) && (r.Scope == "" || slices.Contains(names, r.Scope)) {
			return true
		}
	}
	return false
}

// describe is a mutation's kind and the spaces and UIDs it names.
func describe(m store.Mutation) (string, []string) {
	switch m := m.(type) {
	case store.PutResource:
		return "PutResource", []string{m.Resource.Space, m.Resource.UID}
	case store.DeleteResource:
		return "DeleteResource", []string{m.UID}
	case store.PutOperation:
		return "PutOperation", []string{m.Operation.Space, m.Operation.ResourceUID}
	case store.DeleteOperation:
		return "DeleteOperation", nil
	case store.PutIdempotency:
		return "PutIdempotency", nil
	case store.DeleteIdempotency:
		return "DeleteIdempotency", nil
	case store.AcceptMessage:
		return "AcceptMessage", []string{m.Message.Queue}
	case store.DeliverMessages:
		return "DeliverMessages", []string{m.Queue}
	case store.RetryMessage:
		return "RetryMessage", []string{m.Queue}
	case store.RemoveMessages:
		return "RemoveMessages", []string{m.Queue}
	case store.DropQueue:
		return "DropQueue", []string{m.Queue}
	}
	return fmt.Sprintf("%T", m), nil
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
