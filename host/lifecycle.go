package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/takoform/queuehost/runtime/store"
)

// Part is one piece of the host with a lifecycle: the store, the
// JavaScript runtime, the delivery engine and the controller. Start
// prepares it to serve; Stop releases it, within ctx.
type Part interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

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

// storePart gives the store a lifecycle: it is opened by host.New and
// closed on Stop.
type storePart struct{ close func() error }

func (storePart) Start(context.Context) error  { return nil }
func (s storePart) Stop(context.Context) error { return s.close() }

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
	periodic
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
		p.start(LogsSweepInterval, false, func(context.Context) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p.sweep(ctx)
		})
	}
	return nil
}

func (p *logsPart) Stop(ctx context.Context) error {
	_ = p.halt(ctx)
	return p.h.logs.Close()
}

// PrincipalsReloadInterval is how often the host looks whether host.json
// changed under it (another host of a cluster sharing the data directory
// created or revoked a principal, or tako tokens -data edited it).
const PrincipalsReloadInterval = time.Second

// principalsPart reloads host.json when it changed (auth.Registry.Reload).
type principalsPart struct {
	h *Host
	periodic
}

func (p *principalsPart) Start(context.Context) error {
	p.start(PrincipalsReloadInterval, false, func(context.Context) {
		if changed, err := p.h.principals.Reload(); err != nil {
			p.h.log.Warn("host.json changed but does not load; the principals stay as they were", "error", err)
		} else if changed {
			p.h.log.Info("host.json changed: principals reloaded")
		}
	})
	return nil
}

func (p *principalsPart) Stop(ctx context.Context) error { return p.halt(ctx) }

// periodic runs a part's work every interval on a goroutine of its own
// (and once at once when now is set), from start until halt. The context
// it passes ends when halt is called.
type periodic struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *periodic) start(every time.Duration, now bool, work func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		if now {
			work(ctx)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				work(ctx)
			}
		}
	}()
}

// halt stops the work and waits for its goroutine, or for ctx; nothing
// to do when start was not called.
func (p *periodic) halt(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
