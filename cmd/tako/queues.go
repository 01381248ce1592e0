package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/takoform/queuehost/gen/api"
)

// QueueInfo is one line of `tako queues`.
type QueueInfo struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	// Messages is the count of messages the queue holds now.
	Messages *int   `json:"messages"`
	Active   bool   `json:"active"`
	State    string `json:"state"`
}

// runQueues lists the space's queues with their counts and delivery
// state, or pauses or resumes one (the ext-pause host extension,
// spec/peers.md).
func runQueues(ctx context.Context, c *common, args []string, qf queueFlags, yes bool, stdout, stderr io.Writer) error {
	verb := "list"
	if len(args) > 0 {
		verb = args[0]
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	switch verb {
	case "list":
		if len(args) > 1 {
			return usageError{errors.New("queues list takes no argument")}
		}
		qs, err := cl.list(ctx, formQueue)
		if err != nil {
			return err
		}
		var out []QueueInfo
		for name, r := range qs {
			qi := QueueInfo{Name: name, UID: r.Uid, State: string(r.State), Active: true}
			var obs api.AtLeastOnceQueueObserved
			if json.Unmarshal(r.Observed, &obs) == nil {
				qi.Messages = obs.MessageCount
			}
			// The live counts and delivery state (ext-inspect).
			st, err := cl.api.GetQueueStatsWithResponse(ctx, cl.space, r.Uid)
			if err != nil {
				return err
			}
			if st.JSON200 == nil {
				return problemError("stats of queue "+name, st.StatusCode(), st.ApplicationproblemJSONDefault, st.Body)
			}
			n := st.JSON200.Messages
			qi.Messages, qi.Active = &n, st.JSON200.Active
			out = append(out, qi)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		if c.output == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if out == nil {
				out = []QueueInfo{}
			}
			return enc.Encode(out)
		}
		if len(out) == 0 {
			fmt.Fprintf(stdout, "no queues found in space %s\n", cl.space)
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tMESSAGES\tDELIVERY\tSTATE\tUID")
		for _, q := range out {
			n := "?"
			if q.Messages != nil {
				n = fmt.Sprint(*q.Messages)
			}
			d := "active"
			if !q.Active {
				d = "paused"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", q.Name, n, d, q.State, q.UID)
		}
		return tw.Flush()
	case "stats", "peek":
		if len(args) != 2 {
			return usageError{fmt.Errorf("queues %s QUEUE", verb)}
		}
		r, err := cl.named(ctx, formQueue, args[1])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if verb == "stats" {
			st, err := cl.api.GetQueueStatsWithResponse(ctx, cl.space, r.Uid)
			if err != nil {
				return err
			}
			if st.JSON200 == nil {
				return problemError("stats of queue "+args[1], st.StatusCode(), st.ApplicationproblemJSONDefault, st.Body)
			}
			if c.output == "json" {
				return enc.Encode(st.JSON200)
			}
			s := st.JSON200
			fmt.Fprintf(stdout, "queue %s: %d messages, %d bytes (available %d, delayed %d, retry-waiting %d, in flight %d, removing %d), %d batches in flight, delivery active %v\n",
				args[1], s.Messages, s.Bytes, s.ByState.Available, s.ByState.Delayed, s.ByState.RetryWaiting, s.ByState.InFlight, s.ByState.Removing, s.BatchesInFlight, s.Active)
			return nil
		}
		limit := 20
		page, err := cl.api.ListQueueMessagesWithResponse(ctx, cl.space, r.Uid, &api.ListQueueMessagesParams{Limit: &limit})
		if err != nil {
			return err
		}
		if page.JSON200 == nil {
			return problemError("messages of queue "+args[1], page.StatusCode(), page.ApplicationproblemJSONDefault, page.Body)
		}
		if c.output == "json" {
			return enc.Encode(page.JSON200)
		}
		if err := printMessages(stdout, args[1], page.JSON200.Items); err != nil {
			return err
		}
		printAttempts(stdout, page.JSON200.Items)
		return nil
	case "deadletters":
		return runDeadLetters(ctx, c, cl, args[1:], stdout)
	case "purge", "redrive", "cancel":
		return runQueueOp(ctx, c, cl, verb, args[1:], qf, yes, stdout, stderr)
	case "pause", "resume":
		if len(args) != 2 {
			return usageError{fmt.Errorf("queues %s QUEUE", verb)}
		}
		r, err := cl.named(ctx, formQueue, args[1])
		if err != nil {
			return err
		}
		d, err := cl.api.SetQueueDeliveryWithResponse(ctx, cl.space, r.Uid, api.QueueDeliveryRequest{Active: verb == "resume"})
		if err != nil {
			return err
		}
		if d.JSON200 == nil {
			return problemError(verb+" queue "+args[1], d.StatusCode(), d.ApplicationproblemJSONDefault, d.Body)
		}
		state := "active"
		if !d.JSON200.Active {
			state = "paused"
		}
		if c.output == "json" {
			return json.NewEncoder(stdout).Encode(map[string]any{"name": args[1], "uid": r.Uid, "active": d.JSON200.Active})
		}
		fmt.Fprintf(stdout, "queue %s: delivery %s\n", args[1], state)
		return nil
	}
	return unknownSub("queues", verb, findCommand("queues").subs)
}

// printMessages is peek's table: a message per line, its body previewed
// (escaped), and for one that arrived by dead-lettering the queue it came
// from, why, its ID there and the deliveries it had.
func printMessages(stdout io.Writer, queue string, items []api.QueueMessageInfo) error {
	if len(items) == 0 {
		fmt.Fprintf(stdout, "no messages found in queue %s\n", queue)
		return nil
	}
	dead := false
	for _, m := range items {
		dead = dead || m.DeadLetter != nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if dead {
		fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tSIZE\tFROM QUEUE\tREASON\tORIGINAL ID\tATTEMPTS THERE\tBODY")
	} else {
		fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tSIZE\tBODY")
	}
	for _, m := range items {
		body := fmt.Sprintf("%q", m.BodyPreview)
		if m.BodyTruncated {
			body += "…"
		}
		if !dead {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", m.Id, m.State, m.Attempts, m.Size, body)
			continue
		}
		from, reason, orig, there := "-", "-", "-", "-"
		if d := m.DeadLetter; d != nil {
			from = d.SourceQueueUid
			if d.SourceQueueName != nil {
				from = *d.SourceQueueName
			}
			reason = string(d.Reason)
			if d.OriginalMessageId != nil {
				orig = *d.OriginalMessageId
			}
			there = fmt.Sprint(d.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", m.Id, m.State, m.Attempts, m.Size, escapeControl(from), reason, orig, there, body)
	}
	return tw.Flush()
}
