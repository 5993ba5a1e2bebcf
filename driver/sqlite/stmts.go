package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/idemdev/idem/driver"
)

// stmts is the writer's Executor: it runs each statement through a
// statement prepared once on the writer's connection and kept, by its
// text. SQLite parses and plans a statement each time it is prepared, and
// database/sql prepares one for every call that is not a prepared
// statement's: for idem's writes, whose statements are few and fixed, the
// parse cost more than running them (a fifth of the CPU of a job's claim
// and completion). It is used only while the writer is held, one caller at
// a time.
//
// A prepared statement runs again unparsed only if nothing in its plan
// depends on a parameter's value. SQLite plans with the value of a LIMIT
// that is a bare parameter (LIMIT ?6), and so parses such a statement
// again every time the parameter is bound: the writer's statements write
// LIMIT ?6 + 0, an expression it does not plan with.
type stmts struct {
	conn *sql.Conn
	m    map[string]*cachedStmt
}

// cachedStmt is a prepared statement and whether rows of it are open: a
// statement whose rows are still being read cannot run again until they
// are closed (the next call runs unprepared instead).
type cachedStmt struct {
	*sql.Stmt
	query string
	busy  bool
}

// maxStmts bounds the cache. idem's writes use a few dozen texts; a text
// built per call (a multi-row INSERT's VALUES list) adds one per size.
// When the cache is full it is emptied and filled again.
const maxStmts = 128

func newStmts(conn *sql.Conn) *stmts {
	return &stmts{conn: conn, m: make(map[string]*cachedStmt)}
}

// get returns query's prepared statement, preparing it if it is not
// cached; nil if it is busy or runs unprepared (see unprepared).
func (c *stmts) get(ctx context.Context, query string) (*cachedStmt, error) {
	if s, ok := c.m[query]; ok {
		if s.busy {
			return nil, nil
		}
		return s, nil
	}
	if unprepared(query) {
		return nil, nil
	}
	if len(c.m) >= maxStmts {
		if err := c.close(); err != nil {
			return nil, err
		}
	}
	st, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s := &cachedStmt{Stmt: st, query: query}
	c.m[query] = s
	return s, nil
}

// unprepared reports whether query runs unprepared, parsed at each call:
// a PRAGMA, since SQLite documents that some take effect when they are
// prepared rather than when they run (and the writer's are rare, some
// with a count in their text: PRAGMA incremental_vacuum(N) would only
// churn the cache); or a script of several statements (a migration),
// since a prepared statement is one statement and mattn/go-sqlite3's
// would drop the rest.
func unprepared(query string) bool {
	q := strings.TrimLeft(query, " \t\n")
	return len(q) >= 6 && strings.EqualFold(q[:6], "PRAGMA") ||
		strings.Contains(strings.TrimRight(query, "; \t\n"), ";")
}

// close closes every cached statement that is not busy and empties the
// cache (a busy one is closed by its rows' Close).
func (c *stmts) close() error {
	var errs []error
	for q, s := range c.m {
		if !s.busy {
			errs = append(errs, s.Close())
		}
		delete(c.m, q)
	}
	return errors.Join(errs...)
}

// Exec runs query with args.
func (c *stmts) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	s, err := c.get(ctx, query)
	if err != nil {
		return 0, err
	}
	var res sql.Result
	if s == nil {
		res, err = c.conn.ExecContext(ctx, query, args...)
	} else {
		res, err = s.ExecContext(ctx, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Query runs query with args; the statement stays busy until the rows are
// closed.
func (c *stmts) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (c *stmts) query(ctx context.Context, query string, args ...any) (*stmtRows, error) {
	s, err := c.get(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		rows, err := c.conn.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		return &stmtRows{Rows: rows}, nil
	}
	rows, err := s.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &stmtRows{Rows: rows, c: c, s: s}, nil
}

// QueryRow runs query with args when its row is scanned (*sql.Row's
// Scan closes the rows before it returns: the statement is never left
// busy).
func (c *stmts) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return lazyRow(func(dest ...any) error {
		s, err := c.get(ctx, query)
		if err != nil {
			return err
		}
		if s == nil {
			return c.conn.QueryRowContext(ctx, query, args...).Scan(dest...)
		}
		return s.QueryRowContext(ctx, args...).Scan(dest...)
	})
}

// stmtRows are the rows of a cached statement (s nil: of an unprepared
// one); closing them frees the statement for its next call.
type stmtRows struct {
	*sql.Rows
	c *stmts
	s *cachedStmt
}

func (r *stmtRows) Close() error {
	err := r.Rows.Close()
	if s := r.s; s != nil {
		r.s = nil
		s.busy = false
		if r.c.m[s.query] != s {
			err = errors.Join(err, s.Close()) // dropped from the cache while busy
		}
	}
	return err
}
