package host

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/controller"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

// Pull consumers on active hosts (spec/cluster.md §Pull consumers): a
// lease, a settlement and an extension change a queue's messages, which
// only the queue's owner may write, and a lease lives in the owner's
// engine. A host that does not own the pull consumer's queue forwards the
// call to the owner's Host API (its membership Addr) with the caller's
// token, marked forwarded; the owner answers as for its own client.
// A forwarded call that reaches a host that does not own the queue either
// (the queue moved meanwhile) is backend_unavailable, which the client
// retries; it is never forwarded twice.

// forwardedHeader marks a request one host forwarded to another.
const forwardedHeader = "Takohost-Forwarded"

type forwardedKey struct{}

type authKey struct{}

// markForwarded notes in a lease request's context whether another host
// forwarded it (a forged header only stops a forward), and its
// Authorization header, which a forward carries to the owner: the owner
// authenticates and authorizes the same principal again (the hosts of a
// cluster share host.json).
func markForwarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/leases") {
			ctx := context.WithValue(r.Context(), authKey{}, r.Header.Get("Authorization"))
			if r.Header.Get(forwardedHeader) != "" {
				ctx = context.WithValue(ctx, forwardedKey{}, true)
			}
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

func forwarded(ctx context.Context) bool { v, _ := ctx.Value(forwardedKey{}).(bool); return v }

// advertised is the membership Addr: the bound listen address once the
// Host API listens, else the configured one.
func (c *cluster) advertised() string {
	if a := c.bound.Load(); a != nil {
		return *a
	}
	return c.addr
}

// clusterPuller is the controller's Puller on a host of a cluster.
type clusterPuller struct{ h *Host }

var _ controller.Puller = clusterPuller{}

var pullForwardClient = &http.Client{Timeout: time.Duration(delivery.MaxPullWaitSeconds+30) * time.Second}

// route returns "" when this host's engine holds the pull consumer's
// queue, else the owner's address and the consumer's space.
func (p clusterPuller) route(ctx context.Context, consumerUID string) (addr, space string, err error) {
	c := p.h.cluster
	clusterEngine{c}.ensure(ctx, consumerUID)
	c.mu.Lock()
	cfg, ok := c.consumers[consumerUID]
	c.mu.Unlock()
	if !ok || !cfg.Pull {
		return "", "", delivery.ErrUnknownConsumer
	}
	if c.isOwned(cfg.QueueUID) {
		return "", "", nil
	}
	if forwarded(ctx) {
		return "", "", fmt.Errorf("%w: the queue's owner changed while the request was forwarded; retry", abi.ErrBackendUnavailable)
	}
	ms, err := c.pg.Members(ctx)
	if err != nil {
		return "", "", fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	owner := rendezvous(cfg.QueueUID, ids)
	for _, m := range ms {
		if m.ID == owner && m.ID != c.id && m.Addr != "" {
			r, err := c.pg.Resource(ctx, consumerUID)
			if err != nil {
				return "", "", fmt.Errorf("%w: %w", abi.ErrBackendUnavailable, err)
			}
			return m.Addr, r.Space, nil
		}
	}
	return "", "", fmt.Errorf("%w: the queue's owner is changing; retry", abi.ErrBackendUnavailable)
}

// forward POSTs body to the owner's route and decodes a 200 into out; any
// other answer is returned as the owner's problem.
func (p clusterPuller) forward(ctx context.Context, addr, space, consumerUID, tail string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	u := "http://" + addr + "/v2/spaces/" + url.PathEscape(space) + "/resources/" + url.PathEscape(consumerUID) + tail
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	auth, _ := ctx.Value(authKey{}).(string)
	req.Header.Set("Authorization", auth)
	req.Header.Set(forwardedHeader, p.h.cluster.id)
	resp, err := pullForwardClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: forwarding to the queue's owner at %s: %w", abi.ErrBackendUnavailable, addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%w: reading the queue's owner's answer: %w", abi.ErrBackendUnavailable, err)
	}
	if resp.StatusCode == http.StatusOK {
		return json.Unmarshal(data, out)
	}
	var pb struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(data, &pb) != nil || pb.Code == "" {
		return fmt.Errorf("%w: the queue's owner answered %d", abi.ErrBackendUnavailable, resp.StatusCode)
	}
	return problem.New(resp.StatusCode, pb.Code, "%s", pb.Detail)
}

