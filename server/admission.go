package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/auth"
	"github.com/takoform/queuehost/gen/api"
	"github.com/takoform/queuehost/runtime/store"
	"github.com/takoform/queuehost/schemas"
)

var formNames = map[string]string{
	schemas.FormAtLeastOnceQueue: "AtLeastOnceQueue 0.2.0",
	schemas.FormQueueConsumer:    "QueueConsumer 0.3.0",
	schemas.FormModuleWorker:     "ModuleWorker 0.3.0",
	schemas.FormWorkerVersion:    "WorkerVersion 0.5.0",
}

// admission holds one snapshot of a space, read under s.mu, and checks
// steps 7 to 9 of spec/host-api.md §Admission against it.
type admission struct {
	s        *Server
	p        *auth.Principal
	space    string
	self     string // the UID being created, updated or deleted
	list     []store.Resource
	byUID    map[string]store.Resource
	inflight map[string]inflightOp
}

func (s *Server) snapshot(ctx context.Context, p *auth.Principal, space, self string) (*admission, error) {
	list, err := s.st.Resources(ctx, space, "")
	if err != nil {
		return nil, unavailable(err)
	}
	a := &admission{s: s, p: p, space: space, self: self, list: list, byUID: make(map[string]store.Resource, len(list)), inflight: s.inflight}
	for _, r := range list {
		a.byUID[r.UID] = r
	}
	return a, nil
}

type ref struct {
	pointer string // to the resourceUid member
	uid     string
	form    string
}

// refsOf lists the references of a spec (already valid for its Form).
func refsOf(formURL string, spec []byte) ([]ref, error) {
	r := store.Resource{Spec: spec}
	switch formURL {
	case schemas.FormQueueConsumer:
		sp, err := decodeSpec[api.QueueConsumerSpec](r)
		if err != nil {
			return nil, err
		}
		out := []ref{
			{"/spec/queue/resourceUid", sp.Queue.ResourceUid, schemas.FormAtLeastOnceQueue},
			{"/spec/worker/resourceUid", sp.Worker.ResourceUid, schemas.FormModuleWorker},
		}
		if sp.DeadLetterQueue != nil {
			out = append(out, ref{"/spec/deadLetterQueue/resourceUid", sp.DeadLetterQueue.ResourceUid, schemas.FormAtLeastOnceQueue})
		}
		return out, nil
	case schemas.FormModuleWorker:
		sp, err := decodeSpec[api.ModuleWorkerSpec](r)
		if err != nil {
			return nil, err
		}
		if sp.Version != nil {
			return []ref{{"/spec/version/resourceUid", sp.Version.ResourceUid, schemas.FormWorkerVersion}}, nil
		}
	case schemas.FormWorkerVersion:
		sp, err := decodeSpec[api.WorkerVersionSpec](r)
		if err != nil {
			return nil, err
		}
		out := []ref{{"/spec/worker/resourceUid", sp.Worker.ResourceUid, schemas.FormModuleWorker}}
		if sp.QueueProducerBindings != nil {
			for i, b := range *sp.QueueProducerBindings {
				out = append(out, ref{"/spec/queueProducerBindings/" + strconv.Itoa(i) + "/resource/resourceUid", b.Resource.ResourceUid, schemas.FormAtLeastOnceQueue})
			}
		}
		return out, nil
	}
	return nil, nil
}

// references checks steps 7 (each reference resolves by UID to a usable
// resource of the expected Form in this space) and 8 (the principal may
// read the referenced Form).
func (a *admission) references(formURL string, spec []byte) error {
	refs, err := refsOf(formURL, spec)
	if err != nil {
		return err
	}
	var bad *Problem
	for _, rf := range refs {
		detail := ""
		r, ok := a.byUID[rf.uid]
		switch {
		case !ok || rf.uid == a.self:
			// Another space's UID reads exactly like a missing one.
			detail = fmt.Sprintf("no %s resource with this UID exists in this space", formNames[rf.form])
		case r.FormURL != rf.form:
			detail = fmt.Sprintf("the resource is not a %s", formNames[rf.form])
		case r.State == store.StateDeleting:
			detail = "the resource is being deleted"
		case a.inflight[r.UID].kind == KindCreate || a.inflight[r.UID].kind == KindDelete:
			detail = "the resource's create or delete has not finished"
		}
		if detail != "" {
			if bad == nil {
				bad = unprocessable(CodeInvalidReference, "a reference does not name a usable resource")
			}
			bad.withPointer(rf.pointer, detail)
		}
	}
	if bad != nil {
		return bad
	}
	var denied *Problem
	for _, rf := range refs {
		if !a.p.Can(a.space, rf.form, auth.Read) {
			if denied == nil {
				denied = forbidden("a reference grants no permission: the principal may not read the referenced resource's Form")
			}
			denied.withPointer(rf.pointer, fmt.Sprintf("read permission on %s is required", formNames[rf.form]))
		}
	}
	if denied != nil {
		return denied
	}
	return nil
}

