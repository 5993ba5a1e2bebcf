package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/jackc/pgx/v5"
)

// jobChannel is the LISTEN/NOTIFY channel; the payload is a queue name.
const jobChannel = "idem_jobs"

var jobColNames = []string{"id", "queue", "kind", "args", "state", "priority", "attempt", "max_attempts", "lease_id", "lease_until",
	"worker", "run_at", "unique_key", "errors", "result", "created_at", "updated_at", "attempted_at", "finalized_at",
	"metadata", "partition_key"}

// jobCols lists the job columns, each prefixed with p (e.g. "j.").
func jobCols(p string) string {
	return p + strings.Join(jobColNames, ", "+p)
}

// epochMS is the clock in Unix milliseconds, as the errors column stores it.
const epochMS = `(extract(epoch FROM c.now) * 1000)::bigint`

// appendError appends one entry (error text expr) to j.errors.
func appendError(expr string) string {
	return `j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', ` + epochMS + `, 'error', ` + expr + `))`
}

// scanJob reads jobCols followed by the clock.
func scanJob(s scanner) (idemtype.JobRow, error) {
	var (
		j                                    idemtype.JobRow
		state                                string
		errs                                 []byte
		key, part                            sql.NullString
		leaseUntil, attemptedAt, finalizedAt sql.NullTime
	)
	err := s.Scan(&j.ID, &j.Queue, &j.Kind, &j.Args, &state, &j.Priority, &j.Attempt, &j.MaxAttempts, &j.LeaseID, &leaseUntil,
		&j.ClaimedBy, &j.RunAt, &key, &errs, &j.Result, &j.CreatedAt, &j.UpdatedAt, &attemptedAt, &finalizedAt,
		&j.Metadata, &part, &j.Now)
	if err != nil {
		return j, err
	}
	j.State = idemtype.JobState(state)
	j.UniqueKey, j.PartitionKey = key.String, part.String
	j.LeaseUntil, j.AttemptedAt, j.FinalizedAt = leaseUntil.Time, attemptedAt.Time, finalizedAt.Time
	if j.Errors, err = driver.DecodeJobErrors(errs); err != nil {
		return j, err
	}
	return j, nil
}

func scanJobs(rows driver.Rows) ([]idemtype.JobRow, error) {
	return driver.ScanAll(rows, func(r driver.Row) (idemtype.JobRow, error) { return scanJob(r) })
}

// claimColNames are the columns a claim returns: those of jobColNames
// whose values the claim did not just set itself (scanClaimed fills those
// in).
var claimColNames = []string{"id", "kind", "args", "priority", "attempt", "max_attempts", "run_at", "unique_key", "errors", "result",
	"created_at", "metadata", "partition_key"}

// claimCols lists claimColNames, each prefixed with p.
func claimCols(p string) string {
	return p + strings.Join(claimColNames, ", "+p)
}

// scanClaimed reads the rows of claimCols, followed by the clock, that
// claim p returned, filling in what the claim set: every job is p's,
// running, leased until the clock plus p.Lease (in whole milliseconds, as
// the statement adds it).
func scanClaimed(rows driver.Rows, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	lease := time.Duration(p.Lease.Milliseconds()) * time.Millisecond
	return driver.ScanAll(rows, func(r driver.Row) (idemtype.JobRow, error) {
		var (
			j         idemtype.JobRow
			errs      []byte
			key, part sql.NullString
		)
		err := r.Scan(&j.ID, &j.Kind, &j.Args, &j.Priority, &j.Attempt, &j.MaxAttempts, &j.RunAt, &key, &errs, &j.Result,
			&j.CreatedAt, &j.Metadata, &part, &j.Now)
		if err != nil {
			return j, err
		}
		j.Queue, j.State, j.LeaseID, j.ClaimedBy = p.Queue, idemtype.JobRunning, p.LeaseID, p.Worker
		j.LeaseUntil, j.AttemptedAt, j.UpdatedAt = j.Now.Add(lease), j.Now, j.Now
		j.UniqueKey, j.PartitionKey = key.String, part.String
		if j.Errors, err = driver.DecodeJobErrors(errs); err != nil {
			return j, err
		}
		return j, nil
	})
}

// own is ex, or the pool for driver.Shared.
func (d *Driver) own(ex driver.Executor) driver.Executor {
	if ex == driver.Shared {
		return d.ex
	}
	return ex
}

