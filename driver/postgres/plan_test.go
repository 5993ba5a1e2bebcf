package postgres

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestFencedWritesReadByPrimaryKey: a holder's write reads its row by
// primary key whatever the statistics say. The tables are analyzed while
// no claim is held, and then 10,000 claims are taken: statistics that make
// the partial lease indexes look nearly empty. Both the generic plan (the
// one a prepared statement settles on) and a custom plan must read the
// primary key and not a lease index: with the state written as a literal,
// both chose idem_jobs_lease or idem_keys_lease, and read every held claim
// for each write.
func TestFencedWritesReadByPrimaryKey(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	conn := setUp(t, d, append(autovacuumOff("idem_jobs", "idem_keys"),
		`INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at, finalized_at)
		SELECT 'q', 'k', '{}', 'completed', 3, now(), now(), now(), now() FROM generate_series(1, 20000)`,
		completedKeys("k"),
		`ANALYZE idem_jobs, idem_keys`,
		`UPDATE idem_jobs SET state = 'running', attempt = 1, lease_id = 7, lease_until = now() + interval '1 hour', finalized_at = NULL WHERE id % 2 = 0`,
		`UPDATE idem_keys SET state = 'in_progress', lease_until = now() + interval '1 hour' WHERE right(key, 1) IN ('0', '2', '4', '6', '8')`,
	)...)
	for _, w := range fencedWrites {
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			plan := planOf(t, conn, []string{`SET plan_cache_mode = ` + mode, `PREPARE fenced_write AS ` + w.sql},
				`EXPLAIN EXECUTE fenced_write(`+w.args+`)`, `DEALLOCATE fenced_write`)
			if !strings.Contains(plan, w.table+"_pkey") || strings.Contains(plan, "_lease") {
				t.Errorf("%s, %s: the write does not read %s by primary key alone:\n%s", w.name, mode, w.table, plan)
			}
		}
	}
}

// fencedWrites are a holder's writes, with arguments naming jobs 2, 4 and
// 6 and key k2 of scope s, held with attempt 1 and lease id 7, and the
// table each writes.
var fencedWrites = []struct {
	pickedWrite
	table string
}{
	{pickedWrite{"complete jobs", completeJobsSQL, `NULL, '{2,4,6}', '{1,1,1}', '{7,7,7}'`}, "idem_jobs"},
	{pickedWrite{"finish jobs", finishJobsSQL, `NULL, '{2,4}', '{1,1}', '{7,7}', '{available,dead}', '{1000,0}', '{NULL,NULL}', '{e,e}', '{false,false}'`}, "idem_jobs"},
	{pickedWrite{"heartbeat job", heartbeatJobSQL, `NULL, 2, 1, 7, 30000`}, "idem_jobs"},
	{pickedWrite{"finish key", finishQuery, `NULL, 's', 'k2', 1, 7, 'succeeded', 200, NULL, NULL`}, "idem_keys"},
	{pickedWrite{"heartbeat key", heartbeatSQL, `NULL, 's', 'k2', 1, 7, 30000`}, "idem_keys"},
}

