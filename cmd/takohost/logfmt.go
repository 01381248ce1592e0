package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// newLogger is the host's logger for -log-format: "text" (the default) is
// for a person at a terminal, one line per event, "15:04:05.000 INFO
// message key=value …"; "json" is one JSON object per line for a log
// collector. Request logs and the host's own events go through the same
// logger, so they share the format.
func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return slog.New(newHumanHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// humanHandler writes a record's time (local, to the millisecond), level
// and message as a plain prefix, then its attributes as slog's text
// handler writes them (key=value, quoted only when needed).
type humanHandler struct {
	out   *humanOut
	attrs slog.Handler // a TextHandler writing to out.buf, without time, level and message
}

type humanOut struct {
	mu  sync.Mutex
	w   io.Writer
	buf bytes.Buffer
}

func newHumanHandler(w io.Writer, opts *slog.HandlerOptions) *humanHandler {
	out := &humanOut{w: w}
	o := *opts
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
			return slog.Attr{}
		}
		return a
	}
	return &humanHandler{out: out, attrs: slog.NewTextHandler(&out.buf, &o)}
}

func (h *humanHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.attrs.Enabled(ctx, l)
}

func (h *humanHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.buf.Reset()
	if err := h.attrs.Handle(ctx, r); err != nil {
		return err
	}
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	line := make([]byte, 0, 64+h.out.buf.Len()+len(r.Message))
	line = t.AppendFormat(line, "15:04:05.000")
	line = fmt.Appendf(line, " %-5s %s", r.Level.String(), r.Message)
	if rest := bytes.TrimRight(h.out.buf.Bytes(), "\n"); len(rest) > 0 {
		line = append(append(line, ' '), rest...)
	}
	line = append(line, '\n')
	_, err := h.out.w.Write(line)
	return err
}

func (h *humanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &humanHandler{out: h.out, attrs: h.attrs.WithAttrs(as)}
}

func (h *humanHandler) WithGroup(name string) slog.Handler {
	return &humanHandler{out: h.out, attrs: h.attrs.WithGroup(name)}
}
