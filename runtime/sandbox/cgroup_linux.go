package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
)

// DefaultMaxTasks is a sandbox's default pids cap (Options.MaxTasks): its
// threads, which the Go runtime starts a few of per processor.
const DefaultMaxTasks = 128

// Containment says which operating-system layers a Pool's sandboxes get on
// this machine, each decided when the pool is made (Pool.Containment). A
// layer the machine does not allow is off, and Notes says why.
type Containment struct {
	// Seccomp: each sandbox sets no_new_privs and loads a seccomp filter
	// (contain_linux.go) before any worker code; one that cannot ends.
	Seccomp bool
	// Cgroup is "v2" or "v1" when each sandbox runs in a cgroup of its own
	// with memory (MemoryLimit) and, when CgroupPids, pids (MaxTasks)
	// caps; "" when the host cannot create cgroups, and then the RSS
	// watchdog is the memory cap.
	Cgroup     string
	CgroupPids bool
	// NetNS: each sandbox starts in a network namespace of its own, which
	// has no interface but a loopback that is down. UserNS: the host is
	// not root, so that namespace belongs to a user namespace of the
	// sandbox's own, which maps only the host's uid and gid to themselves
	// (the sandbox keeps no capability after its exec).
	NetNS, UserNS bool
	// Jail (jail_linux.go): each sandbox starts in mount, PID, IPC and UTS
	// namespaces of its own, in an empty read-only root, with no
	// capability in any set, as UID and GID (the host's own ids when it is
	// not root; 0 when UID cannot execute the host's program).
	Jail     bool
	UID, GID int
	// Notes says why a layer is off.
	Notes []string
}

// containment is the host's side of what a Pool applies to its sandboxes.
type containment struct {
	selfTest bool
	cg       *cgroupTree
	jail     string // envJail's value, "" without the jail
	loader   string // envLoader's value
	hostMnt  string // envHostMnt's value
	zone     string // envTZ's value

	mu    sync.Mutex
	state Containment
	// placeFailed counts sandboxes the host could not move into their
	// cgroup (they ran under the RSS watchdog only).
	placeFailed atomic.Int64
}

func newContainment(o Options, exe string) *containment {
	c := &containment{selfTest: o.selfTest, zone: localZone()}
	st := &c.state
	switch {
	case o.noSeccomp:
		st.Notes = append(st.Notes, "seccomp: off (Options)")
	case !seccomp.Supported():
		st.Notes = append(st.Notes, "seccomp: the kernel has no seccomp filters")
	default:
		st.Seccomp = true
	}
	if o.noCgroup {
		st.Notes = append(st.Notes, "cgroup: off (Options); the memory cap is the RSS watchdog")
	} else {
		t, why := openCgroupTree(o.cgroupProc, o.MemoryLimit, o.MaxTasks)
		if t == nil {
			st.Notes = append(st.Notes, "cgroup: "+why+"; the memory cap is the RSS watchdog")
		} else {
			c.cg = t
			st.Cgroup, st.CgroupPids = t.version, t.pids
			if !t.pids {
				st.Notes = append(st.Notes, "cgroup: no pids controller; threads are not capped")
			}
		}
	}
	switch {
	case o.noNetNS:
		st.Notes = append(st.Notes, "netns: off (Options)")
	case os.Geteuid() != 0 || o.userNS:
		st.NetNS, st.UserNS = true, true
	default:
		st.NetNS = true
	}
	st.UID, st.GID = os.Geteuid(), os.Getegid()
	switch {
	case o.noJail:
		st.Notes = append(st.Notes, "jail: off (Options)")
	default:
		spec, note := jailSpec(exe, o.UID, o.GID)
		if st.UserNS && os.Geteuid() == 0 {
			spec, note = "keep", "" // tests: a root host as if it were not
		}
		files, err := loaderFiles(exe)
		if err != nil {
			st.Notes = append(st.Notes, "jail: off: "+err.Error()+"; "+jailOff)
			break
		}
		loader := strings.Join(files, ":")
		attr := &syscall.SysProcAttr{}
		c.namespaces(attr, true)
		if err := probeJail(exe, attr, spec, loader); err != nil {
			var re *refusedError
			if errors.As(err, &re) {
				st.Notes = append(st.Notes, "jail: the kernel refused its namespaces ("+err.Error()+"); "+jailOff)
			} else {
				st.Notes = append(st.Notes, "jail: off: a sandbox could not make it ("+err.Error()+"); "+jailOff)
			}
			break
		}
		c.jail, c.loader, c.hostMnt, st.Jail = spec, loader, hostMnt(), true
		if note != "" {
			st.Notes = append(st.Notes, note)
		}
		if spec != "keep" {
			st.UID, st.GID = o.UID, o.GID
		}
	}
	return c
}

