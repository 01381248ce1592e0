package js

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/takoform/queuehost/abi"
)

func compileErr(t *testing.T, v *abi.Version) *abi.CompileError {
	t.Helper()
	_, err := Compile(v)
	var ce *abi.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("Compile = %v, want a *CompileError", err)
	}
	return ce
}

func TestSyntaxErrorLocation(t *testing.T) {
	ce := compileErr(t, loadVersion(t, "syntax", "v-syntax"))
	if ce.File != "broken.js" || ce.Line != 4 || ce.Column != 28 {
		t.Fatalf("error at %s:%d:%d (%s), want broken.js:4:28", ce.File, ce.Line, ce.Column, ce.Message)
	}
	if !strings.HasPrefix(ce.Error(), "broken.js:4:28: ") {
		t.Fatalf("Error() = %q", ce.Error())
	}
}

func TestMissingDefaultExport(t *testing.T) {
	ce := compileErr(t, loadVersion(t, "nodefault", "v-nodefault"))
	if !strings.Contains(ce.Message, "no default export") {
		t.Fatalf("%v", ce)
	}
}

func TestUnresolvableImport(t *testing.T) {
	ce := compileErr(t, loadVersion(t, "badimport", "v-badimport"))
	if ce.File != "main.js" || ce.Line != 2 || ce.Column != 16 || !strings.Contains(ce.Message, `"fs"`) {
		t.Fatalf("%v", ce)
	}
}

func TestTopLevelThrow(t *testing.T) {
	ce := compileErr(t, loadVersion(t, "toplevel_throw", "v-top"))
	if ce.File != "main.js" || ce.Line != 2 || !strings.Contains(ce.Message, "TypeError") {
		t.Fatalf("%v", ce)
	}
}

func TestTopLevelInfiniteLoop(t *testing.T) {
	rt := New(Options{StartupTimeout: 100 * time.Millisecond})
	defer rt.Close()
	v := &abi.Version{UID: "v-toploop", MainModule: "main.js", Modules: []abi.Module{{Name: "main.js", Content: "while (true) {}\nexport default {};"}}}
	start := time.Now()
	_, err := rt.Compile(v)
	var ce *abi.CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "longer than") || time.Since(start) > time.Second {
		t.Fatalf("Compile = %v after %s", err, time.Since(start))
	}
}

func TestModuleSizeLimit(t *testing.T) {
	rt := New(Options{MaxModuleBytes: 1000})
	defer rt.Close()
	v := &abi.Version{UID: "v-big", MainModule: "main.js", Modules: []abi.Module{
		{Name: "main.js", Content: "export default {};\n"},
		{Name: "big.js", Content: "//" + strings.Repeat("x", 1000)},
	}}
	_, err := rt.Compile(v)
	var ce *abi.CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "more than the limit of 1000 bytes") {
		t.Fatalf("Compile = %v", err)
	}
	// the default limit is 4 MiB
	if _, err := Compile(v); err != nil {
		t.Fatalf("Compile with defaults = %v", err)
	}
}

func TestMainModuleMissing(t *testing.T) {
	v := &abi.Version{UID: "v-nomain", MainModule: "index.js", Modules: []abi.Module{{Name: "main.js", Content: "export default {};"}}}
	if ce := compileErr(t, v); !strings.Contains(ce.Message, `"index.js"`) {
		t.Fatalf("%v", ce)
	}
}

func TestExportsDetection(t *testing.T) {
	for dir, want := range map[string][]string{
		"exports_fetch": {"fetch"},
		"exports_queue": {"queue"},
		"exports_both":  {"fetch", "queue"},
		"imports":       {"fetch", "queue"},
	} {
		p, err := Compile(loadVersion(t, dir, "v-"+dir))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if !reflect.DeepEqual(p.Handlers, want) {
			t.Errorf("%s: handlers %v, want %v", dir, p.Handlers, want)
		}
	}
	rt := New(Options{})
	defer rt.Close()
	if _, err := rt.QueueHandler(loadVersion(t, "exports_fetch", "v-f")); !errors.Is(err, ErrNoQueueHandler) {
		t.Fatalf("QueueHandler of a fetch-only worker = %v", err)
	}
	if _, err := rt.Fetch(t.Context(), loadVersion(t, "exports_queue", "v-q"), newRequest("GET", "/", ""), "/"); !errors.Is(err, ErrNoFetchHandler) {
		t.Fatalf("Fetch of a queue-only worker = %v", err)
	}
}

