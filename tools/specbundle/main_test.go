package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// The source document loads with kin-openapi, external refs allowed, and
// validates: every $ref into schemas/ resolves.
func TestSourceLoadsAndEveryRefResolves(t *testing.T) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	doc, err := loader.LoadFromFile("../../spec/openapi.yaml")
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if len(doc.Paths.Map()) == 0 {
		t.Fatal("no paths")
	}
}

// The checked-in bundle is exactly what the bundler makes now, it holds no
// external reference, and every internal reference names a component.
func TestBundleIsCurrentAndSelfContained(t *testing.T) {
	out := filepath.Join(t.TempDir(), "openapi.json")
	if err := run("../../spec/openapi.yaml", "../../schemas", out, "", ""); err != nil {
		t.Fatal(err)
	}
	fresh, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../../gen/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Fatal("gen/api/openapi.json is stale: run make generate")
	}
	var doc map[string]any
	if err := json.Unmarshal(fresh, &doc); err != nil {
		t.Fatal(err)
	}
	components, _ := doc["components"].(map[string]any)
	var refs []string
	collectRefs(doc, &refs)
	if len(refs) == 0 {
		t.Fatal("no $ref found: the bundle should reference its components")
	}
	for _, ref := range refs {
		parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
		if !strings.HasPrefix(ref, "#/components/") || len(parts) != 2 {
			t.Errorf("reference %q is not an internal component reference", ref)
			continue
		}
		kind, _ := components[parts[0]].(map[string]any)
		if _, ok := kind[parts[1]]; !ok {
			t.Errorf("reference %q names no component", ref)
		}
	}
	// The loader resolves the bundle on its own too.
	loaded, err := openapi3.NewLoader().LoadFromData(fresh)
	if err != nil {
		t.Fatalf("bundle does not load: %v", err)
	}
	if err := loaded.Validate(context.Background()); err != nil {
		t.Fatalf("bundle does not validate: %v", err)
	}
}

// Every schema file a component came from is named by its title, so the
// generated Go types keep the schema's name.
func TestComponentsNamedByTitle(t *testing.T) {
	titles, err := schemaTitles("../../schemas")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../gen/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Resource", "Operation", "Problem", "QueueConsumerSpec", "AtLeastOnceQueueSpec", "WorkerVersionSpec", "Reference"} {
		if _, ok := doc.Components.Schemas[want]; !ok {
			t.Errorf("component %s missing", want)
		}
	}
	for file, title := range titles {
		if _, ok := doc.Components.Schemas[title]; !ok {
			t.Errorf("%s (title %s) is not in the bundle: reference it from spec/openapi.yaml", file, title)
		}
	}
}

func collectRefs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				*out = append(*out, s)
				continue
			}
			collectRefs(e, out)
		}
	case []any:
		for _, e := range x {
			collectRefs(e, out)
		}
	}
}

// The generated Form lists (Go and the console's TypeScript) are what the
// spec's FormUrl component makes now.
func TestFormListsAreCurrent(t *testing.T) {
	dir := t.TempDir()
	goOut, tsOut := filepath.Join(dir, "forms.gen.go"), filepath.Join(dir, "forms.gen.ts")
	if err := run("../../spec/openapi.yaml", "../../schemas", filepath.Join(dir, "openapi.json"), goOut, tsOut); err != nil {
		t.Fatal(err)
	}
	for fresh, committed := range map[string]string{goOut: "../../gen/api/forms.gen.go", tsOut: "../../console/web/src/forms.gen.ts"} {
		a, err := os.ReadFile(fresh)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(committed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s is stale: run make generate", committed)
		}
	}
}

// A FormUrl component whose names do not match its URLs is refused, with
// what is wrong.
func TestFormListRefusals(t *testing.T) {
	for name, ext := range map[string]any{
		"count": []string{"FormA"},
		"ident": []string{"FormA", "Form B"},
		"none":  nil,
	} {
		s := openapi3.NewStringSchema()
		s.Enum = []any{"https://example.test/forms/A/1/", "https://example.test/forms/B/1/"}
		if ext != nil {
			s.Extensions = map[string]any{"x-enum-varnames": ext}
		}
		doc := &openapi3.T{Components: &openapi3.Components{Schemas: openapi3.Schemas{"FormUrl": openapi3.NewSchemaRef("", s)}}}
		if _, err := forms(doc); err == nil || !strings.Contains(err.Error(), "FormUrl") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
