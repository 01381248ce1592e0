package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/takoform/queuehost/abi"
	"github.com/takoform/queuehost/runtime/js"
	"github.com/takoform/queuehost/schemas"
)

// preflight checks, without a host, everything apply can know will be
// refused, so that apply finds it before its first write: each resource's
// spec against its Form's schema and rules (the same validation the host
// runs: ranges such as maxRetries 0..100, names, the namespace of vars,
// secrets and bindings), every worker's modules bundled and compiled as
// the host compiles them (syntax errors, imports of missing modules, a
// missing main module), the handlers each worker declares against those
// its default export provides, and that every worker a consumer names
// declares the queue handler. Every problem found is reported, each naming
// the manifest entry.
func preflight(m *Manifest) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	check := func(what, form string, spec, private any) {
		raw, err := json.Marshal(spec)
		if err != nil {
			bad("%s: %v", what, err)
			return
		}
		var priv []byte
		if private != nil {
			priv, _ = json.Marshal(private)
		}
		vs, err := schemas.ValidateResource(form, raw, priv)
		if err != nil {
			bad("%s: %v", what, err)
			return
		}
		for _, v := range vs {
			key := strings.TrimPrefix(strings.TrimPrefix(v.Pointer, "/spec"), "/")
			key = strings.ReplaceAll(key, "/", ".")
			if key == "" {
				bad("%s: %s", what, v.Detail)
			} else {
				bad("%s: %s %s", what, key, v.Detail)
			}
		}
	}
	// Placeholders stand for the UIDs the host will give.
	const uid = "r-preflight"
	queueUID := map[string]string{}
	for _, q := range m.Queues {
		queueUID[q.Name] = uid
		check("queue "+q.Name, formQueue, queueSpec(q), nil)
	}
	handlers := map[string][]string{}
	for _, w := range m.Workers {
		handlers[w.Name] = w.Handlers
		check("worker "+w.Name, formWorker, map[string]any{"handlers": w.Handlers}, nil)
		b, err := m.buildVersion(w, uid, queueUID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var priv any
		if b.Secrets != nil {
			priv = map[string]any{"secrets": b.Secrets}
		}
		check("worker "+w.Name+" (its version)", formVersion, b.Spec, priv)
		v := &abi.Version{MainModule: b.Spec["mainModule"].(string)}
		for _, mod := range b.Spec["modules"].([]any) {
			mm := mod.(map[string]any)
			v.Modules = append(v.Modules, abi.Module{Name: mm["name"].(string), Content: mm["content"].(string)})
		}
		p, err := js.Compile(v)
		if err != nil {
			var ce *abi.CompileError
			if errors.As(err, &ce) && ce.File != "" {
				bad("worker %s: %s:%d:%d: %s", w.Name, moduleFile(w, ce.File), ce.Line, ce.Column, ce.Message)
			} else {
				bad("worker %s: %v", w.Name, err)
			}
			continue
		}
		for _, h := range w.Handlers {
			if !p.HasHandler(h) {
				bad("worker %s declares the %s handler, but the default export of %s has no %s function (export default { async %s(%s) { … } })",
					w.Name, h, w.Main, h, h, map[string]string{"queue": "batch, env", "fetch": "request, env"}[h])
			}
		}
	}
	for _, c := range m.Consumers {
		if hs, ok := handlers[c.Worker]; ok && !slices.Contains(hs, "queue") {
			bad("consumer %s: worker %s does not declare the queue handler (handlers: [%s]); add queue to its handlers and export it", c.Name, c.Worker, strings.Join(hs, ", "))
		}
		dlq := ""
		if c.DeadLetterQueue != "" {
			dlq = uid + "-dlq"
		}
		check("consumer "+c.Name, formConsumer, consumerSpec(c, uid+"-q", uid+"-w", dlq), nil)
	}
	return errors.Join(errs...)
}

// moduleFile is the manifest's path of the module the version names name.
func moduleFile(w WorkerDecl, name string) string {
	for _, f := range append([]string{w.Main}, w.Modules...) {
		if strings.HasSuffix(strings.ReplaceAll(f, "\\", "/"), "/"+name) || f == name {
			return f
		}
	}
	return name
}