// namespaces sets the namespaces a sandbox starts in on attr (the jail's
// when jail).
func (c *containment) namespaces(attr *syscall.SysProcAttr, jail bool) {
	st := c.report()
	if st.NetNS {
		attr.Cloneflags |= syscall.CLONE_NEWNET
		if st.UserNS {
			uid, gid := os.Geteuid(), os.Getegid()
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
			attr.GidMappingsEnableSetgroups = false
		}
	}
	if jail {
		attr.Cloneflags |= jailNamespaces
	}
}

func (c *containment) report() Containment {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.state
	r.Notes = append([]string(nil), r.Notes...)
	return r
}

// noNetNS turns the network namespace off for the pool's next sandboxes
// (the kernel refused to make one).
func (c *containment) noNetNS(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.NetNS {
		what := "a new network namespace"
		if c.state.UserNS {
			what = "a new user and network namespace"
		}
		c.state.NetNS, c.state.UserNS = false, false
		c.state.Notes = append(c.state.Notes, "netns: the kernel refused "+what+" ("+err.Error()+")")
	}
}

// jailOff says what a sandbox without the jail is.
const jailOff = "sandboxes run as the host's uid, in its mount, PID, IPC and UTS namespaces"

// noJail turns the jail off for the pool's next sandboxes (the kernel
// refused their namespaces).
func (c *containment) noJail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Jail {
		c.jail, c.state.Jail = "", false
		c.state.UID, c.state.GID = os.Geteuid(), os.Getegid()
		c.state.Notes = append(c.state.Notes, "jail: the kernel refused its namespaces ("+err.Error()+")")
	}
}

// prepare sets up cmd for a new sandbox: the environment that tells it to
// contain itself, the network namespace, and its cgroup (nil when the pool
// has none or making it failed, which is logged).
func (c *containment) prepare(p *Pool, cmd *exec.Cmd) *sandboxCgroup {
	// Only the host says what the sandbox applies, never the environment
	// the host inherited.
	env := cmd.Env[:0:0]
	for _, kv := range cmd.Env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case envSeccomp, envSelfTest, envJail, envJailed, envTZ, envProbe, envLoader, envHostMnt:
		default:
			env = append(env, kv)
		}
	}
	cmd.Env = env
	if c.report().Seccomp {
		cmd.Env = append(cmd.Env, envSeccomp+"=1")
	}
	if c.selfTest {
		cmd.Env = append(cmd.Env, envSelfTest+"=1")
	}
	if c.zone != "" {
		cmd.Env = append(cmd.Env, envTZ+"="+c.zone)
	}
	c.mu.Lock()
	jail := c.jail
	c.mu.Unlock()
	if jail != "" {
		cmd.Env = append(cmd.Env, envJail+"="+jail, envLoader+"="+c.loader, envHostMnt+"="+c.hostMnt)
	}
	c.namespaces(cmd.SysProcAttr, jail != "")
	if c.cg == nil {
		return nil
	}
	g, err := c.cg.create()
	if err != nil {
		c.placeFailed.Add(1)
		p.opts.Logger.Warn("sandbox: no cgroup for a sandbox; its memory cap is the RSS watchdog", "err", err)
		return nil
	}
	return g
}

// cgroupTree is the pool's parent cgroup (one per controller hierarchy on
// v1) under the host's own cgroup; each sandbox gets a child of it.
type cgroupTree struct {
	version string // "v1", "v2"
	pids    bool
	// parents: v2 one directory; v1 the memory one, then the pids one.
	parents  []string
	memLimit int64
	tasks    int
	seq      atomic.Uint64

	mu     sync.Mutex
	live   int  // sandbox groups not yet removed
	closed bool // the pool is closed: the last group removed removes the parents
}

