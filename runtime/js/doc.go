// Package js runs ModuleWorker code on goja: it turns a WorkerVersion's ES
// modules into one script (esbuild), runs it on event-loop-owned runtimes,
// and exposes the queue handler, the fetch handler and producer Bindings as
// spec/runtime-abi.md describes.
//
// # API
//
//	rt := js.New(js.Options{Sender: s, AllowedFetchHosts: hosts})
//	p, err := rt.Compile(v)            // cached per version UID; *CompileError
//	h, err := rt.QueueHandler(v)       // abi.Handler; ErrNoQueueHandler
//	resp, err := rt.Fetch(ctx, v, r, path) // *http.Response; ErrNoFetchHandler
//	entries := rt.Logs(workerUID, afterSeq, limit)
//	rt.Evict(versionUID); rt.Close()
//
// Compile (package level) is the same bundling and checking without a
// Runtime, for validation.
//
// # Loading
//
// The modules are bundled with esbuild's Build API (Bundle, format IIFE,
// target ES2020, async generators and for-await lowered) through an
// in-memory plugin: an import resolves only to one of the version's own
// modules, either relative to the importing module ("./lib/x.js",
// "../x.js") or by its exact name as given in Modules ("x.js"); no
// extension is added and nothing else (no packages, no "fs") can be
// imported. Every module loads as an ES module, whatever its name ends
// with (".json" included: spec/runtime-abi.md).
// The source map is inlined with the module names as sources, so goja's
// stack traces read "lib/util.js:10:11". The script is compiled once with
// goja.Compile and shared by every runtime of the version.
//
// Loading fails with a *CompileError (File, 1-based Line and Column when
// known) for: a syntax error (esbuild's location), an unresolvable import
// (the import statement's location), modules totalling more than
// Options.MaxModuleBytes (names plus contents, default 4 MiB), a missing
// main module, duplicate or empty names, top-level code that throws (its
// innermost frame) or runs longer than Options.StartupTimeout (default 5 s),
// and a main module whose default export is missing, null/undefined or not
// an object. The handlers the default export provides are found by
// evaluating the script in a scratch runtime and reading the property
// descriptors of "fetch" and "queue" along the default export's prototype
// chain, under the same startup limit (a getter is never called; a handler
// is a data property whose value is a function; Program.Handlers). The
// entry point given to esbuild is a name no file can have, so the main
// module's name never meets the working directory.
// Programs are cached per version UID (versions are immutable); failures
// are not cached.
//
// # Runtimes and the event loop
//
// Each goja runtime belongs to one version and is used by one invocation at
// a time; the goroutine that checked it out of the version's pool (the
// caller of HandleBatch or Fetch) runs the event loop and is the only one
// touching the runtime. Go work started from JavaScript (settlements,
// sends, outbound fetch) runs on its own goroutine and hands its result back
// through the invocation's task queue, so every Promise is resolved on the
// loop goroutine. A Sender that is a SendStarter starts its sends on the
// loop goroutine instead, and an Options.Waiter may let the loop goroutine
// read their results itself while it waits (a sandbox does both: see
// Waiter). An invocation ends when the handler's returned value (a
// Promise is awaited) has settled and every ctx.waitUntil promise has
// settled. At that point:
//
//   - pending timers are dropped (setTimeout callbacks never run outside
//     their invocation) and completions that arrive later are discarded;
//   - the context given to Go work is cancelled: a send or fetch that the
//     handler did not await (nor pass to ctx.waitUntil) may be cut short;
//   - the batch's settlement methods keep calling the engine, which answers
//     unknown_batch by itself; this package never answers for it.
//
// Top-level code (module evaluation) runs outside any invocation: timers
// it sets never fire and asynchronous I/O rejects.
//
// The pool grows with demand (a new runtime when none is idle) up to
// Options.MaxRuntimes (default 250, QueueConsumer's largest maxConcurrency);
// the engine's own concurrency limit therefore bounds a consumer's runtimes.
// Idle runtimes are kept (module state persists across batches, as in an
// isolate) until Evict or Close. A caller that finds the pool full waits
// for a runtime until its context ends (ErrRuntimeExhausted).
//
// # Limits and isolation
//
// Each invocation has a wall-time limit: Options.InvocationTimeout (default
// 30 s) or the caller's context deadline, whichever is earlier. When it
// passes, goja's Interrupt stops running JavaScript, and the loop's own
// deadline ends an invocation that is merely waiting (await new
// Promise(() => {})): either way HandleBatch returns an error wrapping
// ErrTimeout (the engine treats it as a throw) and the runtime is
// discarded, as it is after a cancelled context, a stack overflow or a
// Go panic. A runaway worker only occupies its own runtime and goroutine.
//
// Memory: goja has no heap limit. Guarded are: call depth (2000 frames; a
// deeper recursion ends the invocation with a RangeError and discards the
// runtime), one ArrayBuffer or typed-array allocation and the result of
// String.prototype.repeat/padStart/padEnd (Options.MaxAllocBytes, default
// 64 MiB, RangeError), Request/Response bodies built in JavaScript, inbound
// fetch request bodies and outbound fetch response bodies
// (Options.MaxBodyBytes, default 16 MiB), message bodies (127000 bytes),
// pending timers (10000 per invocation), log lines (16 KiB each, a ring of
// Options.LogEntries per worker). Not guarded: memory accumulated in many
// small allocations, which only the time limit bounds.
//
// # The global surface
//
// console (log, info, warn, error, debug → the worker's log),
// TextEncoder/TextDecoder (UTF-8 only; fatal and ignoreBOM; no streaming),
// URL/URLSearchParams (goja_nodejs's WHATWG implementation), Headers,
// Request, Response, fetch, setTimeout/clearTimeout, queueMicrotask,
// crypto.randomUUID/getRandomValues (no crypto.subtle), structuredClone,
// atob/btoa. Nothing else is added to goja's ECMAScript globals: no
// require, process, module, Buffer, setInterval, file system or
// environment. Headers, Request and Response are a JavaScript prelude
// (prelude.js); the Go functions it uses are passed to it as an argument
// and are not reachable from worker code. There are no streams: body is
// null or a Uint8Array copy of the bytes; text(), json(), arrayBuffer() and
// bytes() consume the body once.
//
// Outbound fetch: only http and https, only to Options.AllowedFetchHosts
// (a host name or IP literal for any port, "host:port" for one port,
// "*.example.com" for subdomains; empty denies everything), checked for the
// request and every redirect (redirect "follow" up to 20, "manual",
// "error"). At dial time, whatever the name resolved to, the dialler refuses
// link-local addresses (169.254.0.0/16, fe80::/10), link-local multicast,
// unspecified addresses and cloud metadata addresses (169.254.169.254,
// fd00:ec2::254, 100.100.100.200, 192.0.0.192), also IPv4-mapped or behind
// NAT64 (64:ff9b::/96); and loopback, private (RFC 1918, fc00::/7) and
// shared (100.64.0.0/10) addresses unless that IP literal itself is an
// allowed host (NewOutboundTransport). No proxy from the environment. The request is
// bounded by the invocation's deadline. Failures reject with a TypeError.
//
// # queue(batch, env, ctx)
//
// batch: id, queue, messages (in order; each {id, timestampMillis, body, attempts},
// body a fresh ArrayBuffer copy) and acknowledge(id), retry(id,
// delaySeconds?), acknowledgeAll(), retryAll(delaySeconds?), closures bound
// to the batch (they work detached and even from a later invocation, where
// the engine rejects them unknown_batch). Each returns a Promise resolved
// with undefined once the abi.Batch method returned nil, or rejected
// with an Error whose name is abi.Code(err) and whose message is
// err.Error(). A messageId that is not a string rejects with a TypeError; a
// delaySeconds that is present (not undefined) and not a Number holding an
// integer 0..43200 rejects with a RangeError (null and "5" included);
// nothing is settled then. The handler returning (its Promise fulfilling)
// makes HandleBatch return nil; a throw or rejection returns a *ScriptError
// (Name, Message, Stack) and logs "Uncaught (in queue handler) ..." to the
// worker's log. Unhandled rejections of other promises are logged too.
//
// ctx: waitUntil(promise) extends the invocation until promise settles
// (within the time limit; a rejection is logged, it does not fail the
// handler); passThroughOnException() is accepted and does nothing.
//
// # env and producer Bindings
//
// env holds v.Vars and v.Secrets (strings) and, per Binding, an object with
// exactly send(body, options?) and sendBatch(messages). A body is a string
// (its UTF-8 bytes; lone surrogates become U+FFFD), an ArrayBuffer or an
// ArrayBufferView (only the viewed bytes); anything else, a missing body and
// an empty body (0 bytes) reject invalid_body, more than 127000 bytes
// message_too_large. options is undefined or a plain object whose only
// field is delaySeconds (an integer 0..43200, or undefined for the queue's
// default); an unknown field, a bad delaySeconds, null or a non-object
// rejects invalid_body. sendBatch: messages not an array rejects
// invalid_body; 0 or more than 100 messages batch_too_large; each message a
// plain object with only body and delaySeconds, checked as above, in order
// (the first failure wins). Everything is validated before
// Options.Sender.Send(ctx, v.Principal, v.Space, queueUID, msgs) is called
// (an invalid sendBatch sends nothing); send resolves with the ID string,
// sendBatch with the IDs in input order. Sender errors reject with
// abi.Code(err) (backend_unavailable for unknown errors and for a
// missing Sender); a Sender returning the wrong number of IDs is
// backend_unavailable.
//
// # fetch(request, env, ctx)
//
// Fetch builds a Request with url scheme://Host/path?query (https when the
// inbound request is TLS), r's method, r's headers without Authorization
// (the host credential is never shown to workers) and r's body (ignored for
// GET and HEAD), calls the default export's fetch and returns the Response
// as an *http.Response with a buffered body (WriteResponse copies it to an
// http.ResponseWriter). A throw, a rejection, a returned value that is not
// a Response, or the time limit give a 500 application/problem+json
// response with code "worker_exception" or "worker_timeout" and an error
// log line; Fetch's error return is kept for what the host answers itself
// (ErrNoFetchHandler, *CompileError, ErrRequestTooLarge, ErrClosed,
// ErrRuntimeExhausted).
//
// # Logs
//
// Each worker has a log (a LogBook) of Options.LogEntries entries {seq, timeMillis,
// level, message, versionUID}; seq increases by 1 per entry. A host passes
// a durable book (OpenLogBook, Options.Logs): one file per worker, so the
// log and its seq survive restarts. An in-memory book starts a worker's
// seq at the time in microseconds, so it keeps increasing across restarts
// although its entries are gone. console arguments are joined by
// spaces, strings as they are, other values in a short inspect format,
// Errors by their stack. With Options.LogSink set, lines go to the sink
// instead (a sandbox process forwards them to the host's LogBook). Viewers
// read these logs, so every secret value of the version (MinRedactedSecret
// bytes or more) is replaced by "[secret NAME]" in each line, console output
// and exception messages alike.
package js
