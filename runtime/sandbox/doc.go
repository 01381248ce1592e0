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
// on two pipes (fds 3 and 4, pipe.go) and exits. Frames are
// length-prefixed, in the protocol-buffer wire format (codec.go, written
// with protowire); requests go both ways and are multiplexed by ID;
// concurrent writers' frames are coalesced into one write. In the sandbox
// each request of the host that comes this way runs on a worker goroutine
// kept between requests (workers.go), whose stack, grown by goja's
// interpreter, is reused rather than grown again. Besides that connection
// a sandbox has Options.Lanes lanes (lane.go, fds 5 on): pipe pairs that
// one invocation has to itself, read by the goroutine that waits for the
// frame, so that an invocation and its sends cost no hand-over between
// goroutines; an invocation goes over the connection only when every lane
// is busy. Pipe I/O is raw system calls on the runtime's poller (rawFile,
// pipe.go). A worker's log lines go the way its invocation's reply goes,
// ahead of it, so a line is in the log when the invocation returns.
//
// Pool (the host side) keeps a ModuleWorker's invocations in a sandbox of
// its own (all of the worker's versions share it; Options.Instances lets a
// busy worker spread over more, with module state per sandbox) and one
// sandbox per space for admission probes (Probe). A sandbox holds the js.Runtime (compiled
// programs, goja runtimes); the host keeps everything durable and every
// authority: the sandbox asks the host for each send (the host sends as the
// version the invocation runs and only to its Bindings' queues), each
// settlement (the host settles the batch it passed to that invocation) and
// each outbound fetch hop (the host checks the allowed hosts again and
// dials). Log lines come to the host's LogBook, rate-limited per worker.
//
// Limits, enforced from outside JavaScript:
//   - memory: where the host can create cgroups, the kernel caps the
//     sandbox's cgroup at Options.MemoryLimit (512 MiB, below); the host
//     also polls the sandbox's RSS (/proc) and kills it above that limit;
//     inside, GOMEMLIMIT is three quarters of it and RLIMIT_AS (4 GiB)
//     makes a huge allocation fail in the sandbox;
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
// the next invocation starts a fresh sandbox. The end is charged only to
// the queue batch that caused it (blame.go): the others it was running run
// again, in the same delivery, alone in a fresh sandbox each. The delivery
// engine treats a charged end as a throw, so a poison message is bounded
// by 1 + maxRetries; one that has ended two sandboxes runs alone from then
// on (quarantine).
// A sandbox idle for IdleTimeout (30 s) is stopped; at most MaxSandboxes
// (256) live at once (the least recently used idle one makes room).
//
// # Containment by the operating system
//
// Each layer is applied where the machine allows it; Pool.Containment
// says which are on and why one is off (also logged when the pool is made,
// and the host's metrics show it):
//   - seccomp (contain_linux.go): in its init frame, before any worker
//     code, a sandbox sets RLIMIT_CORE 0, RLIMIT_FSIZE 0, RLIMIT_NOFILE 64,
//     no_new_privs and a seccomp filter on every thread (TSYNC;
//     github.com/elastic/go-seccomp-bpf) that answers EPERM to exec, fork
//     (clone without CLONE_THREAD), every socket call (socket, connect,
//     bind, listen, accept), every open (open, openat, openat2, creat: the
//     bundler and the runtimes read no file, and the local time zone is
//     loaded before), changes to the file system, io_uring, ptrace and
//     process_vm_*, signals to any other process, set*id, unshare/setns,
//     mount, kexec, modules, bpf, perf_event_open, keyctl, a new resource
//     limit, and executable memory (mmap/mprotect with PROT_EXEC); a second
//     filter refuses system calls of another architecture (32-bit calls of
//     a 64-bit process). The host asks for the filter when its kernel has
//     seccomp; a sandbox that cannot install it exits before serving.
//   - cgroup (cgroup_linux.go): where the host can create cgroups (v2
//     with the memory controller, else v1's memory and pids hierarchies),
//     the pool makes a group takohost-<pid>-<n> under the host's own
//     cgroup and each sandbox a child of it with memory.max /
//     memory.limit_in_bytes = MemoryLimit (swap too where accounted) and
//     pids.max = MaxTasks (128); the host moves the sandbox in right after
//     starting it, before sending it anything, and removes the group when
//     it has exited (the empty groups of a host that was killed are
//     removed by the next pool made in the same cgroup). The kernel's kill
//     at that cap is reported as "memory cap" (from the group's oom_kill
//     count). Elsewhere the RSS watchdog is the memory cap, which it stays
//     in any case.
//   - network namespace: each sandbox starts in a network namespace of its
//     own (CLONE_NEWNET: no interface but a loopback that is down); a host
//     not running as root makes it in a user namespace of the sandbox's
//     own (CLONE_NEWUSER, the host's uid and gid mapped to themselves); the
//     pool stops asking for one if the kernel refuses it.
//   - jail (jail_linux.go): each sandbox starts in mount, PID, IPC and UTS
//     namespaces of its own, in an empty read-only root (the loader and C
//     library bound read-only, nothing else), as uid/gid 65534 with no
//     capability in any set, its environment built from nothing; a first
//     stage of the process makes it on one thread and executes the
//     program again. The pool tries it once when made (probeJail) and
//     turns it off, saying why, where the kernel refuses.
//   - Pdeathsig SIGKILL: a sandbox never outlives its host.
//
// Not contained: without the jail, a sandbox runs as the host's user
// (root if the host is) with the host's file system view: it can open no
// file, but stat, readlink and access still answer about any path; an
// unprivileged host on a kernel without unprivileged user namespaces gets
// no network namespace nor jail; CPU is bounded only by the time limit,
// not shared fairly (no cpu controller).
package sandbox
