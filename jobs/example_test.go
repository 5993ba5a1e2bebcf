package jobs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/jobs"
)

type Welcome struct {
	UserID int `json:"user_id"`
}

func (Welcome) Kind() string { return "welcome" }

// A job whose effect commits together with its completion, enqueued twice
// under one unique key.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-")
	defer os.RemoveAll(dir)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), &idem.Options{Logger: quietLogger()})
	if err != nil {
		panic(err)
	}
	defer l.Close()

	done := make(chan struct{})
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[Welcome]) error {
		defer close(done)
		tx, err := j.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO mails (user_id) VALUES (?)`, j.Args.UserID); err != nil {
			return err
		}
		if err := j.CompleteTx(ctx, tx); err != nil {
			return err
		}
		return tx.Commit()
	}))
	c, err := jobs.New(l, &jobs.Config{Workers: ws, Logger: quietLogger()})
	if err != nil {
		panic(err)
	}
	c.DB().Exec(`CREATE TABLE mails (user_id INTEGER)`)

	for range 2 {
		r, err := c.Enqueue(ctx, Welcome{UserID: 7}, &jobs.EnqueueOpts{UniqueKey: "welcome/7"})
		if err != nil {
			panic(err)
		}
		fmt.Printf("job %d duplicate=%v\n", r.Job.ID, r.Duplicate)
	}
	c.Start(ctx)
	<-done
	stop, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.Stop(stop)

	var mails int
	c.DB().QueryRow(`SELECT count(*) FROM mails`).Scan(&mails)
	j, _ := c.Get(ctx, 1)
	fmt.Printf("job 1 %s, %d mail sent\n", j.State, mails)
	// Output:
	// job 1 duplicate=false
	// job 1 duplicate=true
	// job 1 completed, 1 mail sent
}
