package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
)

const jobCols = `id, queue, kind, args, state, priority, attempt, max_attempts, lease_id, lease_until, worker, run_at,
	unique_key, errors, result, created_at, updated_at, attempted_at, finalized_at, metadata, partition_key`

func scanJob(s scanner, now int64) (idemtype.JobRow, error) {
	return newJobScanner().scan(s, now)
}

func scanJobs(rows driver.Rows, now int64) ([]idemtype.JobRow, error) {
	js := newJobScanner()
	return driver.ScanAll(rows, func(r driver.Row) (idemtype.JobRow, error) { return js.scan(r, now) })
}

// jobScanner scans rows of jobCols. Its fields are the scan's targets, one
// allocation for all of them, reused from row to row.
type jobScanner struct {
	j                                    idemtype.JobRow
	state, errs                          string
	key, meta, part                      sql.NullString
	leaseUntil, attemptedAt, finalizedAt sql.NullInt64
	runAt, createdAt, updatedAt          int64
	dest                                 []any
}

func newJobScanner() *jobScanner {
	s := &jobScanner{}
	j := &s.j
	s.dest = []any{&j.ID, &j.Queue, &j.Kind, &j.Args, &s.state, &j.Priority, &j.Attempt, &j.MaxAttempts, &j.LeaseID, &s.leaseUntil,
		&j.ClaimedBy, &s.runAt, &s.key, &s.errs, &j.Result, &s.createdAt, &s.updatedAt, &s.attemptedAt, &s.finalizedAt, &s.meta, &s.part}
	return s
}

// claimCols are the columns a claim returns: those of jobCols whose values
// the claim did not just set itself (scanClaimed fills those in).
const claimCols = `id, kind, args, priority, attempt, max_attempts, run_at, unique_key, errors, result, created_at, metadata, partition_key`

// scanClaimed scans the rows of claimCols that a claim p returned with the
// clock now, filling in what the claim set: every job is p's, running,
// leased until now + p.Lease. Fewer columns than jobCols, fewer values for
// SQLite to buffer for RETURNING and for the driver to convert.
func scanClaimed(rows driver.Rows, now int64, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	s := &jobScanner{}
	j := &s.j
	s.dest = []any{&j.ID, &j.Kind, &j.Args, &j.Priority, &j.Attempt, &j.MaxAttempts, &s.runAt, &s.key, &s.errs, &j.Result,
		&s.createdAt, &s.meta, &s.part}
	at, until := fromMS(now), fromMS(now+ms(p.Lease))
	return driver.ScanAll(rows, func(r driver.Row) (idemtype.JobRow, error) {
		s.state, s.updatedAt = string(idemtype.JobRunning), now
		s.leaseUntil, s.attemptedAt, s.finalizedAt = sql.NullInt64{}, sql.NullInt64{}, sql.NullInt64{}
		j, err := s.scan(r, now)
		j.Queue, j.LeaseID, j.ClaimedBy = p.Queue, p.LeaseID, p.Worker
		j.LeaseUntil, j.AttemptedAt = until, at
		return j, err
	})
}

// noJobErrors is the errors column of a job that never failed.
const noJobErrors = "[]"

func (s *jobScanner) scan(r scanner, now int64) (idemtype.JobRow, error) {
	s.j = idemtype.JobRow{}
	err := r.Scan(s.dest...)
	j := s.j
	if err != nil {
		return j, err
	}
	j.State = idemtype.JobState(s.state)
	j.UniqueKey, j.PartitionKey = s.key.String, s.part.String
	if s.meta.Valid {
		j.Metadata = []byte(s.meta.String)
	}
	j.LeaseUntil, j.AttemptedAt, j.FinalizedAt = nullMS(s.leaseUntil), nullMS(s.attemptedAt), nullMS(s.finalizedAt)
	j.RunAt, j.CreatedAt, j.UpdatedAt = fromMS(s.runAt), fromMS(s.createdAt), fromMS(s.updatedAt)
	j.Now = fromMS(now)
	if s.errs == noJobErrors {
		j.Errors = []idemtype.JobError{} // as DecodeJobErrors has it, without the parse
		return j, nil
	}
	if j.Errors, err = driver.DecodeJobErrors([]byte(s.errs)); err != nil {
		return j, err
	}
	return j, nil
}