func (a *admission) consumers() []store.Resource {
	var out []store.Resource
	for _, r := range a.list {
		if r.FormURL == schemas.FormQueueConsumer && r.UID != a.self {
			out = append(out, r)
		}
	}
	return out
}

// consumerRules: one consumer per queue, the worker provides queue, no
// dead-letter cycle (step 9).
func (a *admission) consumerRules(spec []byte) error {
	sp, err := decodeSpec[api.QueueConsumerSpec](store.Resource{Spec: spec})
	if err != nil {
		return err
	}
	others := a.consumers()
	for _, c := range others {
		csp, err := decodeSpec[api.QueueConsumerSpec](c)
		if err == nil && csp.Queue.ResourceUid == sp.Queue.ResourceUid {
			return conflict(CodeConsumerConflict, "the queue already has a consumer (%s); a queue has at most one", c.UID).
				withPointer("/spec/queue/resourceUid", "this queue already has a QueueConsumer")
		}
	}
	if err := a.workerProvidesQueue(sp.Worker.ResourceUid, "/spec/worker/resourceUid"); err != nil {
		return err
	}
	if sp.DeadLetterQueue != nil {
		dlq, q := sp.DeadLetterQueue.ResourceUid, sp.Queue.ResourceUid
		edges := map[string][]string{q: {dlq}}
		for _, c := range others {
			csp, err := decodeSpec[api.QueueConsumerSpec](c)
			if err == nil && csp.DeadLetterQueue != nil {
				edges[csp.Queue.ResourceUid] = append(edges[csp.Queue.ResourceUid], csp.DeadLetterQueue.ResourceUid)
			}
		}
		if path := cyclePath(edges, q); path != nil {
			return unprocessable(CodeDeadLetterCycle, "the dead-letter queues would form a cycle: %s", strings.Join(path, " -> ")).
				withPointer("/spec/deadLetterQueue/resourceUid", "dead-lettering into this queue leads back to the consumer's own queue")
		}
	}
	return nil
}

// cyclePath returns a path start -> ... -> start through edges, or nil.
func cyclePath(edges map[string][]string, start string) []string {
	seen := map[string]bool{}
	var path []string
	var walk func(n string) bool
	walk = func(n string) bool {
		for _, next := range edges[n] {
			if next == start {
				path = append(path, next)
				return true
			}
			if seen[next] {
				continue
			}
			seen[next] = true
			path = append(path, next)
			if walk(next) {
				return true
			}
			path = path[:len(path)-1]
		}
		return false
	}
	if walk(start) {
		return append([]string{start}, path...)
	}
	return nil
}

// workerProvidesQueue: the worker declares queue and its selected version
// exports it.
func (a *admission) workerProvidesQueue(workerUID, pointer string) error {
	w := a.byUID[workerUID]
	wsp, err := decodeSpec[api.ModuleWorkerSpec](w)
	if err != nil {
		return err
	}
	if !slices.Contains(handlersOf(wsp), "queue") {
		return unprocessable(CodeMissingHandler, "the worker does not declare the queue handler").withPointer(pointer, `the ModuleWorker's handlers must include "queue"`)
	}
	if wsp.Version == nil {
		return unprocessable(CodeMissingHandler, "the worker selects no WorkerVersion, so nothing provides the queue handler").withPointer(pointer, "the ModuleWorker has no selected version")
	}
	v, ok := a.byUID[wsp.Version.ResourceUid]
	if !ok || !slices.Contains(v.Exports, "queue") {
		return unprocessable(CodeMissingHandler, "the worker's selected version does not export queue").withPointer(pointer, "the selected WorkerVersion does not export queue")
	}
	return nil
}