// EnqueueJobs inserts jobs in order; a taken unique key returns the
// existing job. Without q, a batch gets its own transaction.
func (d *Driver) EnqueueJobs(ctx context.Context, q driver.Executor, jobs []driver.JobInsert) ([]idemtype.JobRow, []bool, error) {
	if q != driver.Shared || len(jobs) == 1 {
		return d.enqueue(ctx, q, jobs) // one job: gathered into a group commit unless q is a caller's transaction
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, dup, err := d.enqueue(ctx, pgxExecutor{tx}, jobs)
	if err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	return rows, dup, nil
}

// enqueue inserts a batch in one statement; only the jobs whose unique key
// was taken are then read one by one.
func (d *Driver) enqueue(ctx context.Context, q driver.Executor, jobs []driver.JobInsert) ([]idemtype.JobRow, []bool, error) {
	if len(jobs) == 1 {
		row, dup, err := d.enqueueOne(ctx, q, jobs[0])
		if err != nil {
			return nil, nil, err
		}
		return []idemtype.JobRow{row}, []bool{dup}, nil
	}
	var (
		queues, kinds, keys []string
		metas, parts        []string
		args                [][]byte
		attempts, prios     []int32
		uniqueStates        []int32
		across              []bool
		runAtUS, delays     []int64
	)
	for _, j := range jobs {
		a := j.Args
		if a == nil {
			a = []byte{}
		}
		var us int64 // 0: now + delay
		if !j.RunAt.IsZero() {
			us = j.RunAt.UnixMicro()
		}
		queues, kinds, keys, args = append(queues, j.Queue), append(kinds, j.Kind), append(keys, j.UniqueKey), append(args, a)
		attempts, runAtUS, delays = append(attempts, int32(j.MaxAttempts)), append(runAtUS, us), append(delays, j.Delay.Milliseconds())
		prios, uniqueStates = append(prios, int32(j.Priority)), append(uniqueStates, int32(j.UniqueStates))
		metas, parts = append(metas, string(j.Metadata)), append(parts, j.PartitionKey)
		across = append(across, j.UniqueAcrossQueues)
	}
	// Rows are inserted in input order (ORDER BY v.ord), so their ids grow
	// in input order: the inserted rows, by id, are the non-duplicates in
	// order. Each match is checked all the same.
	rows, err := q.Query(ctx, clockCTE+`, v AS (
	SELECT * FROM unnest($2::text[], $3::text[], $4::bytea[], $5::int[], $6::bigint[], $7::bigint[], $8::text[], $9::smallint[], $10::text[], $11::text[], $12::smallint[], $13::bool[])
		WITH ORDINALITY AS v(queue, kind, args, max_attempts, run_at_us, delay_ms, unique_key, priority, metadata, partition_key, unique_states, unique_across, ord)),
ins AS (
	INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, unique_key, created_at, updated_at, priority, metadata, partition_key, unique_states, unique_across)
	SELECT v.queue, v.kind, v.args, 'available', v.max_attempts,
		CASE WHEN v.run_at_us = 0 THEN c.now + v.delay_ms`+msInterval+`
			ELSE timestamptz 'epoch' + v.run_at_us * interval '1 microsecond' END,
		nullif(v.unique_key, ''), c.now, c.now, v.priority, nullif(v.metadata, '')::jsonb, nullif(v.partition_key, ''), nullif(v.unique_states, 0), v.unique_across
	FROM v, c ORDER BY v.ord
	ON CONFLICT DO NOTHING
	RETURNING *)
SELECT `+jobCols("ins.")+`, c.now FROM ins, c ORDER BY ins.id`,
		d.clock(), queues, kinds, args, attempts, runAtUS, delays, keys, prios, metas, parts, uniqueStates, across)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	inserted, err := scanJobs(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	out := make([]idemtype.JobRow, len(jobs))
	dup := make([]bool, len(jobs))
	next := 0
	for i, j := range jobs {
		if next < len(inserted) && sameJob(inserted[next], j) {
			out[i] = inserted[next]
			next++
			continue
		}
		if j.UniqueKey == "" {
			return nil, nil, fmt.Errorf("postgres: enqueue: batch row %d came back out of order", i)
		}
		// The key was taken, before this batch or earlier in it.
		if out[i], dup[i], err = d.enqueueOne(ctx, q, j); err != nil {
			return nil, nil, err
		}
	}
	if next != len(inserted) {
		return nil, nil, fmt.Errorf("postgres: enqueue: %d inserted rows unmatched", len(inserted)-next)
	}
	return out, dup, nil
}

// sameJob reports whether row is the insert of j.
func sameJob(row idemtype.JobRow, j driver.JobInsert) bool {
	return row.Queue == j.Queue && row.Kind == j.Kind && row.UniqueKey == j.UniqueKey && bytes.Equal(row.Args, j.Args)
}

// maxEnqueueTries bounds the insert-or-read loop. A retry means the row
// holding the key was pruned between the two steps, or the caller's
// transaction runs above READ COMMITTED and cannot see the row a
// concurrent transaction committed.
const maxEnqueueTries = 3

// enqueueOne inserts, or reads the job holding the unique key. The read is
// its own statement: at READ COMMITTED it sees a row that a concurrent
// inserter committed while the insert waited for it.
func (d *Driver) enqueueOne(ctx context.Context, q driver.Executor, j driver.JobInsert) (idemtype.JobRow, bool, error) {
	var runAt any
	if !j.RunAt.IsZero() {
		runAt = j.RunAt
	}
	args := j.Args
	if args == nil {
		args = []byte{}
	}
	for range maxEnqueueTries {
		var (
			row      idemtype.JobRow
			inserted bool
		)
		err := d.write(ctx, q, &groupcommit.Write{
			Key: driver.UniqueScope(j) + j.UniqueKey,
			Query: clockCTE + `, ins AS (
	INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, unique_key, created_at, updated_at, priority, metadata, partition_key, unique_states, unique_across)
	SELECT $2, $3, $4, 'available', $5, coalesce($6::timestamptz, c.now + $7` + msInterval + `), $8::text, c.now, c.now, $9,
		$10::text::jsonb, $11::text, nullif($12::smallint, 0), $13 FROM c
	ON CONFLICT DO NOTHING
	RETURNING *)
SELECT ` + jobCols("ins.") + `, c.now FROM ins, c`,
			Args: []any{d.clock(), j.Queue, j.Kind, args, j.MaxAttempts, runAt, j.Delay.Milliseconds(), driver.NullIfEmpty(j.UniqueKey), int16(j.Priority),
				driver.NullIfEmpty(string(j.Metadata)), driver.NullIfEmpty(j.PartitionKey), int16(j.UniqueStates), j.UniqueAcrossQueues},
			Row: func(r groupcommit.Scanner) error {
				var err error
				row, err = scanJob(r)
				inserted = err == nil
				return groupcommit.NoRowIsAnswer(err)
			},
		})
		if err != nil {
			return row, false, fmt.Errorf("postgres: enqueue: %w", err)
		}
		if inserted {
			return row, false, nil
		}
		holder, args := `j.queue = $2 AND j.unique_key = $3 AND NOT j.unique_across`, []any{d.clock(), j.Queue, j.UniqueKey}
		if j.UniqueAcrossQueues {
			holder, args = `j.unique_key = $2 AND j.unique_across`, []any{d.clock(), j.UniqueKey}
		}
		row, err = scanJob(d.own(q).QueryRow(ctx, clockCTE+`SELECT `+jobCols("j.")+`, c.now FROM idem_jobs j, c WHERE `+holder, args...))
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return row, false, fmt.Errorf("postgres: enqueue: read existing job: %w", err)
		}
		return row, true, nil
	}
	return idemtype.JobRow{}, false, fmt.Errorf("postgres: enqueue: unique key %q (%s) is taken by a job this transaction cannot see (%d tries; is it above READ COMMITTED?)",
		j.UniqueKey, driver.UniqueScopeName(j), maxEnqueueTries)
}

// NotifyJobs sends one notice per queue; inside a transaction PostgreSQL
// delivers them at commit, and drops them on rollback.
func (d *Driver) NotifyJobs(ctx context.Context, q driver.Executor, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	if _, err := d.own(q).Exec(ctx, `SELECT pg_notify('`+jobChannel+`', q) FROM unnest($1::text[]) AS q`, queues); err != nil {
		return fmt.Errorf("postgres: notify: %w", err)
	}
	return nil
}

// ListenJobs holds one dedicated connection (not from the pool) in LISTEN
// until ctx ends or the connection fails. Behind a pooler in transaction
// mode (Options.TransactionPooling) a LISTEN would last one statement: it
// returns errors.ErrUnsupported, and workers poll.
func (d *Driver) ListenJobs(ctx context.Context, ready func(), wake func(string)) error {
	if d.txPooling {
		return fmt.Errorf("postgres: LISTEN through a pooler in transaction mode: %w", errors.ErrUnsupported)
	}
	conn, err := pgx.ConnectConfig(ctx, d.cc)
	if err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+jobChannel); err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("postgres: listen: %w", err)
		}
		wake(n.Payload)
	}
}