func (p clusterPuller) Lease(ctx context.Context, consumerUID string, max int, visibility, wait time.Duration) (delivery.PullLease, error) {
	addr, space, err := p.route(ctx, consumerUID)
	if err != nil || addr == "" {
		if err != nil {
			return delivery.PullLease{}, err
		}
		return p.h.eng.Lease(ctx, consumerUID, max, visibility, wait)
	}
	var out api.PullLease
	body := map[string]any{"maxMessages": max, "visibilityTimeoutSeconds": int(visibility / time.Second), "waitSeconds": int(wait / time.Second)}
	if err := p.forward(ctx, addr, space, consumerUID, "/leases", body, &out); err != nil {
		return delivery.PullLease{}, err
	}
	l := delivery.PullLease{Messages: make([]abi.Message, len(out.Messages))}
	if out.LeaseId != nil {
		l.ID = *out.LeaseId
	}
	if out.ExpiresAt != nil {
		l.ExpiresAt = int64(*out.ExpiresAt)
	}
	for i, m := range out.Messages {
		b := []byte(m.Body)
		if m.BodyEncoding == api.PulledMessageBodyEncodingBase64 {
			if b, err = base64.StdEncoding.DecodeString(m.Body); err != nil {
				return delivery.PullLease{}, fmt.Errorf("%w: the queue's owner answered a body that is not base64", abi.ErrBackendUnavailable)
			}
		}
		l.Messages[i] = abi.Message{ID: m.Id, TimestampMillis: int64(m.TimestampMillis), Attempts: m.Attempts, Body: b}
	}
	return l, nil
}

func (p clusterPuller) SettleLease(ctx context.Context, consumerUID, leaseID string, acks []string, retries []delivery.PullRetry) error {
	addr, space, err := p.route(ctx, consumerUID)
	if err != nil || addr == "" {
		if err != nil {
			return err
		}
		return p.h.eng.SettleLease(ctx, consumerUID, leaseID, acks, retries)
	}
	body := map[string]any{}
	if len(acks) > 0 {
		body["acknowledge"] = acks
	}
	if len(retries) > 0 {
		rs := make([]map[string]any, len(retries))
		for i, r := range retries {
			rs[i] = map[string]any{"id": r.ID}
			if r.Delay != nil {
				rs[i]["delaySeconds"] = *r.Delay
			}
		}
		body["retry"] = rs
	}
	var out api.PullSettleResult
	return p.forward(ctx, addr, space, consumerUID, "/leases/"+url.PathEscape(leaseID)+"/settle", body, &out)
}

func (p clusterPuller) ExtendLease(ctx context.Context, consumerUID, leaseID string, visibility time.Duration) (int64, error) {
	addr, space, err := p.route(ctx, consumerUID)
	if err != nil || addr == "" {
		if err != nil {
			return 0, err
		}
		return p.h.eng.ExtendLease(ctx, consumerUID, leaseID, visibility)
	}
	var out api.PullExtendResult
	if err := p.forward(ctx, addr, space, consumerUID, "/leases/"+url.PathEscape(leaseID)+"/extend", map[string]any{"visibilityTimeoutSeconds": int(visibility / time.Second)}, &out); err != nil {
		return 0, err
	}
	return int64(out.ExpiresAt), nil
}

// consumerConfigOf is the engine's configuration of a stored consumer of
// either kind.
func consumerConfigOf(r store.Resource) (delivery.ConsumerConfig, error) {
	if r.FormURL == schemas.FormPullConsumer {
		return controller.PullConfigOf(r)
	}
	return controller.ConsumerConfigOf(r)
}
