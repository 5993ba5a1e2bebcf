package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/jackc/pgx/v5"
)

// bulkCopySQL COPYs jobs in PostgreSQL's binary format, as encodeJobsCopy
// writes them, and commits the transaction InsertJobsFast began: one
// simple-protocol query, so the COMMIT costs no round trip of its own. An
// error in the COPY skips the COMMIT, leaving the transaction aborted.
const bulkCopySQL = `COPY idem_jobs (id, run_at, created_at, updated_at, max_attempts, priority, queue, kind, args, state, metadata, partition_key) FROM STDIN (FORMAT binary); COMMIT`

// bulkFields is how many columns bulkCopySQL names.
const bulkFields = 12

// InsertJobsFast inserts jobs in one transaction and two round trips:
// BEGIN and the reservation of their ids (nextval per id) go together,
// then the COPY of the rows and the COMMIT. A COPY is all rows or none.
// The reservation shares the COPY's transaction because nextval writes
// WAL, so a reservation committed on its own would wait for a WAL flush
// of its own. If the insert fails, the reserved ids are left unused, as a
// rolled back insert leaves them.
func (d *Driver) InsertJobsFast(ctx context.Context, jobs []driver.JobInsert) ([]int64, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	for i, j := range jobs {
		if j.UniqueKey != "" {
			return nil, fmt.Errorf("postgres: insert jobs fast: job %d has a unique key; COPY cannot skip duplicates", i)
		}
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: insert jobs fast: %w", err)
	}
	// Release closes a connection left in a transaction rather than pool
	// it, so an aborted COPY whose ROLLBACK failed harms no later caller.
	defer conn.Release()
	var (
		now time.Time
		ids []int64
	)
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	// The sequence is resolved once (an uncorrelated scalar subquery is an
	// InitPlan), not once per id.
	b.Queue(`SELECT coalesce($1::timestamptz, statement_timestamp()),
	array(SELECT nextval((SELECT pg_get_serial_sequence('idem_jobs', 'id')::regclass)) FROM generate_series(1, $2))`,
		d.clock(), len(jobs)).QueryRow(func(r pgx.Row) error { return r.Scan(&now, &ids) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		rollbackBulk(ctx, conn.Conn())
		return nil, fmt.Errorf("postgres: insert jobs fast: reserve ids: %w", err)
	}
	if len(ids) != len(jobs) {
		rollbackBulk(ctx, conn.Conn())
		return nil, fmt.Errorf("postgres: insert jobs fast: %d ids for %d jobs", len(ids), len(jobs))
	}
	data, err := encodeJobsCopy(jobs, ids, now)
	if err != nil {
		rollbackBulk(ctx, conn.Conn())
		return nil, fmt.Errorf("postgres: insert jobs fast: %w", err)
	}
	pc := conn.Conn().PgConn()
	tag, err := pc.CopyFrom(ctx, bytes.NewReader(data), bulkCopySQL)
	if err != nil {
		rollbackBulk(ctx, conn.Conn())
		return nil, fmt.Errorf("postgres: insert jobs fast: copy: %w", unknownOutcome(err))
	}
	if tag.String() != "COMMIT" || pc.TxStatus() != 'I' {
		rollbackBulk(ctx, conn.Conn())
		return nil, fmt.Errorf("postgres: insert jobs fast: copy ended with %q, not a commit", tag)
	}
	return ids, nil
}

// rollbackBulk ends InsertJobsFast's transaction after a failure, if the
// connection is still in it.
func rollbackBulk(ctx context.Context, c *pgx.Conn) {
	if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = c.Exec(ctx, "ROLLBACK")
}

// pgEpochMicros is 2000-01-01 00:00:00 UTC, PostgreSQL's timestamp epoch,
// in microseconds since the Unix epoch.
const pgEpochMicros = 946_684_800 * 1_000_000

// encodeJobsCopy writes jobs as PostgreSQL's binary COPY format, in
// bulkCopySQL's column order, with ids[i] as the id of jobs[i] and now as
// the time of the insert: created_at, updated_at, and run_at unless the
// job has a RunAt.
//
// pgx's CopyFrom does the same for any table, taking each row as []any and
// encoding each value through its type map; for this one table's twelve
// known columns that general path measured about 1.3 ms a batch of 1000
// more than this (bench/vsriver bulk, alternating builds: 51–52k jobs/s
// with pgx's CopyFrom in the same transaction, 54–58k with this), and it
// cannot put the COMMIT in the COPY's query.
func encodeJobsCopy(jobs []driver.JobInsert, ids []int64, now time.Time) ([]byte, error) {
	size := 19 + 2
	for _, j := range jobs {
		size += 2 + bulkFields*4 + 8*4 + 4 + 2 + len(j.Queue) + len(j.Kind) + len(j.Args) + len(idemtype.JobAvailable) + 1 + len(j.Metadata) + len(j.PartitionKey)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, "PGCOPY\n\377\r\n\000"...)
	buf = binary.BigEndian.AppendUint32(buf, 0) // flags
	buf = binary.BigEndian.AppendUint32(buf, 0) // header extension length
	created := pgMicros(now)
	for i, j := range jobs {
		runAt := j.RunAt
		if runAt.IsZero() {
			runAt = now.Add(j.Delay.Truncate(time.Millisecond))
		}
		if j.MaxAttempts > math.MaxInt32 || j.MaxAttempts < math.MinInt32 || j.Priority > math.MaxInt16 || j.Priority < math.MinInt16 {
			return nil, fmt.Errorf("job %d: max attempts %d or priority %d out of range", i, j.MaxAttempts, j.Priority)
		}
		buf = binary.BigEndian.AppendUint16(buf, bulkFields)
		buf = appendInt64Field(buf, ids[i])
		buf = appendInt64Field(buf, pgMicros(runAt))
		buf = appendInt64Field(buf, created)
		buf = appendInt64Field(buf, created)
		buf = binary.BigEndian.AppendUint32(buf, 4)
		buf = binary.BigEndian.AppendUint32(buf, uint32(int32(j.MaxAttempts)))
		buf = binary.BigEndian.AppendUint32(buf, 2)
		buf = binary.BigEndian.AppendUint16(buf, uint16(int16(j.Priority)))
		var err error
		for _, f := range [...]string{j.Queue, j.Kind} {
			if buf, err = appendBytesField(buf, f); err != nil {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
		}
		if buf, err = appendBytesField(buf, j.Args); err != nil { // bytea: the bytes themselves
			return nil, fmt.Errorf("job %d: args: %w", i, err)
		}
		buf, _ = appendBytesField(buf, string(idemtype.JobAvailable))
		if len(j.Metadata) == 0 {
			buf = appendNull(buf)
		} else if len(j.Metadata) >= math.MaxInt32 {
			return nil, fmt.Errorf("job %d: metadata of %d bytes is too long", i, len(j.Metadata))
		} else {
			// jsonb's binary form: version 1, then the JSON text.
			buf = binary.BigEndian.AppendUint32(buf, uint32(1+len(j.Metadata)))
			buf = append(buf, 1)
			buf = append(buf, j.Metadata...)
		}
		if j.PartitionKey == "" {
			buf = appendNull(buf)
		} else if buf, err = appendBytesField(buf, j.PartitionKey); err != nil {
			return nil, fmt.Errorf("job %d: partition key: %w", i, err)
		}
	}
	buf = binary.BigEndian.AppendUint16(buf, 0xffff) // trailer: -1
	return buf, nil
}

// pgMicros is t in timestamptz's binary form: microseconds since
// 2000-01-01 UTC, rounded down.
func pgMicros(t time.Time) int64 {
	return t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - pgEpochMicros
}

func appendInt64Field(buf []byte, v int64) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 8)
	return binary.BigEndian.AppendUint64(buf, uint64(v))
}

// appendBytesField appends a field whose binary form is its bytes: text
// and bytea.
func appendBytesField[T string | []byte](buf []byte, v T) ([]byte, error) {
	if len(v) >= math.MaxInt32 {
		return buf, fmt.Errorf("a value of %d bytes is too long", len(v))
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
	return append(buf, v...), nil
}

func appendNull(buf []byte) []byte { return binary.BigEndian.AppendUint32(buf, 0xffffffff) }
