package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrNotJSON is the sentinel of a document that is not one JSON value: a
// syntax error, an empty body or data after the value. The error returned
// is a *NotJSONError, which errors.Is reports as ErrNotJSON.
var ErrNotJSON = errors.New("not JSON")

// NotJSONError says where a document stopped being JSON.
type NotJSONError struct {
	Offset int64 // byte offset into the document where parsing failed
	Reason string
}

func (e *NotJSONError) Error() string {
	return fmt.Sprintf("not JSON: %s at byte offset %d", e.Reason, e.Offset)
}

// Is makes errors.Is(err, ErrNotJSON) true.
func (e *NotJSONError) Is(target error) bool { return target == ErrNotJSON }

// MaxValues bounds the JSON values (objects, arrays, members, elements,
// scalars) of one validated document: validating is linear in them, and a
// body of hundreds of thousands of unknown members would cost seconds of
// CPU and a problem of as many errors. No valid resource comes near it.
const MaxValues = 20000

// errTooManyValues stops decoding a document past MaxValues.
var errTooManyValues = errors.New("too many values")

// tooManyValues is the one violation of a document past MaxValues, which
// is then not validated further.
func tooManyValues(base string) violation {
	return violation{Violation: Violation{Pointer: base, Detail: fmt.Sprintf("holds more than %d JSON values; not validated further", MaxValues)}}
}

// decodeStrict decodes one JSON value with every number kept as a
// json.Number. A duplicate object member is not a syntax error but a
// violation (at the second occurrence, whose value is dropped). A document
// of more than MaxValues values is one violation and ok is false: the
// caller must not validate v.
func decodeStrict(raw []byte, base string) (v any, vs []violation, ok bool, err error) {
	v, vs, err = decodeStrictValues(raw, base)
	if errors.Is(err, errTooManyValues) {
		return nil, []violation{tooManyValues(base)}, false, nil
	}
	return v, vs, err == nil, err
}

func decodeStrictValues(raw []byte, base string) (any, []violation, error) {
	d := &decoder{dec: json.NewDecoder(bytes.NewReader(raw))}
	d.dec.UseNumber()
	tok, err := d.dec.Token()
	if err != nil {
		return nil, nil, d.notJSON(err)
	}
	v, err := d.value(tok, base)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, errTooManyValues) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, d.notJSON(err)
	}
	if _, err := d.dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the top-level value")
		}
		return nil, nil, d.notJSON(err)
	}
	return v, d.dups, nil
}

type decoder struct {
	dec    *json.Decoder
	dups   []violation
	values int
}

func (d *decoder) notJSON(err error) error {
	off := d.dec.InputOffset()
	var se *json.SyntaxError
	reason := err.Error()
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case err == io.EOF:
		reason = "empty document"
	case errors.Is(err, io.ErrUnexpectedEOF):
		reason = "unexpected end of document"
	}
	return &NotJSONError{Offset: off, Reason: reason}
}

func (d *decoder) value(tok json.Token, ptr string) (any, error) {
	if d.values++; d.values > MaxValues {
		return nil, errTooManyValues
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for d.dec.More() {
				kt, err := d.dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				vt, err := d.dec.Token()
				if err != nil {
					return nil, err
				}
				mptr := ptr + "/" + escapeToken(key)
				val, err := d.value(vt, mptr)
				if err != nil {
					return nil, err
				}
				if _, dup := obj[key]; dup {
					d.dups = append(d.dups, violation{Violation: Violation{
						Pointer: mptr,
						Detail:  fmt.Sprintf("duplicate member %q", key),
					}})
					continue
				}
				obj[key] = val
			}
			if _, err := d.dec.Token(); err != nil { // '}'
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for i := 0; d.dec.More(); i++ {
				vt, err := d.dec.Token()
				if err != nil {
					return nil, err
				}
				val, err := d.value(vt, fmt.Sprintf("%s/%d", ptr, i))
				if err != nil {
					return nil, err
				}
				arr = append(arr, val)
			}
			if _, err := d.dec.Token(); err != nil { // ']'
				return nil, err
			}
			return arr, nil
		default:
			return nil, fmt.Errorf("unexpected %q", rune(t))
		}
	default: // string, json.Number, bool, nil
		return t, nil
	}
}