// planOf runs the statements before, then explain, whose lines it returns,
// then the statements after, on conn.
func planOf(t *testing.T, conn *pgxpool.Conn, before []string, explain string, after ...string) string {
	t.Helper()
	ctx := context.Background()
	for _, q := range before {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := conn.Query(ctx, explain)
	if err != nil {
		t.Fatalf("%s: %v", explain, err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", explain, err)
	}
	for _, q := range after {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return plan.String()
}

// TestPruneScansStopAtTheWindows: each part of a prune batch reads its
// partial index only up to the end of its window, whatever the statistics
// say. The table is analyzed while it holds only completed records and no
// tombstone, as after a day of claims; then half of them become
// tombstones whose window has not ended. Joined to the clock's CTE, the
// tombstone part was planned as a scan of the whole tombstone index
// filtered afterwards (every tombstone read on every batch: a sweep of
// 300k records went at 5k records/s, slowing as it went); bound by a
// parameter, the records' part was planned as a sequential scan once the
// statistics said every record had expired (all of them read on every
// batch once they were tombstones). Both plans a prepared statement may
// use are checked.
func TestPruneScansStopAtTheWindows(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	conn := setUp(t, d, append(autovacuumOff("idem_keys"),
		`INSERT INTO idem_keys (scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms,
			created_at, updated_at, completed_at, expires_at, tombstone_until, status, replays)
		SELECT 's', 'k' || g, 'f', 'succeeded', 1, 7, now(), 60000, 86400000, now(), now(), now(),
			now() - interval '1 hour', now() + interval '1 day', 200, 0
		FROM generate_series(1, 20000) g`,
		`ANALYZE idem_keys`,
		`UPDATE idem_keys SET state = 'tombstone' WHERE right(key, 1) IN ('0', '2', '4', '6', '8')`,
	)...)
	// explain runs one batch at the clock given (NULL: now) and rolls it back.
	explain := func(mode, clock string) string {
		t.Helper()
		return explainBatch(t, conn, mode, pruneSQL, clock+`, 1000`)
	}
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		// Now: 10,000 records past retention, 10,000 tombstones inside
		// their window. The tombstone index must return none of them.
		plan := explain(mode, "NULL")
		if !regexp.MustCompile(`Index Scan using idem_keys_tombstone on idem_keys \S+ \(actual rows=0 `).MatchString(plan) {
			t.Errorf("%s: the tombstones' part reads tombstones whose window has not ended:\n%s", mode, plan)
		}
		// Two days on, every record is past both windows; the statistics
		// still say every row is a completed record. The records' part
		// must read its index, not the table.
		if plan := explain(mode, "now() + interval '2 days'"); strings.Contains(plan, "Seq Scan on idem_keys") ||
			!strings.Contains(plan, "Index Scan using idem_keys_expires") {
			t.Errorf("%s, two days on: the records' part does not read idem_keys_expires:\n%s", mode, plan)
		}
	}
}

// TestJobsAndInboxPruneScansStopAtTheirWindows: the jobs' and the inbox's
// prunes read their index only up to their window's end, in both plans,
// with statistics taken before any job was finished: the jobs finished
// since, and the inbox's records, are all younger than the window, so
// each scan must return no row.
func TestJobsAndInboxPruneScansStopAtTheirWindows(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	conn := setUp(t, d, append(autovacuumOff("idem_jobs", "idem_inbox"),
		`INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at)
		SELECT 'q', 'k', '{}', 'available', 3, now(), now(), now() FROM generate_series(1, 20000)`,
		`INSERT INTO idem_inbox (source, message_id, payload_hash, received_at)
		SELECT 's', 'm' || g, 'h', now() FROM generate_series(1, 20000) g`,
		`ANALYZE idem_jobs, idem_inbox`,
		`UPDATE idem_jobs SET state = 'completed', finalized_at = now() WHERE id % 2 = 0`,
	)...)
	for _, p := range []struct{ name, sql, index string }{
		{"jobs", pruneJobsSQL, "idem_jobs_finalized"},
		{"inbox", inboxPruneSQL, "idem_inbox_received"},
	} {
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			plan := explainBatch(t, conn, mode, p.sql, `NULL, 3600000, 1000`)
			if !regexp.MustCompile(`Index Scan using ` + p.index + ` on \S+( \S+)? \(actual rows=0 `).MatchString(plan) {
				t.Errorf("%s, %s: the prune reads past its window:\n%s", p.name, mode, plan)
			}
		}
	}
}

// setUp runs the statements on d's pool, then holds one of its connections
// for the test.
func setUp(t *testing.T, d *Driver, statements ...string) *pgxpool.Conn {
	t.Helper()
	ctx := context.Background()
	for _, q := range statements {
		if _, err := d.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}

// explainBatch runs statement, prepared in the plan mode given, with args,
// under EXPLAIN ANALYZE in a transaction it rolls back, and returns the plan.
func explainBatch(t *testing.T, conn *pgxpool.Conn, mode, statement, args string) string {
	t.Helper()
	return planOf(t, conn, []string{`BEGIN`, `SET LOCAL plan_cache_mode = ` + mode, `PREPARE prune_batch AS ` + statement},
		`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE prune_batch(`+args+`)`, `ROLLBACK`, `DEALLOCATE prune_batch`)
}

// TestWritesReadOnlyTheRowsTheyPicked: a write that first picks and locks
// its rows in a CTE or sub-select then reads them by primary key, not the
// whole table, whatever the statistics say: a claim of jobs, the rescue of
// expired leases, the limited claim, the jobs' and the inbox's prunes, the
// count of a key's replays and a job's cancellation. The tables are
// vacuumed while their pages hold one live row, as after a queue was
// drained and its jobs pruned, then 20,000 rows are added at once:
// statistics that say the tables are nearly empty. Joined to the CTE of
// the jobs it locked, the claim's UPDATE was planned (generic plan, the
// one a prepared statement settles on) as a scan of the whole primary key
// with the CTE read once per row: a claim of 440 jobs from a queue of
// 29,000 took 1.6 s, and a bench slice of 8 loops completed no job.
func TestWritesReadOnlyTheRowsTheyPicked(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	var setup []string
	setup = append(setup, nearlyEmpty("idem_jobs", `INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at, finalized_at)
		SELECT 'q', 'k', '{}', 'completed', 3, now(), now(), now(), now() FROM generate_series(1, 20000)`, "id = (SELECT max(id) FROM idem_jobs)")...)
	setup = append(setup, nearlyEmpty("idem_inbox", `INSERT INTO idem_inbox (source, message_id, payload_hash, received_at)
		SELECT 's', 'old' || g, 'h', now() FROM generate_series(1, 20000) g`, "message_id = 'old20000'")...)
	setup = append(setup, nearlyEmpty("idem_keys", completedKeys("old"), "key = 'old20000'")...)
	conn := setUp(t, d, append(append(setup, pickedRows...), completedKeys("k"))...)
	for _, w := range pickedWrites {
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			checkPickedRows(t, w.name+", "+mode, explainBatch(t, conn, mode, w.sql, w.args))
		}
	}
}

// pickedRows are the rows pickedWrites pick from: 20,000 jobs of queue q,
// due, of which every hundredth is running with an expired lease and
// every hundredth (plus one) finished two hours ago; 20,000 inbox records,
// every hundredth received two hours ago.
var pickedRows = []string{
	`INSERT INTO idem_jobs (queue, kind, args, state, max_attempts, run_at, created_at, updated_at)
		SELECT 'q', 'k', '{}', 'available', 3, now() - interval '1 minute', now(), now() FROM generate_series(1, 20000)`,
	`UPDATE idem_jobs SET state = 'running', attempt = 1, lease_id = 3, lease_until = now() - interval '1 second', worker = 'gone'
		WHERE id % 100 = 0`,
	`UPDATE idem_jobs SET state = 'completed', finalized_at = now() - interval '2 hours' WHERE id % 100 = 1`,
	`INSERT INTO idem_inbox (source, message_id, payload_hash, received_at)
		SELECT 's', 'm' || g, 'h', now() - CASE WHEN g % 100 = 0 THEN interval '2 hours' ELSE interval '0' END
		FROM generate_series(1, 20000) g`,
}

// pickedWrite is a statement that picks and locks rows (or names them),
// then writes them, with the arguments of one batch.
type pickedWrite struct{ name, sql, args string }

// pickedWrites are the statements TestWritesReadOnlyTheRowsTheyPicked and
// TestWritesPlannedOnEmptyTablesReadOnlyTheirRows hold to reading only the
// rows they picked, with arguments for a batch of at most 100.
var pickedWrites = []pickedWrite{
	{"claim", claimJobsSQL, `NULL, 'q', 100, 100, 7, 30000, 'w'`},
	{"rescue", rescueJobsSQL, `NULL, 'q', 100`},
	{"claim with limits", claimLimitedSQL, `NULL, 'q', 100, 7, 30000, 'w', 1000000, false, 200`},
	{"prune", pruneJobsSQL, `NULL, 3600000, 100`},
	{"inbox prune", inboxPruneSQL, `NULL, 3600000, 100`},
	{"replays", replayQuery, `'s', 'k2', 3, now()`},
	{"cancel", cancelJobSQL, `NULL, 50`},
}

// checkPickedRows fails the test if a scan of plan (EXPLAIN ANALYZE's)
// read more than 400 rows: returned them, or removed them by its filter.
func checkPickedRows(t *testing.T, name, plan string) {
	t.Helper()
	for _, m := range scanRows.FindAllStringSubmatch(plan, -1) {
		rows, _ := strconv.Atoi(m[2])
		loops, _ := strconv.Atoi(m[3])
		removed, _ := strconv.Atoi(m[5])
		if n := (rows + removed) * loops; n > 400 {
			t.Errorf("%s: a scan of idem_%s read %d rows for a batch of at most 100:\n%s", name, m[1], n, plan)
			return
		}
	}
}

// scanRows finds, in a plan, each scan of an idem table, the rows it
// returned and the rows its filter removed (if it has a filter), both per
// loop, and its loops.
var scanRows = regexp.MustCompile(`on idem_(jobs|inbox|keys)(?: \S+)? \(actual rows=(\d+) loops=(\d+)\)\n(?:\s+(?:Index Cond|Filter|TID Cond|Recheck Cond): .*\n)*(\s+Rows Removed by Filter: (\d+))?`)

// TestWritesPlannedOnEmptyTablesReadOnlyTheirRows: the same statements and
// a holder's writes (fencedWrites), prepared and first run while their
// tables were empty and never analyzed (a new database, a pool opened
// before the first job), keep reading only the rows they picked once the
// tables hold 20,000 rows and no analyze has run since. A generic plan is
// made on the first run and kept: read by primary key as id = ANY of the
// picked ids, the claim's rows were read by a sequential scan of the
// whole table (an empty table is planned as ten pages, on which a scan is
// cheaper than ten index descents), every claim until autovacuum's next
// analyze, and so were a batch of completions' rows, joined to their ids
// with =. The inbox's prune is left out: its rows have no one-column key,
// and by row address (ctid) a plan made on an empty table reads the whole
// table until the table's first analyze replans it (as the ledger's prune
// does; both run in batches of many rows, on a schedule).
func TestWritesPlannedOnEmptyTablesReadOnlyTheirRows(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	conn := setUp(t, d, autovacuumOff("idem_jobs", "idem_inbox", "idem_keys")...)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	writes := slices.DeleteFunc(slices.Clone(pickedWrites), func(w pickedWrite) bool { return w.name == "inbox prune" })
	for _, w := range fencedWrites {
		writes = append(writes, w.pickedWrite)
	}
	for i, w := range writes {
		for _, q := range []string{`PREPARE w` + strconv.Itoa(i) + ` AS ` + w.sql, `BEGIN`, `EXECUTE w` + strconv.Itoa(i) + `(` + w.args + `)`, `ROLLBACK`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %s: %v", w.name, q, err)
			}
		}
	}
	for _, q := range append(slices.Clone(pickedRows),
		`UPDATE idem_jobs SET state = 'running', attempt = 1, lease_id = 7, lease_until = now() + interval '1 hour' WHERE id IN (2, 4, 6)`,
		completedKeys("k"),
		`UPDATE idem_keys SET state = 'in_progress', lease_until = now() + interval '1 hour' WHERE key = 'k2'`,
	) {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i, w := range writes {
		name := `w` + strconv.Itoa(i)
		checkPickedRows(t, w.name+", planned on empty tables", planOf(t, conn, []string{`BEGIN`},
			`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE `+name+`(`+w.args+`)`, `ROLLBACK`, `DEALLOCATE `+name))
	}
}

// completedKeys inserts 20,000 completed records of scope 's', their keys
// prefix followed by a number, within both windows.
func completedKeys(prefix string) string {
	return `INSERT INTO idem_keys (scope, key, fingerprint, state, attempt, lease_id, lease_until, retention_ms, tombstone_ms,
			created_at, updated_at, completed_at, expires_at, tombstone_until, status, replays)
		SELECT 's', '` + prefix + `' || g, 'f', 'succeeded', 1, 7, now(), 60000, 60000, now(), now(), now(), now() + interval '1 day', now() + interval '2 days', 200, 0
		FROM generate_series(1, 20000) g`
}

// nearlyEmpty returns the statements that leave table with statistics
// saying it is nearly empty while its pages remain: autovacuum off, fill,
// delete every row but those matching keep (the last page stays), then
// VACUUM ANALYZE.
func nearlyEmpty(table, fill, keep string) []string {
	return append(autovacuumOff(table),
		fill,
		`DELETE FROM `+table+` WHERE NOT (`+keep+`)`,
		`VACUUM ANALYZE `+table)
}

// autovacuumOff returns the statements that keep autovacuum from
// analyzing tables (and so from replanning statements on them) during a
// test.
func autovacuumOff(tables ...string) []string {
	var out []string
	for _, t := range tables {
		out = append(out, `ALTER TABLE `+t+` SET (autovacuum_enabled = false)`)
	}
	return out
}
