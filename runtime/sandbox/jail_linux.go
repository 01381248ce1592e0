package sandbox

import (
	"bytes"
	"debug/elf"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The jail: what a sandbox is denied before it runs a line of Go code of
// its own, beside seccomp (contain_linux.go), its cgroup and its network
// namespace (cgroup_linux.go).
//
// The host starts the sandbox in new mount, PID, IPC and UTS namespaces
// (where the kernel allows: a host not running as root makes them inside
// the sandbox's user namespace), with an environment built from nothing
// (childEnv), and sets envJail. The process that starts is stage one: in
// Main, before anything else, on one locked thread, still privileged in
// its namespaces, it
//
//   - opens its own executable (/proc/self/exe) to run it again;
//   - makes every mount private, mounts an empty tmpfs and pivots the root
//     into it, detaching the old root, then remounts it read-only,
//     nosuid, nodev, noexec: no file of the host's is reachable by any
//     path, and there is no /proc (its PID namespace's processes are its
//     own anyway);
//   - drops every capability from its bounding set, clears the ambient
//     and inheritable sets, and changes its groups, gid and uid to the
//     unprivileged ones the host chose (65534 by default), which clears
//     its permitted and effective capabilities; sets no_new_privs and its
//     parent-death signal again (a credential change clears it);
//   - runs its executable again (execveat of that descriptor) with
//     envJailed instead of envJail.
//
// Stage two is the sandbox: pid 1 of its own PID namespace, the chosen
// uid and gid with no capabilities in any set, one thread of which every
// later one inherits that, in an empty read-only root. It reads no file
// after start: the Go runtime finds no /proc or /sys and goes on without
// them (GOMAXPROCS is in its environment); the local time zone comes in
// its environment (envTZ, the host's zone's TZif data).
//
// Stage one runs as the chosen uid when it executes the program, so the
// host's executable must be executable by that uid (the pool checks, and
// keeps uid 0 without capabilities otherwise, saying so in its Notes).
const (
	envJail    = "TAKOHOST_SANDBOX_JAIL"     // "uid:gid", or "keep" (no uid change): stage one
	envJailed  = "TAKOHOST_SANDBOX_JAILED"   // "1": stage two (the sandbox proper)
	envTZ      = "TAKOHOST_SANDBOX_TZ"       // base64 TZif data of the host's local zone
	envProbe   = "TAKOHOST_SANDBOX_PROBE"    // "1": stage two exits at once (probeJail)
	envLoader  = "TAKOHOST_SANDBOX_LOADER"   // the files exec needs in the new root (loaderFiles), ":"-separated
	envHostMnt = "TAKOHOST_SANDBOX_HOST_MNT" // the host's mount namespace ("mnt:[N]"), which stage one must not be in
	envFDs     = "TAKOHOST_SANDBOX_FDS"      // the descriptors the host placed in the sandbox: 0 to N-1 (closeInherited)
)

// closeInherited closes every descriptor of the sandbox from envFDs (3
// without it) on that is not close-on-exec: os/exec places the standard
// descriptors and ExtraFiles in the child, but passes on too every
// descriptor the host's process holds without close-on-exec, which the
// host's own Go code never opens but its process may have inherited (a
// supervisor's socket or log, a file a wrapper script opened for it). The
// Go runtime's own descriptors are close-on-exec and stay. It lists
// /proc/self/fd, which the process still sees (stage one, or a sandbox
// without the jail); stage two, which has no /proc, was cleaned by stage
// one and holds nothing more.
func closeInherited() {
	first := 3
	if n, err := strconv.Atoi(os.Getenv(envFDs)); err == nil && n > first {
		first = n
	}
	dir, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range dir {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < first {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// DefaultSandboxID is the uid and gid a sandbox runs as when the host is
// root (Options.UID, Options.GID): nobody/nogroup.
const DefaultSandboxID = 65534

// jailNamespaces are the namespaces the host starts a jailed sandbox in,
// besides its network (and, unprivileged, user) namespace.
const jailNamespaces = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS

// jailMain runs stage one when envJail is set: it does not return when
// the jail is made (the process becomes stage two), and exits 72 with the
// reason on stderr when it cannot be.
func jailMain() {
	spec, ok := os.LookupEnv(envJail)
	if !ok {
		return
	}
	if err := enterJail(spec); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox: jail:", err)
		os.Exit(72)
	}
}

func enterJail(spec string) error {
	uid, gid := -1, -1
	if spec != "keep" {
		u, g, ok := strings.Cut(spec, ":")
		var err1, err2 error
		uid, err1 = strconv.Atoi(u)
		gid, err2 = strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
			return fmt.Errorf("bad %s %q", envJail, spec)
		}
	}
	// Everything below applies to this thread (credentials, capability
	// sets) and to the program it executes; the other threads end with
	// the exec.
	runtime.LockOSThread()
	// Never in the host's namespaces: pivoting the root there would move
	// the host's.
	if err := ownNamespaces(); err != nil {
		return err
	}
	exe, err := unix.Open("/proc/self/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening its own executable: %w", err)
	}
	lastCap := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			lastCap = n
		}
	}
	var loader []string
	if v := os.Getenv(envLoader); v != "" {
		loader = strings.Split(v, ":")
	}
	if err := emptyRoot(loader); err != nil {
		return err
	}
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing the ambient capabilities: %w", err)
	}
	if uid >= 0 {
		// Raw system calls: for this thread only (the Go and C library
		// wrappers change every thread, which here is pointless).
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return fmt.Errorf("setresgid %d: %w", gid, e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			return fmt.Errorf("setresuid %d: %w", uid, e)
		}
	}
	// Nothing inheritable, permitted or effective is left (the uid change
	// cleared the last two already, unless the uid is kept).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	env := []string{envJailed + "=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != envJail && k != envLoader && k != envHostMnt && k != envFDs {
			env = append(env, kv)
		}
	}
	empty, err := syscall.BytePtrFromString("")
	if err != nil {
		return err
	}
	argv, err := syscall.SlicePtrFromStrings(os.Args[:1])
	if err != nil {
		return err
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return err
	}
	_, _, e := unix.RawSyscall6(unix.SYS_EXECVEAT, uintptr(exe), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
	if uid >= 0 && errors.Is(e, unix.EACCES) {
		return fmt.Errorf("executing the host's program as uid %d: %w (it must be executable by that user)", uid, e)
	}
	return fmt.Errorf("executing the host's program: %w", e)
}

