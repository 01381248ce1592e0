package controller

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"strings"
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

// Page sizes of ResourcePage.
const (
	DefaultPageSize = 100
	MaxPageSize     = 500
)

// ResourcePage lists one page of the resources of space (of formURL when
// not empty) that p may read, oldest first (CreateTime, then UID): up to
// limit of them after the position pageToken names ("" for the first
// page), and the token of the next page ("" when this is the last). The
// records share their byte slices with the store when it can list without
// copying (the caller must not change them), so that a list costs one page
// of records, not a copy of every spec of the space.
func (c *Controller) ResourcePage(ctx context.Context, p *auth.Principal, space, formURL, pageToken string, limit int) ([]store.Resource, string, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	var after pagePos
	if pageToken != "" {
		var ok bool
		if after, ok = parsePageToken(pageToken); !ok {
			return nil, "", problem.InvalidRequest("pageToken is not a token this host issued (pass a nextPageToken unchanged)")
		}
	}
	if rl, ok := c.st.(store.ResourceLister); ok {
		return c.resourcePageFrom(ctx, rl, p, space, formURL, after, limit)
	}
	list, err := c.listResources(ctx, space, formURL)
	if err != nil {
		return nil, "", problem.Unavailable(err)
	}
	out := list[:0]
	for _, r := range list {
		if (pageToken == "" || after.before(r)) && p.Can(space, r.FormURL, auth.Read) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.Resource) int {
		return cmp.Or(a.CreateTime.Compare(b.CreateTime), strings.Compare(a.UID, b.UID))
	})
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	return out, PageTokenAfter(out[limit-1]), nil
}

// resourcePageFrom is ResourcePage on a store that reads pages itself: it
// reads pages of limit+1 records until it holds limit+1 that p may read or
// the space ends, so that memory holds about one page whatever the space
// holds (a principal that may read few Forms of a space costs more reads,
// never more memory).
func (c *Controller) resourcePageFrom(ctx context.Context, rl store.ResourceLister, p *auth.Principal, space, formURL string, after pagePos, limit int) ([]store.Resource, string, error) {
	q := store.ResourceQuery{Space: space, FormURL: formURL, Limit: limit + 1}
	if after.uid != "" {
		q.After = store.Resource{UID: after.uid, CreateTime: time.Unix(0, after.nanos).UTC()}
	}
	var out []store.Resource
	for {
		page, err := rl.ResourcePage(ctx, q)
		if err != nil {
			return nil, "", problem.Unavailable(err)
		}
		for _, r := range page {
			if p.Can(space, r.FormURL, auth.Read) {
				out = append(out, r)
			}
		}
		if len(out) > limit {
			out = out[:limit]
			return out, PageTokenAfter(out[limit-1]), nil
		}
		if len(page) < q.Limit {
			return out, "", nil
		}
		q.After = page[len(page)-1]
	}
}

// PageTokenAfter is the token of the page that starts after r: for a
// caller that ends a page of ResourcePage early.
func PageTokenAfter(r store.Resource) string {
	return pagePos{r.CreateTime.UnixNano(), r.UID}.token()
}

// pagePos is where a page ended: the last item's CreateTime and UID.
type pagePos struct {
	nanos int64
	uid   string
}

func (p pagePos) before(r store.Resource) bool {
	n := r.CreateTime.UnixNano()
	return n > p.nanos || n == p.nanos && r.UID > p.uid
}

func (p pagePos) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte("p1." + strconv.FormatInt(p.nanos, 10) + "." + p.uid))
}

func parsePageToken(tok string) (pagePos, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return pagePos{}, false
	}
	rest, ok := strings.CutPrefix(string(b), "p1.")
	if !ok {
		return pagePos{}, false
	}
	nanos, uid, ok := strings.Cut(rest, ".")
	if !ok || uid == "" {
		return pagePos{}, false
	}
	n, err := strconv.ParseInt(nanos, 10, 64)
	if err != nil {
		return pagePos{}, false
	}
	return pagePos{n, uid}, true
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
	if err := c.mayReadOperation(ctx, p, space, op); err != nil {
		return store.Operation{}, err
	}
	if wait > 0 && !op.Done() {
		op, err = c.Wait(ctx, op.ID, wait)
		if err != nil {
			return store.Operation{}, problem.Unavailable(err)
		}
	}
	return op, nil
}

// mayReadOperation is nil when p may read op: it may read the Form of the
// resource op changes.
func (c *Controller) mayReadOperation(ctx context.Context, p *auth.Principal, space string, op store.Operation) error {
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
				return problem.Forbidden("the principal may not read every Form in this space, which reading this Operation needs")
			}
		}
	} else if !p.Can(space, form, auth.Read) {
		return problem.Forbidden("the principal may not read %s resources in this space", c.forms.Name(form))
	}
	return nil
}
