// Package groupcommit gathers concurrent single-statement writes into
// batches that a driver commits in one transaction (one fsync, one WAL
// flush), answering each caller with its own result only after that commit.
//
// The gathering is natural: a committer takes the first write that
// arrives, then whatever else is already waiting (up to a maximum), and
// commits them; writes that arrive meanwhile form the next batch. Under
// load a batch grows to the number of callers that queued during the
// previous commit. The only wait is bounded and only for callers known to
// be coming (Config.Wait), and a write submitted while no other is in
// flight skips the committer altogether (Config.Alone): a lone caller waits
// for nobody.
//
// The drivers own the SQL and the transaction; this package owns only the
// queue, so that SQLite and PostgreSQL gather the same way.
package groupcommit

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/driver"
)

// ErrClosed is returned to a write submitted after Close.
var ErrClosed = errors.New("groupcommit: database closed")

// Scanner reads the one row a statement returned. Its Scan returns an error
// matching sql.ErrNoRows when there was none.
type Scanner interface{ Scan(dest ...any) error }

// Write is one statement of one caller. Exactly one of Row and Exec is set.
// Row and Exec receive the statement's outcome and return an error only
// when the statement failed; a legitimate "no row" or "0 rows" (a fenced
// write) is a result they record, not an error. A committer may call them
// more than once (a batch that failed is re-run one write at a time), so
// they overwrite what they record.
type Write struct {
	// Key orders the writes of a batch (the row they lock), so that two
	// batches on one row-locking database lock rows in the same order and
	// cannot deadlock.
	Key   string
	Query string
	Args  []any
	Row   func(Scanner) error
	Exec  func(rowsAffected int64) error

	ctx   context.Context
	done  chan error
	bytes int // of the byte slices and strings in Args

	mu   sync.Mutex // held while Row or Exec runs
	gone bool       // the submitter stopped waiting: its Row and Exec must not run
}

// Context is the submitter's context, for its values; a committer does not
// let it cancel statements of a shared transaction.
func (w *Write) Context() context.Context { return w.ctx }

// Answer tells the submitter the outcome of its write. Call it once, after
// the commit that holds the write (or after it certainly failed).
func (w *Write) Answer(err error) { w.done <- err }

// Cancelled reports whether the submitter gave up before the write ran;
// such a write must be answered (with its context's error) and skipped.
func (w *Write) Cancelled() error { return w.ctx.Err() }

// NoRowIsAnswer turns "no row" (sql.ErrNoRows) into nil, for the Row of a
// write that returns a row only when it acted (an INSERT … ON CONFLICT DO
// NOTHING RETURNING, a fenced UPDATE … RETURNING): no row is its answer,
// not a failed statement.
func NoRowIsAnswer(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// RunOn runs the write alone on ex (a pool: its own autocommit
// transaction; or a caller's transaction).
func (w *Write) RunOn(ctx context.Context, ex driver.Executor) error {
	if w.Row != nil {
		return w.Scan(ex.QueryRow(ctx, w.Query, w.Args...))
	}
	n, err := ex.Exec(ctx, w.Query, w.Args...)
	if err != nil {
		return err
	}
	return w.Affected(n)
}

// Scan hands the statement's row to w.Row. Committers call it rather
// than w.Row: once the submitter stopped waiting (its context ended after
// the write was sent), Row, which records into the submitter's variables,
// must not run, so the row is only read and dropped.
func (w *Write) Scan(row Scanner) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		row.Scan() // reads and closes the row; the destination count's error is nobody's
		return nil
	}
	return w.Row(row)
}

// Affected hands the statement's row count to w.Exec, unless the
// submitter stopped waiting (see Scan).
func (w *Write) Affected(n int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone {
		return nil
	}
	return w.Exec(n)
}

// abandon marks w as no longer waited for, after any Row or Exec under
// way has returned: none runs once abandon has.
func (w *Write) abandon() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
}

// Writer is the glue every driver shares between its writes and a Queue:
// it runs a write in the caller's transaction when given one, and gathers
// it into a group commit when given driver.Shared (or runs it alone on the
// pool when group commit is off).
type Writer struct {
	pool driver.Executor
	q    *Queue // nil: group commit off
}

// MaxBatch turns a configured batch size into the one in force: 0 means
// def, and 1 or less (-1) means group commit is off.
func MaxBatch(configured, def int) int {
	if configured == 0 {
		return def
	}
	return max(configured, 1)
}

// NewWriter starts group commit for a driver whose own connections are
// pool: batches of at most max writes go to the commit functions (see
// New). With max <= 1, or no commit functions, every write commits on its
// own. Lone writes run on pool in their caller's goroutine.
func NewWriter(pool driver.Executor, max int, wait time.Duration, commits ...func([]*Write)) *Writer {
	return NewWriterBounded(pool, max, 0, wait, commits...)
}

// NewWriterBounded is NewWriter whose batches also gather at most about
// maxBytes of arguments (Config.MaxBytes; 0: no bound), for a driver that
// copies a whole batch's arguments at once.
func NewWriterBounded(pool driver.Executor, max, maxBytes int, wait time.Duration, commits ...func([]*Write)) *Writer {
	wr := &Writer{pool: pool}
	if max > 1 && len(commits) > 0 {
		wr.q = New(Config{Max: max, MaxBytes: maxBytes, Wait: wait, Alone: func(ctx context.Context, w *Write) error {
			return w.RunOn(ctx, pool)
		}}, commits...)
	}
	return wr
}