// ownNamespaces checks that this process is pid 1 of a PID namespace and
// in another mount namespace than the host's (envHostMnt).
func ownNamespaces() error {
	if os.Getpid() != 1 {
		return errors.New("not in a PID namespace of its own")
	}
	mine, err := os.Readlink("/proc/self/ns/mnt")
	host := os.Getenv(envHostMnt)
	if err != nil || host == "" || mine == host {
		return fmt.Errorf("not in a mount namespace of its own (%s, the host's %q, %v)", mine, host, err)
	}
	return nil
}

// hostMnt is the host's mount namespace, for envHostMnt.
func hostMnt() string {
	s, _ := os.Readlink("/proc/self/ns/mnt")
	return s
}

// emptyRoot makes the root of this mount namespace a read-only tmpfs
// holding only loader (the dynamic loader and the C library the program
// needs to be executed, each bound read-only at its own path; none for a
// static program): mounts private (nothing propagates to or from the
// host's), a tmpfs mounted over a directory that exists, the loader's
// files bound in it, pivot_root into it with the old root put on top of
// it, and the old root detached.
func emptyRoot(loader []string) error {
	// The directories made below for the loader's files must be
	// searchable by the sandbox's uid whatever umask the host has
	// (systemd's UMask=0077 would leave them root's alone, and the exec
	// as that uid would fail).
	unix.Umask(0o022)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	dir := ""
	for _, d := range []string{"/tmp", "/mnt", "/dev", "/proc"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dir = d
			break
		}
	}
	if dir == "" {
		return errors.New("no directory to mount the new root on")
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("takohost-sandbox", dir, "tmpfs", flags, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("mounting the new root: %w", err)
	}
	for _, f := range loader {
		if !filepath.IsAbs(f) || strings.Contains(f, "..") {
			return fmt.Errorf("bad loader file %q", f)
		}
		at := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(at, nil, 0o444); err != nil {
			return err
		}
		if err := unix.Mount(f, at, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", f, err)
		}
		if err := unix.Mount("", at, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("binding %s read-only: %w", f, err)
		}
	}
	if err := unix.Chdir(dir); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("making the new root read-only: %w", err)
	}
	return nil
}

