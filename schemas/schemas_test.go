package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// This file holds the one table of validation cases. Most of it is generated
// from compact field descriptions (intField, strField, refField) so that
// every field of every Form gets the same edges; hand-written cases follow
// for what is specific (arrays, env names, namespaces, envelopes).

// tc is one case. Without file it runs ValidateResource(form, spec, pi);
// with file, ValidateDocument(file, doc, "") or, when isValue,
// ValidateValue(file, value, "").
type tc struct {
	name    string
	form    string
	spec    []byte // nil: absent
	pi      []byte // nil: absent
	file    string
	doc     []byte
	value   any
	isValue bool
	want    []Violation
	wantErr error
}

func (c tc) run() ([]Violation, error) {
	switch {
	case c.file == "": // a Form, possibly the empty URL
		return ValidateResource(c.form, c.spec, c.pi)
	case c.isValue:
		return ValidateValue(c.file, c.value, ""), nil
	default:
		return ValidateDocument(c.file, c.doc, "")
	}
}

func v(ptr, detail string) Violation { return Violation{Pointer: ptr, Detail: detail} }

// ---- JSON tree helpers -------------------------------------------------

type raw string // a JSON literal inserted verbatim (5.0, 5e0, ...)

func parse(s string) any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		panic(fmt.Sprintf("bad test JSON %q: %v", s, err))
	}
	return x
}

func render(x any) []byte {
	var conv func(any) any
	conv = func(x any) any {
		switch x := x.(type) {
		case raw:
			return json.RawMessage(x)
		case map[string]any:
			m := map[string]any{}
			for k, e := range x {
				m[k] = conv(e)
			}
			return m
		case []any:
			a := make([]any, len(x))
			for i, e := range x {
				a[i] = conv(e)
			}
			return a
		}
		return x
	}
	b, err := json.Marshal(conv(x))
	if err != nil {
		panic(err)
	}
	return b
}

func deepCopy(x any) any {
	switch x := x.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = deepCopy(e)
		}
		return a
	}
	return x
}

// edit returns a copy of the JSON document doc with the member or item at
// path (unescaped tokens, "/a/0/b") set to val, or deleted when del.
func edit(doc string, path string, val any, del bool) []byte {
	root := deepCopy(parse(doc))
	toks := strings.Split(path, "/")[1:]
	cur := root
	for i, t := range toks {
		last := i == len(toks)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if del {
					delete(c, t)
				} else {
					c[t] = val
				}
				return render(root)
			}
			cur = c[t]
		case []any:
			n, err := strconv.Atoi(t)
			if err != nil {
				panic(path)
			}
			if last {
				if del {
					panic("deleting array items is not supported")
				}
				c[n] = val
				return render(root)
			}
			cur = c[n]
		default:
			panic(fmt.Sprintf("path %s does not exist in %s", path, doc))
		}
	}
	return render(root)
}

func set(doc, path string, val any) []byte { return edit(doc, path, val, false) }
func del(doc, path string) []byte          { return edit(doc, path, nil, true) }

func parentOf(path string) string { return path[:strings.LastIndex(path, "/")] }
func leafOf(path string) string   { return path[strings.LastIndex(path, "/")+1:] }

// ---- targets -----------------------------------------------------------

// target is a document that cases edit: a Form's spec or privateInputs, or
// a standalone schema file.
type target struct {
	label  string
	form   string
	file   string
	valid  string // the valid document the generated cases edit
	other  string // for a Form: the valid other half (privateInputs or spec); "" = absent
	isPI   bool   // the edited document is privateInputs
	prefix string // pointer prefix of the edited document
}

func (t target) with(name string, doc []byte, want ...Violation) tc {
	c := tc{name: t.label + "/" + name, want: want}
	if t.form == "" {
		c.file, c.doc = t.file, doc
		return c
	}
	c.form = t.form
	var other []byte
	if t.other != "" {
		other = []byte(t.other)
	}
	if t.isPI {
		c.spec, c.pi = other, doc
	} else {
		c.spec, c.pi = doc, other
	}
	return c
}

