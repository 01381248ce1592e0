package schemas

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"github.com/takoform/queuehost/gen/api"
)

// Form URLs, matched exactly: trailing slash included, no normalisation.
// Generated once from spec/openapi.yaml (gen/api/forms.gen.go).
const (
	FormAtLeastOnceQueue = api.FormAtLeastOnceQueue
	FormQueueConsumer    = api.FormQueueConsumer
	FormModuleWorker     = api.FormModuleWorker
	FormWorkerVersion    = api.FormWorkerVersion
	// FormPullConsumer is the host's own Form of a pull consumer
	// (spec/peers.md §Pull consumers), not one of the Takoform Forms.
	FormPullConsumer = api.FormPullConsumer
)

// ErrUnknownForm is returned by ValidateResource for a Form URL that is not
// exactly one of the four Forms.
var ErrUnknownForm = errors.New("schemas: unknown form")

type form struct {
	spec          string // schema file of spec
	privateInputs string // schema file of privateInputs; "" = the Form has none
	rules         func(spec, privateInputs any) []violation
}

var forms = map[string]form{
	FormAtLeastOnceQueue: {spec: "atleastoncequeue-0.2.0.spec.json"},
	FormQueueConsumer:    {spec: "queueconsumer-0.3.0.spec.json"},
	FormModuleWorker:     {spec: "moduleworker-0.3.0.spec.json"},
	FormPullConsumer:     {spec: "pullconsumer-0.1.0.spec.json"},
	FormWorkerVersion: {
		spec:          "workerversion-0.5.0.spec.json",
		privateInputs: "workerversion-0.5.0.private-inputs.json",
		rules:         workerVersionRules,
	},
}

const emptyPrivateInputs = "empty-private-inputs.json"

// KnownForm reports whether url is exactly the URL of a Form this host serves.
func KnownForm(url string) bool {
	_, ok := forms[url]
	return ok
}

// ValidateResource validates the spec and privateInputs of a resource of the
// Form formURL: spec against the Form's spec schema at "/spec",
// privateInputs (nil means absent, which is fine) at "/privateInputs" — for a
// Form without private inputs only {} is accepted — and then the rules the
// schemas cannot state (see the package documentation). A nil spec is one
// violation at "/spec". The error is ErrUnknownForm, or a *NotJSONError when
// spec or privateInputs is not one JSON value.
func ValidateResource(formURL string, spec, privateInputs []byte) ([]Violation, error) {
	f, ok := forms[formURL]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownForm, formURL)
	}
	var out []violation

	specSet, specSchema, err := lookup(f.spec)
	if err != nil {
		return nil, err
	}
	var specVal any
	if spec == nil {
		out = append(out, violation{Violation: Violation{Pointer: "/spec", Detail: `required field "spec" is missing`}})
	} else {
		v, dups, ok, err := decodeStrict(spec, "/spec")
		if err != nil {
			return nil, err
		}
		specVal = v
		out = append(out, dups...)
		if ok {
			out = append(out, validate(specSet, specSchema, v, "/spec")...)
		}
	}

	var piVal any
	if privateInputs != nil {
		v, dups, ok, err := decodeStrict(privateInputs, "/privateInputs")
		if err != nil {
			return nil, err
		}
		piVal = v
		out = append(out, dups...)
		switch {
		case !ok:
			// Past MaxValues: the one violation says so.
		case f.privateInputs == "":
			if m, isObj := v.(map[string]any); isObj && len(m) > 0 {
				out = append(out, violation{Violation: Violation{
					Pointer: "/privateInputs",
					Detail:  "non-empty privateInputs are refused: this Form has no private inputs",
				}})
			} else {
				set, s, err := lookup(emptyPrivateInputs)
				if err != nil {
					return nil, err
				}
				out = append(out, validate(set, s, v, "/privateInputs")...)
			}
		default:
			set, s, err := lookup(f.privateInputs)
			if err != nil {
				return nil, err
			}
			out = append(out, validate(set, s, v, "/privateInputs")...)
		}
	}

	if f.rules != nil {
		out = append(out, f.rules(specVal, piVal)...)
	}
	return finish(out), nil
}

// identifier is the rule for binding, var and secret names.
var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]{0,63}$`)

const identifierDetail = "must be a JavaScript identifier matching ^[A-Za-z_$][A-Za-z0-9_$]{0,63}$"

// workerVersionRules checks what the WorkerVersion 0.5.0 schemas cannot say.
// Each rule looks only at values of the right shape; a value of the wrong
// shape already has its schema violation.
//
// Binding, var and secret names share one namespace. Names are taken in the
// order vars (by name), queueProducerBindings (array order), secrets (by
// name) — spec before privateInputs, and within spec the schema's property
// order — and a name already taken is a violation at the later name.
func workerVersionRules(spec, privateInputs any) []violation {
	var out []violation
	add := func(ptr, detail string) {
		out = append(out, violation{Violation: Violation{Pointer: ptr, Detail: detail}, rank: rankRule})
	}
	s, _ := spec.(map[string]any)

	// Module names are unique; mainModule names one of them.
	moduleNames := map[string]string{} // name -> pointer of its first use
	mods, modsOK := s["modules"].([]any)
	for i, m := range mods {
		mm, _ := m.(map[string]any)
		name, ok := mm["name"].(string)
		if !ok {
			continue
		}
		ptr := "/spec/modules/" + strconv.Itoa(i) + "/name"
		if first, dup := moduleNames[name]; dup {
			add(ptr, fmt.Sprintf("duplicate module name %q (first at %s)", name, first))
			continue
		}
		moduleNames[name] = ptr
	}
	if main, ok := s["mainModule"].(string); ok && modsOK && len(mods) > 0 {
		if _, found := moduleNames[main]; !found {
			add("/spec/mainModule", "must name one of modules")
		}
	}

	// One namespace for vars, bindings and secrets.
	taken := map[string]string{} // name -> pointer of its first use
	claim := func(name, ptr, what string) {
		if first, dup := taken[name]; dup {
			add(ptr, fmt.Sprintf("%s name %q is already used at %s; binding, var and secret names share one namespace", what, name, first))
			return
		}
		taken[name] = ptr
	}
	envNames := func(m map[string]any, base, what string) {
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			ptr := base + "/" + escapeToken(k)
			if !identifier.MatchString(k) {
				add(ptr, fmt.Sprintf("%s name %s", what, identifierDetail))
				continue
			}
			claim(k, ptr, what)
		}
	}
	if vars, ok := s["vars"].(map[string]any); ok {
		envNames(vars, "/spec/vars", "var")
	}
	bindings, _ := s["queueProducerBindings"].([]any)
	for i, b := range bindings {
		bm, _ := b.(map[string]any)
		name, ok := bm["name"].(string)
		if !ok || !identifier.MatchString(name) {
			continue // the schema's pattern already reports it
		}
		claim(name, "/spec/queueProducerBindings/"+strconv.Itoa(i)+"/name", "binding")
	}
	pi, _ := privateInputs.(map[string]any)
	if secrets, ok := pi["secrets"].(map[string]any); ok {
		envNames(secrets, "/privateInputs/secrets", "secret")
	}
	return slices.Clip(out)
}