func TestImportsBetweenModules(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := loadVersion(t, "imports", "v-imports")
	resp, err := rt.Fetch(t.Context(), v, newRequest("GET", "/", ""), "/")
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != `{"double":42,"greet":"hello x","names":["double","explode","twice"],"twice":"hello twice"}` {
		t.Fatalf("body %s", got)
	}
	// a stack trace points at the original module and line
	err = runBatch(t, rt, newFakeSettler(), v, "b1", 1)
	var se *ScriptError
	if !errors.As(err, &se) || se.Name != "TypeError" || !strings.Contains(se.Stack, "lib/util.js:10:") {
		t.Fatalf("HandleBatch = %v, stack %q", err, se.Stack)
	}
}

func TestProgramCachedPerUID(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := loadVersion(t, "exports_both", "v-cache")
	p1, err := rt.Compile(v)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := rt.Compile(v)
	if p1 != p2 {
		t.Fatal("compiled twice")
	}
	rt.Evict(v.UID)
	p3, _ := rt.Compile(v)
	if p3 == p1 {
		t.Fatal("Evict kept the program")
	}
}

func oneModule(name, src string) *abi.Version {
	return &abi.Version{UID: "v-" + name, Space: "s", WorkerUID: "w", MainModule: name, Modules: []abi.Module{{Name: name, Content: src}}}
}

// The bundler never looks at the file system: a main module named like a
// file in the working directory (this package's compile.go) or like a glob
// loads from the version's modules.
func TestMainModuleNamesNeverMeetTheFileSystem(t *testing.T) {
	for _, name := range []string{"compile.go", "testdata", "*.go", "go.mod"} {
		p, err := Compile(oneModule(name, "export default { queue() {} };"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(p.Handlers, []string{"queue"}) {
			t.Fatalf("%s: handlers %v", name, p.Handlers)
		}
	}
}

// The handler probe reads descriptors along the prototype chain: methods of
// a class instance count, a getter is never called, and a Proxy whose traps
// spin is stopped by the startup limit.
func TestHandlerProbeReadsDescriptors(t *testing.T) {
	opts := Options{StartupTimeout: 300 * time.Millisecond}.withDefaults()
	p, err := compile(oneModule("main.js", "export default new (class { fetch() {} queue() {} })();"), opts)
	if err != nil || !reflect.DeepEqual(p.Handlers, []string{"fetch", "queue"}) {
		t.Fatalf("class instance: %v %v", p, err)
	}
	p, err = compile(oneModule("main.js", "export default { get queue() { for (;;) {} }, fetch() {} };"), opts)
	if err != nil || !reflect.DeepEqual(p.Handlers, []string{"fetch"}) {
		t.Fatalf("getter: %v %v", p, err)
	}
	for _, src := range []string{
		"export default new Proxy({}, { getOwnPropertyDescriptor() { for (;;) {} } });",
		"export default new Proxy({}, { getPrototypeOf() { for (;;) {} } });",
	} {
		_, err = compile(oneModule("main.js", src), opts)
		var ce *abi.CompileError
		if !errors.As(err, &ce) || !strings.Contains(ce.Message, "ran longer than") {
			t.Fatalf("%s: %v", src, err)
		}
	}
	_, err = compile(oneModule("main.js", "export default new Proxy({}, { getOwnPropertyDescriptor() { throw new Error('nope'); } });"), opts)
	if err == nil || !strings.Contains(err.Error(), "looking up the default export's handlers threw") {
		t.Fatalf("throwing trap: %v", err)
	}
}

// TestEveryModuleIsAnESModule: a module's name does not choose how it is
// loaded (spec/runtime-abi.md): a main module named host.json holding
// JavaScript runs, and a module named data.json holding JSON is a syntax
// error where it is imported from, as any other JavaScript would be.
func TestEveryModuleIsAnESModule(t *testing.T) {
	rt := New(Options{})
	defer rt.Close()
	v := &abi.Version{UID: "v-json-named", MainModule: "host.json", Modules: []abi.Module{
		{Name: "host.json", Content: `import { n } from "./lib.json";
export default { async fetch() { return new Response("js " + n); } };`},
		{Name: "lib.json", Content: `export const n = 42;`},
	}}
	resp, err := rt.Fetch(t.Context(), v, newRequest("GET", "/", ""), "/")
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "js 42" {
		t.Fatalf("body %q", got)
	}
	ce := compileErr(t, &abi.Version{UID: "v-json-data", MainModule: "main.js", Modules: []abi.Module{
		{Name: "main.js", Content: `import data from "./data.json";
export default { async fetch() { return Response.json(data); } };`},
		{Name: "data.json", Content: `{"a": 1, "b": 2}`},
	}})
	if ce.File != "data.json" || ce.Line != 1 {
		t.Fatalf("error at %s:%d:%d (%s), want data.json:1", ce.File, ce.Line, ce.Column, ce.Message)
	}
}
