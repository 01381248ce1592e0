package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Violation is one input problem: an RFC 6901 JSON Pointer into the request
// body and a human sentence.
type Violation struct {
	Pointer string
	Detail  string
}

// rank orders violations that describe the same scalar: only the lowest
// ranked one at a pointer is kept.
const (
	rankNone    = iota // not a scalar constraint: always kept
	rankType           // wrong JSON type
	rankLiteral        // integer written with fraction or exponent
	rankValue          // range, length, pattern, enum, item or member count
	rankRule           // a cross-field rule: dropped where the schema already failed
)

type violation struct {
	Violation
	rank int
}

var printer = message.NewPrinter(language.English)

// ValidateDocument decodes raw (numbers kept as written, duplicate members
// reported as violations) and validates it against the embedded schema file
// schemaFile, with the integer rule. base prefixes every pointer ("/spec").
// The error is a *NotJSONError (errors.Is ErrNotJSON) when raw is not one
// JSON value, or wraps ErrUnknownSchema for a file that is not embedded.
func ValidateDocument(schemaFile string, raw []byte, base string) ([]Violation, error) {
	set, s, err := lookup(schemaFile)
	if err != nil {
		return nil, err
	}
	v, dups, ok, err := decodeStrict(raw, base)
	if err != nil {
		return nil, err
	}
	if !ok {
		return finish(dups), nil
	}
	return finish(append(dups, validate(set, s, v, base)...)), nil
}

// ValidateValue validates an already decoded value (map[string]any, []any,
// string, bool, nil, json.Number, float64 or any Go integer) against the
// embedded schema file schemaFile. The integer rule applies to json.Number
// values only. It panics on a schema file that is not embedded.
func ValidateValue(schemaFile string, v any, base string) []Violation {
	set, s, err := lookup(schemaFile)
	if err != nil {
		panic(err)
	}
	return finish(validate(set, s, v, base))
}

// validate runs the schema validator and the integer walker over v.
func validate(set *compiled, s *jsonschema.Schema, v any, base string) []violation {
	var out []violation
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return []violation{{Violation: Violation{Pointer: base, Detail: err.Error()}}}
		}
		out = appendLeaves(out, set, ve, base)
	}
	out = walkIntegers(out, s, v, base, 0)
	return out
}

func appendLeaves(out []violation, set *compiled, e *jsonschema.ValidationError, base string) []violation {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			out = appendLeaves(out, set, c, base)
		}
		return out
	}
	ptr := base + pointer(e.InstanceLocation)
	node := set.byLoc[e.SchemaURL]
	add := func(p, detail string, rank int) {
		out = append(out, violation{Violation: Violation{Pointer: p, Detail: detail}, rank: rank})
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, m := range k.Missing {
			add(ptr+"/"+escapeToken(m), fmt.Sprintf("required field %q is missing", m), rankNone)
		}
	case *kind.AdditionalProperties:
		for _, m := range k.Properties {
			add(ptr+"/"+escapeToken(m), fmt.Sprintf("unknown field %q is not allowed", m), rankNone)
		}
	case *kind.UniqueItems:
		add(fmt.Sprintf("%s/%d", ptr, k.Duplicates[1]), fmt.Sprintf("must not repeat item %d", k.Duplicates[0]), rankNone)
	case *kind.FalseSchema:
		add(ptr, "is not allowed", rankNone)
	case *kind.Type:
		add(ptr, describe(node, e), rankType)
	case *kind.Minimum, *kind.Maximum, *kind.ExclusiveMinimum, *kind.ExclusiveMaximum, *kind.MultipleOf,
		*kind.MinLength, *kind.MaxLength, *kind.Pattern, *kind.Enum, *kind.Const,
		*kind.MinItems, *kind.MaxItems, *kind.MinProperties, *kind.MaxProperties:
		add(ptr, describe(node, e), rankValue)
	default:
		add(ptr, e.ErrorKind.LocalizedString(printer), rankNone)
	}
	return out
}

// describe states the whole constraint of a scalar, array or object schema
// in one sentence, so that every keyword it breaks says the same thing.
func describe(s *jsonschema.Schema, e *jsonschema.ValidationError) string {
	if s == nil {
		return e.ErrorKind.LocalizedString(printer)
	}
	if s.Enum != nil {
		vals := make([]string, len(s.Enum.Values))
		for i, v := range s.Enum.Values {
			b, _ := json.Marshal(v)
			vals[i] = string(b)
		}
		if len(vals) == 1 {
			return "must be " + vals[0]
		}
		return "must be one of " + strings.Join(vals, ", ")
	}
	var types []string
	if s.Types != nil {
		types = s.Types.ToStrings()
	}
	if len(types) != 1 {
		return e.ErrorKind.LocalizedString(printer)
	}
	switch types[0] {
	case "integer":
		return "must be an integer" + numRange(s)
	case "number":
		return "must be a number" + numRange(s)
	case "string":
		d := "must be a string" + countRange(s.MinLength, s.MaxLength, "character")
		if s.Pattern != nil {
			d += " matching " + s.Pattern.String()
		}
		return d
	case "boolean":
		return "must be true or false"
	case "null":
		return "must be null"
	case "array":
		return "must be an array" + countRange(s.MinItems, s.MaxItems, "item")
	case "object":
		return "must be an object" + countRange(s.MinProperties, s.MaxProperties, "member")
	}
	return e.ErrorKind.LocalizedString(printer)
}

