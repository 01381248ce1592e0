package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// freshDatabase creates an empty database on the server of serverURL and
// returns its URL and a function that drops it, so that a run of the kit
// against PostgreSQL never meets an earlier run's rows.
func freshDatabase(ctx context.Context, serverURL string) (string, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to %s: %w", redact(serverURL), err)
	}
	defer c.Close(context.Background())
	var b [6]byte
	rand.Read(b[:])
	name := "takoconform_" + hex.EncodeToString(b[:])
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("CREATE DATABASE %s: %w", name, err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, serverURL); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	return u.String(), drop, nil
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable connection string)"
	}
	return u.Redacted()
}