// appendError is the expression that appends one entry (error text
// expression) to the errors column; ?1 is the statement's clock.
func appendError(text string) string {
	return `json_insert(errors, '$[#]', json_object('attempt', attempt, 'at', ?1, 'error', ` + text + `))`
}

// EnqueueJobs inserts jobs in order; a taken unique key returns the
// existing job. Without q, a batch gets its own transaction.
func (d *Driver) EnqueueJobs(ctx context.Context, q driver.Executor, jobs []driver.JobInsert) ([]idemtype.JobRow, []bool, error) {
	if len(jobs) == 1 { // gathered into a group commit unless q is a caller's transaction
		row, dup, err := d.enqueueOne(ctx, q, jobs[0])
		if err != nil {
			return nil, nil, err
		}
		return []idemtype.JobRow{row}, []bool{dup}, nil
	}
	if q != driver.Shared {
		return d.enqueue(ctx, q, jobs)
	}
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	defer tx.Rollback()
	rows, dup, err := d.enqueue(ctx, tx, jobs)
	if err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	return rows, dup, nil
}

// onWriter is ex, or the writer for driver.Shared.
func (d *Driver) onWriter(ex driver.Executor) driver.Executor {
	if ex == driver.Shared {
		return d.w
	}
	return ex
}

func (d *Driver) enqueue(ctx context.Context, q driver.Executor, jobs []driver.JobInsert) ([]idemtype.JobRow, []bool, error) {
	rows := make([]idemtype.JobRow, len(jobs))
	dup := make([]bool, len(jobs))
	for i, j := range jobs {
		var err error
		rows[i], dup[i], err = d.enqueueOne(ctx, q, j)
		if err != nil {
			return nil, nil, err
		}
	}
	return rows, dup, nil
}

// maxEnqueueTries bounds the insert-or-read loop; each retry means the row
// holding the key was pruned between the two steps.
const maxEnqueueTries = 3

func (d *Driver) enqueueOne(ctx context.Context, q driver.Executor, j driver.JobInsert) (idemtype.JobRow, bool, error) {
	args := j.Args
	if args == nil {
		args = []byte{}
	}
	for range maxEnqueueTries {
		now := d.nowMS()
		runAt := now + ms(j.Delay)
		if !j.RunAt.IsZero() {
			runAt = j.RunAt.UnixMilli()
		}
		var (
			row      idemtype.JobRow
			inserted bool
		)
		err := d.gc.Write(ctx, q, &groupcommit.Write{
			Key: driver.UniqueScope(j) + j.UniqueKey,
			Query: `INSERT INTO idem_jobs
	(queue, kind, args, state, max_attempts, run_at, unique_key, created_at, updated_at, priority, metadata, partition_key, unique_states, unique_across)
	VALUES (?1, ?2, ?3, 'available', ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, nullif(?11, 0), ?12)
	ON CONFLICT DO NOTHING
	RETURNING ` + jobCols,
			Args: []any{j.Queue, j.Kind, args, j.MaxAttempts, runAt, driver.NullIfEmpty(j.UniqueKey), now, j.Priority,
				driver.NullIfEmpty(string(j.Metadata)), driver.NullIfEmpty(j.PartitionKey), j.UniqueStates, j.UniqueAcrossQueues},
			Row: func(r groupcommit.Scanner) error {
				var err error
				row, err = scanJob(r, now)
				inserted = err == nil
				return groupcommit.NoRowIsAnswer(err)
			},
		})
		if err != nil {
			return row, false, fmt.Errorf("sqlite: enqueue: %w", err)
		}
		if inserted {
			return row, false, nil
		}
		read := q
		if q == driver.Shared {
			read = d.r // after the insert's commit: it sees the row that took the key
		}
		holder, args := `queue = ? AND unique_key = ? AND unique_across = 0`, []any{j.Queue, j.UniqueKey}
		if j.UniqueAcrossQueues {
			holder, args = `unique_key = ? AND unique_across = 1`, []any{j.UniqueKey}
		}
		row, err = scanJob(read.QueryRow(ctx, `SELECT `+jobCols+` FROM idem_jobs WHERE `+holder, args...), now)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return row, false, fmt.Errorf("sqlite: enqueue: read existing job: %w", err)
		}
		return row, true, nil
	}
	return idemtype.JobRow{}, false, fmt.Errorf("sqlite: enqueue: unique key %q (%s) changed %d times; giving up", j.UniqueKey, driver.UniqueScopeName(j), maxEnqueueTries)
}

