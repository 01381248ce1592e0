package steps

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cucumber/godog"
)

var placeholderRE = regexp.MustCompile(`\{\{[a-z0-9]+(:[A-Za-z0-9_-]+)?\}\}`)

const opTimeout = 60 * time.Second

// defaultConsumer is the consumer spec the kit starts from: the smallest
// values the Form allows, so that nothing waits.
func defaultConsumer(q, wk string) map[string]any {
	return map[string]any{
		"queue":                  ref(q),
		"worker":                 ref(wk),
		"maxBatchSize":           json.Number("1"),
		"maxBatchTimeoutSeconds": json.Number("0"),
		"maxConcurrency":         json.Number("1"),
		"maxRetries":             json.Number("0"),
		"retryDelaySeconds":      json.Number("0"),
	}
}

func ref(uid string) map[string]any { return map[string]any{"resourceUid": uid} }

func resPath(space, uid string) string { return "/v2/spaces/" + space + "/resources/" + uid }

// create POSTs a resource as the current principal; on 202 it waits for the
// Operation and records the alias when it succeeds.
func (w *world) create(ctx context.Context, space, alias, form string, spec any, privateInputs any) (*Response, error) {
	return w.createIn(ctx, space, alias, form, "", spec, privateInputs)
}

// createIn creates in an offering ("": the host's default).
func (w *world) createIn(ctx context.Context, space, alias, form, offering string, spec any, privateInputs any) (*Response, error) {
	body := map[string]any{"name": alias, "formUrl": form, "spec": spec}
	if offering != "" {
		body["offering"] = offering
	}
	if privateInputs != nil {
		body["privateInputs"] = privateInputs
	}
	r, err := w.api(ctx, func(c *Client, h http.Header) (*Response, error) { return c.CreateResource(ctx, space, body, h) })
	if err != nil {
		return nil, err
	}
	if r.Status == 202 {
		done, err := w.awaitAccepted(ctx, space, r, "create")
		if err != nil {
			return r, err
		}
		if done.State == "succeeded" {
			m, _ := spec.(map[string]any)
			w.res[alias] = &resource{alias: alias, uid: done.ResourceUID, name: alias, form: form, space: space, spec: m}
		}
	}
	return r, nil
}

