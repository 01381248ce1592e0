package main

import (
	"log/slog"
	"os"
)

type slogLogger = slog.Logger

func discardLogger() *slog.Logger {
	if os.Getenv("TAKO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}
