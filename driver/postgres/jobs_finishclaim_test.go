package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// FinishAndClaimJobs ends claims (each fenced on its own) and claims more
// in ONE transaction: the completed row and the claimed rows carry the same
// xmin. InsertJobsFast (a COPY in a transaction of its own) returns the
// ids of the rows it wrote, in input order.
func TestPostgresFinishAndClaimJobsOneTransaction(t *testing.T) {
	d := openPrivate(t)
	ctx := context.Background()
	ins := make([]driver.JobInsert, 5)
	for i := range ins {
		ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte{'0' + byte(i)}, MaxAttempts: 3, Priority: 1,
			RunAt: time.Now().Add(-time.Duration(10-i) * time.Second)}
	}
	ids, err := d.InsertJobsFast(ctx, ins)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		j, err := d.GetJob(ctx, id)
		if err != nil || string(j.Args) != string(ins[i].Args) || j.State != idemtype.JobAvailable {
			t.Fatalf("job %d (id %d): %+v, %v", i, id, j, err)
		}
	}
	claim := driver.ClaimJobsParams{Queue: "q", Worker: "w", Limit: 2, LeaseID: 7, Lease: time.Minute}
	first, err := d.ClaimJobs(ctx, claim)
	if err != nil || len(first) != 2 || first[0].ID != ids[0] || first[1].ID != ids[1] {
		t.Fatalf("claim: %v, %v", first, err)
	}
	claim.Limit, claim.LeaseID = 10, 8
	fenced, claimed, err := d.FinishAndClaimJobs(ctx, []driver.FinishJobParams{
		{JobFence: driver.JobFence{ID: ids[0], Attempt: 1, LeaseID: 7}, State: idemtype.JobCompleted, Result: []byte("ok")},
		{JobFence: driver.JobFence{ID: ids[1], Attempt: 1, LeaseID: 99}, State: idemtype.JobCompleted}, // not its lease
	}, claim)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fenced, []bool{false, true}) {
		t.Fatalf("fenced = %v, want [false true]", fenced)
	}
	var got []int64
	for _, j := range claimed {
		if j.State != idemtype.JobRunning || j.LeaseID != 8 || j.Attempt != 1 {
			t.Fatalf("claimed %+v", j)
		}
		got = append(got, j.ID)
	}
	if !slices.Equal(got, ids[2:]) {
		t.Fatalf("claimed %v, want %v", got, ids[2:])
	}
	if j, err := d.GetJob(ctx, ids[0]); err != nil || j.State != idemtype.JobCompleted || string(j.Result) != "ok" {
		t.Fatalf("finished job: %+v, %v", j, err)
	}
	if j, err := d.GetJob(ctx, ids[1]); err != nil || j.State != idemtype.JobRunning || j.LeaseID != 7 {
		t.Fatalf("fenced job: %+v, %v", j, err)
	}
	var xids int
	if err := d.Pool().QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM idem_jobs WHERE id = ANY($1)`,
		[]int64{ids[0], ids[2], ids[3], ids[4]}).Scan(&xids); err != nil {
		t.Fatal(err)
	}
	if xids != 1 {
		t.Fatalf("the finish and the claim were written by %d transactions, want 1", xids)
	}
}

// Jobs without a unique key (migration 0013) have no entry in either
// unique index; jobs with one still conflict.
func TestPostgresUniqueIndexesHoldOnlyKeys(t *testing.T) {
	d := openPrivate(t)
	ctx := context.Background()
	ins := make([]driver.JobInsert, 500)
	for i := range ins {
		ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 3, Priority: 1}
	}
	if _, err := d.InsertJobsFast(ctx, ins); err != nil {
		t.Fatal(err)
	}
	keyed := driver.JobInsert{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 3, Priority: 1, UniqueKey: "a"}
	if _, dup, err := d.EnqueueJobs(ctx, driver.Shared, []driver.JobInsert{keyed, keyed}); err != nil || !slices.Equal(dup, []bool{false, true}) {
		t.Fatalf("keyed enqueue: dup %v, %v", dup, err)
	}
	if _, err := d.Pool().Exec(ctx, `ANALYZE idem_jobs`); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"idem_jobs_unique_queue_key": 1, "idem_jobs_unique_across_key": 0} {
		var n float64
		if err := d.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s holds %v rows, want %v", name, n, want)
		}
	}
}