// ClaimJobs rescues expired jobs and claims due ones in one statement (one
// short implicit transaction). The candidate rows are locked with SKIP
// LOCKED in MATERIALIZED CTEs, evaluated exactly once: a subquery under
// IN could be re-run by the planner and lock more than its LIMIT.
func (d *Driver) ClaimJobs(ctx context.Context, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	if p.Concurrency > 0 || p.Rate > 0 {
		return d.claimLimited(ctx, p)
	}
	rows, err := d.ex.Query(ctx, claimJobsSQL, d.claimArgs(p)...)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim jobs: %w", err)
	}
	out, err := scanClaimed(rows, p)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim jobs: %w", err)
	}
	return out, nil
}

// expiredJobs selects (and locks) up to $3 jobs of queue $2 whose lease
// ended: the expired-lease scan every claim starts with.
const expiredJobs = `SELECT id FROM idem_jobs WHERE state = 'running' AND queue = $2 AND lease_until <= ` + clockNow + `
	ORDER BY lease_until LIMIT $3 FOR UPDATE OF idem_jobs SKIP LOCKED`

// jobByID is the condition that joins idem_jobs j to the rows of a CTE
// whose column ref holds job ids, for a write that picked (and locked)
// those jobs first. It looks up each job by primary key, whatever the
// statistics say: j.id = ANY(ARRAY[ref]) can be an index condition per row
// of the CTE but not a hash or merge join's, so the plan is a loop over
// the CTE's rows with one primary-key lookup each. Two other forms read
// the whole table:
//   - joined on j.id = ref, with statistics that say the table is nearly
//     empty (taken after a queue was drained and pruned), the plan scanned
//     the whole primary key and read the CTE once per row (a claim from a
//     queue of 29,000 jobs took 1.6 s; TestWritesReadOnlyTheRowsTheyPicked);
//   - as j.id = ANY(ARRAY(SELECT id FROM the CTE)), a generic plan made
//     while the table was empty (a new database) scanned the whole table
//     on every claim until the next analyze: an empty table is planned as
//     ten pages, cheaper to read than ten index lookups (River's steady
//     workload: enqueue-to-run p99 8 ms before, 50-70 ms with it;
//     TestWritesPlannedOnEmptyTablesReadOnlyTheirRows).
func jobByID(ref string) string { return `j.id = ANY(ARRAY[` + ref + `])` }

