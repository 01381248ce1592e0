package server

import (
	"log/slog"
	"time"
)

const levelInfo = slog.LevelInfo

func attr(k, v string) slog.Attr        { return slog.String(k, v) }
func attrInt(k string, v int) slog.Attr { return slog.Int(k, v) }
func attrDur(k string, d time.Duration) slog.Attr {
	return slog.Float64(k+"Ms", float64(d.Microseconds())/1000)
}

func secondsDuration(n int) time.Duration { return time.Duration(n) * time.Second }