const (
	validQueue         = `{"deliveryDelaySeconds":0,"messageRetentionSeconds":86400}`
	validConsumer      = `{"queue":{"resourceUid":"queue-uid"},"worker":{"resourceUid":"worker-uid"},"maxBatchSize":10,"maxBatchTimeoutSeconds":5,"maxConcurrency":4,"maxRetries":3,"retryDelaySeconds":30,"deadLetterQueue":{"resourceUid":"dlq-uid"}}`
	validModuleWorker  = `{"handlers":["fetch"],"version":{"resourceUid":"v-uid"}}`
	validWorkerVersion = `{"worker":{"resourceUid":"w-uid"},"mainModule":"main.js","modules":[{"name":"main.js","content":"export default {}"},{"name":"util.js","content":""}],"vars":{"GREETING":"hi"},"queueProducerBindings":[{"name":"TASKS","resource":{"resourceUid":"q-uid"}}]}`
	validSecrets       = `{"secrets":{"API_KEY":"s3cret"}}`
	validCreate        = `{"name":"q1","formUrl":"https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/","offering":"default","spec":{},"privateInputs":{}}`
	validUpdate        = `{"spec":{},"privateInputs":{}}`
	validSendOptions   = `{"delaySeconds":5}`
	validSendBatchMsg  = `{"body":"hello","delaySeconds":5}`
)

var (
	tQueue    = target{label: "AtLeastOnceQueue", form: FormAtLeastOnceQueue, valid: validQueue, prefix: "/spec"}
	tConsumer = target{label: "QueueConsumer", form: FormQueueConsumer, valid: validConsumer, prefix: "/spec"}
	tMW       = target{label: "ModuleWorker", form: FormModuleWorker, valid: validModuleWorker, prefix: "/spec"}
	tWV       = target{label: "WorkerVersion", form: FormWorkerVersion, valid: validWorkerVersion, other: validSecrets, prefix: "/spec"}
	tWVPI     = target{label: "WorkerVersion.privateInputs", form: FormWorkerVersion, valid: validSecrets, other: validWorkerVersion, isPI: true, prefix: "/privateInputs"}
	tCreate   = target{label: "create-resource-request", file: SchemaCreateResourceRequest, valid: validCreate}
	tUpdate   = target{label: "update-resource-request", file: SchemaUpdateResourceRequest, valid: validUpdate}
	tSendOpt  = target{label: "send-options", file: SchemaSendOptions, valid: validSendOptions}
	tSendMsg  = target{label: "send-batch-message", file: SchemaSendBatchMessage, valid: validSendBatchMsg}
)

// ---- field descriptions and their generated cases ----------------------

type intField struct {
	t        target
	path     string
	required bool
	min, max int
}

type strField struct {
	t        target
	path     string
	required bool
	min, max int
	pattern  string // as it appears in the detail; "" = none
	// fill makes a valid value of n characters; nil = strings.Repeat("a", n)
	fill func(n int) string
	// also edits the document for a valid value (to keep cross-field rules
	// satisfied); nil = nothing
	also func(doc []byte, val string) []byte
}

type refField struct {
	t        target
	path     string
	required bool
}

func expectIf(cond bool, want ...Violation) []Violation {
	if cond {
		return want
	}
	return nil
}

func missingCase(t target, path string, required bool) tc {
	doc := del(t.valid, path)
	if required {
		return t.with(path+"/missing", doc, v(t.prefix+path, fmt.Sprintf("required field %q is missing", leafOf(path))))
	}
	return t.with(path+"/omitted", doc)
}

func siblingCase(t target, path string) tc {
	name := leafOf(path) + "Extra"
	return t.with(path+"/unknown-sibling", set(t.valid, parentOf(path)+"/"+name, 1),
		v(t.prefix+parentOf(path)+"/"+name, fmt.Sprintf("unknown field %q is not allowed", name)))
}