// rescueExpired makes the jobs of the CTE expired available again, or
// dead after their last attempt.
var rescueExpired = `UPDATE idem_jobs j SET
		state = CASE WHEN j.attempt < j.max_attempts THEN 'available' ELSE 'dead' END,
		finalized_at = CASE WHEN j.attempt < j.max_attempts THEN NULL ELSE c.now END,
		run_at = c.now, lease_until = NULL, updated_at = c.now,
		errors = ` + appendError(`'lease expired: worker ' || j.worker || ' stopped heartbeating'`) + `
	FROM c, expired WHERE ` + jobByID("expired.id")

// claimJobsSQL is ClaimJobs' statement; its arguments are claimArgs.
var claimJobsSQL = clockCTE + `,
expired AS MATERIALIZED (` + expiredJobs + `),
rescued AS (` + rescueExpired + `
	RETURNING j.id),
due AS MATERIALIZED (
	SELECT id FROM idem_jobs WHERE state = 'available' AND queue = $2 AND run_at <= ` + clockNow + `
		AND NOT EXISTS (SELECT 1 FROM idem_job_queues p WHERE p.queue = $2 AND p.paused_at IS NOT NULL)
	ORDER BY priority, run_at, id LIMIT $4 FOR UPDATE OF idem_jobs SKIP LOCKED),
` + claimDue("$5", "$6", "$7")

// claimDue ends a claim: it makes the jobs of the CTE due running under
// lease id leaseID, for lease ms, by worker (each a parameter), reading
// them by primary key (jobByID), and returns them in claim order with the
// clock.
func claimDue(leaseID, lease, worker string) string {
	return `claimed AS (
	UPDATE idem_jobs j SET state = 'running', attempt = j.attempt + 1, lease_id = ` + leaseID + `,
		lease_until = c.now + ` + lease + msInterval + `, worker = ` + worker + `, attempted_at = c.now, updated_at = c.now
	FROM c, due WHERE ` + jobByID("due.id") + `
	RETURNING ` + claimCols("j.") + `)
SELECT ` + claimCols("claimed.") + `, c.now FROM claimed, c ORDER BY claimed.priority, claimed.run_at, claimed.id`
}

