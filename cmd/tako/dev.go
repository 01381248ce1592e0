package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/takoform/queuehost/host"
)

// runDev is the inner loop: make sure a host runs (starting one in this
// process, on a data directory that survives, when none answers at
// -host), apply the project, then re-apply whenever the manifest or a
// module file changes, printing every worker's new log lines as they come.
// It returns when ctx ends (Ctrl-C), stopping the host it started.
func runDev(ctx context.Context, c *common, dataDir string, stdout io.Writer) error {
	out := &lockedWriter{w: stdout}
	m, err := LoadManifest(c.dir)
	if err != nil {
		return usageError{err}
	}
	cl, err := c.client(m)
	if err != nil {
		return err
	}
	m.Space = cl.space
	if _, err := cl.api.GetHealthWithResponse(ctx); err != nil {
		u, perr := url.Parse(c.res.host)
		if perr != nil || u.Host == "" {
			return usageError{fmt.Errorf("-host %q: not a URL", c.res.host)}
		}
		if dataDir == "" {
			dataDir = filepath.Join(m.dir, ".tako", "data")
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return usageError{fmt.Errorf("data directory: %w", err)}
		}
		logf, err := os.OpenFile(filepath.Join(dataDir, "..", "host.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return usageError{fmt.Errorf("host log: %w", err)}
		}
		defer logf.Close()
		h, err := host.New(ctx, host.Config{DataDir: dataDir, Listen: u.Host, Logger: slog.New(slog.NewJSONHandler(logf, nil))})
		if err != nil {
			return fmt.Errorf("starting a host in this process: %w", err)
		}
		if err := h.Start(); err != nil {
			_ = h.Shutdown(context.Background())
			return fmt.Errorf("starting a host in this process: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = h.Shutdown(sctx)
		}()
		fmt.Fprintf(out, "dev: no host answered at %s; started one here (data %s, log %s, token in %s)\n", c.res.host, dataDir, logf.Name(), h.AdminTokenPath())
		if cl, err = newClient(c.res.host, h.AdminToken(), m.Space); err != nil {
			return err
		}
		c.res.token, c.res.tokenSource = h.AdminToken(), "file "+h.AdminTokenPath()
		// Other terminals reach this host as the context dev.
		if path, err := registerDevContext(c.res.host, h.AdminToken(), m.Space); err != nil {
			fmt.Fprintf(out, "dev: could not register the context dev: %v\n", err)
		} else {
			fmt.Fprintf(out, "dev: registered this host as the context dev in %s (use it with -context dev, or `tako context use dev`)\n", path)
		}
	}
	// The log from now on: lines kept from before dev started are not
	// printed again.
	before, err := cl.list(ctx, formWorker)
	if err != nil {
		return err
	}
	old := map[string]bool{}
	for _, w := range before {
		old[w.Uid] = true
	}

	apply := func(m *Manifest) {
		res, err := Apply(ctx, cl, m, false, nil, false)
		if err != nil {
			fmt.Fprintf(out, "dev: apply failed: %v\n", err)
			return
		}
		for _, ch := range res.Changes {
			if ch.Action != "unchanged" {
				fmt.Fprintln(out, formatChange(ch, false))
			}
		}
		s := res.Summary
		fmt.Fprintf(out, "dev: applied to space %s: %d created, %d updated, %d deleted, %d unchanged\n", m.Space, s.Created, s.Updated, s.Deleted, s.Unchanged)
	}
	apply(m)

	var wg sync.WaitGroup
	defer wg.Wait()
	tailCtx, stopTail := context.WithCancel(ctx)
	defer stopTail()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tailAll(tailCtx, cl, m, old, out)
	}()

	seen := fingerprint(m)
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		mm, err := LoadManifest(c.dir)
		if err != nil {
			// A half-saved manifest: say so once per change, keep watching.
			if fp := "error:" + err.Error(); fp != seen {
				seen = fp
				fmt.Fprintf(out, "dev: %v\n", err)
			}
			continue
		}
		if c.space != "" || !mm.declaredSpace {
			mm.Space = m.Space
		}
		if fp := fingerprint(mm); fp != seen {
			seen = fp
			fmt.Fprintln(out, "dev: change seen; applying")
			apply(mm)
		}
	}
}

// fingerprint is the size and modification time of the manifest and of
// every file it names: a change of any re-applies.
func fingerprint(m *Manifest) string {
	files := []string{ManifestFile}
	for _, w := range m.Workers {
		files = append(files, w.Main)
		files = append(files, w.Modules...)
		for _, s := range w.Secrets {
			if s.File != "" {
				files = append(files, s.File)
			}
		}
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		st, err := os.Stat(filepath.Join(m.dir, f))
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// tailAll prints the new log lines of the manifest's workers, each with
// its time (local, to the millisecond) and prefixed with the worker's
// name, until ctx ends. Of a worker in old (it existed when dev started)
// only the lines logged from then on are printed; of a worker created
// since, every line. Control characters are escaped (escapeControl).
func tailAll(ctx context.Context, cl *client, m *Manifest, old map[string]bool, out io.Writer) {
	after := map[string]int64{}
	primed := map[string]bool{}
	for {
		workers, err := cl.list(ctx, formWorker)
		if err == nil {
			for _, w := range m.Workers {
				r, ok := workers[w.Name]
				if !ok {
					continue
				}
				if old[r.Uid] && !primed[r.Uid] {
					// Skip to the end of the log as it is now.
					for {
						items, err := cl.logs(ctx, r.Uid, after[r.Uid], 0)
						if err != nil || len(items) == 0 {
							break
						}
						after[r.Uid] = items[len(items)-1].Seq
					}
				}
				primed[r.Uid] = true
				items, err := cl.logs(ctx, r.Uid, after[r.Uid], 0)
				if err != nil {
					continue
				}
				for _, e := range items {
					fmt.Fprintf(out, "%s [%s] %s %s\n", time.UnixMilli(e.TimeMillis).Format("15:04:05.000"), w.Name, e.Level, escapeControl(e.Message))
					after[r.Uid] = e.Seq
				}
			}
		} else if errors.Is(ctx.Err(), context.Canceled) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// lockedWriter serialises the lines of the apply loop and the log tail.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