// NotifyJobs does nothing: SQLite workers poll.
func (d *Driver) NotifyJobs(ctx context.Context, q driver.Executor, queues []string) error {
	return nil
}

// ListenJobs returns errors.ErrUnsupported: SQLite workers poll.
func (d *Driver) ListenJobs(ctx context.Context, ready func(), wake func(string)) error {
	return errors.ErrUnsupported
}

// ClaimJobs claims due jobs, then rescues expired ones, in one BEGIN
// IMMEDIATE transaction on the writer connection. Claiming first keeps the
// PostgreSQL driver's behaviour, whose single statement cannot see its own
// rescues: a rescued job is claimable from the next claim on.
func (d *Driver) ClaimJobs(ctx context.Context, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim jobs: %w", err)
	}
	defer tx.Rollback()
	out, err := d.claimIn(ctx, tx, d.nowMS(), p) // the clock read after the write lock is held
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: claim jobs: %w", err)
	}
	return out, nil
}

// FinishAndClaimJobs is FinishJobs then ClaimJobs in one BEGIN IMMEDIATE
// transaction: one commit (one fsync) for both.
func (d *Driver) FinishAndClaimJobs(ctx context.Context, ends []driver.FinishJobParams, p driver.ClaimJobsParams) ([]bool, []idemtype.JobRow, error) {
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: finish and claim jobs: %w", err)
	}
	defer tx.Rollback()
	now := d.nowMS()
	fenced, err := d.finishIn(ctx, tx, now, ends)
	if err != nil {
		return nil, nil, err
	}
	out, err := d.claimIn(ctx, tx, now, p)
	if err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("sqlite: finish and claim jobs: %w", err)
	}
	return fenced, out, nil
}

// claimIn is ClaimJobs's work inside tx, with the clock now.
func (d *Driver) claimIn(ctx context.Context, tx *wtx, now int64, p driver.ClaimJobsParams) ([]idemtype.JobRow, error) {
	if p.Concurrency > 0 || p.Rate > 0 {
		return d.claimLimited(ctx, tx, now, p)
	}
	rows, err := tx.Query(ctx, `UPDATE idem_jobs SET state = 'running', attempt = attempt + 1,
	lease_id = ?2, lease_until = ?1 + ?3, worker = ?4, attempted_at = ?1, updated_at = ?1
	WHERE id IN (SELECT id FROM idem_jobs WHERE state = 'available' AND queue = ?5 AND run_at <= ?1
		AND NOT EXISTS (SELECT 1 FROM idem_job_queues p WHERE p.queue = ?5 AND p.paused_at IS NOT NULL)
		ORDER BY priority, run_at, id LIMIT ?6 + 0)
	RETURNING `+claimCols, now, p.LeaseID, ms(p.Lease), p.Worker, p.Queue, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim jobs: %w", err)
	}
	out, err := scanClaimed(rows, now, p)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim jobs: %w", err)
	}
	if p.RescueLimit > 0 {
		if _, err := tx.Exec(ctx, `UPDATE idem_jobs SET
	state = CASE WHEN attempt < max_attempts THEN 'available' ELSE 'dead' END,
	finalized_at = CASE WHEN attempt < max_attempts THEN NULL ELSE ?1 END,
	run_at = ?1, lease_until = NULL, updated_at = ?1,
	errors = `+appendError(`'lease expired: worker ' || worker || ' stopped heartbeating'`)+`
	WHERE id IN (SELECT id FROM idem_jobs WHERE state = 'running' AND queue = ?2 AND lease_until <= ?1
		ORDER BY lease_until LIMIT ?3 + 0)`, now, p.Queue, p.RescueLimit); err != nil {
			return nil, fmt.Errorf("sqlite: rescue jobs: %w", err)
		}
	}
	sortClaimed(out)
	return out, nil
}

