package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// profileRun is one CPU profile taken during a measurement, rendered into
// its section once the run is over.
type profileRun struct {
	Name    string
	Path    string
	Section *section
	// Filled by renderProfiles:
	Hot      []hotSpot // functions
	HotPkgs  []hotSpot // packages, by the sum of their functions' flat share
	Packages []hotSpot // every package's flat share, largest first
	Err      error
}

// hotSpot is a function whose own (flat) CPU share is above 10% and that
// is not encoding, checksumming or the syscall itself.
type hotSpot struct {
	Func    string
	Package string
	Flat    float64 // percent
	Line    string
	// Attributed: the share is the function's own time plus the library
	// and runtime code it calls (pprof -show=takoform/queuehost).
	Attributed bool
}

// profile runs fn under the CPU profiler and returns the profile's path.
func (b *bench) profile(name string, fn func()) (string, error) {
	path := filepath.Join(b.dir, name+".pprof")
	stop, err := startCPUProfile(path)
	if err != nil {
		fn()
		return "", err
	}
	fn()
	stop()
	return path, nil
}

// startCPUProfile starts the CPU profiler writing to path (none when path
// is "") and returns what stops it; calls after the first do nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// pprofTop runs `go tool pprof -top` on a profile.
func pprofTop(path string, extra ...string) (string, error) {
	args := append([]string{"tool", "pprof", "-top", "-nodecount=25"}, extra...)
	args = append(args, path)
	out, err := exec.Command(goTool(), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("go tool pprof: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// renderProfiles adds each profile's `go tool pprof -top` to its section,
// with the hot spots named.
func (b *bench) renderProfiles() {
	for i := range b.profiles {
		p := &b.profiles[i]
		top, err := pprofTop(p.Path)
		if err != nil {
			p.Err = err
			p.Section.note("CPU profile of %s: %v", p.Name, err)
			continue
		}
		p.Hot = hotSpots(top, 10)
		cmd := fmt.Sprintf("go tool pprof -top -nodecount=25 %s.pprof", strings.TrimSuffix(filepath.Base(p.Path), ".pprof"))
		p.Section.Blocks = append(p.Section.Blocks, block{Caption: fmt.Sprintf("CPU profile of %s (runtime/pprof over the whole measured point; `%s`):", p.Name, cmd), Text: top})
		if cum, err := pprofTop(p.Path, "-cum", "-show=takoform/queuehost"); err == nil {
			p.Section.Blocks = append(p.Section.Blocks, block{Caption: "The same profile, this repository's functions only (`-top -cum -show=takoform/queuehost`). " +
				"Here a function's flat share includes the library and runtime code it calls directly (goja, maps, allocation), so it is the cost its owner can act on:", Text: cum})
			for _, h := range hotSpots(cum, 10) {
				h.Attributed = true
				p.Hot = append(p.Hot, h)
			}
		}
		if all, err := pprofTop(p.Path, "-nodecount=100000", "-nodefraction=0", "-edgefraction=0"); err == nil {
			p.Packages = packageShares(all)
			var rows []string
			for i, pk := range p.Packages {
				if i == 12 {
					break
				}
				rows = append(rows, fmt.Sprintf("%6.2f%%  %s", pk.Flat, pk.Package))
				if pk.Flat > 10 && !excusedHotSpot(pk.Package+".") {
					p.HotPkgs = append(p.HotPkgs, pk)
				}
			}
			p.Section.Blocks = append(p.Section.Blocks, block{Caption: fmt.Sprintf("The same profile, flat CPU summed by package (from `-top -nodecount=100000 -nodefraction=0`):"), Text: strings.Join(rows, "\n")})
		}
		if len(p.HotPkgs) > 0 {
			var names []string
			for _, h := range p.HotPkgs {
				names = append(names, fmt.Sprintf("%s (%.1f%% flat)", h.Package, h.Flat))
			}
			p.Section.note("Packages above 10%% flat in %s (information, not hot spots: a package's share sums all its functions, and the runtime's is the allocation, garbage collection and scheduling done for every caller, which the attributed view above charges to them): %s.", p.Name, strings.Join(names, ", "))
		}
		if len(p.Hot) == 0 {
			p.Section.note("Hot spots in %s: none — no function above 10%% flat besides encoding, checksumming and syscalls.", p.Name)
		} else {
			var names []string
			for _, h := range p.Hot {
				how := "flat"
				if h.Attributed {
					how = "with the library and runtime code it calls"
				}
				names = append(names, fmt.Sprintf("`%s` (%.1f%% %s; package %s)", h.Func, h.Flat, how, h.Package))
			}
			p.Section.note("Hot spots in %s (above 10%%, not encoding, checksumming or syscalls): %s.", p.Name, strings.Join(names, "; "))
		}
	}
}

// hotSpots parses `go tool pprof -top` output and returns the functions
// whose flat share exceeds limit percent and that are not encoding,
// checksumming or syscalls.
func hotSpots(top string, limit float64) []hotSpot {
	var out []hotSpot
	sc := bufio.NewScanner(strings.NewReader(top))
	inTable := false
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == "flat" && f[1] == "flat%" {
			inTable = true
			continue
		}
		if !inTable || len(f) < 6 {
			continue
		}
		flat, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err != nil || flat <= limit {
			continue
		}
		fn := strings.Join(f[5:], " ")
		if excusedHotSpot(fn) {
			continue
		}
		out = append(out, hotSpot{Func: fn, Package: funcPackage(fn), Flat: flat, Line: strings.TrimSpace(line)})
	}
	return out
}

// packageShares sums the flat share of every function by package.
func packageShares(top string) []hotSpot {
	sum := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(top))
	inTable := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && f[0] == "flat" && f[1] == "flat%" {
			inTable = true
			continue
		}
		if !inTable || len(f) < 6 {
			continue
		}
		flat, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err != nil {
			continue
		}
		sum[funcPackage(strings.Join(f[5:], " "))] += flat
	}
	out := make([]hotSpot, 0, len(sum))
	for p, v := range sum {
		out = append(out, hotSpot{Package: p, Flat: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Flat != out[j].Flat {
			return out[i].Flat > out[j].Flat
		}
		return out[i].Package < out[j].Package
	})
	return out
}

// excusedHotSpot: what the target allows to be hot.
func excusedHotSpot(fn string) bool {
	for _, s := range []string{"encoding/", "store.(*encoder)", "store.encodeGroup", "store.decodeGroup", "hash/crc32", "journal.Checksum", "crc32",
		"syscall", "golang.org/x/sys/unix", "journal.osFile."} {
		if strings.Contains(fn, s) {
			return true
		}
	}
	return false
}

// funcPackage is the import path of a pprof function name such as
// "github.com/a/b.(*T).M" or "runtime.mallocgc".
func funcPackage(fn string) string {
	slash := strings.LastIndex(fn, "/")
	rest := fn[slash+1:]
	dot := strings.Index(rest, ".")
	if dot < 0 {
		return fn
	}
	return fn[:slash+1+dot]
}