// sandboxCgroup is one sandbox's cgroup (a directory per hierarchy).
type sandboxCgroup struct {
	t       *cgroupTree
	dirs    []string // dirs[0] has the memory controller
	removed atomic.Bool
}

var poolSeq atomic.Uint64

// openCgroupTree finds the host's cgroup (proc is /proc/self unless a test
// says otherwise) and makes the pool's parent group under it: v2 when the
// unified hierarchy has the memory controller, else v1's memory (and pids)
// hierarchies. nil and why when neither can be written.
func openCgroupTree(proc string, memLimit int64, tasks int) (*cgroupTree, string) {
	if proc == "" {
		proc = "/proc/self"
	}
	if tasks <= 0 {
		tasks = DefaultMaxTasks
	}
	mounts, err := readCgroupMounts(filepath.Join(proc, "mountinfo"))
	if err != nil {
		return nil, "cannot read the mounts: " + err.Error()
	}
	paths, err := readCgroupPaths(filepath.Join(proc, "cgroup"))
	if err != nil {
		return nil, "cannot read the host's cgroup: " + err.Error()
	}
	name := fmt.Sprintf("takohost-%d-%d", os.Getpid(), poolSeq.Add(1))
	var whys []string
	if t, why := openV2(mounts, paths, name); t != nil {
		t.memLimit, t.tasks = memLimit, tasks
		return t, ""
	} else {
		whys = append(whys, why)
	}
	t, why := openV1(mounts, paths, name)
	if t != nil {
		t.memLimit, t.tasks = memLimit, tasks
		return t, ""
	}
	whys = append(whys, why)
	return nil, strings.Join(whys, "; ")
}

// cgroupMount is a cgroup file system mounted at dir whose root is the
// cgroup root (a path in the hierarchy) and, for v1, with controllers.
type cgroupMount struct {
	v2          bool
	dir, root   string
	controllers []string
}

func readCgroupMounts(file string) ([]cgroupMount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 98:0 /root /mount/point opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMount(pf[3]), dir: unescapeMount(pf[4])}
		switch qf[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			m.controllers = strings.Split(qf[2], ",")
		default:
			continue
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readCgroupPaths reads /proc/self/cgroup: the host's path by controller
// ("" for the v2 hierarchy).
func readCgroupPaths(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// hostDir is where, under mount m, the host's cgroup path p is.
func hostDir(m cgroupMount, p string) (string, bool) {
	if m.root != "/" {
		if p != m.root && !strings.HasPrefix(p, m.root+"/") {
			return "", false
		}
		p = strings.TrimPrefix(p, m.root)
	}
	if strings.Contains(p, "..") {
		return "", false
	}
	return filepath.Join(m.dir, p), true
}

func openV2(mounts []cgroupMount, paths map[string]string, name string) (*cgroupTree, string) {
	p, ok := paths[""]
	if !ok {
		return nil, "v2: the host is in no unified hierarchy"
	}
	for _, m := range mounts {
		if !m.v2 {
			continue
		}
		dir, ok := hostDir(m, p)
		if !ok {
			continue
		}
		ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return nil, "v2: " + err.Error()
		}
		have := strings.Fields(string(ctrl))
		if !contains(have, "memory") {
			return nil, "v2: the memory controller is not available in " + dir
		}
		pids := contains(have, "pids")
		want := "+memory"
		if pids {
			want += " +pids"
		}
		sub, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if !contains(strings.Fields(string(sub)), "memory") || pids && !contains(strings.Fields(string(sub)), "pids") {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(want), 0); err != nil {
				// A cgroup that has processes (the host's own) cannot
				// give its children controllers, unless it is the root.
				return nil, fmt.Sprintf("v2: cannot enable the memory controller below %s: %v", dir, err)
			}
		}
		removeStale(dir)
		parent := filepath.Join(dir, name)
		if err := os.Mkdir(parent, 0o755); err != nil {
			return nil, "v2: " + err.Error()
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(want), 0); err != nil {
			_ = os.Remove(parent)
			return nil, "v2: " + err.Error()
		}
		return &cgroupTree{version: "v2", pids: pids, parents: []string{parent}}, ""
	}
	return nil, "v2: no unified hierarchy mounted"
}

