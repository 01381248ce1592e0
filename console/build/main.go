// Command build bundles the console's TypeScript and CSS (console/web) into
// console/dist with esbuild's Go API, so that neither the host's build nor
// the console's needs Node.js: `go run ./console/build` (make console).
// With -check it builds in memory and fails when console/dist differs
// (make check-console, run by CI like check-generated).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/evanw/esbuild/pkg/api"
)

func main() {
	dir := flag.String("dir", "console", "the console directory (web/ in, dist/ out)")
	check := flag.Bool("check", false, "build in memory and fail when dist/ differs from the build")
	flag.Parse()
	want, err := build(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "console build:", err)
		os.Exit(1)
	}
	dist := filepath.Join(*dir, "dist")
	if *check {
		if diffs := compare(dist, want); len(diffs) > 0 {
			for _, d := range diffs {
				fmt.Fprintln(os.Stderr, "console build: dist differs:", d)
			}
			fmt.Fprintln(os.Stderr, "console build: run `make console` and commit console/dist")
			os.Exit(1)
		}
		return
	}
	if err := os.RemoveAll(dist); err != nil {
		fmt.Fprintln(os.Stderr, "console build:", err)
		os.Exit(1)
	}
	for name, b := range want {
		p := filepath.Join(dist, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.WriteFile(p, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "console build:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("console build: %d files in %s\n", len(want), dist)
}

// build returns dist's files by name: app.js and app.css from esbuild,
// index.html copied from web/.
func build(dir string) (map[string][]byte, error) {
	web := filepath.Join(dir, "web")
	res := api.Build(api.BuildOptions{
		EntryPointsAdvanced: []api.EntryPoint{
			{InputPath: filepath.Join(web, "src", "main.ts"), OutputPath: "app"},
			{InputPath: filepath.Join(web, "src", "style.css"), OutputPath: "app"},
		},
		Bundle:            true,
		Format:            api.FormatESModule,
		Target:            api.ES2020,
		Platform:          api.PlatformBrowser,
		MinifyWhitespace:  true,
		MinifySyntax:      true,
		MinifyIdentifiers: true,
		LegalComments:     api.LegalCommentsEndOfFile,
		Outdir:            filepath.Join(dir, "dist"),
		Write:             false,
		LogLevel:          api.LogLevelWarning,
		Charset:           api.CharsetUTF8,
	})
	if len(res.Errors) > 0 {
		msgs := api.FormatMessages(res.Errors, api.FormatMessagesOptions{Kind: api.ErrorMessage})
		return nil, fmt.Errorf("%d errors:\n%s", len(res.Errors), bytes.Join(toBytes(msgs), nil))
	}
	out := map[string][]byte{}
	abs, err := filepath.Abs(filepath.Join(dir, "dist"))
	if err != nil {
		return nil, err
	}
	for _, f := range res.OutputFiles {
		rel, err := filepath.Rel(abs, f.Path)
		if err != nil {
			return nil, err
		}
		out[filepath.ToSlash(rel)] = f.Contents
	}
	html, err := os.ReadFile(filepath.Join(web, "index.html"))
	if err != nil {
		return nil, err
	}
	out["index.html"] = html
	return out, nil
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// compare lists the files of dist that differ from want, are missing or
// are extra.
func compare(dist string, want map[string][]byte) []string {
	var diffs []string
	seen := map[string]bool{}
	_ = filepath.WalkDir(dist, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dist, p)
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		b, _ := os.ReadFile(p)
		if w, ok := want[rel]; !ok {
			diffs = append(diffs, rel+" is not built from web/")
		} else if !bytes.Equal(b, w) {
			diffs = append(diffs, rel+" is out of date")
		}
		return nil
	})
	for name := range want {
		if !seen[name] {
			diffs = append(diffs, name+" is missing")
		}
	}
	sort.Strings(diffs)
	return diffs
}