func (d *Driver) claimArgs(p driver.ClaimJobsParams) []any {
	return []any{d.clock(), p.Queue, p.RescueLimit, p.Limit, p.LeaseID, p.Lease.Milliseconds(), p.Worker}
}

// jobFenced is the predicate of every write a job's holder makes ($2…$4).
const jobFenced = `j.id = $2 AND j.attempt = $3 AND j.lease_id = $4 AND j.state = ` + heldJob + ` AND j.lease_until > c.now`

// heartbeatJobSQL extends the lease of the claim jobFenced names by $5 ms.
const heartbeatJobSQL = clockCTE + `UPDATE idem_jobs j SET lease_until = c.now + $5` + msInterval + `, updated_at = c.now
	FROM c WHERE ` + jobFenced + ` RETURNING j.lease_until`

// HeartbeatJob extends a held lease.
func (d *Driver) HeartbeatJob(ctx context.Context, f driver.JobFence, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := d.ex.QueryRow(ctx, heartbeatJobSQL, d.clock(), f.ID, f.Attempt, f.LeaseID, lease.Milliseconds()).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, driver.ErrFenced
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("postgres: heartbeat job: %w", err)
	}
	return until, nil
}

// jobFinishSet is the SET clause that ends a claim, for a row v of (state,
// delay_ms, result, error, snooze).
var jobFinishSet = `state = v.state, lease_until = NULL, updated_at = c.now,
	run_at = CASE WHEN v.state = 'available' THEN c.now + v.delay_ms` + msInterval + ` ELSE j.run_at END,
	finalized_at = CASE WHEN v.state IN ('completed', 'dead') THEN c.now END,
	result = CASE WHEN v.state = 'completed' THEN v.result ELSE j.result END,
	max_attempts = j.max_attempts + CASE WHEN v.snooze THEN 1 ELSE 0 END,
	errors = CASE WHEN v.error = '' THEN j.errors ELSE ` + appendError(`v.error`) + ` END`

// FinishJob ends a held claim, in the caller's transaction when q is not
// nil; there the row stays locked until that transaction ends, so nobody
// can take the job between the fenced write and the commit.
func (d *Driver) FinishJob(ctx context.Context, q driver.Executor, p driver.FinishJobParams) error {
	n, err := d.own(q).Exec(ctx, clockCTE+`, v AS (SELECT $5::text AS state, $6::bigint AS delay_ms, $7::bytea AS result, $8::text AS error, $9::bool AS snooze)
	UPDATE idem_jobs j SET `+jobFinishSet+` FROM c, v WHERE `+jobFenced,
		d.clock(), p.ID, p.Attempt, p.LeaseID, string(p.State), p.Delay.Milliseconds(), p.Result, p.Error, p.Snooze)
	if err != nil {
		return fmt.Errorf("postgres: finish job: %w", err)
	}
	if n == 0 {
		return driver.ErrFenced
	}
	return nil
}

// FinishJobs ends many claims, each row fenced on its own: the plain
// completions (FinishJobParams.Plain) in one statement, the other ends in
// another, sent as one pipeline (one implicit transaction).
func (d *Driver) FinishJobs(ctx context.Context, ps []driver.FinishJobParams) ([]bool, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	n := d.queueEnds(b, ps)
	br := d.pool.SendBatch(ctx, b)
	held, err := readEnds(br, n, len(ps))
	if err := errors.Join(err, br.Close()); err != nil {
		return nil, fmt.Errorf("postgres: finish jobs: %w", unknownOutcome(err))
	}
	return fencedEnds(ps, held), nil
}

// FinishAndClaimJobs ends the claims ps and claims up to p.Limit jobs of
// p.Queue in one round trip and one commit: FinishJobs' statements and
// ClaimJobs' statement sent as one pipeline, which PostgreSQL runs as one
// implicit transaction (one WAL flush instead of two). The claim sees
// the finish (READ COMMITTED: a snapshot per statement), so a job the
// finish made available again without delay may be claimed at once. A
// limited queue (p.Concurrency, p.Rate) is claimed by ClaimJobs after
// FinishJobs, in two transactions.
func (d *Driver) FinishAndClaimJobs(ctx context.Context, ps []driver.FinishJobParams, p driver.ClaimJobsParams) ([]bool, []idemtype.JobRow, error) {
	if p.Concurrency > 0 || p.Rate > 0 || len(ps) == 0 {
		var fenced []bool
		if len(ps) > 0 {
			var err error
			if fenced, err = d.FinishJobs(ctx, ps); err != nil {
				return nil, nil, err
			}
		}
		rows, err := d.ClaimJobs(ctx, p)
		return fenced, rows, err
	}
	b := &pgx.Batch{}
	n := d.queueEnds(b, ps)
	b.Queue(claimJobsSQL, d.claimArgs(p)...)
	br := d.pool.SendBatch(ctx, b)
	held, ferr := readEnds(br, n, len(ps))
	claimed, cerr := batchRows(br, func(rows driver.Rows) ([]idemtype.JobRow, error) { return scanClaimed(rows, p) })
	if err := errors.Join(ferr, cerr, br.Close()); err != nil {
		return nil, nil, fmt.Errorf("postgres: finish and claim jobs: %w", unknownOutcome(err))
	}
	return fencedEnds(ps, held), claimed, nil
}