// mustCreate creates as admin and requires success.
func (w *world) mustCreate(ctx context.Context, space, alias, form string, spec any) (*resource, error) {
	as := w.as
	w.as = PrincipalAdmin
	defer func() { w.as = as }()
	r, err := w.create(ctx, space, alias, form, spec, nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 202 || w.lastOp == nil || w.lastOp.State != "succeeded" {
		return nil, fmt.Errorf("creating %s %q failed: %s (operation %+v)", form, alias, r, w.lastOp)
	}
	return w.res[alias], nil
}

// update PUTs a whole spec and waits for the Operation.
func (w *world) update(ctx context.Context, alias string, spec any) (*Response, error) {
	rs, err := w.resource(alias)
	if err != nil {
		return nil, err
	}
	r, err := w.api(ctx, func(c *Client, h http.Header) (*Response, error) {
		return c.UpdateResource(ctx, rs.space, rs.uid, map[string]any{"spec": spec}, h)
	})
	if err != nil {
		return nil, err
	}
	if r.Status == 202 {
		done, err := w.awaitAccepted(ctx, rs.space, r, "update")
		if err != nil {
			return r, err
		}
		if done.State == "succeeded" {
			if m, ok := spec.(map[string]any); ok {
				rs.spec = m
			}
		}
	}
	return r, nil
}

func (w *world) mustUpdate(ctx context.Context, alias string, spec any) error {
	as := w.as
	w.as = PrincipalAdmin
	defer func() { w.as = as }()
	r, err := w.update(ctx, alias, spec)
	if err != nil {
		return err
	}
	if r.Status != 202 || w.lastOp.State != "succeeded" {
		return fmt.Errorf("updating %q failed: %s (operation %+v)", alias, r, w.lastOp)
	}
	return nil
}

// remove DELETEs and waits for the Operation.
func (w *world) remove(ctx context.Context, alias string) (*Response, error) {
	rs, err := w.resource(alias)
	if err != nil {
		return nil, err
	}
	r, err := w.api(ctx, func(c *Client, h http.Header) (*Response, error) { return c.DeleteResource(ctx, rs.space, rs.uid, h) })
	if err != nil {
		return nil, err
	}
	if r.Status == 202 {
		if _, err := w.awaitAccepted(ctx, rs.space, r, "delete"); err != nil {
			return r, err
		}
	}
	return r, nil
}

// awaitAccepted reads the Operation a 202 answered with, checks its kind,
// waits until it is done and records it as the world's last Operation.
func (w *world) awaitAccepted(ctx context.Context, space string, r *Response, kind string) (*Operation, error) {
	op, err := AcceptedOperation(r)
	if err != nil {
		return nil, err
	}
	if op.Kind != kind {
		return nil, fmt.Errorf("%s answered an Operation of kind %q", kind, op.Kind)
	}
	done, err := WaitOperation(ctx, w.admin(), space, op.ID, opTimeout)
	if err != nil {
		return nil, err
	}
	w.lastOp = done
	return done, nil
}

// get reads a resource as admin and checks the parts every read must have.
// pollObserved reads alias's observed object for a Poll: a failed request
// stops the poll, a resource that cannot be read yet is tried again.
func (w *world) pollObserved(ctx context.Context, alias string) (map[string]any, error) {
	m, r, err := w.get(ctx, alias)
	if err != nil {
		return nil, godogStop{err}
	}
	if m == nil {
		return nil, fmt.Errorf("reading %q: %s", alias, r)
	}
	obs, _ := m["observed"].(map[string]any)
	return obs, nil
}

func (w *world) get(ctx context.Context, alias string) (map[string]any, *Response, error) {
	rs, err := w.resource(alias)
	if err != nil {
		return nil, nil, err
	}
	r, err := w.admin().GetResource(ctx, rs.space, rs.uid, nil)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != 200 {
		return nil, r, nil
	}
	m, err := r.Map()
	if err != nil {
		return nil, r, err
	}
	if err := checkResourceRead(m, rs); err != nil {
		return nil, r, err
	}
	return m, r, nil
}

var observedKeys = map[string]map[string]string{
	FormQueue:    {"queueExists": "bool", "messageCount": "count"},
	FormConsumer: {"queueExists": "bool", "workerExists": "bool", "consumerAttached": "bool"},
	FormWorker:   {},
	FormVersion:  {},
}

// checkResourceRead checks what every read of a queue-Form resource must
// satisfy: output is always {}, observed has only the Form's members, with
// their types, and privateInputs never appears.
func checkResourceRead(m map[string]any, rs *resource) error {
	if m["uid"] != rs.uid {
		return fmt.Errorf("read of %q has uid %v, want %s", rs.alias, m["uid"], rs.uid)
	}
	out, ok := m["output"].(map[string]any)
	if !ok || len(out) != 0 {
		return fmt.Errorf("output of %q is %v, the Form says it is always {}", rs.alias, m["output"])
	}
	if _, ok := m["privateInputs"]; ok {
		return fmt.Errorf("a read of %q returned privateInputs", rs.alias)
	}
	obs, ok := m["observed"].(map[string]any)
	if !ok {
		return fmt.Errorf("observed of %q is %v, want an object", rs.alias, m["observed"])
	}
	allowed := observedKeys[rs.form]
	for k, v := range obs {
		switch allowed[k] {
		case "bool":
			if _, ok := v.(bool); !ok {
				return fmt.Errorf("observed.%s of %q is %v, want a boolean", k, rs.alias, v)
			}
		case "count":
			n, ok := v.(json.Number)
			if !ok || strings.ContainsAny(n.String(), ".eE-") {
				return fmt.Errorf("observed.%s of %q is %v, want an integer >= 0", k, rs.alias, v)
			}
		default:
			return fmt.Errorf("observed of %q has member %q, which its Form does not define", rs.alias, k)
		}
	}
	return nil
}

// workerSource reads a test worker's module.
func (w *world) workerSource(file string) (string, error) {
	b, err := fs.ReadFile(w.k.cfg.Workers, file)
	return string(b), err
}

// versionSpec is the WorkerVersion spec of a kit worker.
func (w *world) versionSpec(workerUID, file string, bindings []any) (map[string]any, error) {
	src, err := w.workerSource(file)
	if err != nil {
		return nil, err
	}
	spec := map[string]any{
		"worker":     ref(workerUID),
		"mainModule": file,
		"modules":    []any{map[string]any{"name": file, "content": src}},
		"vars":       map[string]any{"RECORDER": w.k.cfg.RecorderURL, "SCOPE": w.scope},
	}
	if bindings != nil {
		spec["queueProducerBindings"] = bindings
	}
	return spec, nil
}

// makeWorker creates a ModuleWorker, a WorkerVersion of file with the given
// producer bindings (name -> queue alias), and selects it.
func (w *world) makeWorker(ctx context.Context, alias, file string, handlers []string, bindings [][2]string) error {
	hs := make([]any, len(handlers))
	for i, h := range handlers {
		hs[i] = h
	}
	mw, err := w.mustCreate(ctx, w.space, alias, FormWorker, map[string]any{"handlers": hs})
	if err != nil {
		return err
	}
	mw.handlers = handlers
	var bs []any
	for _, b := range bindings {
		q, err := w.resource(b[1])
		if err != nil {
			return err
		}
		bs = append(bs, map[string]any{"name": b[0], "resource": ref(q.uid)})
	}
	vspec, err := w.versionSpec(mw.uid, file, bs)
	if err != nil {
		return err
	}
	v, err := w.mustCreate(ctx, w.space, alias+"-v1", FormVersion, vspec)
	if err != nil {
		return err
	}
	return w.mustUpdate(ctx, alias, map[string]any{"handlers": hs, "version": ref(v.uid)})
}

var bindingRE = regexp.MustCompile(`([A-Za-z_$][A-Za-z0-9_$]*) to "([^"]*)"`)

// applyMods edits a spec by "field=JSON; field=@alias; -field".
// consumerSpec is the kit's default consumer spec for the named queue and
// worker, with mods ("maxBatchSize=2; maxRetries=1") applied.
func (w *world) consumerSpec(q, wk, mods string) (map[string]any, error) {
	qr, err := w.resource(q)
	if err != nil {
		return nil, err
	}
	wr, err := w.resource(wk)
	if err != nil {
		return nil, err
	}
	return w.applyMods(defaultConsumer(qr.uid, wr.uid), mods)
}

func (w *world) applyMods(spec map[string]any, mods string) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range spec {
		out[k] = v
	}
	for _, part := range strings.Split(mods, "; ") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.HasPrefix(part, "-") {
			delete(out, part[1:])
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("modifier %q is not field=value", part)
		}
		if strings.HasPrefix(v, "@") {
			rs, err := w.resource(v[1:])
			if err != nil {
				return nil, err
			}
			out[k] = ref(rs.uid)
			continue
		}
		x, err := w.expand(v)
		if err != nil {
			return nil, err
		}
		var val any
		d := json.NewDecoder(strings.NewReader(x))
		d.UseNumber()
		if err := d.Decode(&val); err != nil {
			return nil, fmt.Errorf("modifier %q: value is not JSON: %v", part, err)
		}
		out[k] = val
	}
	return out, nil
}

