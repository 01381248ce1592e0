package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The containment a sandbox applies to itself, in its init frame, before
// any worker code reaches it (the host's side, cgroups and the network
// namespace, is in cgroup_linux.go and Pool.start).
//
// The host tells the sandbox in its environment which layers the machine
// allows: envSeccomp=1 when the host's kernel has seccomp filters, and then
// a sandbox that fails to install its filter exits (the host reports the
// end) rather than run worker code without it. envSelfTest=1 (tests only,
// Options.selfTest) lets the host ask the sandbox to try what the filter
// refuses (opSelfTest).
const (
	envSeccomp  = "TAKOHOST_SANDBOX_SECCOMP"
	envSelfTest = "TAKOHOST_SANDBOX_SELFTEST"
)

// opSelfTest (host to sandbox, tests only): the sandbox tries each thing
// its containment refuses and answers, in IDs, one "what: result" line each.
const opSelfTest = "selftest"

// Resource limits of the sandbox process, beside RLIMIT_AS (Options.AddressSpace).
const (
	// sandboxNoFile is RLIMIT_NOFILE: a sandbox holds its standard
	// descriptors, its two pipes to the host, two per lane (at most
	// maxLanes) and the Go runtime's poller.
	sandboxNoFile = 64
)

// containChild applies the sandbox's own limits: no core dump, no file
// grown, few descriptors, and (when wanted) no_new_privs and the seccomp
// filter, on every thread. It runs before js.New, so before any version
// is compiled.
func containChild() error {
	// Not dumpable: no other process of its uid (65534 in the jail,
	// which other processes of the machine may share) may trace it or
	// read its /proc/<pid>/mem or environ; its /proc files are root's.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	for _, l := range []struct {
		res int
		max uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_FSIZE, 0}, {unix.RLIMIT_NOFILE, sandboxNoFile}} {
		lim := unix.Rlimit{Cur: l.max, Max: l.max}
		if err := unix.Setrlimit(l.res, &lim); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.res, err)
		}
	}
	// The local time zone (JavaScript's Date uses it) comes from the host
	// in the environment: a jailed sandbox has no file to read it from.
	loadZone()
	if os.Getenv(envSeccomp) != "1" {
		return nil
	}
	return installSeccomp()
}

// installSeccomp sets no_new_privs and loads two filters on every thread
// of the process (SECCOMP_FILTER_FLAG_TSYNC, which also gives every thread
// the caller's no_new_privs): one refusing system calls of any other
// architecture than the process's own (a 64-bit process can still make
// 32-bit calls, whose numbers the second filter does not know), and the
// policy of sandboxPolicy.
func installSeccomp() error {
	info, err := arch.GetInfo("")
	if err != nil {
		return err
	}
	policy, err := sandboxPolicy(info, os.Getpid())
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	guard, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
	if err != nil {
		return err
	}
	if err := loadRaw(guard); err != nil {
		return fmt.Errorf("seccomp (architecture guard): %w", err)
	}
	return seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: policy})
}

func loadRaw(raw []bpf.RawInstruction) error {
	insts := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		insts[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(insts)), Filter: &insts[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return errno
	}
	return nil
}

// Refused system calls, by group. A call that does not exist on the
// architecture is left out (arm64 has no open, fork, ...).
var (
	// Running another program or forking: a sandbox only ever starts
	// threads (clone with CLONE_THREAD, below).
	denyExec = []string{"execve", "execveat", "fork", "vfork"}
	// The network: the host performs every outbound fetch; the sandbox
	// talks to the host on pipes opened before the filter.
	denyNet = []string{"socket", "socketpair", "connect", "bind", "listen", "accept", "accept4"}
	// The file system: nothing is opened, created, linked, renamed,
	// removed or changed (the bundler and the runtimes work in memory;
	// what the Go runtime reads is read before the filter). io_uring would
	// open files past this filter; memfd_create makes a file to execute.
	denyFiles = []string{
		"open", "openat", "openat2", "creat", "open_by_handle_at", "name_to_handle_at",
		"mkdir", "mkdirat", "mknod", "mknodat", "rmdir", "unlink", "unlinkat",
		"rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat",
		"chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
		"truncate", "utime", "utimes", "utimensat", "futimesat",
		"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
		"chroot", "memfd_create", "memfd_secret", "fanotify_init", "inotify_init", "inotify_init1",
		"io_uring_setup", "io_uring_enter", "io_uring_register",
	}
	// Other processes and privileges: tracing, reading another process's
	// memory, changing identity or namespaces.
	denyProcs = []string{
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
		"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capset",
		"unshare", "setns", "setrlimit", "tkill",
	}
	// The kernel and the machine.
	denySystem = []string{
		"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
		"swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "acct", "quotactl", "syslog",
		"sethostname", "setdomainname", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
		"iopl", "ioperm", "lookup_dcookie", "vhangup", "uselib", "personality", "modify_ldt",
	}
)