func (f intField) cases() []tc {
	t, p, ptr := f.t, f.path, f.t.prefix+f.path
	rng := fmt.Sprintf("must be an integer from %d to %d", f.min, f.max)
	lit := "must be an integer written without fraction or exponent"
	mid := f.min + 1
	return []tc{
		missingCase(t, p, f.required),
		t.with(p+"/below-minimum", set(t.valid, p, f.min-1), v(ptr, rng)),
		t.with(p+"/at-minimum", set(t.valid, p, f.min)),
		t.with(p+"/at-maximum", set(t.valid, p, f.max)),
		t.with(p+"/above-maximum", set(t.valid, p, f.max+1), v(ptr, rng)),
		t.with(p+"/wrong-type-bool", set(t.valid, p, true), v(ptr, rng)),
		t.with(p+"/wrong-type-null", set(t.valid, p, nil), v(ptr, rng)),
		t.with(p+"/string-digits", set(t.valid, p, strconv.Itoa(mid)), v(ptr, rng)),
		t.with(p+"/fraction", set(t.valid, p, raw(fmt.Sprintf("%d.5", mid))), v(ptr, rng)),
		t.with(p+"/point-zero", set(t.valid, p, raw(fmt.Sprintf("%d.0", mid))), v(ptr, lit)),
		t.with(p+"/exponent", set(t.valid, p, raw(fmt.Sprintf("%de0", mid))), v(ptr, lit)),
		t.with(p+"/exponent-upper", set(t.valid, p, raw(fmt.Sprintf("%dE+0", mid))), v(ptr, lit)),
		t.with(p+"/negative-zero", set(t.valid, p, raw("-0")), expectIf(f.min > 0, v(ptr, rng))...),
		t.with(p+"/point-zero-above-maximum", set(t.valid, p, raw(fmt.Sprintf("%d.0", f.max+1))), v(ptr, lit)),
		siblingCase(t, p),
	}
}

func (f strField) cases() []tc {
	t, p, ptr := f.t, f.path, f.t.prefix+f.path
	detail := fmt.Sprintf("must be a string of %d to %d characters", f.min, f.max)
	if f.min == 0 {
		detail = fmt.Sprintf("must be a string of at most %d characters", f.max)
	}
	if f.pattern != "" {
		detail += " matching " + f.pattern
	}
	fill := f.fill
	if fill == nil {
		fill = func(n int) string { return strings.Repeat("a", n) }
	}
	valid := func(name string, n int) tc {
		s := fill(n)
		doc := set(t.valid, p, s)
		if f.also != nil {
			doc = f.also(doc, s)
		}
		return t.with(p+"/"+name, doc)
	}
	cs := []tc{
		missingCase(t, p, f.required),
		valid("at-minimum", f.min),
		valid("at-maximum", f.max),
		t.with(p+"/above-maximum", set(t.valid, p, fill(f.max+1)), v(ptr, detail)),
		t.with(p+"/wrong-type-number", set(t.valid, p, 5), v(ptr, detail)),
		t.with(p+"/wrong-type-object", set(t.valid, p, map[string]any{}), v(ptr, detail)),
		siblingCase(t, p),
	}
	if f.min > 0 {
		cs = append(cs, t.with(p+"/below-minimum", set(t.valid, p, fill(f.min-1)), v(ptr, detail)))
	}
	return cs
}

func (f refField) cases() []tc {
	t, p, ptr := f.t, f.path, f.t.prefix+f.path
	uid := "must be a string of 1 to 256 characters"
	return []tc{
		missingCase(t, p, f.required),
		t.with(p+"/wrong-type", set(t.valid, p, "queue-uid"), v(ptr, "must be an object")),
		t.with(p+"/unknown-field", set(t.valid, p+"/name", "q"), v(ptr+"/name", `unknown field "name" is not allowed`)),
		t.with(p+"/missing-resourceUid", set(t.valid, p, map[string]any{}), v(ptr+"/resourceUid", `required field "resourceUid" is missing`)),
		t.with(p+"/empty-resourceUid", set(t.valid, p+"/resourceUid", ""), v(ptr+"/resourceUid", uid)),
		t.with(p+"/resourceUid-256", set(t.valid, p+"/resourceUid", strings.Repeat("u", 256))),
		t.with(p+"/resourceUid-257", set(t.valid, p+"/resourceUid", strings.Repeat("u", 257)), v(ptr+"/resourceUid", uid)),
		t.with(p+"/resourceUid-number", set(t.valid, p+"/resourceUid", 5), v(ptr+"/resourceUid", uid)),
		siblingCase(t, p),
	}
}

// ---- the table ---------------------------------------------------------

func ident(n int) string {
	if n == 0 {
		return ""
	}
	return "A" + strings.Repeat("a", n-1)
}

func bindings(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"name": "B" + strconv.Itoa(i), "resource": map[string]any{"resourceUid": "q"}}
	}
	return out
}

func envMap(n int) map[string]any {
	m := map[string]any{}
	for i := range n {
		m["V"+strconv.Itoa(i)] = "x"
	}
	return m
}