// batchRows reads the next result of a pipeline with scan.
func batchRows[T any](br pgx.BatchResults, scan func(driver.Rows) (T, error)) (T, error) {
	rows, err := br.Query()
	if err != nil {
		var zero T
		return zero, err
	}
	return scan(pgxRows{rows})
}

// queueEnds queues the statements that end ps and returns how many: the
// plain completions (most ends) in completeJobsSQL, the rest in
// finishJobsSQL, whose CASE per column made a row's update cost about
// twice the plain statement's (auto_explain, 50-row batches: 23 µs a row
// of server time, against 11 for the same UPDATE without the choices).
func (d *Driver) queueEnds(b *pgx.Batch, ps []driver.FinishJobParams) int {
	ids, leases := make([]int64, 0, len(ps)), make([]int64, 0, len(ps))
	attempts := make([]int32, 0, len(ps))
	var rest []driver.FinishJobParams
	for _, p := range ps {
		if p.Plain() {
			ids, attempts, leases = append(ids, p.ID), append(attempts, int32(p.Attempt)), append(leases, p.LeaseID)
			continue
		}
		rest = append(rest, p)
	}
	n := 0
	if len(ids) > 0 {
		b.Queue(completeJobsSQL, d.clock(), ids, attempts, leases)
		n++
	}
	if len(rest) > 0 {
		b.Queue(finishJobsSQL, d.finishArgs(rest)...)
		n++
	}
	return n
}

// readEnds reads the results of queueEnds' n statements: the claims they
// ended, by fence. A claim is known by its whole fence, not its job's id
// alone: a batch may end the same job twice, once for a stale holder
// (fenced) and once for the current one.
func readEnds(br pgx.BatchResults, n, size int) (map[driver.JobFence]bool, error) {
	held := make(map[driver.JobFence]bool, size)
	var errs []error
	for range n {
		rows, err := br.Query()
		if err == nil {
			err = scanHeld(pgxRows{rows}, held)
		}
		errs = append(errs, err)
	}
	return held, errors.Join(errs...)
}

// scanHeld adds the claims an ending statement's rows (id, attempt,
// lease_id) report ended to held, and closes rows.
func scanHeld(rows driver.Rows, held map[driver.JobFence]bool) error {
	defer rows.Close()
	for rows.Next() {
		var f driver.JobFence
		var attempt int32
		if err := rows.Scan(&f.ID, &attempt, &f.LeaseID); err != nil {
			return err
		}
		f.Attempt = int(attempt)
		held[f] = true
	}
	return rows.Err()
}

// fencedEnds reports which of ps were fenced: not among the claims that
// ended.
func fencedEnds(ps []driver.FinishJobParams, held map[driver.JobFence]bool) []bool {
	fenced := make([]bool, len(ps))
	for i, p := range ps {
		fenced[i] = !held[p.JobFence]
	}
	return fenced
}

// jobsFenced is jobFenced for a batch: each row of v (see endsCTE) names
// a claim. Every condition joins j to v, none is j's alone, and none a
// hash or merge join can use, so the plan is a loop over v with one
// primary-key lookup per row (jobByID), whatever the statistics say:
// written with =, and with the state and the clock compared with j's
// columns alone, a plan made while idem_jobs was empty read the whole
// table by a sequential scan for each batch (a hash join, or a scan kept
// in memory across v's rows) until the table's next analyze.
var jobsFenced = jobByID("v.id") + ` AND (j.attempt, j.lease_id, j.state) IS NOT DISTINCT FROM (v.attempt, v.lease_id, v.held) AND j.lease_until > v.now`