// sandboxPolicy is the seccomp policy of a sandbox of process pid: the
// calls above answer EPERM (an error the code that makes them sees, not a
// kill: the Go runtime and the libraries report it like any other error,
// and the host learns nothing it must act on); clone3 answers ENOSYS, so
// that a C library falls back to clone, whose flags the filter can read;
// clone without CLONE_THREAD (a new process), signals to any other process
// (kill(0, …) included), raising a resource limit (prlimit64 with a new
// value) and mapping executable memory answer EPERM. Everything else is
// allowed: the Go runtime's own needs (memory, threads, futexes, signals
// to itself, the pipes' reads and writes, the poller, time).
func sandboxPolicy(info *arch.Info, pid int) (seccomp.Policy, error) {
	var names []string
	for _, g := range [][]string{denyExec, denyNet, denyFiles, denyProcs, denySystem} {
		for _, n := range g {
			if _, ok := info.SyscallNames[n]; ok {
				names = append(names, n)
			}
		}
	}
	self := uint64(pid)
	var conds []seccomp.NameWithConditions
	add := func(name string, c ...seccomp.Condition) {
		if _, ok := info.SyscallNames[name]; ok {
			conds = append(conds, seccomp.NameWithConditions{Name: name, Conditions: c})
		}
	}
	add("clone", seccomp.Condition{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD})
	add("kill", seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: self})
	add("tgkill", seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: self})
	add("rt_sigqueueinfo", seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: self})
	add("rt_tgsigqueueinfo", seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: self})
	add("prlimit64", seccomp.Condition{Argument: 2, Operation: seccomp.NotEqual, Value: 0})
	add("mmap", seccomp.Condition{Argument: 2, Operation: seccomp.BitsSet, Value: unix.PROT_EXEC})
	add("mprotect", seccomp.Condition{Argument: 2, Operation: seccomp.BitsSet, Value: unix.PROT_EXEC})
	add("pkey_mprotect", seccomp.Condition{Argument: 2, Operation: seccomp.BitsSet, Value: unix.PROT_EXEC})
	groups := []seccomp.SyscallGroup{{Names: names, NamesWithCondtions: conds, Action: seccomp.ActionErrno}}
	if _, ok := info.SyscallNames["clone3"]; ok {
		groups = append(groups, seccomp.SyscallGroup{Names: []string{"clone3"}, Action: seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))})
	}
	return seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}, nil
}

