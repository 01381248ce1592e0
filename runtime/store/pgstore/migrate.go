package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations are the files migrations/NNNN_name.sql, applied in order, each
// in its own transaction together with its row in store_schema. They are
// never edited once landed: a change of schema is a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the key of the session advisory lock that serialises
// migrations: two hosts starting at once on an empty database take turns,
// and the second finds the schema already there.
const migrationLock = 0x7461_6b6f_7374_6f72 // "takostor"

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("pgstore: migration file %q is not named NNNN_name.sql", e.Name())
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("pgstore: migration %s: want version %d", m.name, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the schema version this build creates and understands.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil {
		panic(err)
	}
	return len(ms)
}

// migrate brings the database's schema to this build's version under the
// advisory lock. A database whose schema is newer than this build knows is
// refused: an older host must not write to tables it does not understand.
func migrate(ctx context.Context, pool *pgxpool.Pool) (applied int, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return 0, fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session's end: drop the
		// connection rather than return it to the pool still locked.
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock)); uerr != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS store_schema (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("creating store_schema: %w", err)
	}
	var current int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM store_schema").Scan(&current); err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	if current > len(ms) {
		return 0, fmt.Errorf("%w: the database's schema is version %d, this host knows versions up to %d; upgrade the host", ErrSchemaTooNew, current, len(ms))
	}
	for _, m := range ms[current:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO store_schema (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.name, err)
		}
		applied++
	}
	return applied, nil
}
