package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/jobs"
)

// EnqueueManyFast inserts every job of a batch larger than one statement
// chunk, returns their ids in input order, and the jobs run; a batch with
// a unique key is refused whole, and so is a batch with one bad job.
func TestEnqueueManyFast(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := newProducer(t, e)
		const n = 1234
		params := make([]jobs.EnqueueParams, n)
		for i := range params {
			params[i] = jobs.EnqueueParams{Args: testArgs{N: i}, Opts: &jobs.EnqueueOpts{Priority: 1 + i%4}}
		}
		ids, err := c.EnqueueManyFast(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != n {
			t.Fatalf("%d ids for %d jobs", len(ids), n)
		}
		for i, id := range ids {
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("ids not increasing at %d: %d after %d", i, id, ids[i-1])
			}
		}
		for _, i := range []int{0, 499, 500, 1001, n - 1} {
			j, err := c.Get(ctx, ids[i])
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`{"n":%d}`, i); string(j.Args) != want || j.Priority != 1+i%4 || j.State != idemtype.JobAvailable ||
				j.Kind != "test" || j.Queue != jobs.DefaultQueue || j.MaxAttempts != jobs.DefaultMaxAttempts {
				t.Fatalf("job %d (input %d): %+v", ids[i], i, j)
			}
		}
		_, err = c.EnqueueManyFast(ctx, []jobs.EnqueueParams{{Args: testArgs{}}, {Args: testArgs{}, Opts: &jobs.EnqueueOpts{UniqueKey: "k"}}})
		if !errors.Is(err, idem.ErrInvalid) {
			t.Fatalf("unique key in a fast batch: err = %v, want ErrInvalid", err)
		}
		_, err = c.EnqueueManyFast(ctx, []jobs.EnqueueParams{{Args: testArgs{}}, {Args: testArgs{}, Opts: &jobs.EnqueueOpts{Queue: "nope"}}})
		if !errors.Is(err, jobs.ErrUnknownQueue) {
			t.Fatalf("unknown queue in a fast batch: err = %v", err)
		}
		if got := e.count(t, `SELECT count(*) FROM idem_jobs`); got != n {
			t.Fatalf("%d jobs stored, want %d: a refused batch wrote something", got, n)
		}
		// They run like any job.
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error { return nil }))
		w, err := jobs.New(e.l, &jobs.Config{Workers: ws, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		runUntil(t, w, func() bool { cs, _ := w.Counts(ctx, ""); return cs[idemtype.JobCompleted] == n })
	})
}

// BenchmarkBulkInsert inserts batches of 1,000 jobs three ways, one batch
// per op: EnqueueManyFast (COPY on PostgreSQL, multi-row INSERT on
// SQLite); EnqueueMany (one INSERT … SELECT FROM unnest on PostgreSQL, an
// INSERT per job on SQLite, each returning the row); and a loop of
// EnqueueManyTx calls of one job each inside one transaction (one INSERT
// statement, one round trip per job). jobs/s is per job.
func BenchmarkBulkInsert(b *testing.B) {
	const batch = 1000
	top, cluster := b, (*pgtest.Cluster)(nil)
	for _, driver := range drivers {
		b.Run(driver, func(b *testing.B) {
			for _, how := range []string{"fast", "many", "loop"} {
				b.Run(how, func(b *testing.B) {
					l := openLedger(b, benchURL(b, top, driver, &cluster))
					c, err := jobs.New(l, &jobs.Config{Logger: quietLogger()})
					if err != nil {
						b.Fatal(err)
					}
					params := make([]jobs.EnqueueParams, batch)
					for i := range params {
						params[i] = jobs.EnqueueParams{Args: testArgs{N: i}}
					}
					ctx := context.Background()
					for b.Loop() {
						switch how {
						case "fast":
							_, err = c.EnqueueManyFast(ctx, params)
						case "many":
							_, err = c.EnqueueMany(ctx, params)
						case "loop":
							err = enqueueLoop(ctx, c, params)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
				})
			}
		})
	}
}

// enqueueLoop inserts params one statement each, in one transaction.
func enqueueLoop(ctx context.Context, c *jobs.Client, params []jobs.EnqueueParams) error {
	tx, err := c.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, p := range params {
		if _, err := c.EnqueueManyTx(ctx, tx, []jobs.EnqueueParams{p}); err != nil {
			return err
		}
	}
	return tx.Commit()
}