// Write runs w inside the caller's transaction ex, or, when ex is
// driver.Shared, through group commit.
func (wr *Writer) Write(ctx context.Context, ex driver.Executor, w *Write) error {
	switch {
	case ex == nil:
		return errors.New("groupcommit: nil Executor (driver.Shared runs a write on the driver's own connections)")
	case ex != driver.Shared:
		return w.RunOn(ctx, ex)
	case wr.q == nil:
		return w.RunOn(ctx, wr.pool)
	}
	return wr.q.Do(ctx, w)
}

// Close waits for the batches in flight; later writes fail with ErrClosed.
func (wr *Writer) Close() {
	if wr.q != nil {
		wr.q.Close()
	}
}

// Queue hands writes to a fixed set of committers.
type Queue struct {
	reqs     chan *Write // unbuffered: a write is either taken or not sent
	max      int
	maxBytes int
	wait     time.Duration
	alone    func(context.Context, *Write) error
	// active counts the writes submitted and not yet answered.
	active atomic.Int64

	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

// Config shapes a Queue.
type Config struct {
	// Max is the most writes in one batch.
	Max int
	// MaxBytes bounds the bytes of arguments (byte slices and strings:
	// stored responses, step results) one batch gathers: a driver may copy
	// a whole batch's arguments at once (pgx encodes a pipeline into one
	// buffer), so large writes go in small batches. The write that crosses
	// it is the batch's last. 0 means no bound.
	MaxBytes int
	// Wait is the longest a committer holds a batch open for the callers
	// its previous batch answered, who come back with their next write
	// while it gathers: without it, a committer quicker than those callers
	// splits them into a few large batches and many small ones. A
	// committer waits only while its batch is smaller than its previous
	// one, so a lone caller never waits.
	Wait time.Duration
	// Alone runs a write on its own, as without group commit. A write
	// submitted while no other is in flight runs this way, in its caller's
	// goroutine: one caller at a time pays no hand-off to a committer.
	Alone func(context.Context, *Write) error
}

// New starts one goroutine per commit function, each calling its function
// with batches of at most cfg.Max writes. A commit function must answer
// every write of its batch; it is never called concurrently with itself.
func New(cfg Config, commits ...func(batch []*Write)) *Queue {
	q := &Queue{reqs: make(chan *Write), max: cfg.Max, maxBytes: cmp.Or(cfg.MaxBytes, math.MaxInt), wait: cfg.Wait, alone: cfg.Alone, stop: make(chan struct{})}
	for _, commit := range commits {
		q.wg.Add(1)
		go q.run(commit)
	}
	return q
}

// Do submits w and waits for its answer. If ctx ends before a committer
// took w, w was not run and Do returns ctx's error. If ctx ends after, the
// write may or may not commit; Do returns an error saying so rather than
// waiting.
func (q *Queue) Do(ctx context.Context, w *Write) error {
	defer q.active.Add(-1)
	if q.active.Add(1) == 1 && q.alone != nil {
		select {
		case <-q.stop:
			return ErrClosed
		default:
		}
		return q.alone(ctx, w)
	}
	w.ctx, w.done = ctx, make(chan error, 1)
	if q.maxBytes < math.MaxInt { // only a bounded queue counts (the claim path is hot)
		w.bytes = argBytes(w.Args)
	}
	select {
	case q.reqs <- w:
	case <-ctx.Done():
		return ctx.Err()
	case <-q.stop:
		return ErrClosed
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		// The committer may still run the write; it must no longer record
		// into the caller's variables, which the caller reads from now on.
		// (Its Args may still be read: the caller must not reuse them.)
		w.abandon()
		return fmt.Errorf("%w (the write was sent and may or may not commit)", ctx.Err())
	}
}

// Close stops taking writes and waits for the batches in flight.
func (q *Queue) Close() {
	q.stopOnce.Do(func() { close(q.stop) })
	q.wg.Wait()
}

func (q *Queue) run(commit func([]*Write)) {
	defer q.wg.Done()
	last := 0 // size of the previous batch
	var timer *time.Timer
	for {
		var (
			batch []*Write
			size  int // bytes of the batch's arguments
		)
		take := func(w *Write) {
			batch = append(batch, w)
			size += w.bytes
		}
		select {
		case <-q.stop:
			return
		case w := <-q.reqs:
			take(w)
		}
	gather:
		for len(batch) < q.max && size < q.maxBytes {
			select {
			case w := <-q.reqs:
				take(w)
			default:
				break gather
			}
		}
		if want := min(last, q.max); len(batch) < want && q.wait > 0 {
			if timer == nil {
				timer = time.NewTimer(q.wait)
			} else {
				timer.Reset(q.wait)
			}
		wait:
			for len(batch) < want && size < q.maxBytes {
				select {
				case w := <-q.reqs:
					take(w)
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		last = len(batch)
		commit(batch)
	}
}

// argBytes is the size of the byte slices and strings among args.
func argBytes(args []any) int {
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			n += len(v)
		case string:
			n += len(v)
		}
	}
	return n
}

// Live answers the writes whose submitters gave up before they ran (they
// were never applied) and returns the others, in order.
func Live(batch []*Write) []*Write {
	live := batch[:0:0]
	for _, w := range batch {
		if err := w.Cancelled(); err != nil {
			w.Answer(err)
			continue
		}
		live = append(live, w)
	}
	return live
}