var _ driver.JobFinishClaimer = (*Driver)(nil)

// sortClaimed puts claimed jobs in claim order (priority, run_at, id):
// RETURNING's order is unspecified.
func sortClaimed(out []idemtype.JobRow) {
	slices.SortFunc(out, func(a, b idemtype.JobRow) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// jobFenced is the predicate of every write a job's holder makes.
const jobFenced = `id = ?2 AND attempt = ?3 AND lease_id = ?4 AND state = 'running' AND lease_until > ?1`

// HeartbeatJob extends a held lease.
func (d *Driver) HeartbeatJob(ctx context.Context, f driver.JobFence, lease time.Duration) (time.Time, error) {
	now := d.nowMS()
	var until int64
	err := d.w.QueryRow(ctx, `UPDATE idem_jobs SET lease_until = ?1 + ?5, updated_at = ?1 WHERE `+jobFenced+`
	RETURNING lease_until`, now, f.ID, f.Attempt, f.LeaseID, ms(lease)).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, driver.ErrFenced
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: heartbeat job: %w", err)
	}
	return fromMS(until), nil
}

// finishJob is the fenced UPDATE that ends a claim.
var finishJob = `UPDATE idem_jobs SET ` + jobEndSet("?5", "?6", "?7", "?8", "?9") + ` WHERE ` + jobFenced

// jobEndSet is the SET list that ends a job's claim, for both finishJob and
// finishJobs; its arguments are the expressions of the end's state, delay
// (ms), result, error text and snooze (0 or 1). ?1 is the clock.
func jobEndSet(state, delay, result, errText, snooze string) string {
	return `state = ` + state + `, lease_until = NULL, updated_at = ?1,
	run_at = CASE WHEN ` + state + ` = 'available' THEN ?1 + ` + delay + ` ELSE run_at END,
	finalized_at = CASE WHEN ` + state + ` IN ('completed', 'dead') THEN ?1 END,
	result = CASE WHEN ` + state + ` = 'completed' THEN ` + result + ` ELSE result END,
	max_attempts = max_attempts + ` + snooze + `,
	errors = CASE WHEN ` + errText + ` = '' THEN errors ELSE ` + appendError(errText) + ` END`
}

func finishArgs(now int64, p driver.FinishJobParams) []any {
	snooze := 0
	if p.Snooze {
		snooze = 1
	}
	return []any{now, p.ID, p.Attempt, p.LeaseID, string(p.State), ms(p.Delay), p.Result, p.Error, snooze}
}

// FinishJob ends a held claim, in the caller's transaction when q is not nil.
func (d *Driver) FinishJob(ctx context.Context, q driver.Executor, p driver.FinishJobParams) error {
	n, err := d.onWriter(q).Exec(ctx, finishJob, finishArgs(d.nowMS(), p)...)
	if err != nil {
		return fmt.Errorf("sqlite: finish job: %w", err)
	}
	if n == 0 {
		return driver.ErrFenced
	}
	return nil
}

// FinishJobs ends many claims in one BEGIN IMMEDIATE transaction: one
// commit (one fsync) for the batch. The claims without a result (most:
// completions of jobs that set none, retries, releases) end in one
// statement, a primary-key lookup each; a claim with a result (a blob)
// gets a statement of its own in the same transaction.
func (d *Driver) FinishJobs(ctx context.Context, ps []driver.FinishJobParams) ([]bool, error) {
	tx, err := d.w.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
	}
	defer tx.Rollback()
	fenced, err := d.finishIn(ctx, tx, d.nowMS(), ps)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
	}
	return fenced, nil
}

