package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
)

// The publish extension (spec/peers.md §Publish).

// PublishMessages sends the request's messages to a queue through the
// producer Binding's send. Only the HTTP encoding is decoded here: a text
// body is the string's UTF-8 bytes (what send(string) sends), a base64
// body the bytes it decodes to (what send(ArrayBuffer) sends); the limits,
// the codes and the durability are the send's.
func (s *Server) PublishMessages(ctx context.Context, req api.PublishMessagesRequestObject) (api.PublishMessagesResponseObject, error) {
	ri := info(ctx)
	path := resourcesPath(req.Space) + "/" + req.Uid + "/messages"
	idem, err := newIdempotency(req.Params.IdempotencyKey, ri.principal.ID, req.Space, http.MethodPost, path, ri.body)
	if err != nil {
		return nil, err
	}
	msgs := make([]abi.OutgoingMessage, len(req.Body.Messages))
	for i, m := range req.Body.Messages {
		body := []byte(m.Body)
		if m.BodyEncoding != nil && *m.BodyEncoding == api.PublishMessageBodyEncodingBase64 {
			if body, err = base64.StdEncoding.Strict().DecodeString(m.Body); err != nil {
				return nil, problem.New(http.StatusBadRequest, problem.CodeInvalidBody, "a message body is not what its bodyEncoding says; nothing was sent").
					WithPointer(fmt.Sprintf("/messages/%d/body", i), "not standard padded base64 (RFC 4648 §4)")
			}
		}
		msgs[i] = abi.OutgoingMessage{Body: body, Delay: m.DelaySeconds}
	}
	ids, replayed, err := s.ctl.Publish(ctx, controller.PublishRequest{Principal: ri.principal, Space: req.Space, UID: req.Uid, Messages: msgs, Idempotency: idem})
	if err != nil {
		return nil, err
	}
	out := api.PublishMessages200JSONResponse{Body: api.PublishResult{MessageIds: ids}}
	if replayed {
		t := "true"
		out.Headers.IdempotentReplayed = &t
	}
	return out, nil
}
