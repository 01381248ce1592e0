package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/delivery"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

var emptyObject = json.RawMessage(`{}`)

// canonicalJSON re-encodes raw with object members sorted and no
// insignificant white space; numbers keep their literal. It is the basis of
// idempotency fingerprints, ETags and "did the spec change" comparisons.
func canonicalJSON(raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func mustCanonical(raw []byte) []byte {
	c, err := canonicalJSON(raw)
	if err != nil {
		return raw
	}
	return c
}

func sameJSON(a, b []byte) bool {
	if len(a) == 0 || string(a) == "null" {
		a = emptyObject
	}
	if len(b) == 0 || string(b) == "null" {
		b = emptyObject
	}
	return bytes.Equal(mustCanonical(a), mustCanonical(b))
}

func fingerprint(body []byte) string {
	sum := sha256.Sum256(mustCanonical(body))
	return hex.EncodeToString(sum[:])
}

func etagOf(generation int64, spec []byte) string {
	sum := sha256.Sum256(mustCanonical(spec))
	return `"` + strconv.FormatInt(generation, 10) + "-" + hex.EncodeToString(sum[:8]) + `"`
}

func toAPIResource(r store.Resource) api.Resource {
	observed := r.Observed
	if len(observed) == 0 {
		observed = emptyObject
	}
	return api.Resource{
		Uid: r.UID, Name: r.Name, Space: r.Space, FormUrl: r.FormURL, Offering: r.Offering,
		Spec: r.Spec, Observed: observed, Output: emptyObject,
		State: api.ResourceState(r.State), Generation: r.Generation, Etag: r.ETag,
		CreateTime: r.CreateTime, UpdateTime: r.UpdateTime,
	}
}

func toAPIOperation(op store.Operation) api.Operation {
	out := api.Operation{
		Id: op.ID, Kind: api.OperationKind(op.Kind), ResourceUid: op.ResourceUID,
		State: api.OperationState(op.State), Effect: api.OperationEffect(op.Effect),
		CreateTime: op.CreateTime, UpdateTime: op.UpdateTime,
	}
	if op.IdempotencyKey != "" {
		k := op.IdempotencyKey
		out.IdempotencyKey = &k
	}
	if len(op.Error) > 0 {
		var p api.Problem
		if json.Unmarshal(op.Error, &p) == nil {
			out.Error = &p
		}
	}
	return out
}

func decodeSpec[T any](r store.Resource) (T, error) {
	var v T
	err := json.Unmarshal(r.Spec, &v)
	return v, err
}

func queueConfigOf(r store.Resource) (delivery.QueueConfig, error) {
	sp, err := decodeSpec[api.AtLeastOnceQueueSpec](r)
	if err != nil {
		return delivery.QueueConfig{}, err
	}
	c := delivery.QueueConfig{UID: r.UID, Name: r.Name, MessageRetentionSeconds: sp.MessageRetentionSeconds}
	if sp.DeliveryDelaySeconds != nil {
		c.DeliveryDelaySeconds = *sp.DeliveryDelaySeconds
	}
	return c, nil
}

func consumerConfigOf(r store.Resource) (delivery.ConsumerConfig, error) {
	sp, err := decodeSpec[api.QueueConsumerSpec](r)
	if err != nil {
		return delivery.ConsumerConfig{}, err
	}
	c := delivery.ConsumerConfig{
		UID: r.UID, QueueUID: sp.Queue.ResourceUid, WorkerUID: sp.Worker.ResourceUid,
		MaxBatchSize: sp.MaxBatchSize, MaxBatchTimeoutSeconds: sp.MaxBatchTimeoutSeconds,
		MaxConcurrency: sp.MaxConcurrency, MaxRetries: sp.MaxRetries, RetryDelaySeconds: sp.RetryDelaySeconds,
	}
	if sp.DeadLetterQueue != nil {
		c.DeadLetterQueueUID = sp.DeadLetterQueue.ResourceUid
	}
	return c, nil
}

// VersionFromResource is what the runtime needs of a WorkerVersion 0.5.0
// record: its modules, vars, secrets, bindings, worker and principal.
func VersionFromResource(r store.Resource) (*abi.Version, error) {
	if r.FormURL != schemas.FormWorkerVersion {
		return nil, fmt.Errorf("server: %s is not a WorkerVersion", r.UID)
	}
	sp, err := decodeSpec[api.WorkerVersionSpec](r)
	if err != nil {
		return nil, err
	}
	v := &abi.Version{
		UID: r.UID, Space: r.Space, WorkerUID: sp.Worker.ResourceUid, Principal: r.Creator,
		MainModule: sp.MainModule, Vars: map[string]string{}, Secrets: map[string]string{},
	}
	for _, m := range sp.Modules {
		v.Modules = append(v.Modules, abi.Module{Name: m.Name, Content: m.Content})
	}
	if sp.Vars != nil {
		for k, val := range *sp.Vars {
			v.Vars[k] = val
		}
	}
	if sp.QueueProducerBindings != nil {
		for _, b := range *sp.QueueProducerBindings {
			v.Bindings = append(v.Bindings, abi.Binding{Name: b.Name, QueueUID: b.Resource.ResourceUid})
		}
	}
	if len(r.PrivateInputs) > 0 {
		var pi api.WorkerVersionPrivateInputs
		if err := json.Unmarshal(r.PrivateInputs, &pi); err != nil {
			return nil, err
		}
		if pi.Secrets != nil {
			for k, val := range *pi.Secrets {
				v.Secrets[k] = val
			}
		}
	}
	return v, nil
}

func handlersOf(sp api.ModuleWorkerSpec) []string {
	out := make([]string, 0, len(sp.Handlers))
	for _, h := range sp.Handlers {
		out = append(out, string(h))
	}
	return out
}
