package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// schemaKeys follows the committed JSON Schema from one object schema
// (resolving local $refs) and compares its properties with the yaml keys
// of the Go type the manifest decodes into, recursively: neither may name
// a key the other does not.
func compareSchema(t *testing.T, defs map[string]any, node map[string]any, typ reflect.Type, path string) {
	t.Helper()
	node = deref(t, defs, node)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ.Kind() {
	case reflect.Struct:
		props, _ := node["properties"].(map[string]any)
		if node["additionalProperties"] != false {
			t.Errorf("%s: the schema does not refuse unknown keys (additionalProperties: false)", path)
		}
		fields := yamlFields(typ)
		var inSchema, inGo []string
		for k := range props {
			inSchema = append(inSchema, k)
		}
		for k := range fields {
			inGo = append(inGo, k)
		}
		sort.Strings(inSchema)
		sort.Strings(inGo)
		if !reflect.DeepEqual(inSchema, inGo) {
			t.Errorf("%s: the schema's keys %v, the Go type's %v", path, inSchema, inGo)
		}
		for k, f := range fields {
			if p, ok := props[k].(map[string]any); ok {
				compareSchema(t, defs, p, f.Type, path+"."+k)
			}
		}
	case reflect.Slice:
		if deref(t, defs, node)["type"] != "array" {
			t.Errorf("%s: a list in Go, not in the schema", path)
			return
		}
		compareSchema(t, defs, node["items"].(map[string]any), typ.Elem(), path+"[]")
	case reflect.Map:
		ap, ok := node["additionalProperties"].(map[string]any)
		if node["type"] != "object" || !ok {
			t.Errorf("%s: a mapping in Go, not in the schema", path)
			return
		}
		compareSchema(t, defs, ap, typ.Elem(), path+".*")
	case reflect.Int:
		if node["type"] != "integer" {
			t.Errorf("%s: an integer in Go, %v in the schema", path, node["type"])
		}
	case reflect.String:
		if node["type"] != "string" && node["enum"] == nil {
			t.Errorf("%s: a string in Go, %v in the schema", path, node["type"])
		}
	}
}

func deref(t *testing.T, defs map[string]any, node map[string]any) map[string]any {
	t.Helper()
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok || defs[name] == nil {
			t.Fatalf("$ref %q is not a local definition", ref)
		}
		node = defs[name].(map[string]any)
	}
}

// The committed JSON Schema (cmd/tako/manifest.schema.json, which editors
// use through the yaml-language-server line) and the Go manifest types
// agree on every key, at every level, and on their kinds; the example
// project's manifest is valid under the schema and names it.
func TestManifestSchemaMatchesTheGoTypes(t *testing.T) {
	raw, err := os.ReadFile("manifest.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["$defs"].(map[string]any)
	compareSchema(t, defs, schema, reflect.TypeOf(Manifest{}), "tako.yaml")

	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("manifest.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("manifest.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "hello", ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(example), "# yaml-language-server: $schema=../../cmd/tako/manifest.schema.json\n") {
		t.Error("examples/hello/tako.yaml does not name the schema on its first line")
	}
	var v any
	if err := yaml.Unmarshal(example, &v); err != nil {
		t.Fatal(err)
	}
	asJSON, _ := json.Marshal(v)
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(asJSON)))
	if err := sch.Validate(inst); err != nil {
		t.Errorf("examples/hello/tako.yaml under the schema: %v", err)
	}
	// And the schema refuses what LoadManifest refuses: an unknown key.
	var bad any
	_ = yaml.Unmarshal([]byte("queues:\n  - name: q\n    messageRetentionSeconds: 60\n    retention: 5\n"), &bad)
	asJSON, _ = json.Marshal(bad)
	inst, _ = jsonschema.UnmarshalJSON(strings.NewReader(string(asJSON)))
	if err := sch.Validate(inst); err == nil {
		t.Error("the schema accepts an unknown key")
	}
}

// An unknown key names where it is, the key it most likely meant and the
// valid keys there, never a Go type; a value of the wrong kind says what
// was expected.
func TestManifestUnknownKeyDidYouMean(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ yaml, want, not string }{
		{"space: demo\nqueues:\n  - name: q\n    messageRetentionSeconds: 60\nconsumers:\n  - queue: q\n    worker: w\n    max_retries: 3\n",
			`line 8: unknown key "max_retries" in consumers[0]; did you mean "maxRetries"? The keys here are deadLetterQueue, maxBatchSize, maxBatchTimeoutSeconds, maxConcurrency, maxRetries, name, queue, retryDelaySeconds, worker`, "main."},
		{"spaces: demo\n", `line 1: unknown key "spaces" at the top level; did you mean "space"? The keys here are consumers, queues, space, workers`, "main.Manifest"},
		{"queues:\n  - name: q\n    retention: 5\n", `unknown key "retention" in queues[0]`, "QueueDecl"},
		{"queues:\n  - name: q\n    messageRetentionSeconds: a day\n", `queues[0].messageRetentionSeconds (line 3): an integer, not "a day"`, "into int"},
		{"workers:\n  - name: w\n    main: a.js\n    modules: b.js\n", `workers[0].modules (line 4): a list of strings, not "b.js"`, "[]string"},
		{"workers:\n  - name: w\n    main: a.js\n    secrets:\n      KEY: {environment: K}\n", `unknown key "environment" in workers[0].secrets.KEY; did you mean "env"?`, "SecretRef"},
	}
	for _, c := range cases {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadManifest(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), c.not) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
}
