package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
)

// The inspection extension (spec/peers.md §Inspection): counts by state
// and a paged listing of a queue's messages, for viewers of the queue.

// Listing limits.
const (
	DefaultMessagePage = 20
	MaxMessagePage     = 100
	// PreviewBytes bounds the body preview of a listed message.
	PreviewBytes = 256
)

// MessageView is one listed message with its bounded body preview.
type MessageView struct {
	delivery.MessageInfo
	Preview   []byte
	Truncated bool
	// History is the message's attempt history and Group, for a dead
	// letter, its group's fingerprint (ext_forensics.go).
	History []store.Attempt
	Group   string
	// TraceParent is the W3C traceparent of the message's send when the
	// host traced it (spec/peers.md §Tracing), "" otherwise.
	TraceParent string
}

func (c *Controller) queueToInspect(ctx context.Context, p *auth.Principal, space, uid string) (Engine, error) {
	r, err := c.Resource(ctx, p, space, uid)
	if err != nil {
		return nil, err
	}
	if !c.forms.IsQueue(r.FormURL) {
		return nil, problem.New(404, problem.CodeNotAQueue, "a %s has no messages to inspect: only an AtLeastOnceQueue does", c.forms.Name(r.FormURL))
	}
	return c.env.Engine, nil
}

func engineQueueErr(err error) error {
	if errors.Is(err, abi.ErrUnknownQueue) {
		return problem.Conflict(problem.CodeOperationInProgress, "the engine does not hold the queue yet (or any more): its create or delete has not finished")
	}
	return problem.Unavailable(err)
}

// InspectQueue counts a queue's messages by state; p must be able to read
// the queue.
func (c *Controller) InspectQueue(ctx context.Context, p *auth.Principal, space, uid string) (delivery.QueueInspection, error) {
	in, err := c.queueToInspect(ctx, p, space, uid)
	if err != nil {
		return delivery.QueueInspection{}, err
	}
	out, err := in.Inspect(ctx, uid)
	if err != nil {
		return delivery.QueueInspection{}, engineQueueErr(err)
	}
	return out, nil
}

// HistoryInterval is how often the host samples its queues' figures for
// QueueHistory.
const HistoryInterval = 10 * time.Second

// HistoryPoint is one sample of a queue's figures (the history
// extension, console/README.md): its backlog then, and its cumulative
// counts since the engine started.
type HistoryPoint struct {
	TimeMillis                                               int64
	Messages, Bytes, InFlightBatches                         int64
	Accepted, Delivered, Acknowledged, Retried, DeadLettered uint64
}

// QueueHistory answers the queue's figures over the last hour as the host
// sampled them, oldest first; p must be able to read the queue. Reading
// it costs a copy of at most the queue's kept points: it never walks the
// queue.
func (c *Controller) QueueHistory(ctx context.Context, p *auth.Principal, space, uid string) ([]HistoryPoint, error) {
	if _, err := c.queueToInspect(ctx, p, space, uid); err != nil {
		return nil, err
	}
	if c.opts.History == nil {
		return nil, nil
	}
	return c.opts.History(uid), nil
}

// QueueMessages lists one page of a queue's messages in accept order
// (limit 1..MaxMessagePage), with the token of the next page ("" for the
// last). A message acknowledged between the index read and the body read
// is left out of the page.
func (c *Controller) QueueMessages(ctx context.Context, p *auth.Principal, space, uid, pageToken string, limit int) ([]MessageView, string, error) {
	in, err := c.queueToInspect(ctx, p, space, uid)
	if err != nil {
		return nil, "", err
	}
	var after delivery.Cursor
	if pageToken != "" {
		var ok bool
		if after, ok = parseMessageToken(pageToken); !ok {
			return nil, "", problem.InvalidRequest("pageToken is not a token this host issued (pass a nextPageToken unchanged)")
		}
	}
	if limit <= 0 {
		limit = DefaultMessagePage
	}
	limit = min(limit, MaxMessagePage)
	page, next, more, err := in.MessagePage(ctx, uid, after, limit)
	if err != nil {
		return nil, "", engineQueueErr(err)
	}
	ids := make([]string, len(page))
	for i, m := range page {
		ids[i] = m.ID
	}
	bodies, err := c.st.Bodies(ctx, uid, ids)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			bodies = make([][]byte, len(ids))
		} else {
			return nil, "", problem.Unavailable(err)
		}
	}
	out := make([]MessageView, 0, len(page))
	for i, m := range page {
		b := bodies[i]
		if b == nil {
			continue // gone meanwhile
		}
		v := MessageView{MessageInfo: m, Preview: b}
		if len(b) > PreviewBytes {
			v.Preview, v.Truncated = b[:PreviewBytes], true
		}
		out = append(out, v)
	}
	if err := c.withHistory(ctx, uid, out); err != nil {
		return nil, "", err
	}
	tok := ""
	if more {
		tok = messageToken(next)
	}
	return out, tok, nil
}

func messageToken(c delivery.Cursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte("m1." + strconv.FormatInt(c.AcceptedAt, 10) + "." + strconv.FormatUint(c.Seq, 10)))
}

func parseMessageToken(tok string) (delivery.Cursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return delivery.Cursor{}, false
	}
	rest, ok := strings.CutPrefix(string(b), "m1.")
	if !ok {
		return delivery.Cursor{}, false
	}
	a, s, ok := strings.Cut(rest, ".")
	if !ok {
		return delivery.Cursor{}, false
	}
	at, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil {
		return delivery.Cursor{}, false
	}
	return delivery.Cursor{AcceptedAt: at, Seq: seq}, true
}

// checkIdle is the conditional delete's check (intra-mart's
// removeSerializedTaskQueue rule, spec/peers.md §Conditional delete): the
// queue holds no message and no batch of it runs, when the delete is
// admitted.
func (c *Controller) checkIdle(ctx context.Context, r store.Resource) error {
	if !c.forms.IsQueue(r.FormURL) {
		return problem.InvalidRequest("ifIdle applies to an AtLeastOnceQueue only; a %s is deleted without it", c.forms.Name(r.FormURL))
	}
	st, err := c.env.Engine.Inspect(ctx, r.UID)
	if errors.Is(err, abi.ErrUnknownQueue) {
		return nil // the engine holds nothing of it
	}
	if err != nil {
		return problem.Unavailable(err)
	}
	if st.Messages > 0 || st.Batches > 0 {
		return problem.Conflict(problem.CodeQueueNotIdle, "the queue holds %d messages and %d batches of it are running; delete without ifIdle to delete them with it", st.Messages, st.Batches)
	}
	return nil
}
