package js

import (
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/dop251/goja_nodejs/url"
)

//go:embed prelude.js
var preludeSource string

var (
	preludeOnce sync.Once
	preludeProg *goja.Program
	preludeErr  error
)

func prelude() (*goja.Program, error) {
	preludeOnce.Do(func() {
		preludeProg, preludeErr = goja.Compile("prelude.js", preludeSource, true)
	})
	return preludeProg, preludeErr
}

// helpers are the prelude's functions that Go calls.
type helpers struct {
	isView        goja.Callable
	toPromise     goja.Callable
	makeRequest   goja.Callable
	responseParts goja.Callable
}

// newBareInstance makes a runtime with the global surface and nothing of a
// version (rt and ver may be nil: the compile probe).
func newBareInstance(rt *Runtime, ver *version) (*instance, error) {
	vm := goja.New()
	vm.SetMaxCallStackSize(maxCallStack)
	in := &instance{vm: vm, rt: rt, ver: ver}
	vm.SetPromiseRejectionTracker(in.trackRejection)
	if err := in.installGlobals(); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *instance) installGlobals() error {
	vm := in.vm
	g := vm.GlobalObject()
	in.errorCtor = vm.Get("Error")
	in.typeErrorCtor = vm.Get("TypeError")
	in.rangeErrorCtor = vm.Get("RangeError")

	// URL and URLSearchParams: goja_nodejs's WHATWG implementation,
	// installed without a require() function.
	mod := vm.NewObject()
	_ = mod.Set("exports", vm.NewObject())
	url.Require(vm, mod)
	ex := mod.Get("exports").ToObject(vm)
	for _, name := range []string{"URL", "URLSearchParams"} {
		if err := g.DefineDataProperty(name, ex.Get(name), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_FALSE); err != nil {
			return err
		}
	}
	fns := map[string]func(goja.FunctionCall) goja.Value{
		"setTimeout":   in.setTimeout,
		"clearTimeout": in.clearTimeout,
		"atob":         in.atob,
		"btoa":         in.btoa,
	}
	for name, f := range fns {
		if err := g.DefineDataProperty(name, vm.ToValue(f), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_FALSE); err != nil {
			return err
		}
	}

	host := vm.NewObject()
	maxBody, maxAlloc := DefaultMaxBodyBytes, DefaultMaxAllocBytes
	if in.rt != nil {
		maxBody, maxAlloc = in.rt.opts.MaxBodyBytes, in.rt.opts.MaxAllocBytes
	}
	_ = host.Set("maxBodyBytes", maxBody)
	_ = host.Set("maxAllocBytes", maxAlloc)
	// The host functions take goja.FunctionCall: goja calls a function of
	// any other signature through reflection.
	_ = host.Set("log", func(call goja.FunctionCall) goja.Value {
		in.log(call.Argument(0).String(), call.Argument(1).String())
		return goja.Undefined()
	})
	_ = host.Set("reportError", func(call goja.FunctionCall) goja.Value {
		in.log("error", "Uncaught "+call.Argument(1).String()+": "+in.scriptError(call.Argument(0)).describe())
		return goja.Undefined()
	})
	_ = host.Set("utf8Encode", func(call goja.FunctionCall) goja.Value {
		// String gives UTF-8; lone surrogates become U+FFFD.
		return vm.ToValue(vm.NewArrayBuffer([]byte(call.Argument(0).String())))
	})
	_ = host.Set("utf8Decode", in.utf8Decode)
	_ = host.Set("randomFill", func(call goja.FunctionCall) goja.Value {
		b, err := in.bytesOf(call.Argument(0), call.Argument(1).ToInteger(), call.Argument(2).ToInteger())
		if err != nil {
			panic(vm.NewTypeError(err.Error()))
		}
		_, _ = rand.Read(b)
		return goja.Undefined()
	})
	_ = host.Set("randomUUID", func(goja.FunctionCall) goja.Value { return vm.ToValue(randomUUID()) })
	_ = host.Set("fetch", in.outboundFetch)

	p, err := prelude()
	if err != nil {
		return fmt.Errorf("js: prelude: %w", err)
	}
	fv, err := vm.RunProgram(p)
	if err != nil {
		return fmt.Errorf("js: prelude: %w", err)
	}
	f, ok := goja.AssertFunction(fv)
	if !ok {
		return errors.New("js: prelude is not a function")
	}
	hv, err := f(goja.Undefined(), host)
	if err != nil {
		return fmt.Errorf("js: prelude: %w", err)
	}
	ho := hv.ToObject(vm)
	for name, dst := range map[string]*goja.Callable{
		"isView": &in.h.isView, "toPromise": &in.h.toPromise,
		"makeRequest": &in.h.makeRequest, "responseParts": &in.h.responseParts,
	} {
		c, ok := goja.AssertFunction(ho.Get(name))
		if !ok {
			return fmt.Errorf("js: prelude helper %s missing", name)
		}
		*dst = c
	}
	return nil
}

