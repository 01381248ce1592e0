package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/takoform/queuehost/runtime/startstop"
	"github.com/takoform/queuehost/runtime/store"
)

// Part is one piece of the host with a lifecycle: the store, the
// JavaScript runtime, the delivery engine and the controller. Start
// prepares it to serve; Stop releases it, within ctx. It is the one
// lifecycle of every long-lived part (runtime/startstop).
type Part = startstop.Service

// lifecycle is the one place the order of the host's parts is written:
// they start in order (store, runtime, engine, controller) and stop in the
// reverse order, so that nothing stops while a part started after it still
// uses it.
type lifecycle struct {
	names   []string
	parts   []Part
	started int
}

func (l *lifecycle) add(name string, p Part) {
	l.names = append(l.names, name)
	l.parts = append(l.parts, p)
}

// Start starts every part in order. When one fails, those already started
// are stopped (in reverse order) and the error says which part failed.
func (l *lifecycle) Start(ctx context.Context) error {
	for i, p := range l.parts {
		if err := p.Start(ctx); err != nil {
			stopErr := l.Stop(context.WithoutCancel(ctx))
			return errors.Join(fmt.Errorf("starting the %s: %w", l.names[i], err), stopErr)
		}
		l.started = i + 1
	}
	return nil
}

// Stop stops the started parts in reverse order; every part is stopped
// even when one fails.
func (l *lifecycle) Stop(ctx context.Context) error {
	var errs []error
	for i := l.started - 1; i >= 0; i-- {
		if err := l.parts[i].Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.names[i], err))
		}
	}
	l.started = 0
	return errors.Join(errs...)
}

// LogsDir is the directory of DataDir that holds the workers' log files.
const LogsDir = "logs"

// LogsSweepInterval is how often a host on a shared PostgreSQL store
// removes the log files of workers another host deleted.
const LogsSweepInterval = 10 * time.Minute

// logsPart removes, at start, the log files of workers deleted while the
// host was not running, and on a shared store every LogsSweepInterval
// those of workers another host deleted (the deleting host forgets only
// its own); it closes the open files at stop.
type logsPart struct {
	h *Host
	startstop.Base
}

func (p *logsPart) sweep(ctx context.Context) {
	n, err := p.h.logs.Sweep(func(worker string) bool {
		_, err := p.h.st.Resource(ctx, worker)
		return !errors.Is(err, store.ErrNotFound)
	})
	if err != nil {
		p.h.log.Warn("reading the worker logs directory", "error", err)
	} else if n > 0 {
		p.h.log.Info("removed the logs of deleted workers", "files", n)
	}
}

func (p *logsPart) Start(ctx context.Context) error {
	p.sweep(ctx)
	if p.h.cfg.StoreURL != "" {
		p.Every(LogsSweepInterval, false, func(context.Context) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p.sweep(ctx)
		})
	}
	return nil
}

func (p *logsPart) Stop(ctx context.Context) error {
	return errors.Join(p.Base.Stop(ctx), p.h.logs.Close())
}

// PrincipalsReloadInterval is how often the host looks whether host.json
// changed under it (another host of a cluster sharing the data directory
// created or revoked a principal, or tako tokens -data edited it).
const PrincipalsReloadInterval = time.Second

// principalsPart reloads host.json when it changed (auth.Registry.Reload).
type principalsPart struct {
	h *Host
	startstop.Base
}

func (p *principalsPart) Start(context.Context) error {
	p.Every(PrincipalsReloadInterval, false, func(context.Context) {
		if changed, err := p.h.principals.Reload(); err != nil {
			p.h.log.Warn("host.json changed but does not load; the principals stay as they were", "error", err)
		} else if changed {
			p.h.log.Info("host.json changed: principals reloaded")
		}
	})
	return nil
}

// safeName makes s a file name: characters other than letters, digits,
// '.', '-' and '_' become '_'.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "host"
	}
	return string(b)
}