// completeJobs is finishJob for a JSON list of plain completions, each
// [id, attempt, lease_id]: ?1 is the clock, ?2 the list.
const completeJobs = `UPDATE idem_jobs SET state = 'completed', lease_until = NULL, updated_at = ?1, finalized_at = ?1, result = NULL
	FROM (SELECT value ->> 0 AS jid, value ->> 1 AS jattempt, value ->> 2 AS jlease FROM json_each(?2)) AS v
	WHERE id = v.jid AND attempt = v.jattempt AND lease_id = v.jlease AND state = 'running' AND lease_until > ?1`

// notCompleted lists the positions in completeJobs' list ?2 whose job the
// statement did not complete (clock ?1): fenced out. Only asked when it
// completed fewer than all.
const notCompleted = `SELECT key FROM json_each(?2) WHERE NOT EXISTS (SELECT 1 FROM idem_jobs
	WHERE id = value ->> 0 AND attempt = value ->> 1 AND lease_id = value ->> 2 AND state = 'completed' AND finalized_at = ?1)`

// completeIn writes the plain completions ps[at[k]] in one statement, and
// marks those fenced out.
func (d *Driver) completeIn(ctx context.Context, tx *wtx, now int64, ps []driver.FinishJobParams, at []int, fenced []bool) error {
	list := make([]byte, 0, 48*len(at))
	list = append(list, '[')
	for k, i := range at {
		if k > 0 {
			list = append(list, ',')
		}
		list = append(list, '[')
		list = strconv.AppendInt(list, ps[i].ID, 10)
		list = append(list, ',')
		list = strconv.AppendInt(list, int64(ps[i].Attempt), 10)
		list = append(list, ',')
		list = strconv.AppendInt(list, ps[i].LeaseID, 10)
		list = append(list, ']')
	}
	list = append(list, ']')
	js := string(list)
	n, err := tx.Exec(ctx, completeJobs, now, js)
	if err != nil {
		return err
	}
	if int(n) == len(at) {
		return nil // each entry matches one row at most: all completed
	}
	rows, err := tx.Query(ctx, notCompleted, now, js)
	if err != nil {
		return err
	}
	missed, err := driver.ScanAll(rows, func(r driver.Row) (int, error) {
		var k int
		return k, r.Scan(&k)
	})
	if err != nil {
		return err
	}
	for _, k := range missed {
		fenced[at[k]] = true
	}
	return nil
}

