package main

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/dop251/goja"
	"github.com/google/pprof/profile"
)

// jsProfile runs fn under goja's own profiler and says where the
// JavaScript time went by script: the worker's bundle (worker.js), the
// runtime's prelude (prelude.js: Request, Response, Headers, ...) or
// elsewhere. The Go CPU profile cannot tell them apart: both run inside the
// goja call that started them. goja samples every 10 ms and measures
// execution time, so this is a share, not a CPU figure.
func jsProfile(fn func()) (string, error) {
	var buf bytes.Buffer
	if err := goja.StartProfile(&buf); err != nil {
		fn()
		return "", err
	}
	fn()
	goja.StopProfile()
	p, err := profile.Parse(&buf)
	if err != nil {
		return "", err
	}
	vi := len(p.SampleType) - 1 // the time value
	byFile := map[string]int64{}
	byFunc := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		if len(s.Location) == 0 || len(s.Location[0].Line) == 0 || s.Location[0].Line[0].Function == nil {
			continue
		}
		f := s.Location[0].Line[0].Function
		v := s.Value[vi]
		total += v
		byFile[f.Filename] += v
		byFunc[f.Filename+": "+f.Name] += v
	}
	if total == 0 {
		return "no JavaScript samples", nil
	}
	share := func(m map[string]int64, n int) []string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
		var out []string
		for i, k := range keys {
			if i == n {
				break
			}
			out = append(out, fmt.Sprintf("%s %s", k, pct(float64(m[k])/float64(total))))
		}
		return out
	}
	return fmt.Sprintf("%d samples; by script: %s; by function: %s", len(p.Sample),
		strings.Join(share(byFile, 4), ", "), strings.Join(share(byFunc, 6), ", ")), nil
}
