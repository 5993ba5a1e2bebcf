package driver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Executor runs a driver's statements: on the driver's own connections, or
// inside a caller's transaction. Its methods mirror database/sql's, so that
// one driver can run on a *sql.Tx and a pgx.Tx alike.
type Executor interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	// Query runs a statement that returns rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRow runs a statement that returns at most one row. Its Scan
	// returns an error matching sql.ErrNoRows when there was none.
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Row is one row of a result.
type Row interface{ Scan(dest ...any) error }

// Rows is a result being read, as *sql.Rows reads it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Shared is the Executor that stands for a driver's own connections: a
// write given Shared is gathered with other callers' writes into one group
// commit (or commits on its own when group commit is off), and a read runs
// on the driver's pool. A driver recognises it; its methods, called
// directly, fail.
var Shared Executor = shared{}

type shared struct{}

var errShared = errors.New("driver: Shared is run by a driver, not called")

func (shared) Exec(context.Context, string, ...any) (int64, error) { return 0, errShared }
func (shared) Query(context.Context, string, ...any) (Rows, error) { return nil, errShared }
func (shared) QueryRow(context.Context, string, ...any) Row        { return errRow{errShared} }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Querier is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL makes an Executor of a database/sql pool, connection or transaction.
func SQL(q Querier) Executor { return sqlExecutor{q} }

type sqlExecutor struct{ q Querier }

func (e sqlExecutor) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := e.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (e sqlExecutor) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return e.q.QueryContext(ctx, query, args...)
}

func (e sqlExecutor) QueryRow(ctx context.Context, query string, args ...any) Row {
	return e.q.QueryRowContext(ctx, query, args...)
}

// SQLTx is the Executor of a caller's transaction for drivers that take
// only *sql.Tx: tx must be one, begun on any pool open on the driver's
// database.
func SQLTx(driverName string, tx any) (Executor, error) {
	switch t := tx.(type) {
	case *sql.Tx:
		if t == nil {
			break
		}
		return SQL(t), nil
	case Executor:
		return t, nil
	}
	return nil, fmt.Errorf("%s: transaction of type %T: want *sql.Tx", driverName, tx)
}

// ScanAll reads every row with scan and closes rows.
func ScanAll[T any](rows Rows, scan func(Row) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ScanAges reads rows of (name, milliseconds) into durations by name, as
// the queues' oldest-job ages come back from both dialects.
func ScanAges(rows Rows) (map[string]time.Duration, error) {
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var (
			name string
			ms   int64
		)
		if err := rows.Scan(&name, &ms); err != nil {
			return nil, err
		}
		out[name] = time.Duration(ms) * time.Millisecond
	}
	return out, rows.Err()
}

// NullIfEmpty binds an empty string as NULL (an absent unique key, which
// never conflicts).
func NullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
