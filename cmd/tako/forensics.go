package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/takoform/queuehost/gen/api"
)

// The forensics extensions (spec/peers.md §Attempt history, §Dead-letter
// groups):
//
//	tako queues deadletters DLQ            the dead letters grouped by cause
//	tako queues redrive DLQ -group G       only that group
//	tako queues redrive DLQ -dry-run       what would move; moves nothing
//
// and `queues peek` prints each message's attempts under the table.

// runDeadLetters lists a dead-letter queue's groups, largest first.
func runDeadLetters(ctx context.Context, c *common, cl *client, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("queues deadletters DLQ")}
	}
	r, err := cl.named(ctx, formQueue, args[0])
	if err != nil {
		return err
	}
	buckets := 0
	g, err := cl.api.ListDeadLetterGroupsWithResponse(ctx, cl.space, r.Uid, &api.ListDeadLetterGroupsParams{Buckets: &buckets})
	if err != nil {
		return err
	}
	if g.JSON200 == nil {
		return problemError("dead-letter groups of queue "+args[0], g.StatusCode(), g.ApplicationproblemJSONDefault, g.Body)
	}
	if c.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(g.JSON200)
	}
	return printGroups(stdout, args[0], g.JSON200)
}

func printGroups(stdout io.Writer, queue string, g *api.QueueDeadLetterGroups) error {
	if len(g.Groups) == 0 {
		fmt.Fprintf(stdout, "no dead letters in queue %s\n", queue)
		return nil
	}
	fmt.Fprintf(stdout, "queue %s: %d dead letters in %d groups\n", queue, g.DeadLetters, len(g.Groups))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tCOUNT\tFIRST SEEN\tLAST SEEN\tEXAMPLE\tCAUSE")
	for _, gr := range g.Groups {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", gr.Fingerprint, gr.Count, msTime(gr.FirstSeenMillis), msTime(gr.LastSeenMillis),
			gr.ExampleMessageId, escapeControl(gr.Title))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "redrive one group with: tako queues redrive %s -group GROUP [-dry-run]\n", queue)
	return nil
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z") }

// printAttempts prints, under peek's table, the attempt history of each
// message that has one: an attempt a line, the error's first stack
// frames under a thrown one.
func printAttempts(stdout io.Writer, items []api.QueueMessageInfo) {
	for _, m := range items {
		if m.AttemptHistory == nil || len(*m.AttemptHistory) == 0 {
			continue
		}
		group := ""
		if m.DeadLetterGroup != nil {
			group = " (group " + *m.DeadLetterGroup + ")"
		}
		fmt.Fprintf(stdout, "\nattempts of %s%s:\n", m.Id, group)
		if m.TraceUrl != nil {
			fmt.Fprintf(stdout, "  trace %s\n", escapeControl(*m.TraceUrl))
		} else if m.TraceId != nil {
			fmt.Fprintf(stdout, "  trace %s\n", *m.TraceId)
		}
		for _, a := range *m.AttemptHistory {
			fmt.Fprintf(stdout, "  #%d %s %s, %s", a.Attempt, msTime(a.StartedAtMillis), a.Outcome, time.Duration(a.DurationMillis)*time.Millisecond)
			if a.Host != nil {
				fmt.Fprintf(stdout, " on %s", escapeControl(*a.Host))
			}
			if a.WorkerVersionUid != nil {
				fmt.Fprintf(stdout, " (version %s)", *a.WorkerVersionUid)
			}
			if a.Outcome == "retried" && a.DelaySeconds != nil {
				fmt.Fprintf(stdout, ", retry in %ds", *a.DelaySeconds)
			}
			fmt.Fprintln(stdout)
			if msg := attemptError(a); msg != "" {
				fmt.Fprintf(stdout, "     %s\n", escapeControl(msg))
			}
			if a.ErrorStack != nil {
				frames := 0
				for line := range strings.SplitSeq(*a.ErrorStack, "\n") {
					if line = strings.TrimSpace(line); strings.HasPrefix(line, "at ") && frames < 3 {
						fmt.Fprintf(stdout, "       %s\n", escapeControl(line))
						frames++
					}
				}
			}
		}
	}
}

func attemptError(a api.QueueAttempt) string {
	name, msg := "", ""
	if a.ErrorName != nil {
		name = *a.ErrorName
	}
	if a.ErrorMessage != nil {
		msg = *a.ErrorMessage
	}
	switch {
	case name != "" && msg != "":
		return name + ": " + msg
	case name != "":
		return name
	}
	return msg
}

// dryRunLine is the report of a redrive's dry run.
func dryRunLine(name string, p *api.QueueOperationProgress) string {
	n := func(v *int) int {
		if v == nil {
			return 0
		}
		return *v
	}
	g := ""
	if p.Group != nil && *p.Group != "" {
		g = " of group " + *p.Group
	}
	return fmt.Sprintf("redrive %s (dry run%s): %d of %d would move, %d would be skipped; nothing moved", name, g, n(p.WouldMove), n(p.Total), n(p.Skipped))
}
