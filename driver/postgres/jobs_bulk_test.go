package postgres_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openBulk opens a driver on a new database of the shared cluster, on a
// pool of one connection: a connection that InsertJobsFast left in a
// transaction would be the one every later statement gets.
func openBulk(t *testing.T) *postgres.Driver {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := postgres.New(pool, &postgres.Options{ClosePool: true})
	if err := d.Setup(ctx, driver.Config{}); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// bulkJobs are jobs that use every column InsertJobsFast writes, in the
// forms that encode differently.
func bulkJobs() []driver.JobInsert {
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	return []driver.JobInsert{
		{Queue: "q", Kind: "plain", Args: []byte(`{"n":1}`), MaxAttempts: 25, Priority: idemtype.JobPriorityHighest},
		{Queue: "q", Kind: "nil args", MaxAttempts: 1, Priority: idemtype.JobPriorityLowest},
		{Queue: "q", Kind: "bytes", Args: []byte{0, 0xff, 0xfe, '\n', '\\'}, MaxAttempts: 3, Priority: 2},
		{Queue: "q", Kind: "delayed", Args: []byte(`{}`), MaxAttempts: 2, Priority: 3, Delay: 90*time.Second + 1234567*time.Nanosecond},
		{Queue: "other", Kind: "at", Args: []byte(`[]`), MaxAttempts: 4, Priority: 1, RunAt: at},
		{Queue: "q", Kind: "before 2000", Args: []byte(`1`), MaxAttempts: 5, Priority: 1, RunAt: time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.FixedZone("x", 3600))},
		{Queue: "q", Kind: "meta", Args: []byte(`"s"`), MaxAttempts: 6, Priority: 2, Metadata: []byte(`{"tenant": "ä", "n": [1, 2.5, null]}`)},
		{Queue: "ünï", Kind: "partition ✓", Args: []byte(`{}`), MaxAttempts: 7, Priority: 4, PartitionKey: "customer-42", Metadata: []byte(`{}`)},
	}
}

// InsertJobsFast writes every column as the ordinary insert does (same
// input, same row, defaults included), returns ids in input order, and
// stamps created_at, updated_at and a delayed run_at from one database
// clock.
func TestPostgresInsertJobsFastRoundTrip(t *testing.T) {
	d := openBulk(t)
	ctx := context.Background()
	ins := bulkJobs()
	ids, err := d.InsertJobsFast(ctx, ins)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := d.EnqueueJobs(ctx, driver.Shared, ins)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(ins) {
		t.Fatalf("%d ids for %d jobs", len(ids), len(ins))
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids %v are not increasing", ids)
		}
	}
	for i, id := range ids {
		got, err := d.GetJob(ctx, id)
		if err != nil {
			t.Fatalf("job %d (id %d): %v", i, id, err)
		}
		w := want[i]
		if got.ID <= 0 || w.ID <= ids[len(ids)-1] {
			t.Fatalf("job %d: id %d, ordinary insert's id %d", i, got.ID, w.ID)
		}
		if !got.CreatedAt.Equal(got.UpdatedAt) || got.CreatedAt.IsZero() || !got.CreatedAt.Equal(mustJob(t, d, ids[0]).CreatedAt) {
			t.Fatalf("job %d: created %v, updated %v, first job created %v", i, got.CreatedAt, got.UpdatedAt, mustJob(t, d, ids[0]).CreatedAt)
		}
		if ins[i].RunAt.IsZero() {
			if delay := got.RunAt.Sub(got.CreatedAt); delay != ins[i].Delay.Truncate(time.Millisecond) {
				t.Fatalf("job %d: run_at is created_at + %v, want + %v", i, delay, ins[i].Delay.Truncate(time.Millisecond))
			}
		} else if !got.RunAt.Equal(w.RunAt) || !got.RunAt.Equal(ins[i].RunAt.Truncate(time.Microsecond)) {
			t.Fatalf("job %d: run_at %v, ordinary insert %v, given %v", i, got.RunAt, w.RunAt, ins[i].RunAt)
		}
		if len(w.Args) == 0 {
			w.Args = nil
		}
		if len(got.Args) == 0 {
			got.Args = nil
		}
		if !bytes.Equal(got.Args, ins[i].Args) {
			t.Fatalf("job %d: args %q, want %q", i, got.Args, ins[i].Args)
		}
		// The rest must be what the ordinary insert writes.
		for _, r := range []*idemtype.JobRow{&got, &w} {
			r.ID, r.CreatedAt, r.UpdatedAt, r.RunAt, r.Now = 0, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		}
		if !jobRowsEqual(got, w) {
			t.Fatalf("job %d:\nfast     %+v\nordinary %+v", i, got, w)
		}
		if got.State != idemtype.JobAvailable || got.Queue != ins[i].Queue || got.Kind != ins[i].Kind || got.Priority != ins[i].Priority ||
			got.MaxAttempts != ins[i].MaxAttempts || got.PartitionKey != ins[i].PartitionKey || (got.Metadata == nil) != (ins[i].Metadata == nil) {
			t.Fatalf("job %d: %+v from %+v", i, got, ins[i])
		}
	}
}