func modules(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"name": "m" + strconv.Itoa(i) + ".js", "content": ""}
	}
	out[0] = map[string]any{"name": "main.js", "content": ""}
	return out
}

func allCases() []tc {
	var cs []tc
	ints := []intField{
		{tQueue, "/deliveryDelaySeconds", false, 0, 43200},
		{tQueue, "/messageRetentionSeconds", true, 60, 1209600},
		{tConsumer, "/maxBatchSize", true, 1, 100},
		{tConsumer, "/maxBatchTimeoutSeconds", true, 0, 60},
		{tConsumer, "/maxConcurrency", true, 1, 250},
		{tConsumer, "/maxRetries", true, 0, 100},
		{tConsumer, "/retryDelaySeconds", true, 0, 43200},
		{tSendOpt, "/delaySeconds", false, 0, 43200},
		{tSendMsg, "/delaySeconds", false, 0, 43200},
	}
	for _, f := range ints {
		cs = append(cs, f.cases()...)
	}
	refs := []refField{
		{tConsumer, "/queue", true},
		{tConsumer, "/worker", true},
		{tConsumer, "/deadLetterQueue", false},
		{tMW, "/version", false},
		{tWV, "/worker", true},
		{tWV, "/queueProducerBindings/0/resource", true},
	}
	for _, f := range refs {
		cs = append(cs, f.cases()...)
	}
	moduleName := `^[A-Za-z0-9_][A-Za-z0-9_.-]*$`
	bindingName := `^[A-Za-z_$][A-Za-z0-9_$]{0,63}$`
	envName := "must be a JavaScript identifier matching " + bindingName
	// mainModule must name a module: a valid value also renames module 1.
	renameModule1 := func(doc []byte, val string) []byte { return set(string(doc), "/modules/1/name", val) }
	strs := []strField{
		{t: tWV, path: "/mainModule", required: true, min: 1, max: 128, also: renameModule1},
		{t: tWV, path: "/modules/1/name", required: true, min: 1, max: 128, pattern: moduleName},
		{t: tWV, path: "/modules/1/content", required: true, min: 0, max: 4194304},
		{t: tWV, path: "/queueProducerBindings/0/name", required: true, min: 1, max: 64, pattern: bindingName, fill: ident},
		{t: tCreate, path: "/name", required: true, min: 1, max: 63, pattern: `^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`},
		{t: tCreate, path: "/formUrl", required: true, min: 1, max: 2048},
		{t: tCreate, path: "/offering", required: false, min: 1, max: 128},
	}
	for _, f := range strs {
		cs = append(cs, f.cases()...)
	}

	// Every target: the valid document, an unknown top-level member, wrong type.
	for _, t := range []target{tQueue, tConsumer, tMW, tWV, tWVPI, tCreate, tUpdate, tSendOpt, tSendMsg} {
		cs = append(cs,
			t.with("valid", []byte(t.valid)),
			t.with("unknown-top-level", set(t.valid, "/foo", 1), v(t.prefix+"/foo", `unknown field "foo" is not allowed`)),
			t.with("not-an-object", []byte(`[]`), v(t.prefix, "must be an object")),
		)
	}

	// ModuleWorker handlers.
	hd := "must be an array of 1 to 2 items"
	cs = append(cs,
		missingCase(tMW, "/handlers", true),
		siblingCase(tMW, "/handlers"),
		tMW.with("/handlers/empty", set(validModuleWorker, "/handlers", []any{}), v("/spec/handlers", hd)),
		tMW.with("/handlers/both", set(validModuleWorker, "/handlers", []any{"fetch", "queue"})),
		tMW.with("/handlers/queue", set(validModuleWorker, "/handlers", []any{"queue"})),
		tMW.with("/handlers/three", set(validModuleWorker, "/handlers", []any{"fetch", "queue", "fetch"}),
			v("/spec/handlers", hd), v("/spec/handlers/2", "must not repeat item 0")),
		tMW.with("/handlers/repeated", set(validModuleWorker, "/handlers", []any{"queue", "queue"}), v("/spec/handlers/1", "must not repeat item 0")),
		tMW.with("/handlers/unknown", set(validModuleWorker, "/handlers", []any{"fetch", "scheduled"}), v("/spec/handlers/1", `must be one of "fetch", "queue"`)),
		tMW.with("/handlers/number", set(validModuleWorker, "/handlers", []any{1}), v("/spec/handlers/0", `must be one of "fetch", "queue"`)),
		tMW.with("/handlers/wrong-type", set(validModuleWorker, "/handlers", "fetch"), v("/spec/handlers", hd)),
	)

	// WorkerVersion modules.
	md := "must be an array of 1 to 64 items"
	cs = append(cs,
		missingCase(tWV, "/modules", true),
		siblingCase(tWV, "/modules"),
		tWV.with("/modules/empty", set(validWorkerVersion, "/modules", []any{}), v("/spec/modules", md)),
		tWV.with("/modules/64", set(validWorkerVersion, "/modules", modules(64))),
		tWV.with("/modules/65", set(validWorkerVersion, "/modules", modules(65)), v("/spec/modules", md)),
		tWV.with("/modules/wrong-type", set(validWorkerVersion, "/modules", map[string]any{}), v("/spec/modules", md)),
		tWV.with("/modules/1/unknown-field", set(validWorkerVersion, "/modules/1/type", "esm"), v("/spec/modules/1/type", `unknown field "type" is not allowed`)),
		tWV.with("/modules/1/name/leading-dot", set(validWorkerVersion, "/modules/1/name", ".util.js"),
			v("/spec/modules/1/name", "must be a string of 1 to 128 characters matching "+moduleName)),
		tWV.with("/modules/1/name/slash", set(validWorkerVersion, "/modules/1/name", "./util.js"),
			v("/spec/modules/1/name", "must be a string of 1 to 128 characters matching "+moduleName)),
		tWV.with("/modules/1/name/duplicate", set(validWorkerVersion, "/modules/1/name", "main.js"),
			v("/spec/modules/1/name", `duplicate module name "main.js" (first at /spec/modules/0/name)`)),
		tWV.with("/mainModule/names-no-module", set(validWorkerVersion, "/mainModule", "other.js"), v("/spec/mainModule", "must name one of modules")),
		tWV.with("/mainModule/too-long-reported-once", set(validWorkerVersion, "/mainModule", strings.Repeat("a", 129)),
			v("/spec/mainModule", "must be a string of 1 to 128 characters")),
	)

	// queueProducerBindings.
	bd := "must be a string of 1 to 64 characters matching " + bindingName
	bp := "/queueProducerBindings/0/name"
	cs = append(cs,
		missingCase(tWV, "/queueProducerBindings", false),
		siblingCase(tWV, "/queueProducerBindings"),
		tWV.with("/queueProducerBindings/empty", set(validWorkerVersion, "/queueProducerBindings", []any{})),
		tWV.with("/queueProducerBindings/64", set(validWorkerVersion, "/queueProducerBindings", bindings(64))),
		tWV.with("/queueProducerBindings/65", set(validWorkerVersion, "/queueProducerBindings", bindings(65)),
			v("/spec/queueProducerBindings", "must be an array of at most 64 items")),
		tWV.with("/queueProducerBindings/wrong-type", set(validWorkerVersion, "/queueProducerBindings", map[string]any{}),
			v("/spec/queueProducerBindings", "must be an array of at most 64 items")),
		tWV.with("/queueProducerBindings/item-wrong-type", set(validWorkerVersion, "/queueProducerBindings/0", "TASKS"),
			v("/spec/queueProducerBindings/0", "must be an object")),
		tWV.with(bp+"/dollar-a", set(validWorkerVersion, bp, "$a")),
		tWV.with(bp+"/underscore", set(validWorkerVersion, bp, "_")),
		tWV.with(bp+"/dollar", set(validWorkerVersion, bp, "$")),
		tWV.with(bp+"/64", set(validWorkerVersion, bp, strings.Repeat("a", 64))),
		tWV.with(bp+"/65", set(validWorkerVersion, bp, strings.Repeat("a", 65)), v("/spec"+bp, bd)),
		tWV.with(bp+"/leading-digit", set(validWorkerVersion, bp, "1a"), v("/spec"+bp, bd)),
		tWV.with(bp+"/hyphen", set(validWorkerVersion, bp, "a-b"), v("/spec"+bp, bd)),
		tWV.with(bp+"/empty", set(validWorkerVersion, bp, ""), v("/spec"+bp, bd)),
		tWV.with(bp+"/non-ascii", set(validWorkerVersion, bp, "é"), v("/spec"+bp, bd)),
		tWV.with("/queueProducerBindings/duplicate-name",
			set(validWorkerVersion, "/queueProducerBindings", []any{
				map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": "q1"}},
				map[string]any{"name": "OTHER", "resource": map[string]any{"resourceUid": "q2"}},
				map[string]any{"name": "TASKS", "resource": map[string]any{"resourceUid": "q3"}},
			}),
			v("/spec/queueProducerBindings/2/name", `binding name "TASKS" is already used at /spec/queueProducerBindings/0/name; binding, var and secret names share one namespace`)),
		tWV.with("/queueProducerBindings/collides-with-var", set(validWorkerVersion, bp, "GREETING"),
			v("/spec"+bp, `binding name "GREETING" is already used at /spec/vars/GREETING; binding, var and secret names share one namespace`)),
		tWV.with("/queueProducerBindings/collides-with-secret", set(validWorkerVersion, bp, "API_KEY"),
			v("/privateInputs/secrets/API_KEY", `secret name "API_KEY" is already used at /spec/queueProducerBindings/0/name; binding, var and secret names share one namespace`)),
	)

	// vars and secrets: the same EnvStrings rules at two places.
	for _, env := range []struct {
		t    target
		path string
		what string
	}{{tWV, "/vars", "var"}, {tWVPI, "/secrets", "secret"}} {
		t, p, ptr := env.t, env.path, env.t.prefix+env.path
		nameCase := func(label, name string, ok bool) tc {
			doc := set(t.valid, p, map[string]any{name: "x"})
			if ok {
				return t.with(p+"/name-"+label, doc)
			}
			return t.with(p+"/name-"+label, doc, v(ptr+"/"+escapeToken(name), env.what+" name "+envName))
		}
		cs = append(cs,
			missingCase(t, p, false),
			siblingCase(t, p),
			t.with(p+"/empty", set(t.valid, p, map[string]any{})),
			t.with(p+"/64", set(t.valid, p, envMap(64))),
			t.with(p+"/65", set(t.valid, p, envMap(65)), v(ptr, "must be an object of at most 64 members")),
			t.with(p+"/wrong-type", set(t.valid, p, []any{}), v(ptr, "must be an object of at most 64 members")),
			t.with(p+"/value-number", set(t.valid, p, map[string]any{"N": 5}), v(ptr+"/N", "must be a string of at most 65536 characters")),
			t.with(p+"/value-65536", set(t.valid, p, map[string]any{"N": strings.Repeat("x", 65536)})),
			t.with(p+"/value-65537", set(t.valid, p, map[string]any{"N": strings.Repeat("x", 65537)}), v(ptr+"/N", "must be a string of at most 65536 characters")),
			nameCase("dollar-a", "$a", true),
			nameCase("underscore", "_", true),
			nameCase("64", ident(64), true),
			nameCase("65", ident(65), false),
			nameCase("leading-digit", "1a", false),
			nameCase("hyphen", "a-b", false),
			nameCase("empty", "", false),
			nameCase("slash-escaped", "a/b~c", false),
		)
	}
	cs = append(cs,
		tWVPI.with("/secrets/collides-with-var", set(validSecrets, "/secrets/GREETING", "s"),
			v("/privateInputs/secrets/GREETING", `secret name "GREETING" is already used at /spec/vars/GREETING; binding, var and secret names share one namespace`)),
		tWVPI.with("absent", nil),
		tWVPI.with("empty", []byte(`{}`)),
		tWVPI.with("null", []byte(`null`), v("/privateInputs", "must be an object")),
	)

	// privateInputs of the Forms without secrets.
	for _, t := range []target{tQueue, tConsumer, tMW} {
		pi := target{label: t.label + ".privateInputs", form: t.form, valid: `{}`, other: t.valid, isPI: true, prefix: "/privateInputs"}
		cs = append(cs,
			pi.with("absent", nil),
			pi.with("empty", []byte(`{}`)),
			pi.with("non-empty", []byte(`{"secrets":{"A":"b"}}`), v("/privateInputs", "non-empty privateInputs are refused: this Form has no private inputs")),
			pi.with("array", []byte(`[]`), v("/privateInputs", "must be an object")),
			pi.with("null", []byte(`null`), v("/privateInputs", "must be an object")),
		)
	}

	// Spec as a whole.
	cs = append(cs,
		tc{name: "spec/absent", form: FormAtLeastOnceQueue, want: []Violation{v("/spec", `required field "spec" is missing`)}},
		tc{name: "spec/duplicate-member", form: FormAtLeastOnceQueue,
			spec: []byte(`{"messageRetentionSeconds":60,"messageRetentionSeconds":61}`),
			want: []Violation{v("/spec/messageRetentionSeconds", `duplicate member "messageRetentionSeconds"`)}},
		tc{name: "spec/duplicate-nested-member", form: FormQueueConsumer,
			spec: []byte(strings.Replace(validConsumer, `"queue-uid"`, `"a","resourceUid":"b"`, 1)),
			want: []Violation{v("/spec/queue/resourceUid", `duplicate member "resourceUid"`)}},
		tc{name: "spec/unknown-member-escaped", form: FormAtLeastOnceQueue, spec: []byte(`{"messageRetentionSeconds":60,"a~b/c":1}`),
			want: []Violation{v("/spec/a~0b~1c", `unknown field "a~b/c" is not allowed`)}},
		tc{name: "spec/sorted-numerically", form: FormWorkerVersion, spec: set(validWorkerVersion, "/modules",
			append(modules(11), map[string]any{"name": "m10.js"}, map[string]any{"name": "x", "content": 1})), pi: []byte(validSecrets),
			want: []Violation{
				v("/spec/modules/11/content", `required field "content" is missing`),
				v("/spec/modules/11/name", `duplicate module name "m10.js" (first at /spec/modules/10/name)`),
				v("/spec/modules/12/content", "must be a string of at most 4194304 characters"),
			}},
		tc{name: "spec/everything-missing", form: FormQueueConsumer, spec: []byte(`{}`), want: []Violation{
			v("/spec/maxBatchSize", `required field "maxBatchSize" is missing`),
			v("/spec/maxBatchTimeoutSeconds", `required field "maxBatchTimeoutSeconds" is missing`),
			v("/spec/maxConcurrency", `required field "maxConcurrency" is missing`),
			v("/spec/maxRetries", `required field "maxRetries" is missing`),
			v("/spec/queue", `required field "queue" is missing`),
			v("/spec/retryDelaySeconds", `required field "retryDelaySeconds" is missing`),
			v("/spec/worker", `required field "worker" is missing`),
		}},
	)

	// Form URLs and not-JSON.
	for _, u := range []string{
		"https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0",
		"https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0//",
		"http://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/",
		"https://edge.forms.takoform.com/forms/atleastoncequeue/0.2.0/",
		"https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.1.0/",
		"https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/#input",
		"",
	} {
		cs = append(cs, tc{name: "form-url/" + u, form: u, spec: []byte(validQueue), wantErr: ErrUnknownForm})
	}
	for _, bad := range []string{``, ` `, `{`, `{"a":`, `{"a" 1}`, `{} {}`, `{}x`, `nul`, `{'a':1}`, `[1,]`, "\x00"} {
		cs = append(cs,
			tc{name: "not-json/resource/" + strconv.Quote(bad), form: FormAtLeastOnceQueue, spec: []byte(bad), wantErr: ErrNotJSON},
			tc{name: "not-json/private-inputs/" + strconv.Quote(bad), form: FormWorkerVersion, spec: []byte(validWorkerVersion), pi: []byte(bad), wantErr: ErrNotJSON},
			tc{name: "not-json/document/" + strconv.Quote(bad), file: SchemaCreateResourceRequest, doc: []byte(bad), wantErr: ErrNotJSON},
		)
	}
	cs = append(cs, tc{name: "unknown-schema-file", file: "nope.json", doc: []byte(`{}`), wantErr: ErrUnknownSchema})

	// Envelopes.
	nd := "must be a string of 1 to 63 characters matching ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
	for _, n := range []string{"a", "0", "a-b", "a--b", "q1", strings.Repeat("a", 63)} {
		cs = append(cs, tCreate.with("/name/ok-"+n, set(validCreate, "/name", n)))
	}
	for _, n := range []string{"A", "-a", "a-", "a_b", "a.b", "é", " a", strings.Repeat("a", 64)} {
		cs = append(cs, tCreate.with("/name/bad-"+n, set(validCreate, "/name", n), v("/name", nd)))
	}
	cs = append(cs,
		missingCase(tCreate, "/spec", true),
		missingCase(tCreate, "/privateInputs", false),
		tCreate.with("/spec/wrong-type", set(validCreate, "/spec", "x"), v("/spec", "must be an object")),
		tCreate.with("/privateInputs/wrong-type", set(validCreate, "/privateInputs", nil), v("/privateInputs", "must be an object")),
		tCreate.with("/spec/open-inside", set(validCreate, "/spec/anything", 1)),
		missingCase(tUpdate, "/spec", true),
		missingCase(tUpdate, "/privateInputs", false),
		tUpdate.with("/spec/wrong-type", set(validUpdate, "/spec", []any{}), v("/spec", "must be an object")),
		tUpdate.with("/privateInputs/wrong-type", set(validUpdate, "/privateInputs", []any{}), v("/privateInputs", "must be an object")),
		tUpdate.with("/name-not-allowed", set(validUpdate, "/name", "q1"), v("/name", `unknown field "name" is not allowed`)),
		tUpdate.with("/duplicate-spec", []byte(`{"spec":{},"spec":{}}`), v("/spec", `duplicate member "spec"`)),
		missingCase(tSendMsg, "/body", true),
		tSendMsg.with("/body/any-json", set(validSendBatchMsg, "/body", []any{1, 2})),
		tSendOpt.with("/empty", []byte(`{}`)),
	)

	// ValidateValue: values decoded elsewhere.
	val := func(name string, x any, want ...Violation) tc {
		return tc{name: "value/" + name, file: SchemaSendOptions, value: x, isValue: true, want: want}
	}
	sd := "must be an integer from 0 to 43200"
	cs = append(cs,
		val("nil-options-refused", nil, v("", "must be an object")),
		val("empty", map[string]any{}),
		val("float64-integral", map[string]any{"delaySeconds": 5.0}),
		val("int64", map[string]any{"delaySeconds": int64(43200)}),
		val("float64-fraction", map[string]any{"delaySeconds": 5.5}, v("/delaySeconds", sd)),
		val("float64-above", map[string]any{"delaySeconds": 43201.0}, v("/delaySeconds", sd)),
		val("json-number-point-zero", map[string]any{"delaySeconds": json.Number("5.0")}, v("/delaySeconds", "must be an integer written without fraction or exponent")),
		val("string", map[string]any{"delaySeconds": "5"}, v("/delaySeconds", sd)),
		val("unknown", map[string]any{"delay": 5}, v("/delay", `unknown field "delay" is not allowed`)),
	)
	return cs
}