// endsCTE is the CTE v of a batch of ends: the arrays given unnested into
// rows of the columns given, each row with the state its claim must hold
// (held, heldJob) and the clock (now) besides, for jobsFenced.
func endsCTE(arrays, columns string) string {
	return `, v AS MATERIALIZED (SELECT *, ` + heldJob + ` AS held, ` + clockNow + ` AS now FROM unnest(` + arrays + `) AS v(` + columns + `))`
}

// completeJobsSQL is queueEnds' statement for plain completions; $2, $3
// and $4 are their ids, attempts and lease ids. It sets what
// finishJobsSQL sets for a completion without a result.
var completeJobsSQL = clockCTE + endsCTE(`$2::bigint[], $3::int[], $4::bigint[]`, `id, attempt, lease_id`) + `
	UPDATE idem_jobs j SET state = 'completed', lease_until = NULL, updated_at = c.now, finalized_at = c.now, result = NULL
	FROM c, v
	WHERE ` + jobsFenced + `
	RETURNING j.id, v.attempt, v.lease_id`

// finishJobsSQL is queueEnds' statement for the ends that are not plain
// completions; its arguments are finishArgs.
var finishJobsSQL = clockCTE + endsCTE(`$2::bigint[], $3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::bytea[], $8::text[], $9::bool[]`,
	`id, attempt, lease_id, state, delay_ms, result, error, snooze`) + `
	UPDATE idem_jobs j SET ` + jobFinishSet + ` FROM c, v
	WHERE ` + jobsFenced + `
	RETURNING j.id, v.attempt, v.lease_id`

func (d *Driver) finishArgs(ps []driver.FinishJobParams) []any {
	var (
		ids, leases, delays []int64
		attempts            []int32
		states, errs        []string
		results             [][]byte
		snoozes             []bool
	)
	for _, p := range ps {
		ids, attempts, leases = append(ids, p.ID), append(attempts, int32(p.Attempt)), append(leases, p.LeaseID)
		states, delays = append(states, string(p.State)), append(delays, p.Delay.Milliseconds())
		results, errs, snoozes = append(results, p.Result), append(errs, p.Error), append(snoozes, p.Snooze)
	}
	return []any{d.clock(), ids, attempts, leases, states, delays, results, errs, snoozes}
}

// GetJob reads one job.
func (d *Driver) GetJob(ctx context.Context, id int64) (idemtype.JobRow, error) {
	j, err := scanJob(d.ex.QueryRow(ctx, clockCTE+`SELECT `+jobCols("j.")+`, c.now FROM idem_jobs j, c WHERE j.id = $2`, d.clock(), id))
	if errors.Is(err, sql.ErrNoRows) {
		return j, driver.ErrNotFound
	}
	if err != nil {
		return j, fmt.Errorf("postgres: get job: %w", err)
	}
	return j, nil
}