// finishIn is FinishJobs's work inside tx, with the clock now. Plain
// completions (no result, the most common end) go in one statement; the
// other ends without a result in another; an end with a result (a blob) in
// a statement of its own.
func (d *Driver) finishIn(ctx context.Context, tx *wtx, now int64, ps []driver.FinishJobParams) ([]bool, error) {
	fenced := make([]bool, len(ps))
	var plain []int
	for i, p := range ps {
		if p.Plain() { // written with completeJobs
			plain = append(plain, i)
		}
	}
	if len(plain) > 1 {
		if err := d.completeIn(ctx, tx, now, ps, plain, fenced); err != nil {
			return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
		}
	} else {
		plain = nil
	}
	if len(plain) == len(ps) {
		return fenced, nil
	}
	type end struct {
		ID      int64  `json:"i"`
		Attempt int    `json:"a"`
		LeaseID int64  `json:"l"`
		State   string `json:"s"`
		Delay   int64  `json:"d"`
		Error   string `json:"e"`
		Snooze  int    `json:"z"`
	}
	var list []end
	for i, p := range ps {
		if p.Result == nil && !written(plain, i) {
			e := end{ID: p.ID, Attempt: p.Attempt, LeaseID: p.LeaseID, State: string(p.State), Delay: ms(p.Delay), Error: p.Error}
			if p.Snooze {
				e.Snooze = 1
			}
			list = append(list, e)
		}
	}
	one := len(list) <= 1 // a statement of its own is as cheap
	if !one {
		js, err := json.Marshal(list)
		if err != nil {
			return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
		}
		rows, err := tx.Query(ctx, finishJobs, now, string(js))
		if err != nil {
			return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
		}
		held, err := driver.ScanAll(rows, func(r driver.Row) (driver.JobFence, error) {
			var f driver.JobFence
			return f, r.Scan(&f.ID, &f.Attempt, &f.LeaseID)
		})
		if err != nil {
			return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
		}
		ended := make(map[driver.JobFence]bool, len(held))
		for _, f := range held {
			ended[f] = true
		}
		for i, p := range ps {
			if p.Result == nil && !written(plain, i) {
				fenced[i] = !ended[p.JobFence]
			}
		}
	}
	for i, p := range ps {
		if written(plain, i) {
			continue
		}
		if p.Result != nil || one {
			n, err := tx.Exec(ctx, finishJob, finishArgs(now, p)...)
			if err != nil {
				return nil, fmt.Errorf("sqlite: finish jobs: %w", err)
			}
			fenced[i] = n == 0
		}
	}
	return fenced, nil
}

// written reports whether position i is in plain (ascending), the
// completions completeIn wrote.
func written(plain []int, i int) bool {
	_, found := slices.BinarySearch(plain, i)
	return found
}

// finishJobs is finishJob for a JSON list of claims without results (see
// FinishJobs): ?1 is the clock, ?2 the list.
var finishJobs = `UPDATE idem_jobs SET ` + jobEndSet("v.jstate", "v.jdelay", "NULL", "v.jerror", "v.jsnooze") + `
	FROM (SELECT json_extract(value, '$.i') AS jid, json_extract(value, '$.a') AS jattempt,
		json_extract(value, '$.l') AS jlease, json_extract(value, '$.s') AS jstate, json_extract(value, '$.d') AS jdelay,
		json_extract(value, '$.e') AS jerror, json_extract(value, '$.z') AS jsnooze FROM json_each(?2)) AS v
	WHERE id = v.jid AND attempt = v.jattempt AND lease_id = v.jlease AND state = 'running' AND lease_until > ?1
	RETURNING id, attempt, lease_id`

// GetJob reads one job from the read pool.
func (d *Driver) GetJob(ctx context.Context, id int64) (idemtype.JobRow, error) {
	now := d.nowMS()
	j, err := scanJob(d.r.QueryRow(ctx, `SELECT `+jobCols+` FROM idem_jobs WHERE id = ?`, id), now)
	if errors.Is(err, sql.ErrNoRows) {
		return j, driver.ErrNotFound
	}
	if err != nil {
		return j, fmt.Errorf("sqlite: get job: %w", err)
	}
	return j, nil
}

