package controller

import (
	"context"
	"errors"
	"slices"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

// Space is admission's view of one space, read under the space's lock:
// Forms check their rules (Admit) against it. It reads only what a check
// asks for, so that admission costs the same however many unrelated
// resources the space holds.
type Space struct {
	c         *Controller
	name      string
	self      string // the UID being created, updated or deleted
	principal *auth.Principal
	got       map[string]store.Resource
}

func (c *Controller) space(name, self string, p *auth.Principal) *Space {
	return &Space{c: c, name: name, self: self, principal: p, got: map[string]store.Resource{}}
}

// Name is the space's name.
func (sp *Space) Name() string { return sp.name }

// Self is the UID of the resource being admitted.
func (sp *Space) Self() string { return sp.self }

// Get reads a resource of the space by UID; false when the space holds
// none (another space's UID reads like a missing one).
func (sp *Space) Get(ctx context.Context, uid string) (store.Resource, bool, error) {
	if r, ok := sp.got[uid]; ok {
		return r, true, nil
	}
	r, err := sp.c.readRecord(ctx, uid)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Space != sp.name) { // mutate:cross-space-reference
		return store.Resource{}, false, nil
	}
	if err != nil {
		return store.Resource{}, false, problem.Unavailable(err)
	}
	sp.got[uid] = r
	return r, true, nil
}

// ReferencedBy lists the resources of the space, other than the one being
// admitted, whose specs reference uid, with the references that name it.
func (sp *Space) ReferencedBy(ctx context.Context, uid string) ([]Referrer, error) {
	list, err := sp.c.referencedBy(ctx, sp.name, uid)
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	out := list[:0]
	for _, r := range list {
		if r.Resource.UID != sp.self {
			out = append(out, r)
		}
	}
	return out, nil
}

// refsOf is the references of a stored record.
func (c *Controller) refsOf(r store.Resource) ([]Reference, error) {
	f, ok := c.forms.Form(r.FormURL)
	if !ok {
		return nil, nil
	}
	return f.References(r.Spec)
}

// Referrer is a resource that references another, with the references
// that name it.
type Referrer struct {
	Resource store.Resource
	Refs     []Reference
}

// Via reports whether one of the references is at pointer.
func (r Referrer) Via(pointers ...string) bool {
	for _, rf := range r.Refs {
		if slices.Contains(pointers, rf.Pointer) {
			return true
		}
	}
	return false
}
