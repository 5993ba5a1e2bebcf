package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit on PostgreSQL: a few committers, each with a connection of
// its own (outside the pool), take batches of writes. A batch of one runs
// as one autocommit statement, as without group commit. A larger batch is
// sent as one pipeline (BEGIN, its statements, one Sync): one round trip
// for all of them; then, if every statement succeeded, COMMIT: one WAL
// flush for the batch. N callers cost two round trips and one flush
// instead of N of each.
//
// Nothing is committed before every statement of the batch has answered.
// If one failed (or the connection broke before COMMIT), the batch is
// rolled back and every write runs again on its own, from the pool, so the
// failure reaches only the caller whose statement it was. The writes of a
// batch are sorted by the row they lock, so two batches never deadlock, and
// a committer's connection gives up a lock wait after batchLockTimeout (its
// writes then run again on their own, where they may wait as long as they
// need): one caller waiting for another's transaction (ClaimTx) must not
// hold a whole batch hostage.
const (
	// DefaultMaxBatch is the most writes one pipeline carries.
	DefaultMaxBatch = 64
	// DefaultCommitters is how many batches may be in flight at once.
	// Measured on 2 cores: 2 beat 1 (one batch commits while the next
	// runs) and 4 or 8 (smaller batches, more commits, more server CPU).
	DefaultCommitters = 2
	// batchWait is the longest a batch waits for the callers of the
	// previous one to come back (see groupcommit.New).
	batchWait = 200 * time.Microsecond
	// maxBatchBytes bounds the arguments (stored responses) one batch
	// gathers: pgx encodes a whole pipeline into one buffer, a copy of
	// every body in it (and the buffer grows by doubling), so 64 writes of
	// 1 MiB would hold 64 MiB more than their callers do.
	maxBatchBytes = 4 << 20
	// batchLockTimeout bounds a lock wait inside a batch.
	batchLockTimeout = "50ms"
	// batchTimeout bounds one batch. Past it before COMMIT the batch is
	// rolled back and its writes run alone; past it during COMMIT the
	// outcome is unknown, its callers are told so, and the connection is
	// dropped.
	batchTimeout = 30 * time.Second
)

// startGroupCommit starts the committers unless max turns group commit
// off; lone writes run from the pool in their caller's goroutine.
func (d *Driver) startGroupCommit(max int) {
	if max <= 1 {
		d.gc = groupcommit.NewWriter(d.ex, max, batchWait)
		return
	}
	cc := d.cc.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["lock_timeout"] = batchLockTimeout
	cc.RuntimeParams["application_name"] = "idem group commit"
	commits := make([]func([]*groupcommit.Write), DefaultCommitters)
	for i := range commits {
		c := &committer{d: d, cc: cc}
		d.committers = append(d.committers, c)
		commits[i] = c.commit
	}
	d.gc = groupcommit.NewWriterBounded(d.ex, max, maxBatchBytes, batchWait, commits...)
}

// stopGroupCommit waits for the batches in flight and closes the
// committers' connections.
func (d *Driver) stopGroupCommit() {
	if d.gc == nil {
		return
	}
	d.gc.Close()
	for _, c := range d.committers {
		c.close()
	}
}

// committer owns one connection and sends one batch at a time on it.
type committer struct {
	d    *Driver
	cc   *pgx.ConnConfig
	conn *pgx.Conn // nil until needed, and after it broke
	// setLocal: the server refused lock_timeout as a startup parameter
	// (PgBouncer does), so each batch sets it with SET LOCAL, which lasts
	// its transaction on whatever server connection a pooler picks.
	setLocal bool
}

// connect opens the committer's connection with lock_timeout as a
// startup parameter, or, where a pooler refuses that, without it.
func (c *committer) connect(ctx context.Context) (*pgx.Conn, error) {
	if !c.setLocal {
		conn, err := pgx.ConnectConfig(ctx, c.cc)
		if err == nil || !strings.Contains(err.Error(), "unsupported startup parameter") {
			return conn, err
		}
		c.setLocal = true
	}
	cc := c.cc.Copy()
	delete(cc.RuntimeParams, "lock_timeout")
	return pgx.ConnectConfig(ctx, cc)
}

func (c *committer) close() {
	if c.conn != nil {
		c.conn.Close(context.Background())
		c.conn = nil
	}
}

func (c *committer) commit(batch []*groupcommit.Write) {
	batch = groupcommit.Live(batch)
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	if c.conn == nil {
		conn, err := c.connect(ctx)
		if err != nil {
			c.d.runAlone(batch) // nothing was sent: the pool may fare better
			return
		}
		c.conn = conn
	}
	var large []*groupcommit.Write
	if !c.setLocal {
		// Large writes go alone, after the others (see execLarge).
		small := batch[:0]
		for _, w := range batch {
			if isLarge(w) {
				large = append(large, w)
			} else {
				small = append(small, w)
			}
		}
		batch = small
	}
	switch {
	case len(batch) == 1 && !c.setLocal:
		c.commitOne(ctx, batch[0], false)
	case len(batch) > 0:
		c.commitBatch(ctx, batch)
	}
	for i, w := range large {
		if c.conn == nil { // a write before broke it
			c.d.runAlone(large[i:])
			return
		}
		c.commitOne(ctx, w, true)
	}
}

