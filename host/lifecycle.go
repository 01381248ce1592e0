package host

import (
	"context"
	"errors"
	"fmt"

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

// logsPart removes, at start, the log files of workers deleted while the
// host was not running (or by another host of a shared store), and closes
// the open files at stop.
type logsPart struct{ h *Host }

func (p *logsPart) Start(ctx context.Context) error {
	n, err := p.h.logs.Sweep(func(worker string) bool {
		_, err := p.h.st.Resource(ctx, worker)
		return !errors.Is(err, store.ErrNotFound)
	})
	if err != nil {
		p.h.log.Warn("reading the worker logs directory", "error", err)
	} else if n > 0 {
		p.h.log.Info("removed the logs of deleted workers", "files", n)
	}
	return nil
}

func (p *logsPart) Stop(context.Context) error { return p.h.logs.Close() }
