package main

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkNode walks the manifest's YAML before it is decoded and reports
// what the decoder would report in Go's words (an unknown key, a value of
// the wrong kind) in the manifest's: where (queues[0].maxRetries, line 7),
// what was expected (an integer, a list of strings), and for an unknown
// key the valid ones, with the likeliest one it was meant to be.
func checkNode(n *yaml.Node, t reflect.Type, path string) []error {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return checkNode(n.Content[0], t, path)
	}
	if n.Kind == yaml.AliasNode {
		return checkNode(n.Alias, t, path)
	}
	if n.Tag == "!!null" {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	where := func() string {
		if path == "" {
			return fmt.Sprintf("line %d", n.Line)
		}
		return fmt.Sprintf("%s (line %d)", path, n.Line)
	}
	wrong := func() []error {
		return []error{fmt.Errorf("%s: %s, not %s", where(), kindName(t), describeNode(n))}
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return wrong()
		}
		fields := yamlFields(t)
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fields[k.Value]
			if !ok {
				errs = append(errs, unknownKey(path, k, fields))
				continue
			}
			errs = append(errs, checkNode(v, f.Type, join(path, k.Value))...)
		}
		return errs
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return wrong()
		}
		var errs []error
		for i, it := range n.Content {
			errs = append(errs, checkNode(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return wrong()
		}
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			errs = append(errs, checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))...)
		}
		return errs
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return wrong()
		}
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 32); err != nil {
			return []error{fmt.Errorf("%s: %s is out of range", where(), n.Value)}
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return wrong()
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func unknownKey(path string, k *yaml.Node, fields map[string]reflect.StructField) error {
	var names []string
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	in := "at the top level"
	if path != "" {
		in = "in " + path
	}
	msg := fmt.Sprintf("line %d: unknown key %q %s", k.Line, k.Value, in)
	if s := suggest(k.Value, names); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	msg += " The keys here are " + strings.Join(names, ", ")
	return fmt.Errorf("%s", msg)
}

// yamlFields are a struct type's keys (its yaml tags) and fields.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f
	}
	return out
}

// kindName says what a Go type holds in the manifest's words.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return "a mapping of keys"
	case reflect.Slice:
		return "a list of " + plural(t.Elem())
	case reflect.Map:
		return "a mapping of names to " + plural(t.Elem())
	case reflect.Int:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return "a value"
}

func plural(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return "mappings"
	case reflect.String:
		return "strings"
	case reflect.Int:
		return "integers"
	}
	return "values"
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	switch n.Tag {
	case "!!int":
		return "the integer " + v
	case "!!float":
		return "the number " + v
	case "!!bool":
		return v
	}
	return strconv.Quote(v)
}
