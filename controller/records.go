package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/takoform/queuehost/problem"
	"github.com/takoform/queuehost/runtime/store"
)

var emptyObject = json.RawMessage(`{}`)

// canonicalJSON re-encodes raw with object members sorted and no
// insignificant white space; numbers keep their literal. It is the basis of
// idempotency fingerprints, ETags and "did the spec change" comparisons.
func canonicalJSON(raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func mustCanonical(raw []byte) []byte {
	c, err := canonicalJSON(raw)
	if err != nil {
		return raw
	}
	return c
}

// sameJSON reports whether a and b hold the same JSON value (absent and
// null read as {}).
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || string(a) == "null" {
		a = emptyObject
	}
	if len(b) == 0 || string(b) == "null" {
		b = emptyObject
	}
	return bytes.Equal(mustCanonical(a), mustCanonical(b))
}

// Fingerprint is the idempotency fingerprint of a request body: the hash
// of its canonical JSON.
func Fingerprint(body []byte) string {
	sum := sha256.Sum256(mustCanonical(body))
	return hex.EncodeToString(sum[:])
}

func etagOf(generation int64, spec []byte) string {
	sum := sha256.Sum256(mustCanonical(spec))
	return `"` + strconv.FormatInt(generation, 10) + "-" + hex.EncodeToString(sum[:8]) + `"`
}

func compact(raw []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func decodeSpec[T any](spec []byte) (T, error) {
	var v T
	err := json.Unmarshal(spec, &v)
	return v, err
}

// load finds uid in space: a resource of another space, a deleted one and
// a missing one all read as 404.
func (c *Controller) load(ctx context.Context, space, uid string) (store.Resource, error) {
	r, err := c.st.Resource(ctx, uid)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Space != space) {
		return store.Resource{}, problem.NotFound("no resource with this UID exists in this space")
	}
	if err != nil {
		return store.Resource{}, problem.Unavailable(err)
	}
	return r, nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// formOf is the Form of a stored record.
func (c *Controller) formOf(r store.Resource) (Form, error) {
	f, ok := c.forms.Form(r.FormURL)
	if !ok {
		return nil, fmt.Errorf("controller: resource %s has Form %s, which this host does not serve", r.UID, r.FormURL)
	}
	return f, nil
}