// selfTest tries, from inside the sandbox, what its containment refuses,
// and describes each result ("exec: operation not permitted"), then what
// the sandbox is ("uid: 65534"). args come from the host: "connect=ADDR"
// (a live TCP port), "hostpid=PID" (the host's pid, in the host's PID
// namespace), "read=PATH" (a file or directory of the host's: opened and
// stat'ed), "env=NAME" (a variable set in the host's environment),
// "fd=N" (a descriptor the host's process holds, not close-on-exec). The
// signal to the host is 0, which only checks, so nothing happens to the
// host were it let through.
func selfTest(args []string) []string {
	var out []string
	res := func(what string, err error) {
		if err == nil {
			out = append(out, what+": allowed")
			return
		}
		out = append(out, what+": "+err.Error())
	}
	var connectTo string
	hostPid := -1
	var reads, envs, fds []string
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "connect":
			connectTo = v
		case "hostpid":
			hostPid, _ = strconv.Atoi(v)
		case "read":
			reads = append(reads, v)
		case "env":
			envs = append(envs, v)
		case "fd":
			fds = append(fds, v)
		}
	}
	// Each attempt is one the kernel would refuse or make harmless
	// without the filter, with another error than EPERM: exec of a
	// program that does not exist (ENOENT), ptrace of pid 0 (ESRCH), a
	// signal 0 to the host (only checks), a file created and removed.
	res("exec", syscall.Exec("/nonexistent/takohost-selftest", []string{"x"}, nil))
	fd, err := unix.Open("/tmp/takohost-sandbox-selftest-"+strconv.Itoa(os.Getpid()), unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o600)
	if err == nil {
		unix.Close(fd)
		_ = unix.Unlink("/tmp/takohost-sandbox-selftest-" + strconv.Itoa(os.Getpid()))
	}
	res("create", err)
	fd, err = unix.Open("/proc/self/status", unix.O_RDONLY, 0)
	if err == nil {
		unix.Close(fd)
	}
	res("open", err)
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
	}
	res("socket", err)
	res("connect", connectTCP(connectTo))
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if errno == 0 {
		if pid == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(int(pid), &ws, 0, nil)
		res("fork", nil)
	} else {
		res("fork", errno)
	}
	res("signal the host", unix.Kill(hostPid, 0))
	res("ptrace", unix.PtraceAttach(0))
	// Setting a limit to its own value: the kernel allows it, the filter
	// refuses any new value (raising needs CAP_SYS_RESOURCE, which a host
	// running as root has).
	var lim unix.Rlimit
	err = unix.Getrlimit(unix.RLIMIT_AS, &lim)
	if err == nil {
		err = unix.Prlimit(0, unix.RLIMIT_AS, &lim, nil)
	}
	res("set RLIMIT_AS", err)
	b, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err == nil {
		_ = unix.Munmap(b)
	}
	res("map executable memory", err)
	res("unshare", unix.Unshare(unix.CLONE_NEWUSER))

	// What the jail (jail_linux.go) takes away, each tried as code that
	// escaped goja would: the host's secrets in its environment and in
	// its files, its processes.
	readFile := func(path string) error {
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_, err = unix.Read(fd, make([]byte, 64))
		return err
	}
	res("read /proc/1/environ", readFile("/proc/1/environ"))
	if hostPid > 0 {
		res("read the host's environ", readFile("/proc/"+strconv.Itoa(hostPid)+"/environ"))
	}
	for _, p := range reads {
		res("read "+p, readFile(p))
		var st unix.Stat_t
		res("stat "+p, unix.Stat(p, &st))
	}
	for _, v := range fds {
		fd, err := strconv.Atoi(v)
		if err == nil {
			_, err = unix.Pread(fd, make([]byte, 64), 0)
		}
		res("read fd "+v, err)
	}
	procs, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil {
		n, rerr := unix.ReadDirent(procs, make([]byte, 4096))
		unix.Close(procs)
		if rerr == nil && n == 0 {
			rerr = errors.New("empty")
		}
		err = rerr
	}
	res("list processes", err)
	res("signal every process", unix.Kill(-1, 0))
	for _, name := range envs {
		if _, ok := os.LookupEnv(name); ok {
			res("env "+name, nil)
		} else {
			res("env "+name, errors.New("not set"))
		}
	}
	var keys []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	out = append(out, "environment: "+strings.Join(keys, ","))
	out = append(out, fmt.Sprintf("uid: %d", os.Getuid()), fmt.Sprintf("gid: %d", os.Getgid()))
	groups, _ := unix.Getgroups()
	out = append(out, fmt.Sprintf("groups: %v", groups))
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil {
		out = append(out, fmt.Sprintf("capabilities: effective %x permitted %x inheritable %x",
			uint64(data[1].Effective)<<32|uint64(data[0].Effective),
			uint64(data[1].Permitted)<<32|uint64(data[0].Permitted),
			uint64(data[1].Inheritable)<<32|uint64(data[0].Inheritable)))
	}
	bounding, ambient := 0, 0
	for c := 0; c < 64; c++ {
		if r, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && r == 1 {
			bounding++
		}
		if r, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err == nil && r == 1 {
			ambient++
		}
	}
	out = append(out, fmt.Sprintf("bounding set: %d", bounding), fmt.Sprintf("ambient: %d", ambient))
	return out
}

// connectTCP connects a raw socket to addr (an IPv4 ip:port) without the
// Go runtime's poller, so that only the two calls are tried.
func connectTCP(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, sa)
}
