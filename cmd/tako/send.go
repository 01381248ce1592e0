package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/takoform/queuehost/gen/api"
)

// maxSendBody is the largest message body (the producer Binding's limit,
// which the host checks too).
const maxSendBody = 127000

// runSend publishes one message to a queue (by name, or by UID for a
// principal that may not list queues) through the Host API's publish
// route (spec/peers.md §Publish): the body is BODY's text, or with "-" the
// bytes on stdin (sent in base64 when they are not UTF-8), with the
// producer Binding's limits and codes, and the message is durable when
// send prints its ID; -key makes a retry print the same ID and send
// nothing again. Nothing else is created or changed: no helper
// worker, no version, no Operation.
func runSend(ctx context.Context, c *common, args []string, delay int, key string, stdout io.Writer) error {
	if len(args) != 2 {
		return usageError{errors.New("send QUEUE BODY (or - to read the body from stdin)")}
	}
	queue := args[0]
	body := []byte(args[1])
	if args[1] == "-" {
		// One byte past the limit is enough to know the body is too
		// large; more need not be read.
		b, err := io.ReadAll(io.LimitReader(stdin, maxSendBody+1))
		if err != nil {
			return fmt.Errorf("send: reading the body from stdin: %w", err)
		}
		body = b
	} else if !utf8.Valid(body) {
		return usageError{errors.New("send: the body is not UTF-8 text (give - and the bytes on stdin)")}
	}
	if len(body) == 0 {
		return usageError{errors.New("send: the body is empty (a message has 1..127000 bytes)")}
	}
	// Found before any request (the host refuses it too, as
	// message_too_large).
	if len(body) > maxSendBody {
		what := fmt.Sprintf("%d bytes", len(body))
		if args[1] == "-" {
			what = "more than 127000 bytes"
		}
		return usageError{fmt.Errorf("send: the body is %s, more than a message holds (127000); split it, or send a reference to where it is stored", what)}
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
	// UTF-8 goes as text, anything else in base64: the consumer receives
	// the same bytes either way.
	msg := api.PublishMessage{Body: string(body)}
	if !utf8.Valid(body) {
		enc := api.PublishMessageBodyEncodingBase64
		msg.Body, msg.BodyEncoding = base64.StdEncoding.EncodeToString(body), &enc
	}
	if delay >= 0 {
		msg.DelaySeconds = &delay
	}
	what := "send to queue " + queue
	var params api.PublishMessagesParams
	if key != "" {
		k := api.IdempotencyKey(key)
		params.IdempotencyKey = &k
	}
	r, err := cl.api.PublishMessagesWithResponse(ctx, cl.space, uid, &params, api.PublishRequest{Messages: []api.PublishMessage{msg}})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if r.JSON200 == nil || len(r.JSON200.MessageIds) != 1 {
		return problemError(what, r.StatusCode(), r.ApplicationproblemJSONDefault, r.Body)
	}
	again := ""
	if r.HTTPResponse != nil && r.HTTPResponse.Header.Get("Idempotent-Replayed") == "true" {
		again = " (sent before with this key; not sent again)"
	}
	fmt.Fprintf(stdout, "sent to queue %s: message %s%s\n", queue, r.JSON200.MessageIds[0], again)
	return nil
}