func openV1(mounts []cgroupMount, paths map[string]string, name string) (*cgroupTree, string) {
	find := func(ctrl string) (string, error) {
		p, ok := paths[ctrl]
		if !ok {
			return "", fmt.Errorf("v1: the host is in no %s hierarchy", ctrl)
		}
		for _, m := range mounts {
			if m.v2 || !contains(m.controllers, ctrl) {
				continue
			}
			if dir, ok := hostDir(m, p); ok {
				removeStale(dir)
				parent := filepath.Join(dir, name)
				if err := os.Mkdir(parent, 0o755); err != nil {
					return "", fmt.Errorf("v1: %w", err)
				}
				return parent, nil
			}
		}
		return "", fmt.Errorf("v1: no %s hierarchy mounted", ctrl)
	}
	mem, err := find("memory")
	if err != nil {
		return nil, err.Error()
	}
	t := &cgroupTree{version: "v1", parents: []string{mem}}
	if pids, err := find("pids"); err == nil {
		t.pids = true
		t.parents = append(t.parents, pids)
	}
	return t, ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// removeStale removes the parent groups under dir left by hosts that are
// gone (named takohost-<pid>-<n>, pid not running), with their children.
func removeStale(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "takohost-")
		if !ok || !e.IsDir() {
			continue
		}
		ps, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(ps)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue
		}
		removeGroup(filepath.Join(dir, e.Name()))
	}
}

// removeGroup removes a cgroup directory and its child groups (a cgroup
// directory is removed with rmdir; its files go with it).
func removeGroup(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeGroup(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

// create makes a sandbox's cgroup with its caps.
func (t *cgroupTree) create() (*sandboxCgroup, error) {
	name := "s" + strconv.FormatUint(t.seq.Add(1), 10)
	t.mu.Lock()
	t.live++
	t.mu.Unlock()
	g := &sandboxCgroup{t: t}
	for _, parent := range t.parents {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, err
		}
		g.dirs = append(g.dirs, d)
	}
	mem := strconv.FormatInt(t.memLimit, 10)
	tasks := strconv.Itoa(t.tasks)
	var err error
	set := func(dir, file, v string) {
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, file), []byte(v), 0)
		}
	}
	switch t.version {
	case "v2":
		set(g.dirs[0], "memory.max", mem)
		if t.pids {
			set(g.dirs[0], "pids.max", tasks)
		}
		// No swap beyond the cap, where the kernel accounts swap.
		_ = os.WriteFile(filepath.Join(g.dirs[0], "memory.swap.max"), []byte("0"), 0)
	case "v1":
		set(g.dirs[0], "memory.limit_in_bytes", mem)
		// Memory plus swap at the same cap, where swap is accounted.
		_ = os.WriteFile(filepath.Join(g.dirs[0], "memory.memsw.limit_in_bytes"), []byte(mem), 0)
		if t.pids {
			set(g.dirs[1], "pids.max", tasks)
		}
	}
	if err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// enter moves the process pid (all its threads) into the group.
func (g *sandboxCgroup) enter(pid int) error {
	if g == nil {
		return nil
	}
	for _, d := range g.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return err
		}
	}
	return nil
}

