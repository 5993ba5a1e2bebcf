package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/jobs"
)

// Jobs through PgBouncer, in session and in transaction pooling mode: two
// producers enqueue the same unique jobs at once (half inside their own
// transactions), two worker clients run them, each exactly once, with the
// effect and the completion in one transaction. In session mode the
// workers LISTEN through PgBouncer (that a notice crosses it is proven in
// driver/postgres, TestPgBouncerListen) and poll every 2s, as a notice can
// be skipped by the client's per-queue notify limit; in transaction mode
// (pooler=transaction) there is no LISTEN and they poll every 100ms.
func TestPgBouncerJobs(t *testing.T) {
	for _, mode := range []pgtest.PoolMode{pgtest.SessionPooling, pgtest.TransactionPooling} {
		t.Run(string(mode), func(t *testing.T) {
			_, url := pgtest.NewPgBouncer(t, mode)
			poll := 2 * time.Second
			if mode == pgtest.TransactionPooling {
				url += "&pooler=transaction"
				poll = 100 * time.Millisecond
			}
			l := openLedger(t, url)
			e := &env{driver: "postgres", url: url, l: l, db: l.Driver().DB()}
			e.exec(t, `CREATE TABLE effects (job_id BIGINT NOT NULL, worker TEXT NOT NULL, attempt INTEGER NOT NULL)`)
			ctx := context.Background()

			var producers []*jobs.Client
			for range 2 {
				p, err := jobs.New(openLedger(t, url), &jobs.Config{Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				producers = append(producers, p)
			}
			for i := range 2 {
				ws := jobs.NewWorkers()
				jobs.AddWorker(ws, effectWorker(fmt.Sprint("w", i)))
				w, err := jobs.New(openLedger(t, url), &jobs.Config{Workers: ws, Lease: 2 * time.Second,
					PollInterval: poll, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Stop(context.Background()) })
			}

			const perRound = 60
			for round := range 2 {
				if round > 0 {
					time.Sleep(300 * time.Millisecond) // the workers go idle
				}
				inserted := make([]int, perRound)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for _, p := range producers {
					wg.Go(func() {
						for i := range perRound {
							opts := &jobs.EnqueueOpts{UniqueKey: fmt.Sprintf("r%d-%d", round, i)}
							var res *jobs.EnqueueResult
							var err error
							if i%2 == 0 {
								res, err = p.Enqueue(ctx, testArgs{N: i}, opts)
							} else {
								tx, terr := p.DB().BeginTx(ctx, nil)
								if terr != nil {
									t.Error(terr)
									return
								}
								if res, err = p.EnqueueTx(ctx, tx, testArgs{N: i}, opts); err == nil {
									err = tx.Commit()
								} else {
									tx.Rollback()
								}
							}
							if err != nil {
								t.Errorf("enqueue %s: %v", opts.UniqueKey, err)
								return
							}
							if !res.Duplicate {
								mu.Lock()
								inserted[i]++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				for i, n := range inserted {
					if n != 1 {
						t.Fatalf("round %d job %d inserted %d times", round, i, n)
					}
				}
				want := perRound * (round + 1)
				waitFor(t, 30*time.Second, func() bool {
					return e.count(t, `SELECT count(*) FROM idem_jobs WHERE state = 'completed'`) == want
				})
				if n := e.count(t, `SELECT count(*) FROM effects`); n != want {
					t.Fatalf("round %d: %d effects, want %d", round, n, want)
				}
				if n := e.count(t, `SELECT count(DISTINCT job_id) FROM effects`); n != want {
					t.Fatalf("round %d: %d distinct effects, want %d", round, n, want)
				}
			}
		})
	}
}
