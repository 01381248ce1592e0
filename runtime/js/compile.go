package js

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/dop251/goja"
	"github.com/evanw/esbuild/pkg/api"
	"github.com/takoform/queuehost/abi"
)

// Handler names a default export may provide.
const (
	HandlerFetch = "fetch"
	HandlerQueue = "queue"
)

// DefaultMaxModuleBytes is the default limit on the total size of a
// version's modules (names and contents).
const DefaultMaxModuleBytes = 4 << 20

const (
	bundleGlobal = "__takoform_worker"
	bundleFile   = "worker.js"
	modNamespace = "takoform-module"
	// entryName is the entry point esbuild is given. esbuild looks for a
	// file of the entry point's name in the working directory before any
	// plugin runs (and expands "*" as a glob); a name holding NUL can be no
	// file, so the main module's name never meets the file system.
	entryName = "\x00takoform-main"
)

// Program is a WorkerVersion's modules bundled into one script and compiled
// once; it is shared by every runtime of the version.
type Program struct {
	VersionUID string
	// Handlers lists, sorted, the handlers the default export provides
	// ("fetch", "queue"): the properties whose typeof is "function".
	Handlers []string
	// Size is the length of the bundled script in bytes (source map included).
	Size int

	prog *goja.Program
}

// HasHandler reports whether the default export provides the named handler.
func (p *Program) HasHandler(name string) bool {
	for _, h := range p.Handlers {
		if h == name {
			return true
		}
	}
	return false
}

// Compile bundles and compiles v's modules with the default Options (module
// size limit, startup time limit) and no caching. The host's
// validation path can use it to report syntax errors and missing handlers;
// (*Runtime).Compile does the same with the runtime's Options and a cache.
func Compile(v *abi.Version) (*Program, error) {
	return compile(v, Options{}.withDefaults())
}

func compile(v *abi.Version, opts Options) (*Program, error) {
	src, err := bundle(v, opts.MaxModuleBytes)
	if err != nil {
		return nil, err
	}
	prog, err := goja.Compile(bundleFile, src, true)
	if err != nil {
		// esbuild accepted the source, so this is a goja limitation (for
		// example a regular expression feature it does not support).
		return nil, gojaCompileError(err)
	}
	p := &Program{VersionUID: v.UID, Size: len(src), prog: prog}
	handlers, err := probeHandlers(p, opts.StartupTimeout)
	if err != nil {
		return nil, err
	}
	p.Handlers = handlers
	return p, nil
}

