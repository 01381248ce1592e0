// Command specbundle turns spec/openapi.yaml, which references the shapes in
// schemas/ by file, into one self-contained OpenAPI 3.0 document: every
// external $ref becomes a component named by the schema's title. oapi-codegen
// generates the server from the bundle, and the server serves it at
// GET /v2/openapi.json, so schemas/ stays the single source of every shape.
//
//	go run ./tools/specbundle -in spec/openapi.yaml -schemas schemas -out gen/api/openapi.json \
//		-forms-go gen/api/forms.gen.go -forms-ts console/web/src/forms.gen.ts
//
// It also writes the one list of the Form URLs (components.schemas.FormUrl)
// as Go constants for every Go package (gen/api) and as TypeScript for the
// console, so that no Form URL is typed by hand twice.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	in := flag.String("in", "spec/openapi.yaml", "OpenAPI source document")
	schemaDir := flag.String("schemas", "schemas", "directory of the JSON Schema files it references")
	out := flag.String("out", "gen/api/openapi.json", "bundled document to write")
	formsGoOut := flag.String("forms-go", "", "Go file of the Form URL constants to write (gen/api/forms.gen.go); none when empty")
	formsTSOut := flag.String("forms-ts", "", "TypeScript file of the Form URLs to write (console/web/src/forms.gen.ts); none when empty")
	flag.Parse()
	if err := run(*in, *schemaDir, *out, *formsGoOut, *formsTSOut); err != nil {
		fmt.Fprintln(os.Stderr, "specbundle:", err)
		os.Exit(1)
	}
}

func run(in, schemaDir, out, formsGoOut, formsTSOut string) error {
	titles, err := schemaTitles(schemaDir)
	if err != nil {
		return err
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	doc, err := loader.LoadFromFile(in)
	if err != nil {
		return fmt.Errorf("load %s: %w", in, err)
	}
	var unnamed []string
	doc.InternalizeRefs(context.Background(), func(d *openapi3.T, ref openapi3.ComponentRef) string {
		if u := ref.RefPath(); u != nil && u.Path != "" {
			if t, ok := titles[path.Base(u.Path)]; ok {
				return t
			}
			unnamed = append(unnamed, u.Path)
		}
		return openapi3.DefaultRefNameResolver(d, ref)
	})
	if len(unnamed) > 0 {
		return fmt.Errorf("referenced files without a title in %s: %s", schemaDir, strings.Join(unnamed, ", "))
	}
	if err := doc.Validate(context.Background()); err != nil {
		return fmt.Errorf("bundled document is not valid OpenAPI 3.0: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := writeFile(out, buf.Bytes()); err != nil {
		return err
	}
	return writeForms(doc, formsGoOut, formsTSOut)
}

// schemaTitles maps each schema file's base name to its title, which becomes
// the component (and generated Go type) name.
func schemaTitles(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	titles := make(map[string]string, len(files))
	seen := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s struct {
			Title string `json:"title"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if s.Title == "" {
			continue
		}
		if other, dup := seen[s.Title]; dup {
			return nil, fmt.Errorf("%s and %s share the title %q", other, f, s.Title)
		}
		seen[s.Title] = f
		titles[filepath.Base(f)] = s.Title
	}
	return titles, nil
}
