package controller

import (
	"context"
	"errors"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

// Resource reads a resource of space that p may read.
func (c *Controller) Resource(ctx context.Context, p *auth.Principal, space, uid string) (store.Resource, error) {
	r, err := c.load(ctx, space, uid)
	if err != nil {
		return store.Resource{}, err
	}
	if !p.Can(space, r.FormURL, auth.Read) {
		return store.Resource{}, problem.Forbidden("the principal may not read %s resources in this space", c.forms.Name(r.FormURL))
	}
	return r, nil
}

// Resources lists the resources of space (of formURL when not empty) that
// p may read.
func (c *Controller) Resources(ctx context.Context, p *auth.Principal, space, formURL string) ([]store.Resource, error) {
	list, err := c.st.Resources(ctx, space, formURL)
	if err != nil {
		return nil, problem.Unavailable(err)
	}
	out := list[:0]
	for _, r := range list {
		if p.Can(space, r.FormURL, auth.Read) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Operation reads an Operation of space that p may read, waiting up to
// wait for it to be done.
func (c *Controller) Operation(ctx context.Context, p *auth.Principal, space, id string, wait time.Duration) (store.Operation, error) {
	op, err := c.st.Operation(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && op.Space != space) {
		return store.Operation{}, problem.NotFound("no Operation with this ID exists in this space")
	}
	if err != nil {
		return store.Operation{}, problem.Unavailable(err)
	}
	form := FormOfOperation(op)
	if form == "" {
		// Journaled before Operations had a FormURL and Done (so without
		// its intent): the resource's Form if it still exists, else the
		// principal must be able to read every Form.
		if r, err := c.st.Resource(ctx, op.ResourceUID); err == nil {
			form = r.FormURL
		}
	}
	if form == "" {
		for _, f := range c.forms.list {
			if !p.Can(space, f.URL(), auth.Read) {
				return store.Operation{}, problem.Forbidden("the principal may not read every Form in this space, which reading this Operation needs")
			}
		}
	} else if !p.Can(space, form, auth.Read) {
		return store.Operation{}, problem.Forbidden("the principal may not read %s resources in this space", c.forms.Name(form))
	}
	if wait > 0 && !op.Done() {
		op, err = c.Wait(ctx, op.ID, wait)
		if err != nil {
			return store.Operation{}, problem.Unavailable(err)
		}
	}
	return op, nil
}