// bundle turns the version's ES modules into one IIFE script whose
// bundleGlobal.default is the main module's default export.
func bundle(v *abi.Version, maxBytes int) (string, error) {
	if len(v.Modules) == 0 {
		return "", &abi.CompileError{Message: "the version has no modules"}
	}
	mods := make(map[string]string, len(v.Modules))
	total := 0
	for _, m := range v.Modules {
		if m.Name == "" {
			return "", &abi.CompileError{Message: "a module has an empty name"}
		}
		if _, dup := mods[m.Name]; dup {
			return "", &abi.CompileError{File: m.Name, Message: "two modules have the name " + m.Name}
		}
		mods[m.Name] = m.Content
		total += len(m.Name) + len(m.Content)
	}
	if total > maxBytes {
		return "", &abi.CompileError{Message: fmt.Sprintf("the modules total %d bytes, more than the limit of %d bytes", total, maxBytes)}
	}
	if _, ok := mods[v.MainModule]; !ok {
		return "", &abi.CompileError{Message: fmt.Sprintf("the main module %q is not one of the modules", v.MainModule)}
	}

	plugin := api.Plugin{Name: "takoform-modules", Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
			if a.Kind == api.ResolveEntryPoint && a.Path == entryName {
				return api.OnResolveResult{Path: v.MainModule, Namespace: modNamespace}, nil
			}
			name, ok := resolveModule(a.Path, a.Importer, mods)
			if !ok {
				return api.OnResolveResult{}, fmt.Errorf("cannot import %q: only the version's own modules can be imported (by name, or relative to the importing module)", a.Path)
			}
			return api.OnResolveResult{Path: name, Namespace: modNamespace}, nil
		})
		b.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: modNamespace}, func(a api.OnLoadArgs) (api.OnLoadResult, error) {
			c, ok := mods[a.Path]
			if !ok {
				return api.OnLoadResult{}, fmt.Errorf("no module named %q", a.Path)
			}
			// Every module is an ES module, whatever its name ends with
			// (spec/runtime-abi.md §modules): a name is a name, never a type.
			return api.OnLoadResult{Contents: &c, Loader: api.LoaderJS}, nil
		})
	}}

	res := api.Build(api.BuildOptions{
		EntryPoints:    []string{entryName},
		Bundle:         true,
		Write:          false,
		Outfile:        bundleFile,
		Format:         api.FormatIIFE,
		GlobalName:     bundleGlobal,
		Platform:       api.PlatformNeutral,
		Target:         api.ES2020,
		Supported:      map[string]bool{"async-generator": false, "for-await": false},
		Sourcemap:      api.SourceMapExternal,
		SourcesContent: api.SourcesContentExclude,
		Charset:        api.CharsetUTF8,
		LogLevel:       api.LogLevelSilent,
		Plugins:        []api.Plugin{plugin},
		// A free `require` would otherwise become esbuild's __require shim,
		// a function that only throws: workers must see no require at all.
		Define: map[string]string{"require": "undefined"},
	})
	if len(res.Errors) > 0 {
		return "", esbuildError(res.Errors[0])
	}
	var script, smap []byte
	for _, f := range res.OutputFiles {
		switch {
		case strings.HasSuffix(f.Path, ".map"):
			smap = f.Contents
		case strings.HasSuffix(f.Path, ".js"):
			script = f.Contents
		}
	}
	if script == nil {
		return "", &abi.CompileError{Message: "the bundler produced no output"}
	}
	// Wrapped so that the bundle's var stays local and the script's
	// completion value is the module namespace; the prefix sits on line 1
	// (esbuild's own "var ... = (() => {"), so mapped lines do not move.
	out := "(function () { " + strings.TrimRight(string(script), "\n")
	// Drop esbuild's external map reference and inline a map whose sources
	// are the module names as given (without the plugin namespace), so that
	// goja's stack traces read "util.js:3:9".
	if i := strings.LastIndex(out, "\n//# sourceMappingURL="); i >= 0 {
		out = out[:i]
	}
	out += "\nreturn " + bundleGlobal + ";\n})();"
	if smap != nil {
		var m map[string]any
		if err := json.Unmarshal(smap, &m); err == nil {
			if srcs, ok := m["sources"].([]any); ok {
				for i, s := range srcs {
					if str, ok := s.(string); ok {
						srcs[i] = strings.TrimPrefix(str, modNamespace+":")
					}
				}
			}
			if b, err := json.Marshal(m); err == nil {
				out += "\n//# sourceMappingURL=data:application/json;base64," + base64.StdEncoding.EncodeToString(b)
			}
		}
	}
	return out + "\n", nil
}

// resolveModule maps an import specifier to a module name: "./x.js" and
// "../x.js" relative to the importing module's directory, anything else as
// a module name exactly as given in Modules.
func resolveModule(spec, importer string, mods map[string]string) (string, bool) {
	name := spec
	if strings.HasPrefix(spec, "./") || strings.HasPrefix(spec, "../") {
		name = path.Join(path.Dir(importer), spec)
		if strings.HasPrefix(name, "../") || name == ".." {
			return "", false
		}
	} else if strings.HasPrefix(spec, "/") {
		name = strings.TrimPrefix(path.Clean(spec), "/")
	}
	_, ok := mods[name]
	return name, ok
}

func esbuildError(m api.Message) *abi.CompileError {
	ce := &abi.CompileError{Message: m.Text}
	if m.Location != nil {
		ce.File = strings.TrimPrefix(m.Location.File, modNamespace+":")
		ce.Line = m.Location.Line
		ce.Column = m.Location.Column + 1 // esbuild's columns are 0-based
	}
	return ce
}

func gojaCompileError(err error) *abi.CompileError {
	ce := &abi.CompileError{Message: err.Error()}
	if cerr, ok := err.(*goja.CompilerSyntaxError); ok {
		ce.Message = cerr.Message
		if cerr.File != nil {
			pos := cerr.File.Position(cerr.Offset)
			ce.File, ce.Line, ce.Column = pos.Filename, pos.Line, pos.Column
		}
	}
	return ce
}