// oomKills is how many processes the kernel killed in the group for its
// memory cap (v2 memory.events, v1 memory.oom_control: oom_kill).
func (g *sandboxCgroup) oomKills() int64 {
	if g == nil {
		return 0
	}
	file := "memory.events"
	if g.t.version == "v1" {
		file = "memory.oom_control"
	}
	b, err := os.ReadFile(filepath.Join(g.dirs[0], file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// remove removes the group once its process is gone (the kernel may take
// a moment to see the group empty).
func (g *sandboxCgroup) remove() {
	if g == nil || g.removed.Swap(true) {
		return
	}
	defer g.t.removed()
	for _, d := range g.dirs {
		for i := 0; ; i++ {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) || i == 50 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// close removes the pool's parent groups once every sandbox group is
// removed (now, or when the last sandbox still stopping has exited).
func (t *cgroupTree) close() {
	t.mu.Lock()
	t.closed = true
	last := t.live == 0
	t.mu.Unlock()
	if last {
		t.removeParents()
	}
}

func (t *cgroupTree) removed() {
	t.mu.Lock()
	t.live--
	last := t.closed && t.live == 0
	t.mu.Unlock()
	if last {
		t.removeParents()
	}
}

func (t *cgroupTree) removeParents() {
	for _, p := range t.parents {
		removeGroup(p)
	}
}

// procCgroups reads which cgroups process pid is in (tests).
func procCgroups(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return string(b)
}

// start starts cmd; when the kernel refuses the new network namespace
// (no CAP_SYS_ADMIN, or no unprivileged user namespaces, say), the pool's
// sandboxes go without one from then on (logged) and cmd is started again
// without it.
func (c *containment) start(p *Pool, cmd *exec.Cmd) (*exec.Cmd, error) {
	err := cmd.Start()
	if err == nil || cmd.SysProcAttr.Cloneflags&syscall.CLONE_NEWNET == 0 || !(errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC)) {
		return cmd, err
	}
	c.noNetNS(err)
	c.noJail(err)
	p.opts.Logger.Warn("sandbox: the kernel refused a network namespace; sandboxes start without one, and without the jail", "err", err)
	again := exec.Command(cmd.Path)
	again.Dir, again.ExtraFiles, again.Stderr = cmd.Dir, cmd.ExtraFiles, cmd.Stderr
	for _, kv := range cmd.Env {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case envJail, envLoader, envHostMnt:
		default:
			again.Env = append(again.Env, kv)
		}
	}
	attr := *cmd.SysProcAttr
	attr.Cloneflags &^= syscall.CLONE_NEWNET | syscall.CLONE_NEWUSER | jailNamespaces
	attr.UidMappings, attr.GidMappings = nil, nil
	again.SysProcAttr = &attr
	return again, again.Start()
}

// enter moves the started sandbox into its cgroup, before the host sends
// it anything (what its Go runtime allocated at start-up stays charged to
// the host's group). A sandbox that cannot be moved runs under the RSS
// watchdog alone (logged and counted).
func (c *containment) enter(p *Pool, g *sandboxCgroup, pid int) *sandboxCgroup {
	if g == nil {
		return nil
	}
	if err := g.enter(pid); err != nil {
		c.placeFailed.Add(1)
		p.opts.Logger.Warn("sandbox: could not move a sandbox into its cgroup; its memory cap is the RSS watchdog", "pid", pid, "err", err)
		g.remove()
		return nil
	}
	return g
}

func (c *containment) close() {
	if c.cg != nil {
		c.cg.close()
	}
}

// Containment says which operating-system layers the pool's sandboxes get
// on this machine; CgroupFailures counts sandboxes that could not be put
// in their cgroup and ran under the RSS watchdog alone.
func (p *Pool) Containment() (c Containment, cgroupFailures int64) {
	return p.contain.report(), p.contain.placeFailed.Load()
}

func (p *Pool) logContainment() {
	c := p.contain.report()
	p.opts.Logger.Info("sandbox: containment", "seccomp", c.Seccomp, "cgroup", c.Cgroup, "cgroup_pids", c.CgroupPids, "netns", c.NetNS, "userns", c.UserNS,
		"jail", c.Jail, "uid", c.UID, "gid", c.GID, "memory_limit_mib", p.opts.MemoryLimit>>20, "max_tasks", p.opts.MaxTasks)
	for _, n := range c.Notes {
		p.opts.Logger.Warn("sandbox: containment layer off", "why", n)
	}
}

// cgroupMemoryReason is why a sandbox the kernel killed at its cgroup's
// memory cap ended.
func (pr *proc) cgroupMemoryReason() string {
	return fmt.Sprintf("memory cap: the kernel killed it at its cgroup's memory limit of %d MiB", pr.pool.opts.MemoryLimit>>20)
}
