// Package sandbox runs worker code outside the host process, so that no
// module, request or message can take the host down.
//
// # Why processes
//
// goja has no heap limit and no interrupt inside its native functions, and
// esbuild's parser recurses on nested input: a Go stack overflow or an
// out-of-memory is fatal to the whole process, and a backtracking regular
// expression runs on after its invocation's time limit. No in-process guard
// can contain that, so bundling, compiling and running worker code happen in
// child processes that the host can kill.
//
// # Design
//
// A sandbox is the host's own executable started with EnvVar=1: Main, the
// first call of every program that can start a host, then serves the host
// on a socketpair (fd 3) and exits. Frames are gob-encoded (protocol.go);
// requests go both ways and are multiplexed by ID.
//
// Pool (the host side) keeps one sandbox per ModuleWorker for its
// invocations (all of the worker's versions share it) and one per space for
// admission probes (Probe). A sandbox holds the js.Runtime (compiled
// programs, goja runtimes); the host keeps everything durable and every
// authority: the sandbox asks the host for each send (the host sends as the
// version the invocation runs and only to its Bindings' queues), each
// settlement (the host settles the batch it passed to that invocation) and
// each outbound fetch hop (the host checks the allowed hosts again and
// dials). Log lines come to the host's LogBook, rate-limited per worker.
//
// Limits, enforced from outside JavaScript:
//   - memory: the host polls the sandbox's RSS (/proc) and kills it above
//     Options.MemoryLimit (512 MiB); inside, GOMEMLIMIT is three quarters of
//     it and RLIMIT_AS (4 GiB) makes a huge allocation fail in the sandbox;
//   - stack: debug.SetMaxStack (64 MiB), so a runaway recursion in Go code
//     (the bundler, goja's natives) ends the sandbox;
//   - time: goja's interrupt ends the invocation at its deadline inside the
//     sandbox; when it has not answered KillGrace (1 s) after the deadline,
//     or after the caller gave up, the host kills the sandbox;
//   - outbound fetch: FetchPerCall (6) concurrent per invocation, FetchTotal
//     (256) for the host, FetchPerHost (16) connections per destination; the
//     dialler refuses loopback, private and link-local addresses a name
//     resolved to (js.NewOutboundTransport).
//
// A sandbox that ends fails only the invocations it was running, with an
// error wrapping ErrSandboxEnded that says why (memory cap, time limit,
// stack overflow, crash); the reason goes to each affected worker's log;
// the next invocation starts a fresh sandbox. The delivery engine treats
// the failure as a throw, so a poison message is bounded by 1 + maxRetries.
// A sandbox idle for IdleTimeout (30 s) is stopped; at most MaxSandboxes
// (256) live at once (the least recently used idle one makes room).
//
// Not contained: there is no uid, namespace, seccomp or cgroup isolation —
// a sandbox runs as the host's user and could open files if goja were
// escaped; CPU is bounded only by the time limit, not shared fairly.
package sandbox
