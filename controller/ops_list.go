package controller

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

// Operation list page sizes.
const (
	DefaultOperationPageSize = 50
	MaxOperationPageSize     = 200
)

// OperationStates are the states an Operation list filters by.
var OperationStates = []string{store.OpPending, store.OpRunning, store.OpSucceeded, store.OpFailed, store.OpReconciling}

// OperationPage lists the space's Operations that p may read, newest
// first, optionally only those in state or of one resource: up to limit
// of them after the position pageToken names ("" for the first page), and
// the token of the next page ("" when none follows). Operations expire a
// day after they finish (Store.ExpireRecords), so the list is the recent
// history, not all of it.
func (c *Controller) OperationPage(ctx context.Context, p *auth.Principal, space, state, resourceUID, pageToken string, limit int) ([]store.Operation, string, error) {
	if limit <= 0 {
		limit = DefaultOperationPageSize
	}
	limit = min(limit, MaxOperationPageSize)
	if state != "" && !contains(OperationStates, state) {
		return nil, "", problem.InvalidRequest("state must be one of %s", strings.Join(OperationStates, ", "))
	}
	ol, ok := c.st.(store.OperationLister)
	if !ok {
		return nil, "", problem.Unavailable(errNoOperationList)
	}
	q := store.OperationQuery{Space: space, State: state, ResourceUID: resourceUID, Limit: limit + 1}
	if pageToken != "" {
		var ok bool
		if q.Before, ok = parseOperationToken(pageToken); !ok {
			return nil, "", problem.InvalidRequest("pageToken is not a token this host issued (pass a nextPageToken unchanged)")
		}
	}
	var out []store.Operation
	for {
		page, err := ol.Operations(ctx, q)
		if err != nil {
			return nil, "", problem.Unavailable(err)
		}
		for _, op := range page {
			// Operations on Forms p may not read are left out, as a
			// resource list leaves out such resources.
			if c.mayReadOperation(ctx, p, space, op) == nil {
				out = append(out, op)
			}
		}
		if len(out) > limit {
			out = out[:limit]
			return out, operationToken(out[limit-1]), nil
		}
		if len(page) < q.Limit {
			return out, "", nil
		}
		q.Before = page[len(page)-1]
	}
}

type operationListError struct{}

func (operationListError) Error() string { return "the store does not list Operations" }

var errNoOperationList = operationListError{}

// operationToken names the position after op: its CreateTime and ID.
func operationToken(op store.Operation) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o1." + strconv.FormatInt(op.CreateTime.UnixNano(), 10) + "." + op.ID))
}

func parseOperationToken(tok string) (store.Operation, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return store.Operation{}, false
	}
	rest, ok := strings.CutPrefix(string(b), "o1.")
	if !ok {
		return store.Operation{}, false
	}
	n, id, ok := strings.Cut(rest, ".")
	if !ok || id == "" {
		return store.Operation{}, false
	}
	nanos, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return store.Operation{}, false
	}
	return store.Operation{ID: id, CreateTime: time.Unix(0, nanos).UTC()}, true
}
