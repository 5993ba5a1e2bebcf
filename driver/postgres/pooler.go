package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// probeQuery is a statement only the probe sends, so that its prepared
// name (pgx names a cached statement after a hash of its text) is ours.
const probeQuery = `SELECT 1 AS idem_prepared_statement_probe`

// checkPreparedStatements finds out, when the pool prepares named
// statements (pgx's default, QueryExecModeCacheStatement), whether they
// survive: behind a pooler in transaction mode (PgBouncer before 1.21, or
// without max_prepared_statements) two client connections share server
// connections, so one's prepared statement is already there for the other
// (42P05) or gone (26000). Two connections of our own each run one
// statement in turn, which lands both on the same idle server connection.
// Directly on PostgreSQL, or in session mode, each has its own session and
// the probe passes.
func (d *Driver) checkPreparedStatements(ctx context.Context) error {
	if d.cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	var conns [2]*pgx.Conn
	for i := range conns {
		c, err := pgx.ConnectConfig(ctx, d.cc)
		if err != nil {
			return fmt.Errorf("postgres: connect to %s: %w", server(d.cc), err)
		}
		defer c.Close(context.WithoutCancel(ctx))
		conns[i] = c
	}
	for range 2 {
		for _, c := range conns {
			var one int
			err := c.QueryRow(ctx, probeQuery).Scan(&one)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") {
				return fmt.Errorf("postgres: %s: prepared statements do not last between transactions: a pooler in transaction mode "+
					"(PgBouncer pool_mode=transaction) stands in front of PostgreSQL; add pooler=transaction to the URL, "+
					"or give the pool DefaultQueryExecMode pgx.QueryExecModeCacheDescribe and set postgres.Options.TransactionPooling "+
					"(docs/scaling.md): %w", server(d.cc), err)
			}
			if err != nil {
				return fmt.Errorf("postgres: %s: %w", server(d.cc), err)
			}
		}
	}
	return nil
}
