package membudget

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MinHostMemory is the least DefaultHostMemory returns.
const MinHostMemory = 256 << 20

// DefaultHostMemory is the memory the host may use when -max-memory is not
// given, and where that figure comes from: the limit of the host's memory
// cgroup (v2 memory.max, or v1 memory.limit_in_bytes) when there is one,
// else a quarter of the machine's RAM (MemTotal), at least MinHostMemory.
// The host's sandboxes have caps of their own, and in a cgroup they share
// its limit with the host, so the host takes only part of it: half a
// cgroup's limit, a quarter of an unlimited machine.
func DefaultHostMemory() (int64, string) {
	if lim, where := cgroupLimit("/proc/self/cgroup", "/proc/self/mountinfo"); lim > 0 {
		return max(lim/2, MinHostMemory), "half the memory cgroup's limit (" + where + ")"
	}
	if total := memTotal("/proc/meminfo"); total > 0 {
		return max(total/4, MinHostMemory), "a quarter of the machine's memory (/proc/meminfo)"
	}
	return 1 << 30, "1 GiB (neither a cgroup limit nor /proc/meminfo was found)"
}

// cgroupLimit reads the memory limit of the process's cgroup: the smallest
// limit on the path from its group up to the hierarchy's root, in v2
// (memory.max) or v1 (memory.limit_in_bytes); 0 when there is none.
func cgroupLimit(cgroupFile, mountinfo string) (int64, string) {
	groups, err := os.ReadFile(cgroupFile)
	if err != nil {
		return 0, ""
	}
	mounts := cgroupMounts(mountinfo)
	var best int64
	var where string
	for _, line := range strings.Split(strings.TrimSpace(string(groups)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var root, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			root, file = mounts["cgroup2"], "memory.max"
		case hasController(parts[1], "memory"):
			root, file = mounts["memory"], "memory.limit_in_bytes"
		default:
			continue
		}
		if root == "" {
			continue
		}
		for dir := filepath.Join(root, parts[2]); strings.HasPrefix(dir, root); dir = filepath.Dir(dir) {
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err == nil {
				s := strings.TrimSpace(string(b))
				// v1 writes "no limit" as a huge number.
				if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < 1<<60 && (best == 0 || n < best) {
					best, where = n, filepath.Join(dir, file)
				}
			}
			if dir == root {
				break
			}
		}
	}
	return best, where
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// cgroupMounts maps "cgroup2" and each v1 controller to its mount point.
func cgroupMounts(mountinfo string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(mountinfo)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || len(fields) < 5 {
			continue
		}
		switch fields[sep+1] {
		case "cgroup2":
			if _, ok := out["cgroup2"]; !ok {
				out["cgroup2"] = fields[4]
			}
		case "cgroup":
			for _, o := range strings.Split(fields[sep+3], ",") {
				if o == "memory" {
					out["memory"] = fields[4]
				}
			}
		}
	}
	return out
}

func memTotal(meminfo string) int64 {
	b, err := os.ReadFile(meminfo)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
