package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/takoform/queuehost/gen/api"
)

// runSend publishes one message to a queue (by name, or by UID for a
// principal that may not list queues) through the Host API's publish
// route (spec/peers.md §Publish): the body is sent as its UTF-8 text,
// with the producer Binding's limits and codes, and the message is durable
// when send prints its ID. Nothing else is created or changed: no helper
// worker, no version, no Operation.
func runSend(ctx context.Context, c *common, args []string, delay int, stdout io.Writer) error {
	if len(args) != 2 {
		return usageError{errors.New("send QUEUE BODY")}
	}
	queue, body := args[0], args[1]
	if body == "" {
		return usageError{errors.New("send: the body is empty (a message has 1..127000 bytes)")}
	}
	if !utf8.ValidString(body) {
		return usageError{errors.New("send: the body is not UTF-8 text")}
	}
	cl, err := c.client(nil)
	if err != nil {
		return err
	}
	// QUEUE is a name; a principal that may not read the space's queues
	// (a publisher, which may only publish) names its queue by UID.
	uid := queue
	q, err := cl.named(ctx, formQueue, queue)
	var ae *apiError
	switch {
	case err == nil:
		uid = q.Uid
	case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
	default:
		return err
	}
	msg := api.PublishMessage{Body: body}
	if delay >= 0 {
		msg.DelaySeconds = &delay
	}
	what := "send to queue " + queue
	r, err := cl.api.PublishMessagesWithResponse(ctx, cl.space, uid, nil, api.PublishRequest{Messages: []api.PublishMessage{msg}})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.JSON200 == nil || len(r.JSON200.MessageIds) != 1 {
		return problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	fmt.Fprintf(stdout, "sent to queue %s: message %s\n", queue, r.JSON200.MessageIds[0])
	return nil
}