// probeHandlers evaluates the program in a scratch runtime (with the full
// global surface, no env) and reports which handlers the default export
// provides. Top-level code and the lookup run under the startup time limit
// together; the lookup reads property descriptors along the prototype chain
// with the intrinsics taken before worker code ran, so a getter is never
// called (a handler must be a data property) and a Proxy's traps run under
// the timer.
func probeHandlers(p *Program, limit time.Duration) ([]string, error) {
	inst, err := newBareInstance(nil, nil)
	if err != nil {
		return nil, err
	}
	vm := inst.vm
	object := vm.Get("Object").ToObject(vm)
	getOwn, _ := goja.AssertFunction(object.Get("getOwnPropertyDescriptor"))
	getProto, _ := goja.AssertFunction(object.Get("getPrototypeOf"))
	deadline := time.Now().Add(limit)
	def, err := evalProgram(vm, p, limit)
	if err != nil {
		return nil, err
	}
	t := time.AfterFunc(time.Until(deadline), func() { vm.Interrupt(errStartupTimeout) })
	hs, err := lookupHandlers(vm, def, getOwn, getProto)
	if !t.Stop() && err == nil {
		err = &goja.InterruptedError{}
	}
	if err != nil {
		if _, ok := err.(*goja.InterruptedError); ok {
			return nil, &abi.CompileError{Message: fmt.Sprintf("the modules' top-level code and the lookup of the default export's handlers ran longer than %s", limit)}
		}
		ce := topLevelError(err)
		ce.Message = strings.Replace(ce.Message, "top-level code threw", "looking up the default export's handlers threw", 1)
		return nil, ce
	}
	sort.Strings(hs)
	return hs, nil
}

func lookupHandlers(vm *goja.Runtime, def *goja.Object, getOwn, getProto goja.Callable) ([]string, error) {
	var hs []string
	for _, name := range []string{HandlerFetch, HandlerQueue} {
		var o goja.Value = def
		for depth := 0; depth < 64 && o != nil && !goja.IsNull(o) && !goja.IsUndefined(o); depth++ {
			desc, err := getOwn(goja.Undefined(), o, vm.ToValue(name))
			if err != nil {
				return nil, err
			}
			if !goja.IsUndefined(desc) {
				// desc is a fresh ordinary object made by the intrinsic.
				if _, ok := goja.AssertFunction(desc.ToObject(vm).Get("value")); ok {
					hs = append(hs, name)
				}
				break
			}
			if o, err = getProto(goja.Undefined(), o); err != nil {
				return nil, err
			}
		}
	}
	return hs, nil
}

// evalProgram runs the bundled script on vm (top-level code under limit)
// and returns the default export (the script's completion value is the
// module namespace).
func evalProgram(vm *goja.Runtime, p *Program, limit time.Duration) (*goja.Object, error) {
	t := time.AfterFunc(limit, func() { vm.Interrupt(errStartupTimeout) })
	res, err := vm.RunProgram(p.prog)
	stopped := t.Stop()
	if !stopped {
		// The interrupt fired or is firing: the runtime is not reusable
		// whatever the outcome, so report the time limit.
		if err == nil {
			err = &goja.InterruptedError{}
		}
	}
	if err != nil {
		if _, ok := err.(*goja.InterruptedError); ok {
			return nil, &abi.CompileError{Message: fmt.Sprintf("the modules' top-level code ran longer than %s", limit)}
		}
		return nil, topLevelError(err)
	}
	ns := res
	if ns == nil || goja.IsUndefined(ns) || goja.IsNull(ns) {
		return nil, &abi.CompileError{Message: "the bundle did not define its exports"}
	}
	def := ns.ToObject(vm).Get("default")
	if def == nil || goja.IsUndefined(def) || goja.IsNull(def) {
		return nil, &abi.CompileError{Message: "the main module has no default export"}
	}
	obj, ok := def.(*goja.Object)
	if !ok {
		return nil, &abi.CompileError{Message: "the main module's default export is not an object"}
	}
	return obj, nil
}

// topLevelError reports an exception thrown by the modules' top-level code,
// located at its innermost frame.
func topLevelError(err error) *abi.CompileError {
	ce := &abi.CompileError{Message: "top-level code threw: " + err.Error()}
	if ex, ok := err.(*goja.Exception); ok {
		ce.Message = "top-level code threw: " + exceptionMessage(ex.Value())
		for _, f := range ex.Stack() {
			pos := f.Position()
			if pos.Filename != "" && pos.Filename != bundleFile && pos.Line > 0 {
				ce.File, ce.Line, ce.Column = pos.Filename, pos.Line, pos.Column
				break
			}
		}
	}
	return ce
}