// commitBatch sends a batch of more than one write (or any batch, behind
// a pooler) as one pipeline on the committer's connection, then commits.
func (c *committer) commitBatch(ctx context.Context, batch []*groupcommit.Write) {
	slices.SortStableFunc(batch, func(a, b *groupcommit.Write) int { return strings.Compare(a.Key, b.Key) })

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	if c.setLocal {
		b.Queue("SET LOCAL lock_timeout = '" + batchLockTimeout + "'")
	}
	for _, w := range batch {
		b.Queue(w.Query, w.Args...)
	}
	br := c.conn.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil && c.setLocal {
		_, err = br.Exec()
	}
	for _, w := range batch {
		if err != nil {
			break // the rest did not run; the batch rolls back
		}
		err = runPiped(br, w)
	}
	err = errors.Join(err, br.Close())
	crashpoint.Hit(crashpoint.MidBatch)
	if err != nil {
		// Not committed: roll back (or drop a broken connection, which
		// rolls back too) and let every write run on its own.
		if _, rerr := c.conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			c.close()
		}
		c.d.runAlone(batch)
		return
	}
	if _, err := c.conn.Exec(ctx, "COMMIT"); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			c.close() // the connection broke: the commit may or may not have happened
		}
		err = fmt.Errorf("group commit of %d writes: %w; retry with the same key: %w", len(batch), driver.ErrOutcomeUnknown, err)
		for _, w := range batch {
			w.Answer(err)
		}
		return
	}
	for _, w := range batch {
		w.Answer(nil)
	}
}

// runPiped reads one write's result from a pipeline.
func runPiped(br pgx.BatchResults, w *groupcommit.Write) error {
	if w.Row != nil {
		return w.Scan(br.QueryRow())
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	return w.Affected(tag.RowsAffected())
}

// commitOne runs a lone write as one autocommit statement on the
// committer's connection, a large one (isLarge) by execLarge. A lock wait
// past batchLockTimeout hands it to the pool, where it may wait as long
// as it needs.
func (c *committer) commitOne(ctx context.Context, w *groupcommit.Write, large bool) {
	var err error
	switch {
	case w.Row != nil:
		err = w.Scan(c.conn.QueryRow(ctx, w.Query, w.Args...))
	case large:
		var n int64
		if n, err = execLarge(ctx, c.conn, w); err == nil {
			err = w.Affected(n)
		}
	default:
		var tag pgconn.CommandTag
		if tag, err = c.conn.Exec(ctx, w.Query, w.Args...); err == nil {
			err = w.Affected(tag.RowsAffected())
		}
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available: rolled back
		c.d.runAlone([]*groupcommit.Write{w})
		return
	case c.conn.IsClosed():
		c.close()
	}
	w.Answer(err)
}

// runAlone runs each write on its own from the pool, at once and side by
// side, under its caller's context: a write that waits for a lock delays
// nobody else. The committer does not wait for them.
func (d *Driver) runAlone(batch []*groupcommit.Write) {
	for _, w := range batch {
		go func() { w.Answer(w.RunOn(w.Context(), d.ex)) }()
	}
}

// write runs w through group commit (or on q), and marks an error after
// which w may have been applied (see unknownOutcome).
func (d *Driver) write(ctx context.Context, q driver.Executor, w *groupcommit.Write) error {
	d.writes.begin()
	defer d.writes.end()
	return unknownOutcome(d.gc.Write(ctx, q, w))
}

// liveWrites tracks the ledger's writes in this process (claims,
// completions, heartbeats): how many are in flight and when the last
// ended, so that a paced prune gives way to them (see PrunePaced).
type liveWrites struct {
	inFlight atomic.Int64
	ended    atomic.Int64 // Unix nanoseconds
}

func (lw *liveWrites) begin() { lw.inFlight.Add(1) }

func (lw *liveWrites) end() {
	lw.ended.Store(time.Now().UnixNano())
	lw.inFlight.Add(-1)
}

// idleFor is how long no write has been in flight: zero while one is.
func (lw *liveWrites) idleFor() time.Duration {
	if lw.inFlight.Load() > 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, lw.ended.Load())))
}

// unknownOutcome wraps err with driver.ErrOutcomeUnknown when the
// connection broke (a network error, EOF) at a point where pgx cannot
// promise that nothing was sent.
func unknownOutcome(err error) error {
	if err == nil || errors.Is(err, driver.ErrOutcomeUnknown) || pgconn.SafeToRetry(err) {
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %w", driver.ErrOutcomeUnknown, err)
	}
	return err
}
