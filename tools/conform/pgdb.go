package main

import (
	"context"

	"github.com/takoform/queuehost/runtime/store/pgstore/pgtest"
)

// freshDatabase creates an empty database on the server of serverURL and
// returns its URL and a function that drops it, so that a run of the kit
// against PostgreSQL never meets an earlier run's rows.
func freshDatabase(ctx context.Context, serverURL string) (string, func(), error) {
	u, drop, err := pgtest.Create(ctx, serverURL, "takoconform_")
	if err != nil {
		return "", nil, err
	}
	return u, func() { _ = drop() }, nil
}
