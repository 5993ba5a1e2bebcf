package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// benchArgs is the job every jobs row enqueues and works: it does nothing,
// so the rows measure the queue.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

// jobsPerClaim is how many jobs the hand-written loop claims at a time.
const jobsPerClaim = 100

// jobRows: enqueue one job per call through jobs.Client against a
// hand-written INSERT; then workers claiming and completing pre-enqueued
// jobs through jobs.Client against a hand-written loop that claims 100 at a
// time (FOR UPDATE SKIP LOCKED on PostgreSQL, BEGIN IMMEDIATE on SQLite)
// and completes them in one statement. Both sides hold the same number of
// jobs at once: c loops of 100, or a client with 100·c workers.
func (r *runner) jobRows(ctx context.Context) ([]Result, error) {
	var out []Result
	for _, c := range r.o.Concurrency {
		res, err := r.enqueueRow(ctx, c)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	for _, c := range r.o.Concurrency {
		res, err := r.bulkRow(ctx, c)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	for _, c := range r.o.Concurrency {
		res, err := r.claimCompleteRow(ctx, c)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

func (r *runner) enqueueRow(ctx context.Context, c int) (Result, error) {
	idemL, idemQueue, done, err := r.openQueue(ctx)
	if err != nil {
		return Result{}, err
	}
	defer done()
	client, err := jobs.New(idemL, &jobs.Config{Logger: quiet, Queues: map[string]jobs.QueueConfig{idemQueue: {}}})
	if err != nil {
		return Result{}, err
	}
	opts := &jobs.EnqueueOpts{Queue: idemQueue}
	idemOp := one(func(ctx context.Context, w int, seq int64) error {
		res, err := client.Enqueue(ctx, benchArgs{N: int(seq)}, opts)
		if err == nil && res.Duplicate {
			err = fmt.Errorf("enqueue without a unique key was a duplicate: %w", errUnexpected)
		}
		return err
	})
	handL, handQueue, done, err := r.openQueue(ctx)
	if err != nil {
		return Result{}, err
	}
	defer done()
	handOp := handEnqueue(r.handDB(handL), handL.Driver().Name(), handQueue)
	return r.medianRun(func(int) (Result, error) {
		r.progress("jobs enqueue, %s: idem, hand-written SQL", callers(c))
		st, err := compare(ctx, c, r.o.Duration, side{name: "idem", op: idemOp}, side{name: "baseline", op: handOp})
		if err != nil {
			return Result{}, fmt.Errorf("enqueue, %s: %w", callers(c), err)
		}
		return newResult(GroupJobs, "jobs enqueue", "hand-written INSERT, a commit per job",
			r.db, c, r.o.Duration, st[0], st[1], true), nil
	})
}

// claimCompleteRow takes turns like compare, in 4 slices per side,
// each slice on a new queue filled before its clock starts: the
// hand-written loop on one database, a jobs.Client on another.
func (r *runner) claimCompleteRow(ctx context.Context, c int) (Result, error) {
	loop := "FOR UPDATE SKIP LOCKED"
	if r.db.driver == "sqlite" {
		loop = "BEGIN IMMEDIATE"
	}
	workers := min(c*jobsPerClaim, 10_000)
	handL, _, doneHand, err := r.openQueue(ctx)
	if err != nil {
		return Result{}, err
	}
	defer doneHand()
	idemL, _, doneIdem, err := r.openQueue(ctx)
	if err != nil {
		return Result{}, err
	}
	defer doneIdem()
	const rounds = 4 // each slice fills a queue and starts a client: keep them few
	slice, warm := r.o.Duration/rounds, warmup(r.o.Duration)
	total := (warm + slice).Seconds()
	return r.medianRun(func(int) (Result, error) {
		r.progress("jobs claim+complete, %d loops of %d: hand-written %s loop; idem, %d workers", c, jobsPerClaim, loop, workers)
		var hand, idemStat Stat
		for round := range rounds {
			for k := range 2 {
				if (k == 0) == (round%2 == 0) {
					queue := r.queueName()
					if err := prefill(ctx, r.handDB(handL), handL.Driver().Name(), queue, int(100_000*total)); err != nil {
						return Result{}, err
					}
					var (
						st  Stat
						err error
					)
					pprof.Do(ctx, pprof.Labels("side", "baseline"), func(ctx context.Context) {
						st, err = closedLoop(ctx, c, warm, slice, handClaimComplete100(r.handDB(handL), handL.Driver().Name(), queue))
					})
					r.dropQueue(handL, queue)
					if err != nil {
						return Result{}, fmt.Errorf("hand-written job loop: %w", err)
					}
					hand.add(st)
					continue
				}
				queue := r.queueName()
				// Enough jobs that the queue outlasts the slice at the loop's rate.
				n := max(20_000, int(1.5*max(hand.PerSec(), 20_000)*total))
				if err := prefill(ctx, idemL.DB(), idemL.Driver().Name(), queue, n); err != nil {
					return Result{}, err
				}
				// The client's goroutines (producer, finisher, workers)
				// start inside and carry the label.
				var (
					st  Stat
					err error
				)
				pprof.Do(ctx, pprof.Labels("side", "idem"), func(ctx context.Context) {
					st, err = r.workJobs(ctx, idemL, queue, workers, n, warm, slice)
				})
				r.dropQueue(idemL, queue)
				if err != nil {
					return Result{}, fmt.Errorf("idem jobs: %w", err)
				}
				idemStat.add(st)
			}
		}
		res := newResult(GroupJobs, "jobs claim+complete", fmt.Sprintf("hand-written %s loop, %d jobs a claim, one completing UPDATE a batch", loop, jobsPerClaim),
			r.db, c, r.o.Duration, idemStat, hand, false)
		res.Note = fmt.Sprintf("%d loops of %d jobs vs a jobs.Client with %d workers (default Config otherwise)", c, jobsPerClaim, workers)
		return res, nil
	})
}

func (r *runner) queueName() string { return strings.ReplaceAll(name("bench"), "_", "-") }

// dropQueue deletes a slice's jobs, so that the next slice's queue starts
// on a table of the same size.
func (r *runner) dropQueue(l *idem.Ledger, queue string) {
	l.Driver().DB().ExecContext(context.Background(), rebind(l, `DELETE FROM idem_jobs WHERE queue = ?`), queue)
}

// openQueue opens a ledger on a fresh database with a queue name of its
// own; done closes it (deleting the queue's jobs on a shared database).
func (r *runner) openQueue(ctx context.Context) (l *idem.Ledger, queue string, done func(), err error) {
	url, err := r.db.fresh(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if l, err = dburl.Open(ctx, url, &idem.Options{Logger: quiet}); err != nil {
		return nil, "", nil, err
	}
	queue = r.queueName()
	return l, queue, func() {
		if r.db.shared {
			r.dropQueue(l, queue)
		}
		l.Close()
	}, nil
}

// rebind writes '?' placeholders as the ledger's database wants them.
func rebind(l *idem.Ledger, q string) string {
	if l.Driver().Name() != "postgres" {
		return q
	}
	return postgres.Rebind(q)
}

// workJobs runs a client with workers on a queue holding n jobs and counts
// the handler calls that end inside the window (after the warm-up, until
// the duration or the queue runs dry).
func (r *runner) workJobs(ctx context.Context, l *idem.Ledger, queue string, workers, n int, warm, d time.Duration) (Stat, error) {
	var (
		from, until time.Time
		done, seen  atomic.Int64
		last        atomic.Int64 // unix ns of the latest counted call
	)
	drained := make(chan struct{})
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[benchArgs]) error {
		now := time.Now()
		if !now.Before(from) && now.Before(until) {
			done.Add(1)
			for t := now.UnixNano(); ; {
				old := last.Load()
				if old >= t || last.CompareAndSwap(old, t) {
					break
				}
			}
		}
		if seen.Add(1) == int64(n) {
			close(drained)
		}
		return nil
	}))
	client, err := jobs.New(l, &jobs.Config{Workers: ws, Logger: quiet,
		Queues: map[string]jobs.QueueConfig{queue: {MaxWorkers: workers}}})
	if err != nil {
		return Stat{}, err
	}
	cpu0, wall0 := processCPU(), time.Now()
	busy0, ticks0 := machineCPU()
	from = wall0.Add(warm)
	until = from.Add(d)
	if err := client.Start(ctx); err != nil {
		return Stat{}, err
	}
	select {
	case <-time.After(time.Until(until)):
	case <-drained:
	case <-ctx.Done():
	}
	cpu, wall := processCPU()-cpu0, time.Since(wall0)
	busy1, ticks1 := machineCPU()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return Stat{}, fmt.Errorf("stop: %w", err)
	}
	counts, err := client.Counts(ctx, queue)
	if err != nil {
		return Stat{}, err
	}
	if counts[idemtype.JobDead] > 0 || counts[idemtype.JobRunning] > 0 {
		return Stat{}, fmt.Errorf("after the run: %v: %w", counts, errUnexpected)
	}
	window := d
	if seen.Load() >= int64(n) {
		if lastAt := time.Unix(0, last.Load()); lastAt.Before(until) {
			window = max(lastAt.Sub(from), time.Millisecond)
		}
	}
	return Stat{Ops: done.Load(), Elapsed: window, CPU: cpu, Wall: wall, busy: busy1 - busy0, ticks: ticks1 - ticks0}, ctx.Err()
}

// The hand-written job SQL: what a careful programmer writes for a leased
// queue on the jobs table, without idem.
var handJobSQL = map[string]struct{ enqueue, prefill, claim, complete string }{
	"sqlite": {
		enqueue: `INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at)
	VALUES (?1, 'bench', ?2, 'available', 25, ?3, ?3, ?3) RETURNING id`,
		prefill: `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
	INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at)
	SELECT ?1, 'bench', CAST('{"n":0}' AS BLOB), 'available', 25, ?3, ?3, ?3 FROM n`,
		claim: `UPDATE idem_jobs SET state = 'running', attempt = attempt + 1, lease_id = ?2, lease_until = ?1 + 30000,
	worker = 'bench', attempted_at = ?1, updated_at = ?1
	WHERE id IN (SELECT id FROM idem_jobs WHERE state = 'available' AND queue = ?3 AND run_at <= ?1
		ORDER BY priority, run_at, id LIMIT ?4)
	RETURNING id`,
		complete: `UPDATE idem_jobs SET state = 'completed', lease_until = NULL, finalized_at = ?1, updated_at = ?1
	WHERE lease_id = ?2 AND state = 'running' AND lease_until > ?1 AND id IN (SELECT value FROM json_each(?3))`,
	},
	"postgres": {
		enqueue: `INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at)
	VALUES ($1, 'bench', $2, 'available', 25, now(), now(), now()) RETURNING id`,
		prefill: `INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at)
	SELECT $1, 'bench', convert_to('{"n":0}', 'UTF8'), 'available', 25, now(), now(), now() FROM generate_series(1, $2)`,
		// The locking SELECT in a MATERIALIZED CTE, run once: as an IN
		// subquery the planner may rerun it per row of the table (a plan
		// made while the queue was empty), and 8 loops then spun for
		// minutes on the lock manager, claiming nothing.
		claim: `WITH due AS MATERIALIZED (SELECT id FROM idem_jobs WHERE state = 'available' AND queue = $2 AND run_at <= now()
		ORDER BY priority, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)
	UPDATE idem_jobs j SET state = 'running', attempt = j.attempt + 1, lease_id = $1, lease_until = now() + interval '30 seconds',
	worker = 'bench', attempted_at = now(), updated_at = now()
	FROM due WHERE j.id = due.id
	RETURNING j.id`,
		complete: `UPDATE idem_jobs SET state = 'completed', lease_until = NULL, finalized_at = now(), updated_at = now()
	WHERE lease_id = $1 AND state = 'running' AND lease_until > now() AND id = ANY($2::bigint[])`,
	},
}

func handEnqueue(db *sql.DB, drv, queue string) opFunc {
	q := handJobSQL[drv].enqueue
	return one(func(ctx context.Context, w int, seq int64) error {
		args := []byte(`{"n":` + strconv.FormatInt(seq, 10) + `}`)
		var id int64
		if drv == "sqlite" {
			return db.QueryRowContext(ctx, q, queue, args, time.Now().UnixMilli()).Scan(&id)
		}
		return db.QueryRowContext(ctx, q, queue, args).Scan(&id)
	})
}

// prefill enqueues n jobs in one statement, before the clock starts.
func prefill(ctx context.Context, db *sql.DB, drv, queue string, n int) error {
	var err error
	if drv == "sqlite" {
		_, err = db.ExecContext(ctx, handJobSQL[drv].prefill, queue, n, time.Now().UnixMilli())
	} else {
		_, err = db.ExecContext(ctx, handJobSQL[drv].prefill, queue, n)
	}
	if err != nil {
		return fmt.Errorf("prefill %d jobs: %w", n, err)
	}
	return nil
}

// handClaimComplete100 is one round of the hand-written worker loop: claim
// up to 100 due jobs in one short transaction, run them (they do nothing),
// complete them all with one fenced UPDATE.
func handClaimComplete100(db *sql.DB, drv, queue string) opFunc {
	q := handJobSQL[drv]
	return func(ctx context.Context, w int, seq int64) (int, error) {
		leaseID := rand.Int64()
		ids, err := claimIDs(ctx, db, drv, q.claim, leaseID, queue)
		if err != nil {
			return 0, err
		}
		if len(ids) == 0 {
			return 0, errDrained // nobody else enqueues: the queue ran dry
		}
		var res sql.Result
		if drv == "sqlite" {
			list := make([]string, len(ids))
			for i, id := range ids {
				list[i] = strconv.FormatInt(id, 10)
			}
			res, err = db.ExecContext(ctx, q.complete, time.Now().UnixMilli(), leaseID, "["+strings.Join(list, ",")+"]")
		} else {
			res, err = db.ExecContext(ctx, q.complete, leaseID, ids)
		}
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || int(n) != len(ids) {
			return 0, fmt.Errorf("completed %d of %d claimed jobs (%v): %w", n, len(ids), err, errUnexpected)
		}
		return len(ids), nil
	}
}

func claimIDs(ctx context.Context, db *sql.DB, drv, q string, leaseID int64, queue string) ([]int64, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if drv == "sqlite" {
		// One short BEGIN IMMEDIATE transaction (the pool's _txlock), as a
		// careful SQLite worker claims.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback()
		if rows, err = tx.QueryContext(ctx, q, time.Now().UnixMilli(), leaseID, queue, jobsPerClaim); err != nil {
			return nil, err
		}
		ids, err := scanIDs(rows)
		if err != nil {
			return nil, err
		}
		return ids, tx.Commit()
	}
	if rows, err = db.QueryContext(ctx, q, leaseID, queue, jobsPerClaim); err != nil {
		return nil, err
	}
	return scanIDs(rows)
}

func scanIDs(rows *sql.Rows) ([]int64, error) {
	defer rows.Close()
	ids := make([]int64, 0, jobsPerClaim)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