// ListJobs returns jobs matching f, by id, from the read pool. Only the
// filters given become predicates, so the partial indexes apply.
func (d *Driver) ListJobs(ctx context.Context, f driver.JobFilter) ([]idemtype.JobRow, error) {
	now := d.nowMS()
	where, args := []string{"id > ?"}, []any{f.AfterID}
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if f.Queue != "" {
		add("queue = ?", f.Queue)
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if f.Kind != "" {
		add("kind = ?", f.Kind)
	}
	if f.KeyPrefix != "" {
		add("substr(unique_key, 1, length(?)) = ?", f.KeyPrefix)
		args = append(args, f.KeyPrefix)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	rows, err := d.r.Query(ctx, `SELECT `+jobCols+` FROM idem_jobs WHERE `+strings.Join(where, " AND ")+
		` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list jobs: %w", err)
	}
	out, err := scanJobs(rows, now)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list jobs: %w", err)
	}
	return out, nil
}

// CountJobs counts a queue's jobs by state, from the read pool.
func (d *Driver) CountJobs(ctx context.Context, queue string) (map[idemtype.JobState]int, error) {
	rows, err := d.r.Query(ctx, `SELECT state, count(*) FROM idem_jobs WHERE ?1 = '' OR queue = ?1 GROUP BY state`, queue)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count jobs: %w", err)
	}
	out, err := driver.ScanJobCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count jobs: %w", err)
	}
	return out, nil
}

// RequeueJob makes a dead job available now.
func (d *Driver) RequeueJob(ctx context.Context, id int64, attempts int) (idemtype.JobRow, error) {
	now := d.nowMS()
	j, err := scanJob(d.w.QueryRow(ctx, `UPDATE idem_jobs SET state = 'available', run_at = ?1, updated_at = ?1,
	finalized_at = NULL, max_attempts = attempt + ?3
	WHERE id = ?2 AND state = 'dead' RETURNING `+jobCols, now, id, attempts), now)
	if errors.Is(err, sql.ErrNoRows) {
		return j, d.missingOrConflict(ctx, id)
	}
	if err != nil {
		return j, fmt.Errorf("sqlite: requeue job: %w", err)
	}
	return j, nil
}

// CancelJob makes an available or running job cancelled, in one BEGIN
// IMMEDIATE transaction on the writer: ordered with every fenced write.
func (d *Driver) CancelJob(ctx context.Context, id int64) (idemtype.JobRow, idemtype.JobState, error) {
	tx, err := d.w.begin(ctx)
	if err != nil {
		return idemtype.JobRow{}, "", fmt.Errorf("sqlite: cancel job: %w", err)
	}
	defer tx.Rollback()
	now := d.nowMS()
	j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobCols+` FROM idem_jobs WHERE id = ?`, id), now)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return j, "", driver.ErrNotFound
	case err != nil:
		return j, "", fmt.Errorf("sqlite: cancel job: %w", err)
	case j.State == idemtype.JobCancelled:
		return j, "", nil
	case j.State != idemtype.JobAvailable && j.State != idemtype.JobRunning:
		return j, "", driver.ErrConflict
	}
	from := j.State
	j, err = scanJob(tx.QueryRow(ctx, `UPDATE idem_jobs SET state = 'cancelled', lease_until = NULL,
	finalized_at = ?1, updated_at = ?1 WHERE id = ?2 RETURNING `+jobCols, now, id), now)
	if err != nil {
		return j, "", fmt.Errorf("sqlite: cancel job: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return j, "", fmt.Errorf("sqlite: cancel job: %w", err)
	}
	return j, from, nil
}

// DeleteJob deletes a job that is in one of states.
func (d *Driver) DeleteJob(ctx context.Context, id int64, states []idemtype.JobState) error {
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(states)), ", ")
	args := []any{id}
	for _, s := range states {
		args = append(args, string(s))
	}
	n, err := d.w.Exec(ctx, `DELETE FROM idem_jobs WHERE id = ? AND state IN (`+marks+`)`, args...)
	if err != nil {
		return fmt.Errorf("sqlite: delete job: %w", err)
	}
	if n == 0 {
		return d.missingOrConflict(ctx, id)
	}
	return nil
}

func (d *Driver) missingOrConflict(ctx context.Context, id int64) error {
	var one int
	err := d.w.QueryRow(ctx, `SELECT 1 FROM idem_jobs WHERE id = ?`, id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return driver.ErrNotFound
	case err != nil:
		return fmt.Errorf("sqlite: read job: %w", err)
	}
	return driver.ErrConflict
}

// PruneJobs deletes completed and cancelled jobs finalized at least
// olderThan ago.
func (d *Driver) PruneJobs(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	now := d.nowMS()
	n, err := d.w.Exec(ctx, `DELETE FROM idem_jobs WHERE id IN (SELECT id FROM idem_jobs
	WHERE state IN ('completed', 'cancelled') AND finalized_at <= ?1 LIMIT ?2 + 0)`, now-ms(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune jobs: %w", err)
	}
	return int(n), nil
}