// workerRules: the selected version belongs to this worker and exports
// every declared handler; while a consumer references the worker, it keeps
// providing queue (step 9).
func (a *admission) workerRules(spec []byte, update bool) error {
	sp, err := decodeSpec[api.ModuleWorkerSpec](store.Resource{Spec: spec})
	if err != nil {
		return err
	}
	handlers := handlersOf(sp)
	var exports []string
	if sp.Version != nil {
		v := a.byUID[sp.Version.ResourceUid]
		vsp, err := decodeSpec[api.WorkerVersionSpec](v)
		if err != nil {
			return err
		}
		if vsp.Worker.ResourceUid != a.self {
			return unprocessable(CodeInvalidReference, "the version belongs to another worker").
				withPointer("/spec/version/resourceUid", "a ModuleWorker can select only its own WorkerVersions")
		}
		exports = v.Exports
		var missing []string
		for _, h := range handlers {
			if !slices.Contains(exports, h) {
				missing = append(missing, h)
			}
		}
		if len(missing) > 0 {
			return unprocessable(CodeMissingHandler, "the selected version does not export %s", strings.Join(missing, ", ")).
				withPointer("/spec/version/resourceUid", "the WorkerVersion must export every declared handler")
		}
	}
	if !update {
		return nil
	}
	for _, c := range a.consumers() {
		csp, err := decodeSpec[api.QueueConsumerSpec](c)
		if err != nil || csp.Worker.ResourceUid != a.self {
			continue
		}
		if !slices.Contains(handlers, "queue") {
			return unprocessable(CodeMissingHandler, "QueueConsumer %s uses this worker's queue handler", c.UID).
				withPointer("/spec/handlers", `"queue" cannot be removed while a QueueConsumer references the worker`)
		}
		if sp.Version == nil || !slices.Contains(exports, "queue") {
			return unprocessable(CodeMissingHandler, "QueueConsumer %s uses this worker's queue handler", c.UID).
				withPointer("/spec/version", "while a QueueConsumer references the worker, the selected version must export queue")
		}
	}
	return nil
}

// compiled is the outcome of loading a WorkerVersion's modules, computed
// before the lock is taken and reported in step 9.
type compiled struct {
	exports []string
	err     error
}

func (s *Server) compileVersion(ctx context.Context, uid, space, creator string, spec, privateInputs []byte) compiled {
	sp, err := decodeSpec[api.WorkerVersionSpec](store.Resource{Spec: spec})
	if err != nil {
		return compiled{err: err}
	}
	total := 0
	for _, m := range sp.Modules {
		total += len(m.Content)
	}
	if total > MaxModuleBytes {
		return compiled{err: unprocessable(CodeInvalidSpec, "the modules total %d bytes; at most %d (4 MiB) are allowed", total, MaxModuleBytes).
			withPointer("/spec/modules", "the modules are too large")}
	}
	v, err := VersionFromResource(store.Resource{UID: uid, Space: space, FormURL: schemas.FormWorkerVersion, Spec: spec, PrivateInputs: privateInputs, Creator: creator})
	if err != nil {
		return compiled{err: err}
	}
	exports, err := s.workers.Compile(ctx, v)
	if err != nil {
		var ce *abi.CompileError
		if errors.As(err, &ce) {
			p := unprocessable(CodeInvalidSpec, "the modules do not load: %s", ce.Error())
			ptr := "/spec/modules"
			for i, m := range sp.Modules {
				if m.Name == ce.File {
					ptr = "/spec/modules/" + strconv.Itoa(i) + "/content"
				}
			}
			return compiled{err: p.withPointer(ptr, ce.Error())}
		}
		return compiled{err: fmt.Errorf("compiling version: %w", err)}
	}
	slices.Sort(exports)
	return compiled{exports: slices.Compact(exports)}
}

// dependents lists the resources that keep uid from being deleted
// (spec/host-api.md §Operations, deletion rules).
func (a *admission) dependents(r store.Resource) []string {
	var out []string
	for _, o := range a.list {
		if o.UID == r.UID {
			continue
		}
		hit := false
		switch o.FormURL {
		case schemas.FormQueueConsumer:
			sp, err := decodeSpec[api.QueueConsumerSpec](o)
			if err != nil {
				continue
			}
			switch r.FormURL {
			case schemas.FormAtLeastOnceQueue:
				hit = sp.Queue.ResourceUid == r.UID || (sp.DeadLetterQueue != nil && sp.DeadLetterQueue.ResourceUid == r.UID)
			case schemas.FormModuleWorker:
				hit = sp.Worker.ResourceUid == r.UID
			}
		case schemas.FormWorkerVersion:
			sp, err := decodeSpec[api.WorkerVersionSpec](o)
			if err != nil {
				continue
			}
			switch r.FormURL {
			case schemas.FormAtLeastOnceQueue:
				if sp.QueueProducerBindings != nil {
					for _, b := range *sp.QueueProducerBindings {
						hit = hit || b.Resource.ResourceUid == r.UID
					}
				}
			case schemas.FormModuleWorker:
				hit = sp.Worker.ResourceUid == r.UID
			}
		case schemas.FormModuleWorker:
			sp, err := decodeSpec[api.ModuleWorkerSpec](o)
			if err == nil && r.FormURL == schemas.FormWorkerVersion {
				hit = sp.Version != nil && sp.Version.ResourceUid == r.UID
			}
		}
		if hit {
			out = append(out, fmt.Sprintf("%s %q (%s)", formNames[o.FormURL], o.Name, o.UID))
		}
	}
	return out
}