// expandJSON expands the kit's placeholders in s, then decodes it as JSON
// (numbers kept as written).
func (w *world) expandJSON(s string) (any, error) {
	x, err := w.expand(s)
	if err != nil {
		return nil, err
	}
	return decodeJSON(x)
}

func decodeJSON(s string) (any, error) {
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v: %s", err, s)
	}
	return v, nil
}

func registerResourceSteps(sc *godog.ScenarioContext) {
	W := func(ctx context.Context) *world { return get(ctx) }

	// ---- setup (as admin, must succeed) ----
	sc.Step(`^a queue "([^"]*)"$`, func(ctx context.Context, a string) error {
		_, err := W(ctx).mustCreate(ctx, W(ctx).space, a, FormQueue, map[string]any{"messageRetentionSeconds": json.Number("600")})
		return err
	})
	sc.Step(`^a queue "([^"]*)" with spec (\{.*\})$`, func(ctx context.Context, a, spec string) error {
		w := W(ctx)
		v, err := decodeJSON(spec)
		if err != nil {
			return err
		}
		_, err = w.mustCreate(ctx, w.space, a, FormQueue, v)
		return err
	})
	sc.Step(`^a queue "([^"]*)" in another space$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		_, err := w.mustCreate(ctx, w.secondSpace(), a, FormQueue, map[string]any{"messageRetentionSeconds": json.Number("600")})
		return err
	})
	sc.Step(`^a worker "([^"]*)"$`, func(ctx context.Context, a string) error {
		return W(ctx).makeWorker(ctx, a, "kit.js", []string{"fetch", "queue"}, nil)
	})
	sc.Step(`^a worker "([^"]*)" with producer bindings? (.+)$`, func(ctx context.Context, a, bs string) error {
		var pairs [][2]string
		for _, m := range bindingRE.FindAllStringSubmatch(bs, -1) {
			pairs = append(pairs, [2]string{m[1], m[2]})
		}
		if len(pairs) == 0 {
			return fmt.Errorf("no bindings in %q (want NAME to \"queue\")", bs)
		}
		return W(ctx).makeWorker(ctx, a, "kit.js", []string{"fetch", "queue"}, pairs)
	})
	sc.Step(`^a fetch-only worker "([^"]*)"$`, func(ctx context.Context, a string) error {
		return W(ctx).makeWorker(ctx, a, "fetch-only.js", []string{"fetch"}, nil)
	})
	sc.Step(`^an unselected version "([^"]*)" of "([^"]*)" with producer binding ([A-Za-z_$][A-Za-z0-9_$]*) to "([^"]*)"$`,
		func(ctx context.Context, v, wk, name, q string) error {
			w := W(ctx)
			mw, err := w.resource(wk)
			if err != nil {
				return err
			}
			qr, err := w.resource(q)
			if err != nil {
				return err
			}
			spec, err := w.versionSpec(mw.uid, "kit.js", []any{map[string]any{"name": name, "resource": ref(qr.uid)}})
			if err != nil {
				return err
			}
			_, err = w.mustCreate(ctx, w.space, v, FormVersion, spec)
			return err
		})
	consumer := func(ctx context.Context, c, q, wk, mods string) error {
		w := W(ctx)
		spec, err := w.consumerSpec(q, wk, mods)
		if err != nil {
			return err
		}
		_, err = w.mustCreate(ctx, w.space, c, FormConsumer, spec)
		return err
	}
	sc.Step(`^a consumer "([^"]*)" of "([^"]*)" by "([^"]*)"$`, func(ctx context.Context, c, q, wk string) error {
		return consumer(ctx, c, q, wk, "")
	})
	sc.Step(`^a consumer "([^"]*)" of "([^"]*)" by "([^"]*)" with (.+)$`, consumer)
	sc.Step(`^"([^"]*)" has been deleted$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		as := w.as
		w.as = PrincipalAdmin
		defer func() { w.as = as }()
		r, err := w.remove(ctx, a)
		if err != nil {
			return err
		}
		if r.Status != 202 || w.lastOp.State != "succeeded" {
			return fmt.Errorf("deleting %q failed: %s (operation %+v)", a, r, w.lastOp)
		}
		return nil
	})
	sc.Step(`^"([^"]*)" has been updated with (.+)$`, func(ctx context.Context, a, mods string) error {
		w := W(ctx)
		rs, err := w.resource(a)
		if err != nil {
			return err
		}
		spec, err := w.applyMods(rs.spec, mods)
		if err != nil {
			return err
		}
		return w.mustUpdate(ctx, a, spec)
	})

	// ---- principals and headers ----
	sc.Step(`^I act as the "([^"]*)" principal$`, func(ctx context.Context, p string) error {
		w := W(ctx)
		w.as = p
		_, err := w.client(ctx)
		return err
	})
	sc.Step(`^I act without a token$`, func(ctx context.Context) error { W(ctx).as = "nobody"; return nil })
	sc.Step(`^I act with an unknown token$`, func(ctx context.Context) error { W(ctx).as = "bogus"; return nil })
	sc.Step(`^the next request carries header "([^"]*)": (.*)$`, func(ctx context.Context, k, v string) error {
		w := W(ctx)
		x, err := w.expand(v)
		if err != nil {
			return err
		}
		if w.header == nil {
			w.header = http.Header{}
		}
		w.header.Set(k, x)
		return nil
	})
	sc.Step(`^I remember the etag of "([^"]*)"$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		m, r, err := w.get(ctx, a)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("reading %q: %s", a, r)
		}
		e, _ := m["etag"].(string)
		if e == "" {
			return fmt.Errorf("%q has no etag: %s", a, r)
		}
		if h := r.Header.Get("ETag"); h != "" && h != e {
			return fmt.Errorf("ETag header %q differs from etag member %q", h, e)
		}
		w.etags[a] = e
		return nil
	})

	// ---- requests (as the current principal; the outcome is checked by Then steps) ----
	sc.Step(`^I create an? "([^"]*)" named "([^"]*)" with spec:$`, func(ctx context.Context, form, a string, doc *godog.DocString) error {
		w := W(ctx)
		fu := formsByShortName[form]
		if fu == "" {
			return fmt.Errorf("unknown Form %q", form)
		}
		v, err := w.expandJSON(doc.Content)
		if err != nil {
			return err
		}
		_, err = w.create(ctx, w.space, a, fu, v, nil)
		return err
	})
	sc.Step(`^I create a queue "([^"]*)" with spec (.+)$`, func(ctx context.Context, a, spec string) error {
		w := W(ctx)
		v, err := w.expandJSON(spec)
		if err != nil {
			return err
		}
		_, err = w.create(ctx, w.space, a, FormQueue, v, nil)
		return err
	})
	sc.Step(`^I create a queue "([^"]*)" with privateInputs (.+)$`, func(ctx context.Context, a, pi string) error {
		w := W(ctx)
		v, err := decodeJSON(pi)
		if err != nil {
			return err
		}
		_, err = w.create(ctx, w.space, a, FormQueue, map[string]any{"messageRetentionSeconds": json.Number("600")}, v)
		return err
	})
	createConsumer := func(ctx context.Context, c, q, wk, mods string) error {
		w := W(ctx)
		spec, err := w.consumerSpec(q, wk, mods)
		if err != nil {
			return err
		}
		_, err = w.create(ctx, w.space, c, FormConsumer, spec, nil)
		return err
	}
	sc.Step(`^I create a consumer "([^"]*)" of "([^"]*)" by "([^"]*)"$`, func(ctx context.Context, c, q, wk string) error {
		return createConsumer(ctx, c, q, wk, "")
	})
	sc.Step(`^I create a consumer "([^"]*)" of "([^"]*)" by "([^"]*)" with (.+)$`, createConsumer)
	sc.Step(`^I create a consumer "([^"]*)" of "([^"]*)" by "([^"]*)" carrying privateInputs (.+)$`, func(ctx context.Context, c, q, wk, pi string) error {
		w := W(ctx)
		spec, err := w.consumerSpec(q, wk, "")
		if err != nil {
			return err
		}
		v, err := decodeJSON(pi)
		if err != nil {
			return err
		}
		_, err = w.create(ctx, w.space, c, FormConsumer, spec, v)
		return err
	})
	sc.Step(`^I create a version "([^"]*)" of "([^"]*)" with:$`, func(ctx context.Context, v, wk string, doc *godog.DocString) error {
		w := W(ctx)
		mw, err := w.resource(wk)
		if err != nil {
			return err
		}
		spec, err := w.versionSpec(mw.uid, "kit.js", nil)
		if err != nil {
			return err
		}
		extra, err := w.expandJSON(doc.Content)
		if err != nil {
			return err
		}
		em, _ := extra.(map[string]any)
		var pi any
		for k, val := range em {
			switch k {
			case "privateInputs":
				pi = val
			case "vars":
				vars := spec["vars"].(map[string]any)
				for vk, vv := range val.(map[string]any) {
					vars[vk] = vv
				}
			default:
				spec[k] = val
			}
		}
		_, err = w.create(ctx, w.space, v, FormVersion, spec, pi)
		return err
	})
	sc.Step(`^I create a version "([^"]*)" of "([^"]*)" with (\d+) bindings to "([^"]*)"$`, func(ctx context.Context, v, wk string, n int, q string) error {
		w := W(ctx)
		mw, err := w.resource(wk)
		if err != nil {
			return err
		}
		qr, err := w.resource(q)
		if err != nil {
			return err
		}
		var bs []any
		for i := 0; i < n; i++ {
			bs = append(bs, map[string]any{"name": fmt.Sprintf("B%d", i), "resource": ref(qr.uid)})
		}
		spec, err := w.versionSpec(mw.uid, "kit.js", bs)
		if err != nil {
			return err
		}
		_, err = w.create(ctx, w.space, v, FormVersion, spec, nil)
		return err
	})
	sc.Step(`^the request is (accepted|refused with (\d+) "([^"]*)")$`, func(ctx context.Context, outcome string, status, code string) error {
		w := W(ctx)
		if w.last == nil {
			return fmt.Errorf("no request was made")
		}
		if outcome == "accepted" {
			if _, err := AcceptedOperation(w.last); err != nil {
				return err
			}
			if w.lastOp == nil || w.lastOp.State != "succeeded" {
				return fmt.Errorf("operation did not succeed: %+v (answer %s)", w.lastOp, w.last)
			}
			if w.lastOp.Effect != "applied" && w.lastOp.Effect != "none" {
				return fmt.Errorf("succeeded operation has effect %q", w.lastOp.Effect)
			}
			return nil
		}
		n, _ := strconv.Atoi(status)
		return CheckProblem(w.last, n, code)
	})
	sc.Step(`^I update "([^"]*)" with (.+)$`, func(ctx context.Context, a, mods string) error {
		w := W(ctx)
		rs, err := w.resource(a)
		if err != nil {
			return err
		}
		spec, err := w.applyMods(rs.spec, mods)
		if err != nil {
			return err
		}
		_, err = w.update(ctx, a, spec)
		return err
	})
	sc.Step(`^I replace the spec of "([^"]*)" with:$`, func(ctx context.Context, a string, doc *godog.DocString) error {
		w := W(ctx)
		v, err := w.expandJSON(doc.Content)
		if err != nil {
			return err
		}
		_, err = w.update(ctx, a, v)
		return err
	})
	sc.Step(`^I delete "([^"]*)"$`, func(ctx context.Context, a string) error {
		_, err := W(ctx).remove(ctx, a)
		return err
	})
	sc.Step(`^I start deleting "([^"]*)"$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		rs, err := w.resource(a)
		if err != nil {
			return err
		}
		c := w.admin()
		w.bg = make(chan *Response, 1)
		go func() {
			r, err := c.Do(context.Background(), "DELETE", resPath(rs.space, rs.uid), nil, nil)
			if err != nil {
				r = &Response{Method: "DELETE", Path: resPath(rs.space, rs.uid), Status: -1, Body: []byte(err.Error())}
			}
			w.bg <- r
		}()
		time.Sleep(300 * time.Millisecond) // let the DELETE reach the host before the next request races it
		return nil
	})
	sc.Step(`^the deletion of "([^"]*)" completes$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		rs, _ := w.resource(a)
		var r *Response
		select {
		case r = <-w.bg:
		case <-time.After(opTimeout):
			return fmt.Errorf("DELETE did not answer within %s", opTimeout)
		}
		op, err := AcceptedOperation(r)
		if err != nil {
			return err
		}
		done, err := WaitOperation(ctx, w.admin(), rs.space, op.ID, opTimeout)
		if err != nil {
			return err
		}
		if done.State != "succeeded" {
			return fmt.Errorf("deletion ended %s/%s", done.State, done.Effect)
		}
		return nil
	})
	sc.Step(`^I (GET|POST|PUT|DELETE) "([^"]*)"$`, func(ctx context.Context, method, path string) error {
		w := W(ctx)
		p, err := w.expand(path)
		if err != nil {
			return err
		}
		_, err = w.do(ctx, method, p, nil)
		return err
	})
	sc.Step(`^I (POST|PUT) "([^"]*)" with body:$`, func(ctx context.Context, method, path string, doc *godog.DocString) error {
		w := W(ctx)
		p, err := w.expand(path)
		if err != nil {
			return err
		}
		b, err := w.expand(doc.Content)
		if err != nil {
			return err
		}
		if doc.MediaType != "" && doc.MediaType != "json" {
			if w.header == nil {
				w.header = http.Header{}
			}
			if w.header.Get("Content-Type") == "" {
				w.header.Set("Content-Type", doc.MediaType)
			}
		}
		_, err = w.do(ctx, method, p, []byte(b))
		return err
	})
	sc.Step(`^I read "([^"]*)"$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		rs, err := w.resource(a)
		if err != nil {
			return err
		}
		_, err = w.api(ctx, func(c *Client, h http.Header) (*Response, error) { return c.GetResource(ctx, rs.space, rs.uid, h) })
		return err
	})
	sc.Step(`^I list the resources(?: of "([^"]*)")?$`, func(ctx context.Context, form string) error {
		w := W(ctx)
		p := "/v2/spaces/" + w.space + "/resources"
		if form != "" {
			p += "?formUrl=" + formsByShortName[form]
		}
		_, err := w.do(ctx, "GET", p, nil)
		return err
	})
	sc.Step(`^I invoke the fetch handler of "([^"]*)"$`, func(ctx context.Context, a string) error {
		w := W(ctx)
		rs, err := w.resource(a)
		if err != nil {
			return err
		}
		_, err = w.do(ctx, "GET", resPath(rs.space, rs.uid)+"/fetch/hello", nil)
		return err
	})

	// ---- outcomes ----
	sc.Step(`^the problem points at "([^"]*)"$`, func(ctx context.Context, ptr string) error {
		w := W(ctx)
		if w.last == nil || w.last.Problem == nil {
			return fmt.Errorf("the last answer is not a problem: %v", w.last)
		}
		for _, e := range ProblemErrors(w.last.Problem) {
			if e.Pointer == ptr || strings.HasPrefix(e.Pointer, ptr+"/") {
				return nil
			}
		}
		return fmt.Errorf("no error points at %s: %s", ptr, w.last)
	})
	sc.Step(`^the response status is (\d+)$`, func(ctx context.Context, status int) error {
		w := W(ctx)
		if w.last == nil || w.last.Status != status {
			return fmt.Errorf("want status %d, got %v", status, w.last)
		}
		return nil
	})
	sc.Step(`^the response replays the previous operation$`, func(ctx context.Context) error {
		w := W(ctx)
		if w.prev == nil || w.last == nil {
			return fmt.Errorf("need two requests")
		}
		a, err := AcceptedOperation(w.prev)
		if err != nil {
			return fmt.Errorf("first request: %w", err)
		}
		b, err := AcceptedOperation(w.last)
		if err != nil {
			return fmt.Errorf("second request: %w", err)
		}
		if a.ID != b.ID {
			return fmt.Errorf("replay answered operation %s, the first request got %s", b.ID, a.ID)
		}
		if v := w.last.Header.Get("Idempotent-Replayed"); v != "true" {
			return fmt.Errorf("replay has Idempotent-Replayed %q, want true", v)
		}
		return nil
	})
	sc.Step(`^the listing holds exactly (\d+) resources? named "([^"]*)"$`, func(ctx context.Context, n int, name string) error {
		w := W(ctx)
		r, err := w.admin().ListResources(ctx, w.space, nil)
		if err != nil {
			return err
		}
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if err := r.JSON(&l); err != nil {
			return err
		}
		got := 0
		for _, it := range l.Items {
			if it["name"] == name {
				got++
			}
		}
		if got != n {
			return fmt.Errorf("%d resources named %q, want %d: %s", got, name, n, r)
		}
		return nil
	})
	sc.Step(`^the listing shows no "([^"]*)" resources$`, func(ctx context.Context, form string) error {
		w := W(ctx)
		if w.last == nil || w.last.Status != 200 {
			return fmt.Errorf("listing failed: %v", w.last)
		}
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if err := w.last.JSON(&l); err != nil {
			return err
		}
		for _, it := range l.Items {
			if it["formUrl"] == formsByShortName[form] {
				return fmt.Errorf("listing shows %v", it["name"])
			}
		}
		return nil
	})
	sc.Step(`^"([^"]*)" (?:still )?exists$`, func(ctx context.Context, a string) error {
		m, r, err := W(ctx).get(ctx, a)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("%q does not read: %s", a, r)
		}
		return nil
	})
	sc.Step(`^"([^"]*)" no longer exists$`, func(ctx context.Context, a string) error {
		_, r, err := W(ctx).get(ctx, a)
		if err != nil {
			return err
		}
		return CheckProblem(r, 404, "not_found")
	})
	sc.Step(`^the spec of "([^"]*)" reads (\{.*\})$`, func(ctx context.Context, a, want string) error {
		w := W(ctx)
		m, r, err := w.get(ctx, a)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("reading %q: %s", a, r)
		}
		x, err := w.expand(want)
		if err != nil {
			return err
		}
		wv, err := decodeJSON(x)
		if err != nil {
			return err
		}
		if !jsonEqual(m["spec"], wv) {
			b, _ := json.Marshal(m["spec"])
			return fmt.Errorf("spec of %q is %s, want %s", a, b, x)
		}
		return nil
	})
	sc.Step(`^"([^"]*)" is at generation (\d+)$`, func(ctx context.Context, a string, g int) error {
		m, r, err := W(ctx).get(ctx, a)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("reading %q: %s", a, r)
		}
		if fmt.Sprint(m["generation"]) != strconv.Itoa(g) {
			return fmt.Errorf("generation of %q is %v, want %d", a, m["generation"], g)
		}
		return nil
	})
	sc.Step(`^the observed of "([^"]*)" is \{\} or a confirmed observation$`, func(ctx context.Context, a string) error {
		// checkResourceRead already restricts observed to the Form's members and types.
		m, r, err := W(ctx).get(ctx, a)
		if m == nil && err == nil {
			err = fmt.Errorf("reading %q: %s", a, r)
		}
		return err
	})
	sc.Step(`^the output of "([^"]*)" is \{\}$`, func(ctx context.Context, a string) error {
		m, r, err := W(ctx).get(ctx, a)
		if m == nil && err == nil {
			err = fmt.Errorf("reading %q: %s", a, r)
		}
		return err
	})
	sc.Step(`^"([^"]*)" eventually observes (.+)$`, func(ctx context.Context, a, want string) error {
		w := W(ctx)
		wantM := map[string]string{}
		for _, part := range strings.Split(want, ", ") {
			k, v, _ := strings.Cut(strings.TrimSpace(part), " ")
			wantM[k] = v
		}
		return Poll(30*time.Second, func() error {
			obs, err := w.pollObserved(ctx, a)
			if err != nil {
				return err
			}
			for k, v := range wantM {
				if fmt.Sprint(obs[k]) != v {
					return fmt.Errorf("observed of %q is %v, want %s", a, obs, want)
				}
			}
			return nil
		})
	})

	// ---- Operations ----
	sc.Step(`^I remember the operation$`, func(ctx context.Context) error {
		w := W(ctx)
		op, err := AcceptedOperation(w.last)
		if err != nil {
			return err
		}
		w.etags["op"] = op.ID
		return nil
	})
	sc.Step(`^the remembered operation reads (succeeded|failed)$`, func(ctx context.Context, state string) error {
		w := W(ctx)
		op, err := WaitOperation(ctx, w.admin(), w.space, w.etags["op"], opTimeout)
		if err != nil {
			return err
		}
		if op.State != state {
			return fmt.Errorf("operation %s is %s/%s, want %s", op.ID, op.State, op.Effect, state)
		}
		return nil
	})
	sc.Step(`^the operation failed with "([^"]*)"$`, func(ctx context.Context, code string) error {
		w := W(ctx)
		if w.lastOp == nil || w.lastOp.State != "failed" || w.lastOp.Error == nil || w.lastOp.Error.Code != code {
			return fmt.Errorf("want a failed operation with error %q, got %+v (answer %v)", code, w.lastOp, w.last)
		}
		return nil
	})

	// ---- host control ----
	sc.Step(`^the host restarts$`, func(ctx context.Context) error {
		w := W(ctx)
		if w.k.cfg.Restart == nil {
			return w.k.skip(ctx, "needs host control: pass --restart-cmd")
		}
		return w.k.cfg.Restart(ctx)
	})
}

// godogStop marks a polling error that retrying cannot fix.
type godogStop struct{ error }

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	var u, v any
	dx := json.NewDecoder(bytes.NewReader(x))
	dx.UseNumber()
	dx.Decode(&u)
	dy := json.NewDecoder(bytes.NewReader(y))
	dy.UseNumber()
	dy.Decode(&v)
	x, _ = json.Marshal(u)
	y, _ = json.Marshal(v)
	return bytes.Equal(x, y)
}