func TestValidation(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range allCases() {
		if seen[c.name] {
			t.Fatalf("duplicate case name %q", c.name)
		}
		seen[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			if c.file == "" { // KnownForm agrees with ValidateResource
				if known := KnownForm(c.form); known != !errors.Is(c.wantErr, ErrUnknownForm) {
					t.Fatalf("KnownForm(%q) = %v", c.form, known)
				}
			}
			got, err := c.run()
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("error = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) == 0 && len(c.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("violations\n got: %s\nwant: %s\ninput spec=%.300s pi=%.300s doc=%.300s", show(got), show(c.want), c.spec, c.pi, c.doc)
			}
		})
	}
}

func show(vs []Violation) string {
	var b bytes.Buffer
	for _, v := range vs {
		fmt.Fprintf(&b, "\n  %s: %s", v.Pointer, v.Detail)
	}
	return b.String()
}

// A body of very many unknown members is one violation, found without
// validating each of them; a document with many violations reports at most
// MaxViolations, the last counting the rest.
func TestValidationBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"messageRetentionSeconds":60`)
	for i := range 600000 {
		fmt.Fprintf(&b, `,"u%d":1`, i)
	}
	b.WriteString(`}`)
	vs, err := ValidateResource(FormAtLeastOnceQueue, []byte(b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Pointer != "/spec" || !strings.Contains(vs[0].Detail, "more than") {
		t.Fatalf("%d violations, first %+v", len(vs), vs[:min(len(vs), 1)])
	}

	b.Reset()
	b.WriteString(`{"messageRetentionSeconds":60`)
	for i := range 500 {
		fmt.Fprintf(&b, `,"u%d":1`, i)
	}
	b.WriteString(`}`)
	vs, err = ValidateResource(FormAtLeastOnceQueue, []byte(b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != MaxViolations || !strings.Contains(vs[MaxViolations-1].Detail, "and 401 more violations") {
		t.Fatalf("%d violations, last %+v", len(vs), vs[len(vs)-1])
	}
}
