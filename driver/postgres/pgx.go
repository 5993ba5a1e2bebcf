package postgres

import (
	"context"

	"github.com/idemdev/idem/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgxQuerier is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgxExecutor runs the driver's statements natively on pgx: on the pool,
// or inside an application's pgx.Tx.
type pgxExecutor struct{ q pgxQuerier }

func (e pgxExecutor) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := e.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (e pgxExecutor) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := e.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

func (e pgxExecutor) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return e.q.QueryRow(ctx, query, args...)
}

// pgxRows gives pgx.Rows the Close of database/sql's rows.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}