// ListJobs returns jobs matching f, by id. Only the filters given become
// predicates, so the partial indexes apply.
func (d *Driver) ListJobs(ctx context.Context, f driver.JobFilter) ([]idemtype.JobRow, error) {
	args := []any{d.clock(), f.AfterID}
	where := []string{"j.id > $2"}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.Queue != "" {
		add("j.queue = $?", f.Queue)
	}
	if f.State != "" {
		add("j.state = $?", string(f.State))
	}
	if f.Kind != "" {
		add("j.kind = $?", f.Kind)
	}
	if f.KeyPrefix != "" {
		add("left(j.unique_key, char_length($?)) = $?", f.KeyPrefix)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	rows, err := d.ex.Query(ctx, clockCTE+`SELECT `+jobCols("j.")+`, c.now FROM idem_jobs j, c WHERE `+
		strings.Join(where, " AND ")+` ORDER BY j.id LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list jobs: %w", err)
	}
	out, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list jobs: %w", err)
	}
	return out, nil
}

// CountJobs counts a queue's jobs by state.
func (d *Driver) CountJobs(ctx context.Context, queue string) (map[idemtype.JobState]int, error) {
	rows, err := d.ex.Query(ctx, `SELECT state, count(*) FROM idem_jobs WHERE $1 = '' OR queue = $1 GROUP BY state`, queue)
	if err != nil {
		return nil, fmt.Errorf("postgres: count jobs: %w", err)
	}
	out, err := driver.ScanJobCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: count jobs: %w", err)
	}
	return out, nil
}

// RequeueJob makes a dead job available now.
func (d *Driver) RequeueJob(ctx context.Context, id int64, attempts int) (idemtype.JobRow, error) {
	j, err := scanJob(d.ex.QueryRow(ctx, clockCTE+`UPDATE idem_jobs j SET state = 'available', run_at = c.now,
	updated_at = c.now, finalized_at = NULL, max_attempts = j.attempt + $3
	FROM c WHERE j.id = $2 AND j.state = 'dead' RETURNING `+jobCols("j.")+`, c.now`, d.clock(), id, attempts))
	if errors.Is(err, sql.ErrNoRows) {
		return j, d.missingOrConflict(ctx, id)
	}
	if err != nil {
		return j, fmt.Errorf("postgres: requeue job: %w", err)
	}
	return j, nil
}

// cancelJobSQL cancels job $2 if it is available or running, returning it,
// the clock and the state it had. The UPDATE names the job by primary key
// besides joining the locked row: joined alone, with statistics that say
// the table is nearly empty, it read the whole primary key
// (TestWritesReadOnlyTheRowsTheyPicked).
var cancelJobSQL = clockCTE + `, old AS MATERIALIZED (
	SELECT id, state FROM idem_jobs WHERE id = $2 AND state IN ('available', 'running') FOR UPDATE)
UPDATE idem_jobs j SET state = 'cancelled', lease_until = NULL, finalized_at = c.now, updated_at = c.now
	FROM c, old WHERE j.id = $2 AND j.id = old.id RETURNING ` + jobCols("j.") + `, c.now, old.state`

// CancelJob makes an available or running job cancelled in one statement.
// A holder's CompleteTx keeps the row locked until its transaction ends;
// the FOR UPDATE waits for it and re-checks its predicate on the row as
// committed, so a job completed meanwhile is not cancelled.
func (d *Driver) CancelJob(ctx context.Context, id int64) (idemtype.JobRow, idemtype.JobState, error) {
	var from string
	j, err := scanJob(&withTail{row: d.ex.QueryRow(ctx, cancelJobSQL, d.clock(), id), tail: &from})
	if errors.Is(err, sql.ErrNoRows) {
		j, err = d.GetJob(ctx, id)
		switch {
		case err != nil:
			return j, "", err
		case j.State == idemtype.JobCancelled:
			return j, "", nil
		}
		return j, "", driver.ErrConflict
	}
	if err != nil {
		return j, "", fmt.Errorf("postgres: cancel job: %w", err)
	}
	return j, idemtype.JobState(from), nil
}

// withTail scans one more column after the ones scanJob reads.
type withTail struct {
	row  driver.Row
	tail any
}

func (w *withTail) Scan(dest ...any) error { return w.row.Scan(append(dest, w.tail)...) }

// DeleteJob deletes a job that is in one of states.
func (d *Driver) DeleteJob(ctx context.Context, id int64, states []idemtype.JobState) error {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	n, err := d.ex.Exec(ctx, `DELETE FROM idem_jobs WHERE id = $1 AND state = ANY($2::text[])`, id, names)
	if err != nil {
		return fmt.Errorf("postgres: delete job: %w", err)
	}
	if n == 0 {
		return d.missingOrConflict(ctx, id)
	}
	return nil
}

func (d *Driver) missingOrConflict(ctx context.Context, id int64) error {
	var one int
	err := d.ex.QueryRow(ctx, `SELECT 1 FROM idem_jobs WHERE id = $1`, id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return driver.ErrNotFound
	case err != nil:
		return fmt.Errorf("postgres: read job: %w", err)
	}
	return driver.ErrConflict
}

// PruneJobs deletes completed and cancelled jobs finalized at least olderThan ago,
// oldest first, skipping rows another transaction has locked. Bounded by
// clockNow and read in the order of idem_jobs_finalized, the scan reads
// only the rows it deletes whatever the statistics say (see pruneSQL).
func (d *Driver) PruneJobs(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := d.ex.Exec(ctx, pruneJobsSQL, d.clock(), olderThan.Milliseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: prune jobs: %w", err)
	}
	return int(n), nil
}

// pruneJobsSQL deletes at most $3 jobs finalized at least $2 ms ago.
// It looks up by primary key each job it picked (jobByID): as a
// semi-join, with statistics that say the table is nearly empty, the whole
// table was read for each batch.
var pruneJobsSQL = `WITH p AS MATERIALIZED (SELECT id FROM idem_jobs
	WHERE state IN ('completed', 'cancelled') AND finalized_at <= ` + clockNow + ` - $2` + msInterval + `
	ORDER BY finalized_at LIMIT $3 FOR UPDATE OF idem_jobs SKIP LOCKED)
DELETE FROM idem_jobs j USING p WHERE ` + jobByID("p.id")
