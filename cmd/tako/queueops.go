package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/takoform/queuehost/gen/api"
)

// The purge and redrive extensions (spec/peers.md §Purge, §Redrive):
//
//	tako queues purge QUEUE
//	tako queues redrive DLQ [-to QUEUE] [-rate N]
//	tako queues cancel OPERATION
//
// purge and redrive wait for their Operation; on a terminal the progress
// is one line that each report overwrites, otherwise a plain line per
// change. Interrupting tako leaves the Operation running on the host
// (cancel a redrive with `tako queues cancel ID`).

// queueFlags are the flags of `tako queues`.
type queueFlags struct {
	to     string
	rate   int
	group  string
	dryRun bool
}

func (q *queueFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&q.to, "to", "", "redrive: the queue every message goes to (default: the queue each was dead-lettered from)")
	fs.IntVar(&q.rate, "rate", 0, "redrive: the most messages moved per second (default: the host's, 100)")
	fs.StringVar(&q.group, "group", "", "redrive: only the dead letters of this group (a fingerprint `tako queues deadletters` lists)")
	fs.BoolVar(&q.dryRun, "dry-run", false, "redrive: say how many would move, and move nothing")
}

func runQueueOp(ctx context.Context, c *common, cl *client, verb string, args []string, qf queueFlags, yes bool, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("queues %s %s", verb, map[string]string{"purge": "QUEUE", "redrive": "DLQ [-to QUEUE] [-rate N] [-group G] [-dry-run]", "cancel": "OPERATION"}[verb])}
	}
	if verb != "purge" && yes {
		return usageError{fmt.Errorf("queues %s takes no -yes", verb)}
	}
	if verb != "redrive" && (qf.to != "" || qf.rate != 0 || qf.group != "" || qf.dryRun) {
		return usageError{fmt.Errorf("queues %s takes none of -to, -rate, -group, -dry-run", verb)}
	}
	if verb == "cancel" {
		r, err := cl.api.CancelOperationWithResponse(ctx, cl.space, args[0])
		if err != nil {
			return err
		}
		if r.JSON200 == nil {
			return problemError("cancel Operation "+args[0], r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		return printQueueOp(c, stdout, "cancel", args[0], api.Operation(*r.JSON200))
	}
	q, err := cl.named(ctx, formQueue, args[0])
	if err != nil {
		return err
	}
	var op api.Operation
	what := verb + " queue " + args[0]
	switch verb {
	case "purge":
		if !yes {
			msg := fmt.Sprintf("remove every message of queue %s in space %s at %s?", args[0], cl.space, cl.base)
			if st, err := cl.api.GetQueueStatsWithResponse(ctx, cl.space, q.Uid); err == nil && st.JSON200 != nil {
				msg = fmt.Sprintf("remove all %d messages of queue %s in space %s at %s?", st.JSON200.Messages, args[0], cl.space, cl.base)
			}
			if err := confirm(msg, "purge", stderr); err != nil {
				return err
			}
		}
		r, err := cl.api.PurgeQueueWithResponse(ctx, cl.space, q.Uid, &api.PurgeQueueParams{})
		if err != nil {
			return err
		}
		if r.JSON202 == nil {
			return problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		op = *r.JSON202
	case "redrive":
		var body api.QueueRedriveRequest
		if qf.to != "" {
			t, err := cl.named(ctx, formQueue, qf.to)
			if err != nil {
				return err
			}
			body.TargetQueue = &api.Reference{ResourceUid: t.Uid}
		}
		if qf.rate != 0 {
			body.MaxMessagesPerSecond = &qf.rate
		}
		if qf.group != "" {
			body.Group = &qf.group
		}
		if qf.dryRun {
			body.DryRun = &qf.dryRun
		}
		r, err := cl.api.RedriveQueueWithResponse(ctx, cl.space, q.Uid, &api.RedriveQueueParams{}, body)
		if err != nil {
			return err
		}
		if r.JSON202 == nil {
			return problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
		}
		op = *r.JSON202
	}
	var progress io.Writer
	if c.output != "json" {
		progress = stdout
	}
	op, err = cl.follow(ctx, what, op, progress, isTerminal(stdout))
	if err != nil {
		return err
	}
	return printQueueOp(c, stdout, verb, args[0], op)
}

// progressLine is one report of a purge's or a redrive's progress.
func progressLine(verb, name string, op api.Operation) string {
	p := op.Progress
	state := string(op.State)
	if cancelled(op) {
		state = "cancelled"
	}
	n := func(v *int) int {
		if v == nil {
			return 0
		}
		return *v
	}
	switch {
	case p == nil:
		return fmt.Sprintf("%s %s: %s", verb, name, state)
	case p.DryRun != nil && *p.DryRun:
		return dryRunLine(name, p)
	case verb == "purge":
		return fmt.Sprintf("purge %s: %s, %d messages removed", name, state, n(p.Removed))
	}
	return fmt.Sprintf("%s %s: %s, %d of %d moved, %d skipped", verb, name, state, n(p.Moved), n(p.Total), n(p.Skipped))
}

// cancelled reports whether the Operation ended because someone cancelled
// it (spec/peers.md §Redrive, Cancel): an outcome, not a failure.
func cancelled(op api.Operation) bool {
	return op.State == api.OperationStateFailed && op.Error != nil && op.Error.Code == "operation_cancelled"
}

// follow waits for the Operation to end, reporting its progress on out
// (nil: silent): on a terminal one line that each report overwrites,
// otherwise a plain line for each change.
func (cl *client) follow(ctx context.Context, what string, op api.Operation, out io.Writer, tty bool) (api.Operation, error) {
	verb, name, _ := strings.Cut(what, " queue ")
	last := ""
	for op.State != api.OperationStateSucceeded && op.State != api.OperationStateFailed {
		if out != nil {
			line := progressLine(verb, name, op)
			switch {
			case tty:
				fmt.Fprintf(out, "\r\033[K%s", line)
			case line != last:
				fmt.Fprintln(out, line)
			}
			last = line
		}
		next, err := cl.operation(ctx, op.Id, 1)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%s: stopped waiting; Operation %s goes on (%w)", what, op.Id, ctx.Err())
			}
			if out != nil && tty {
				fmt.Fprintln(out)
			}
			return op, err
		}
		op = next
	}
	if out != nil && tty {
		fmt.Fprint(out, "\r\033[K")
	}
	if cancelled(op) {
		return op, nil
	}
	if op.State == api.OperationStateFailed {
		if op.Error != nil {
			if out != nil {
				fmt.Fprintln(out, progressLine(verb, name, op))
			}
			return op, problemError(what+" (Operation "+op.Id+")", op.Error.Status, op.Error, nil)
		}
		return op, errors.New(what + ": Operation " + op.Id + " failed")
	}
	return op, nil
}

func printQueueOp(c *common, stdout io.Writer, verb, name string, op api.Operation) error {
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(op)
	}
	if verb == "cancel" {
		verb = string(op.Kind)
		name = "(Operation " + op.Id + ")"
	}
	fmt.Fprintln(stdout, progressLine(verb, name, op))
	return nil
}