// immutables is step 5: fields that a PUT cannot change.
func immutables(cur store.Resource, spec, privateInputs []byte) error {
	switch cur.FormURL {
	case schemas.FormQueueConsumer:
		old, err1 := decodeSpec[api.QueueConsumerSpec](cur)
		nw, err2 := decodeSpec[api.QueueConsumerSpec](store.Resource{Spec: spec})
		if err1 != nil || err2 != nil {
			return errors.Join(err1, err2)
		}
		var p *Problem
		if old.Queue.ResourceUid != nw.Queue.ResourceUid {
			p = unprocessable(CodeInvalidSpec, "queue and worker are immutable: delete the consumer and create a new one")
			p.withPointer("/spec/queue", "queue cannot change")
		}
		if old.Worker.ResourceUid != nw.Worker.ResourceUid {
			if p == nil {
				p = unprocessable(CodeInvalidSpec, "queue and worker are immutable: delete the consumer and create a new one")
			}
			p.withPointer("/spec/worker", "worker cannot change")
		}
		if p != nil {
			return p
		}
	case schemas.FormWorkerVersion:
		if !sameJSON(cur.Spec, spec) {
			return unprocessable(CodeInvalidSpec, "a WorkerVersion is immutable: create a new version and select it").
				withPointer("/spec", "no field of a WorkerVersion can change")
		}
		if privateInputs != nil && !sameJSON(cur.PrivateInputs, privateInputs) {
			return unprocessable(CodeInvalidSpec, "a WorkerVersion is immutable: create a new version and select it").
				withPointer("/privateInputs", "the private inputs of a WorkerVersion cannot change")
		}
	}
	return nil
}

// parseIdempotencyKey accepts 1..255 visible ASCII characters, bare or as
// an RFC 8941 string.
func parseIdempotencyKey(v *string) (string, error) {
	if v == nil {
		return "", nil
	}
	raw := *v
	key := raw
	if strings.HasPrefix(raw, `"`) {
		if len(raw) < 2 || !strings.HasSuffix(raw, `"`) {
			return "", invalidRequest("Idempotency-Key: unterminated structured-field string")
		}
		var b strings.Builder
		in := raw[1 : len(raw)-1]
		for i := 0; i < len(in); i++ {
			c := in[i]
			switch {
			case c == '\\':
				if i+1 >= len(in) || (in[i+1] != '"' && in[i+1] != '\\') {
					return "", invalidRequest(`Idempotency-Key: in a structured-field string only \" and \\ are escapes`)
				}
				i++
				b.WriteByte(in[i])
			case c == '"':
				return "", invalidRequest("Idempotency-Key: unescaped quote in a structured-field string")
			default:
				b.WriteByte(c)
			}
		}
		key = b.String()
	}
	if len(key) < 1 || len(key) > 255 {
		return "", invalidRequest("Idempotency-Key must be 1 to 255 characters")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", invalidRequest("Idempotency-Key must be visible ASCII characters")
		}
	}
	return key, nil
}

func idemScope(principal, space, method, path string) string {
	return principal + "\x00" + space + "\x00" + method + "\x00" + path
}

// idemRequest is a mutation's Idempotency-Key (empty when it has none), in
// its scope, with the fingerprint of the request body.
type idemRequest struct{ key, scope, fp string }

// newIdemRequest parses the Idempotency-Key header of a request by
// principal to method path with body.
func newIdemRequest(header *string, principal, space, method, path string, body []byte) (idemRequest, error) {
	key, err := parseIdempotencyKey(header)
	if err != nil {
		return idemRequest{}, err
	}
	return idemRequest{key: key, scope: idemScope(principal, space, method, path), fp: fingerprint(body)}, nil
}

// record is what the Operation's first write stores for the key, or nil.
func (ir idemRequest) record() *store.IdempotencyRecord {
	if ir.key == "" {
		return nil
	}
	return &store.IdempotencyRecord{Scope: ir.scope, Key: ir.key, Fingerprint: ir.fp}
}

// replay looks the key up: the same fingerprint returns the recorded
// Operation, another fingerprint is idempotency_key_reuse.
func (s *Server) replay(ctx context.Context, ir idemRequest) (*store.Operation, error) {
	scope, key, fp := ir.scope, ir.key, ir.fp
	if key == "" {
		return nil, nil
	}
	rec, err := s.st.Idempotency(ctx, scope, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if rec.Fingerprint != fp {
		return nil, unprocessable(CodeIdempotencyKeyReuse, "this Idempotency-Key was used for a different request body")
	}
	op, err := s.st.Operation(ctx, rec.OperationID)
	if err != nil {
		return nil, unavailable(err)
	}
	return &op, nil
}

func preconditionFailed() *Problem {
	return newProblem(http.StatusPreconditionFailed, CodePreconditionFailed, "If-Match does not match the resource's current ETag")
}

func ifMatch(h *string, etag string) error {
	if h == nil {
		return nil
	}
	for _, t := range strings.Split(*h, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || t == etag {
			return nil
		}
	}
	return preconditionFailed()
}
