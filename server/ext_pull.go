package server

import (
	"context"
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/delivery"
)

// The pull consumer extension (spec/peers.md §Pull consumers): only the
// HTTP encoding is here; the rules, the codes and the durability are the
// controller's and the engine's.

// PullMessages leases messages of a PullConsumer's queue.
func (s *Server) PullMessages(ctx context.Context, req api.PullMessagesRequestObject) (api.PullMessagesResponseObject, error) {
	ri := info(ctx)
	pr := controller.PullRequest{Principal: ri.principal, Space: req.Space, UID: req.Uid}
	if b := req.Body; b != nil {
		if b.MaxMessages != nil {
			pr.MaxMessages = *b.MaxMessages
		}
		if b.VisibilityTimeoutSeconds != nil {
			pr.Visibility = time.Duration(*b.VisibilityTimeoutSeconds) * time.Second
		}
		if b.WaitSeconds != nil {
			pr.Wait = time.Duration(*b.WaitSeconds) * time.Second
		}
	}
	l, err := s.ctl.Pull(ctx, pr)
	if err != nil {
		return nil, err
	}
	out := api.PullMessages200JSONResponse{Messages: make([]api.PulledMessage, len(l.Messages))}
	if l.ID != "" {
		id, exp := l.ID, int(l.ExpiresAt)
		out.LeaseId, out.ExpiresAt = &id, &exp
	}
	for i, m := range l.Messages {
		pm := api.PulledMessage{Id: m.ID, TimestampMillis: int(m.TimestampMillis), Attempts: m.Attempts}
		// The text of a send(string), the bytes of a send(ArrayBuffer):
		// the Forms keep no content type, so text is what decodes as UTF-8.
		if utf8.Valid(m.Body) {
			pm.Body, pm.BodyEncoding = string(m.Body), api.PulledMessageBodyEncodingText
		} else {
			pm.Body, pm.BodyEncoding = base64.StdEncoding.EncodeToString(m.Body), api.PulledMessageBodyEncodingBase64
		}
		out.Messages[i] = pm
	}
	return out, nil
}

// SettleLease acknowledges and retries messages of a lease.
func (s *Server) SettleLease(ctx context.Context, req api.SettleLeaseRequestObject) (api.SettleLeaseResponseObject, error) {
	ri := info(ctx)
	var acks []string
	var retries []delivery.PullRetry
	if b := req.Body; b != nil {
		if b.Acknowledge != nil {
			acks = *b.Acknowledge
		}
		if b.Retry != nil {
			for _, r := range *b.Retry {
				retries = append(retries, delivery.PullRetry{ID: r.Id, Delay: r.DelaySeconds})
			}
		}
	}
	if err := s.ctl.SettleLease(ctx, ri.principal, req.Space, req.Uid, req.LeaseId, acks, retries); err != nil {
		return nil, err
	}
	return api.SettleLease200JSONResponse{Acknowledged: len(acks), Retried: len(retries)}, nil
}

// ExtendLease hides a lease's unsettled messages for longer.
func (s *Server) ExtendLease(ctx context.Context, req api.ExtendLeaseRequestObject) (api.ExtendLeaseResponseObject, error) {
	ri := info(ctx)
	exp, err := s.ctl.ExtendLease(ctx, ri.principal, req.Space, req.Uid, req.LeaseId, time.Duration(req.Body.VisibilityTimeoutSeconds)*time.Second)
	if err != nil {
		return nil, err
	}
	return api.ExtendLease200JSONResponse{LeaseId: req.LeaseId, ExpiresAt: int(exp)}, nil
}
