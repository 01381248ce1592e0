package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/takoform/queuehost/gen/api"
)

// opsFlags are the flags of `tako ops list`.
type opsFlags struct {
	state, resource string
	limit           int
}

// runOpsList prints the space's recent Operations, newest first, through
// GET /v2/spaces/{space}/operations, reading pages until -limit are
// printed or none remain. Resources are shown by name when they still
// exist.
func runOpsList(ctx context.Context, c *common, of opsFlags, stdout io.Writer) error {
	if of.limit < 1 {
		return usageError{errors.New("ops list: -limit must be at least 1")}
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	all, err := cl.list(ctx, "")
	if err != nil {
		return err
	}
	names := map[string]string{}
	for name, r := range all {
		names[r.Uid] = name
	}
	params := &api.ListOperationsParams{}
	if of.state != "" {
		st := api.ListOperationsParamsState(of.state)
		params.State = &st
	}
	if of.resource != "" {
		uid := of.resource
		if r, ok := all[of.resource]; ok {
			uid = r.Uid
		}
		params.ResourceUid = &uid
	}
	var ops []api.Operation
	for len(ops) < of.limit {
		page := min(of.limit-len(ops), 200)
		params.Limit = &page
		r, err := cl.api.ListOperationsWithResponse(ctx, cl.space, params)
		if err != nil {
			return err
		}
		if r.JSON200 == nil {
			return problemError("list Operations of space "+cl.space, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		ops = append(ops, r.JSON200.Items...)
		if r.JSON200.NextPageToken == nil {
			break
		}
		params.PageToken = r.JSON200.NextPageToken
	}
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ops)
	}
	if len(ops) == 0 {
		fmt.Fprintf(stdout, "no operations found in space %s\n", cl.space)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CREATED\tID\tKIND\tRESOURCE\tSTATE/EFFECT\tERROR")
	for _, op := range ops {
		what := op.ResourceUid
		if n, ok := names[op.ResourceUid]; ok {
			what = n + " (" + op.ResourceUid + ")"
		}
		code := ""
		if op.Error != nil && op.Error.Code != "" {
			code = op.Error.Code
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%s\t%s\n", op.CreateTime.UTC().Format(time.RFC3339), op.Id, op.Kind, what, op.State, op.Effect, code)
	}
	return tw.Flush()
}