// loaderFiles lists what the kernel and the dynamic loader open to execute
// exe: its interpreter (PT_INTERP) and the libraries it needs (DT_NEEDED),
// found where the host's loader would find them; nil for a static program.
func loaderFiles(exe string) ([]string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var files []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, err
			}
			files = append(files, strings.TrimRight(string(b), "\x00"))
		}
	}
	if len(files) == 0 {
		return nil, nil
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	dirs := []string{filepath.Dir(files[0])}
	if m, _ := filepath.Glob("/lib/*-linux-gnu*"); len(m) > 0 {
		dirs = append(dirs, m...)
	}
	if m, _ := filepath.Glob("/usr/lib/*-linux-gnu*"); len(m) > 0 {
		dirs = append(dirs, m...)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	for _, l := range libs {
		found := ""
		for _, d := range dirs {
			p := filepath.Join(d, l)
			if strings.Contains(l, "/") {
				p = l
			}
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				found = p
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%s needs %s, which is in none of %v", exe, l, dirs)
		}
		files = append(files, found)
	}
	return files, nil
}

// jailSpec is the value of envJail for a sandbox of exe: "uid:gid" when
// the host is root and uid can execute exe, else "keep" and why not.
func jailSpec(exe string, uid, gid int) (spec, note string) {
	if os.Geteuid() != 0 {
		return "keep", fmt.Sprintf("uid: the host is not root; sandboxes run as its uid %d, with no capabilities", os.Geteuid())
	}
	if !canExec(exe, uid, gid) {
		return "keep", fmt.Sprintf("uid: %s is not executable by uid %d gid %d; sandboxes run as uid 0 with no capabilities", exe, uid, gid)
	}
	return strconv.Itoa(uid) + ":" + strconv.Itoa(gid), ""
}

// canExec reports whether uid (groups: gid only) may execute the file exe
// by its mode bits.
func canExec(exe string, uid, gid int) bool {
	fi, err := os.Stat(exe)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	m := fi.Mode().Perm()
	switch {
	case int(st.Uid) == uid:
		return m&0o100 != 0
	case int(st.Gid) == gid:
		return m&0o010 != 0
	}
	return m&0o001 != 0
}

// probeJail starts exe jailed as a sandbox would be (flags, spec) and lets
// stage two exit at once: nil when the jail can be made on this machine,
// else why not.
func probeJail(exe string, attr *syscall.SysProcAttr, spec, loader string) error {
	cmd := exec.Command(exe)
	cmd.Dir = "/"
	cmd.Env = []string{EnvVar + "=1", envJail + "=" + spec, envLoader + "=" + loader, envHostMnt + "=" + hostMnt(), envProbe + "=1", "GOTRACEBACK=none", "GOMAXPROCS=1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = attr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return &refusedError{err}
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			if s := strings.TrimSpace(stderr.String()); s != "" {
				return fmt.Errorf("%w: %s", err, s)
			}
			return err
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("the probe did not end within 10s")
	}
}

// refusedError: the kernel refused to start a process in the jail's
// namespaces.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// localZone is the TZif data of the host's local time zone (TZ, else
// /etc/localtime), base64, for envTZ; "" for UTC or when it cannot be read.
func localZone() string {
	name, ok := os.LookupEnv("TZ")
	var b []byte
	var err error
	switch {
	case !ok:
		b, err = os.ReadFile("/etc/localtime")
	case name == "" || name == "UTC" || name == ":UTC":
		return ""
	default:
		name = strings.TrimPrefix(name, ":")
		if filepath.IsAbs(name) {
			b, err = os.ReadFile(name)
			break
		}
		err = os.ErrNotExist
		for _, d := range []string{"/usr/share/zoneinfo/", "/usr/share/lib/zoneinfo/", "/usr/lib/locale/TZ/", "/etc/zoneinfo/"} {
			if strings.Contains(name, "..") {
				break
			}
			if b, err = os.ReadFile(d + name); err == nil {
				break
			}
		}
	}
	if err != nil || len(b) > 64<<10 {
		return ""
	}
	return base64.StdEncoding.EncodeToString(b)
}

// loadZone sets time.Local from envTZ (the sandbox reads no file).
func loadZone() {
	v := os.Getenv(envTZ)
	if v == "" {
		time.Local = time.UTC
		return
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return
	}
	if loc, err := time.LoadLocationFromTZData("Local", b); err == nil {
		time.Local = loc
	}
}