func numRange(s *jsonschema.Schema) string {
	lo, hi := s.Minimum, s.Maximum
	switch {
	case lo != nil && hi != nil:
		return " from " + ratString(lo) + " to " + ratString(hi)
	case lo != nil:
		return " of at least " + ratString(lo)
	case hi != nil:
		return " of at most " + ratString(hi)
	}
	return ""
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func countRange(lo, hi *int, noun string) string {
	plural := func(n int) string {
		if n == 1 {
			return noun
		}
		return noun + "s"
	}
	switch {
	case lo != nil && hi != nil && *lo == *hi:
		return fmt.Sprintf(" of exactly %d %s", *lo, plural(*lo))
	case lo != nil && hi != nil && *lo > 0:
		return fmt.Sprintf(" of %d to %d %s", *lo, *hi, plural(*hi))
	case hi != nil:
		return fmt.Sprintf(" of at most %d %s", *hi, plural(*hi))
	case lo != nil && *lo > 0:
		return fmt.Sprintf(" of at least %d %s", *lo, plural(*lo))
	}
	return ""
}

// walkIntegers applies the integer rule: wherever the schema's type is
// integer (and not number), a json.Number literal must have no fraction and
// no exponent. It follows $ref, allOf, properties, additionalProperties and
// items; depth guards against a schema that refers to itself.
func walkIntegers(out []violation, s *jsonschema.Schema, v any, ptr string, depth int) []violation {
	if s == nil || depth > 10000 {
		return out
	}
	out = walkIntegers(out, s.Ref, v, ptr, depth+1)
	for _, sub := range s.AllOf {
		out = walkIntegers(out, sub, v, ptr, depth+1)
	}
	switch v := v.(type) {
	case json.Number:
		if integerOnly(s) && strings.ContainsAny(string(v), ".eE") { // mutate:integer-literal
			out = append(out, violation{
				Violation: Violation{Pointer: ptr, Detail: "must be an integer written without fraction or exponent"},
				rank:      rankLiteral,
			})
		}
	case map[string]any:
		for k, child := range v {
			cptr := ptr + "/" + escapeToken(k)
			if ps, ok := s.Properties[k]; ok {
				out = walkIntegers(out, ps, child, cptr, depth+1)
			} else if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
				out = walkIntegers(out, ap, child, cptr, depth+1)
			}
		}
	case []any:
		for i, child := range v {
			cptr := ptr + "/" + strconv.Itoa(i)
			switch {
			case i < len(s.PrefixItems):
				out = walkIntegers(out, s.PrefixItems[i], child, cptr, depth+1)
			case s.Items2020 != nil:
				out = walkIntegers(out, s.Items2020, child, cptr, depth+1)
			default:
				if is, ok := s.Items.(*jsonschema.Schema); ok {
					out = walkIntegers(out, is, child, cptr, depth+1)
				}
			}
		}
	}
	return out
}

func integerOnly(s *jsonschema.Schema) bool {
	if s.Types == nil {
		return false
	}
	t := s.Types.ToStrings()
	return slices.Contains(t, "integer") && !slices.Contains(t, "number")
}

// finish drops the lesser scalar violations at a pointer, removes exact
// duplicates and sorts by pointer, then detail.
func finish(vs []violation) []Violation {
	best := map[string]int{}
	for _, v := range vs {
		if v.rank == rankNone {
			continue
		}
		if r, ok := best[v.Pointer]; !ok || v.rank < r {
			best[v.Pointer] = v.rank
		}
	}
	out := make([]Violation, 0, len(vs))
	for _, v := range vs {
		if v.rank != rankNone && v.rank != best[v.Pointer] {
			continue
		}
		out = append(out, v.Violation)
	}
	slices.SortFunc(out, compareViolations)
	out = slices.Compact(out)
	if len(out) > MaxViolations {
		more := len(out) - (MaxViolations - 1)
		out = append(out[:MaxViolations-1], Violation{Pointer: "", Detail: fmt.Sprintf("and %d more violations, not listed", more)})
	}
	return out
}

// MaxViolations bounds the violations one validation reports: the first
// MaxViolations-1 in pointer order, then one that counts the rest.
const MaxViolations = 100

func compareViolations(a, b Violation) int {
	if c := comparePointers(a.Pointer, b.Pointer); c != 0 {
		return c
	}
	return strings.Compare(a.Detail, b.Detail)
}

// comparePointers orders pointers token by token, a parent before its
// members, array indexes numerically.
func comparePointers(a, b string) int {
	if a == b {
		return 0
	}
	at, bt := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(at) && i < len(bt); i++ {
		if at[i] == bt[i] {
			continue
		}
		an, aerr := strconv.ParseUint(at[i], 10, 64)
		bn, berr := strconv.ParseUint(bt[i], 10, 64)
		if aerr == nil && berr == nil && an != bn {
			if an < bn {
				return -1
			}
			return 1
		}
		return strings.Compare(at[i], bt[i])
	}
	return len(at) - len(bt)
}

// pointer renders an instance location as an RFC 6901 JSON Pointer.
func pointer(loc []string) string {
	var b strings.Builder
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

// escapeToken escapes one reference token: "~" as "~0", "/" as "~1".
func escapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}