func mustJob(t *testing.T, d *postgres.Driver, id int64) idemtype.JobRow {
	t.Helper()
	j, err := d.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// jobRowsEqual compares rows field by field, byte slices by content.
func jobRowsEqual(a, b idemtype.JobRow) bool {
	return a.ID == b.ID && a.Queue == b.Queue && a.Kind == b.Kind && bytes.Equal(a.Args, b.Args) && a.State == b.State &&
		a.Priority == b.Priority && a.Attempt == b.Attempt && a.MaxAttempts == b.MaxAttempts && a.LeaseID == b.LeaseID &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.ClaimedBy == b.ClaimedBy && a.RunAt.Equal(b.RunAt) && a.UniqueKey == b.UniqueKey &&
		len(a.Errors) == len(b.Errors) && bytes.Equal(a.Result, b.Result) && a.CreatedAt.Equal(b.CreatedAt) &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.AttemptedAt.Equal(b.AttemptedAt) && a.FinalizedAt.Equal(b.FinalizedAt) &&
		bytes.Equal(a.Metadata, b.Metadata) && a.PartitionKey == b.PartitionKey
}

// A job the server rejects in the middle of a batch fails the whole
// batch: nothing of it is inserted, and the connection is rolled back and
// kept: the pool (of one) hands out the same backend afterwards.
func TestPostgresInsertJobsFastErrorInsertsNothing(t *testing.T) {
	d := openBulk(t)
	ctx := context.Background()
	count := func() int {
		var n int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM idem_jobs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	bad := map[string]func(*driver.JobInsert){
		"text not UTF-8":  func(j *driver.JobInsert) { j.Kind = "k\xff" },
		"metadata broken": func(j *driver.JobInsert) { j.Metadata = []byte(`{"a":`) },
	}
	pid := func() int {
		var p int
		if err := d.Pool().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, spoil := range bad {
		t.Run(name, func(t *testing.T) {
			before, backend := count(), pid()
			ins := make([]driver.JobInsert, 500)
			for i := range ins {
				ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte(`{}`), MaxAttempts: 1, Priority: 1}
			}
			spoil(&ins[250])
			if ids, err := d.InsertJobsFast(ctx, ins); err == nil {
				t.Fatalf("inserted %d jobs, one of them bad", len(ids))
			}
			if n := count(); n != before {
				t.Fatalf("%d jobs inserted by a failed batch", n-before)
			}
			if p := pid(); p != backend {
				t.Fatalf("the failed batch cost the pool its connection (backend %d, then %d)", backend, p)
			}
			ids, err := d.InsertJobsFast(ctx, ins[:250])
			if err != nil || len(ids) != 250 {
				t.Fatalf("the next batch: %d ids, %v", len(ids), err)
			}
			if n := count(); n != before+250 {
				t.Fatalf("%d jobs after the next batch of 250, want %d", n-before, 250)
			}
		})
	}
}

// Through PgBouncer in transaction mode (statements unnamed), a batch and
// a failed batch behave as on PostgreSQL itself: the transaction spans the
// id reservation and the COPY, and a failed COPY leaves nothing behind on
// the server connection the pooler hands to the next transaction.
func TestPostgresInsertJobsFastPgBouncer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := bouncerDriver(t, ctx, pgtest.TransactionPooling)
	ins := bulkJobs()
	for round := range 3 {
		ids, err := d.InsertJobsFast(ctx, ins)
		if err != nil || len(ids) != len(ins) {
			t.Fatalf("round %d: %d ids, %v", round, len(ids), err)
		}
		for i, id := range ids {
			if j := mustJob(t, d, id); j.Kind != ins[i].Kind || !bytes.Equal(j.Metadata, canonicalJSON(t, d, ins[i].Metadata)) {
				t.Fatalf("round %d, job %d: %+v", round, i, j)
			}
		}
		bad := slices.Clone(ins)
		bad[3].Queue = "\xff"
		if _, err := d.InsertJobsFast(ctx, bad); err == nil {
			t.Fatalf("round %d: a batch with a queue name not UTF-8 was inserted", round)
		}
	}
	var n int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM idem_jobs`).Scan(&n); err != nil || n != 3*len(ins) {
		t.Fatalf("%d jobs, want %d (%v)", n, 3*len(ins), err)
	}
}

// canonicalJSON is js as jsonb stores it, nil for nil.
func canonicalJSON(t *testing.T, d *postgres.Driver, js []byte) []byte {
	t.Helper()
	if js == nil {
		return nil
	}
	var out []byte
	if err := d.Pool().QueryRow(context.Background(), `SELECT $1::text::jsonb::text`, string(js)).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
