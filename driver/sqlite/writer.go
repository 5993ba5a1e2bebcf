package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/driver"
)

// writer is the one connection idem writes through. Its lock queues
// writers in Go, one statement or one transaction at a time, as a pool of
// one connection would; it is itself an Executor that takes the lock for
// each statement.
type writer struct {
	sem       chan struct{}
	conn      *sql.Conn
	st        *stmts        // conn's prepared statements: its Executor
	closed    chan struct{} // closed by close: later statements fail at once
	closeOnce sync.Once
	closeErr  error
	// waiting counts the callers blocked in lock: a long holder (a prune)
	// gives the writer up between its steps while it is not zero.
	waiting atomic.Int64
	// pruneRows is how many rows of each kind one prune step changes,
	// adapted after every step so that a step holds the writer about
	// pruneStepHold (see Driver.PrunePaced).
	pruneRows atomic.Int64
	// freed is when the writer was last given back (Unix nanoseconds): a
	// prune takes its next step once the writer has been idle a while
	// (see idleFor).
	freed atomic.Int64
}

func newWriter(conn *sql.Conn) *writer {
	return &writer{sem: make(chan struct{}, 1), conn: conn, st: newStmts(conn), closed: make(chan struct{})}
}

// errClosed answers a statement sent after Close.
var errClosed = errors.New("sqlite: database closed")

func (w *writer) lock(ctx context.Context) error {
	select {
	case <-w.closed:
		return errClosed
	default:
	}
	select {
	case w.sem <- struct{}{}:
		return w.taken()
	default:
	}
	w.waiting.Add(1)
	defer w.waiting.Add(-1)
	select {
	case w.sem <- struct{}{}:
		return w.taken()
	case <-w.closed:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// taken checks, once the writer is taken, that close did not take it for
// good first.
func (w *writer) taken() error {
	select {
	case <-w.closed: // close took the writer and gave it up for good
		<-w.sem
		return errClosed
	default:
		return nil
	}
}

// contended reports whether another caller is waiting for the writer.
func (w *writer) contended() bool { return w.waiting.Load() > 0 }

func (w *writer) unlock() {
	w.freed.Store(time.Now().UnixNano())
	<-w.sem
}

// idleFor is how long the writer has been free with no caller waiting for
// it: zero while it is held or awaited.
func (w *writer) idleFor() time.Duration {
	if w.contended() || len(w.sem) > 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, w.freed.Load())))
}

// close waits for the statement or transaction in flight and gives the
// connection back; a second call does nothing.
func (w *writer) close() error {
	w.closeOnce.Do(func() {
		w.sem <- struct{}{}
		close(w.closed)
		w.closeErr = errors.Join(w.st.close(), w.conn.Close())
		<-w.sem // a waiter that takes it sees closed and gives it back
	})
	return w.closeErr
}

// Exec runs one statement on the writer.
func (w *writer) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := w.lock(ctx); err != nil {
		return 0, err
	}
	defer w.unlock()
	return w.st.Exec(ctx, query, args...)
}

// Query runs one statement on the writer, which stays taken until the rows
// are closed.
func (w *writer) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	if err := w.lock(ctx); err != nil {
		return nil, err
	}
	rows, err := w.st.query(ctx, query, args...)
	if err != nil {
		w.unlock()
		return nil, err
	}
	return &lockedRows{stmtRows: rows, unlock: w.unlock}, nil
}

// QueryRow runs one statement on the writer when its row is scanned.
func (w *writer) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return lazyRow(func(dest ...any) error {
		if err := w.lock(ctx); err != nil {
			return err
		}
		defer w.unlock()
		return w.st.QueryRow(ctx, query, args...).Scan(dest...)
	})
}

type lazyRow func(dest ...any) error

func (r lazyRow) Scan(dest ...any) error { return r(dest...) }

type lockedRows struct {
	*stmtRows
	unlock func()
	closed bool
}

func (r *lockedRows) Close() error {
	err := r.stmtRows.Close()
	if !r.closed {
		r.closed = true
		r.unlock()
	}
	return err
}

// begin takes the writer and begins a BEGIN IMMEDIATE transaction on it.
// The writer is given back by Commit or Rollback.
func (w *writer) begin(ctx context.Context) (*wtx, error) {
	if err := w.lock(ctx); err != nil {
		return nil, err
	}
	if _, err := w.st.Exec(ctx, `BEGIN IMMEDIATE`); err != nil {
		w.unlock()
		return nil, err
	}
	return &wtx{w: w}, nil
}

// beginUnsynced is begin for a transaction whose commit need not wait for
// the disk (synchronous = NORMAL until it ends; then the connection's
// synchronous is set back to restore). It is for writes whose loss in a
// power cut is harmless (a prune step: the next sweep redoes it). The WAL
// is written in order, so the next synced commit, or the next checkpoint,
// makes this one durable too; until then a power cut may lose it and
// nothing after it.
func (w *writer) beginUnsynced(ctx context.Context, restore Synchronous) (*wtx, error) {
	if restore != SyncFull {
		return w.begin(ctx)
	}
	if err := w.lock(ctx); err != nil {
		return nil, err
	}
	t := &wtx{w: w, restore: restore}
	if _, err := w.conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
		t.done = true
		return nil, errors.Join(err, t.release())
	}
	if _, err := w.st.Exec(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.done = true
		return nil, errors.Join(err, t.release())
	}
	return t, nil
}

// wtx is a transaction on the writer. Its statements run on the writer's
// connection, which it holds.
type wtx struct {
	w    *writer
	done bool
	// restore, when set, is the synchronous the connection goes back to
	// when the transaction ends (see beginUnsynced).
	restore Synchronous
}

// release gives the writer back, first setting synchronous back to
// restore if the transaction changed it. If it cannot, the writer closes
// for good rather than commit later writes with less durability than was
// asked for.
func (t *wtx) release() error {
	defer t.w.unlock()
	if t.restore == "" {
		return nil
	}
	if _, err := t.w.conn.ExecContext(context.Background(), `PRAGMA synchronous = `+string(t.restore)); err != nil {
		t.w.breakOff()
		return fmt.Errorf("synchronous = %s: %w; the writer is closed", t.restore, err)
	}
	return nil
}

func (t *wtx) ex() driver.Executor { return t.w.st }

func (t *wtx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return t.ex().Exec(ctx, query, args...)
}

func (t *wtx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	return t.ex().Query(ctx, query, args...)
}

func (t *wtx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return t.ex().QueryRow(ctx, query, args...)
}

// Commit commits and gives the writer back. A failed COMMIT is rolled back,
// so the connection is never left inside a transaction.
func (t *wtx) Commit() error {
	if t.done {
		return errors.New("sqlite: transaction already ended")
	}
	t.done = true
	// Not under a caller's context: a COMMIT cut short would leave the
	// outcome unknown for nothing.
	if _, err := t.w.st.Exec(context.Background(), `COMMIT`); err != nil {
		t.w.st.Exec(context.Background(), `ROLLBACK`)
		return errors.Join(fmt.Errorf("commit: %w", err), t.release())
	}
	return t.release()
}

// Rollback rolls back and gives the writer back; after Commit it does
// nothing.
func (t *wtx) Rollback() error {
	if t.done {
		return nil
	}
	t.done = true
	_, err := t.w.st.Exec(context.Background(), `ROLLBACK`)
	return errors.Join(err, t.release())
}

// breakOff closes the writer for good while its caller holds it: later
// statements fail with errClosed.
func (w *writer) breakOff() {
	w.closeOnce.Do(func() {
		close(w.closed)
		w.closeErr = errors.Join(w.st.close(), w.conn.Close())
	})
}
