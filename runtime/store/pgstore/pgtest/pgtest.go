// Package pgtest gives tests a fresh PostgreSQL database each.
//
// The server is the one in TAKOHOST_TEST_POSTGRES (a connection string to
// a database the test user may CREATE DATABASE from), by default the
// trust-auth server on 127.0.0.1:5432 as user postgres. When it cannot be
// reached the test is skipped with a message saying so, unless
// TAKOHOST_REQUIRE_POSTGRES is set (CI sets it), where it fails instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable with the server's connection string.
const EnvURL = "TAKOHOST_TEST_POSTGRES"

// EnvRequire names the variable that turns an unreachable server from a
// skip into a failure.
const EnvRequire = "TAKOHOST_REQUIRE_POSTGRES"

// DefaultURL is the server used when EnvURL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the admin connection string.
func ServerURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

var (
	probeOnce sync.Once
	probeErr  error
)

func admin(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(ctx, ServerURL())
}

// Available reports whether the server can be reached (probed once).
func Available() error {
	probeOnce.Do(func() {
		c, err := admin(context.Background())
		if err != nil {
			probeErr = err
			return
		}
		c.Close(context.Background())
	})
	return probeErr
}

// Require skips (or, with EnvRequire set, fails) t when the server is not
// reachable.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("PostgreSQL at %s is required (%s is set) but unreachable: %v", redacted(), EnvRequire, err)
		}
		t.Skipf("PostgreSQL at %s unreachable (%v): skipping; set %s to a server's connection string to run this test", redacted(), err, EnvURL)
	}
}

func redacted() string {
	u, err := url.Parse(ServerURL())
	if err != nil {
		return "(unparsable " + EnvURL + ")"
	}
	return u.Redacted()
}

// Database creates an empty database, dropped when t ends, and returns its
// connection string.
func Database(t testing.TB) string {
	t.Helper()
	Require(t)
	u, drop, err := Create(context.Background(), ServerURL(), "takotest_")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("pgtest: %v", err)
		}
	})
	return u
}

// Create creates an empty database named prefix + random hex on the server
// of serverURL (whose user may CREATE DATABASE) and returns its connection
// string and a function that drops it (terminating its connections). For
// tools that want a fresh database per run (the conformance runner, the
// torture driver, the benchmarks).
func Create(ctx context.Context, serverURL, prefix string) (dbURL string, drop func() error, err error) {
	var b [6]byte
	rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("server connection string: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to %s: %w", u.Redacted(), err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(cctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("CREATE DATABASE %s: %w", name, err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return fmt.Errorf("dropping %s: %w", name, err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("dropping %s: %w", name, err)
		}
		return nil
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// Exec runs sql on the database at dbURL (for faults and inspection).
func Exec(t testing.TB, dbURL, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Fault makes every write to the store's tables in the database fail (on)
// or succeed again (off), with a trigger that raises an error: the
// database refuses the transaction, as it would on a full disk.
func Fault(t testing.TB, dbURL string, on bool) {
	t.Helper()
	tables := []string{"store_resources", "store_operations", "store_idempotency", "store_messages"}
	if on {
		Exec(t, dbURL, `CREATE OR REPLACE FUNCTION pgtest_fault() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN RAISE EXCEPTION 'pgtest: injected fault'; END $$`)
		for _, tb := range tables {
			Exec(t, dbURL, fmt.Sprintf(`CREATE TRIGGER pgtest_fault BEFORE INSERT OR UPDATE OR DELETE ON %s
				FOR EACH STATEMENT EXECUTE FUNCTION pgtest_fault()`, tb))
		}
		return
	}
	for _, tb := range tables {
		Exec(t, dbURL, fmt.Sprintf(`DROP TRIGGER IF EXISTS pgtest_fault ON %s`, tb))
	}
}