// bytesOf returns the live bytes [off, off+n) of an ArrayBuffer value.
func (in *instance) bytesOf(abv goja.Value, off, n int64) ([]byte, error) {
	ab, ok := abv.Export().(goja.ArrayBuffer)
	if !ok {
		return nil, errors.New("not an ArrayBuffer")
	}
	b := ab.Bytes()
	if off < 0 || n < 0 || off+n > int64(len(b)) {
		return nil, errors.New("the view is out of its buffer's bounds")
	}
	return b[off : off+n], nil
}

var arrayBufferType = reflect.TypeOf(goja.ArrayBuffer{})

// viewBytes returns a copy of the bytes of an ArrayBuffer or of the viewed
// range of an ArrayBufferView (typed array, DataView); ok is false for
// anything else.
func (in *instance) viewBytes(v goja.Value) (b []byte, ok bool, err error) {
	o, isObj := v.(*goja.Object)
	if !isObj {
		return nil, false, nil
	}
	if o.ExportType() == arrayBufferType { // not Export of a typed array: see outgoingBody
		if ab, isAB := o.Export().(goja.ArrayBuffer); isAB {
			return append([]byte(nil), ab.Bytes()...), true, nil
		}
	}
	r, err := in.h.isView(goja.Undefined(), o)
	if err != nil || !r.ToBoolean() {
		return nil, false, err
	}
	live, err := in.bytesOf(o.Get("buffer"), o.Get("byteOffset").ToInteger(), o.Get("byteLength").ToInteger())
	if err != nil {
		return nil, true, err
	}
	return append([]byte(nil), live...), true, nil
}

func (in *instance) utf8Decode(call goja.FunctionCall) goja.Value {
	b, err := in.bytesOf(call.Argument(0), call.Argument(1).ToInteger(), call.Argument(2).ToInteger())
	if err != nil {
		panic(in.vm.NewTypeError("TextDecoder: " + err.Error()))
	}
	fatal, ignoreBOM := call.Argument(3).ToBoolean(), call.Argument(4).ToBoolean()
	if !ignoreBOM && len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF {
		b = b[3:]
	}
	if utf8.Valid(b) {
		return in.vm.ToValue(string(b))
	}
	if fatal {
		panic(in.vm.NewTypeError("TextDecoder: the input is not valid UTF-8"))
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		sb.WriteRune(r) // utf8.RuneError for each invalid byte
		b = b[size:]
	}
	return in.vm.ToValue(sb.String())
}

// btoa: each UTF-16 code unit must be at most 0xFF.
func (in *instance) btoa(call goja.FunctionCall) goja.Value {
	if len(call.Arguments) == 0 {
		panic(in.vm.NewTypeError("btoa: 1 argument required"))
	}
	s := call.Argument(0).String()
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if r > 0xFF {
			panic(in.newError("InvalidCharacterError", "btoa: the string contains characters outside of the Latin1 range"))
		}
		b = append(b, byte(r))
	}
	return in.vm.ToValue(base64.StdEncoding.EncodeToString(b))
}

// atob: forgiving-base64 decode; the result is a binary string.
func (in *instance) atob(call goja.FunctionCall) goja.Value {
	if len(call.Arguments) == 0 {
		panic(in.vm.NewTypeError("atob: 1 argument required"))
	}
	s := call.Argument(0).String()
	s = strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\f', '\r':
			return -1
		}
		return r
	}, s)
	if len(s)%4 == 0 {
		s = strings.TrimSuffix(strings.TrimSuffix(s, "="), "=")
	}
	bad := func() { panic(in.newError("InvalidCharacterError", "atob: the string is not correctly encoded")) }
	if len(s)%4 == 1 || strings.ContainsRune(s, '=') {
		bad()
	}
	b, err := decodeLoose(s)
	if err != nil {
		bad()
	}
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = rune(c)
	}
	return in.vm.ToValue(string(rs))
}

const b64alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func decodeLoose(s string) ([]byte, error) {
	var out []byte
	var acc, bits uint
	for i := 0; i < len(s); i++ {
		j := strings.IndexByte(b64alphabet, s[i])
		if j < 0 {
			return nil, errors.New("invalid character")
		}
		acc = acc<<6 | uint(j)
		bits += 6
		if bits >= 8 {
			bits -= 8
			out = append(out, byte(acc>>bits))
			acc &= 1<<bits - 1
		}
	}
	return out, nil
}

func randomUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
