package schemas

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed *.json
var files embed.FS

// schemaBase is the URL under which every embedded file is registered. It is
// never fetched: the loader serves only embedded files below it.
const schemaBase = "https://queuehost.takoform.com/schemas/"

// Schema files a caller outside this package validates against by name.
const (
	SchemaCreateResourceRequest = "create-resource-request.json"
	SchemaUpdateResourceRequest = "update-resource-request.json"
	SchemaSendOptions           = "send-options.json"
	SchemaSendBatchMessage      = "send-batch-message.json"
)

// ErrUnknownSchema is returned (or, from ValidateValue, panicked with) for a
// schema file name that is not embedded here: a programming error.
var ErrUnknownSchema = errors.New("schemas: unknown schema file")

type compiled struct {
	byFile  map[string]*jsonschema.Schema
	byLoc   map[string]*jsonschema.Schema // every subschema by its Location
	compErr error
}

var (
	compileOnce sync.Once
	compiledSet compiled
)

// embedLoader serves the embedded files registered below schemaBase.
type embedLoader struct{}

func (embedLoader) Load(url string) (any, error) {
	name, ok := strings.CutPrefix(url, schemaBase)
	if !ok || strings.Contains(name, "/") {
		return nil, fmt.Errorf("schemas: %q is not an embedded schema", url)
	}
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

func schemaSet() *compiled {
	compileOnce.Do(func() {
		compiledSet = compileAll()
	})
	return &compiledSet
}

func compileAll() compiled {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(embedLoader{})
	out := compiled{
		byFile: map[string]*jsonschema.Schema{},
		byLoc:  map[string]*jsonschema.Schema{},
	}
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		out.compErr = err
		return out
	}
	sort.Strings(names)
	for _, name := range names {
		s, err := c.Compile(schemaBase + name)
		if err != nil {
			out.compErr = fmt.Errorf("schemas: compiling %s: %w", name, err)
			return out
		}
		out.byFile[name] = s
		indexSchema(s, out.byLoc)
	}
	return out
}

// indexSchema records s and every subschema reachable from it by Location,
// so that a validation error's SchemaURL finds the schema that failed.
func indexSchema(s *jsonschema.Schema, idx map[string]*jsonschema.Schema) {
	if s == nil {
		return
	}
	if _, seen := idx[s.Location]; seen {
		return
	}
	idx[s.Location] = s
	indexSchema(s.Ref, idx)
	indexSchema(s.Not, idx)
	indexSchema(s.If, idx)
	indexSchema(s.Then, idx)
	indexSchema(s.Else, idx)
	for _, l := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf, s.PrefixItems} {
		for _, sub := range l {
			indexSchema(sub, idx)
		}
	}
	for _, sub := range s.Properties {
		indexSchema(sub, idx)
	}
	if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		indexSchema(ap, idx)
	}
	indexSchema(s.Items2020, idx)
	switch it := s.Items.(type) {
	case *jsonschema.Schema:
		indexSchema(it, idx)
	case []*jsonschema.Schema:
		for _, sub := range it {
			indexSchema(sub, idx)
		}
	}
	if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		indexSchema(ai, idx)
	}
	indexSchema(s.Contains, idx)
	indexSchema(s.PropertyNames, idx)
}

// lookup returns the compiled schema of an embedded file.
func lookup(schemaFile string) (*compiled, *jsonschema.Schema, error) {
	set := schemaSet()
	if set.compErr != nil {
		return nil, nil, set.compErr
	}
	s, ok := set.byFile[schemaFile]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownSchema, schemaFile)
	}
	return set, s, nil
}
