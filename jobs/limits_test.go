package jobs_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// modeLimits is a worker process for TestGlobalLimits: it works the three
// limited queues of limitQueues until SIGTERM.
const modeLimits = "limits"

// The queues of TestGlobalLimits: "limited" runs at most 2 jobs at once
// across all processes, "parted" at most 1 per partition key, "rated" at
// most 5 claims per 250ms window.
var limitQueues = map[string]jobs.QueueConfig{
	"limited": {MaxWorkers: 4, Limits: jobs.Limits{Concurrency: 2}},
	"parted":  {MaxWorkers: 4, Limits: jobs.Limits{Concurrency: 1, PerPartition: true}},
	"rated":   {MaxWorkers: 4, Limits: jobs.Limits{Rate: 5, RateInterval: 250 * time.Millisecond}},
}

const rateWindowMS = 250

// limitWorker counts concurrent runs in the conc table (one row per
// counter: "all" for the limited queue, "p:<key>" per partition), keeping
// the highest count seen; each update is one statement, atomic in the
// database.
func limitWorker() jobs.Worker[testArgs] {
	return jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
		var name string
		switch j.Queue {
		case "limited":
			name = "all"
		case "parted":
			name = "p:" + j.PartitionKey
		default:
			return nil
		}
		ctx = context.WithoutCancel(ctx)
		db := j.DB()
		greatest := "max"
		if rebindFor(db, "?") != "?" {
			greatest = "greatest"
		}
		if _, err := db.ExecContext(ctx, rebindFor(db, `UPDATE conc SET cur = cur + 1, mx = `+greatest+`(mx, cur + 1) WHERE name = ?`), name); err != nil {
			return err
		}
		time.Sleep(time.Duration(5+j.Args.N%10) * time.Millisecond)
		_, err := db.ExecContext(ctx, rebindFor(db, `UPDATE conc SET cur = cur - 1 WHERE name = ?`), name)
		return err
	})
}

func limitsMain() {
	ctx := context.Background()
	l, err := dburl.Open(ctx, os.Getenv(helperURL), &idem.Options{Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: open:", err)
		os.Exit(3)
	}
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, limitWorker())
	c, err := jobs.New(l, &jobs.Config{Workers: ws, ID: os.Getenv(helperName), PollInterval: 50 * time.Millisecond,
		Logger: quietLogger(), Queues: limitQueues})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper: start:", err)
		os.Exit(3)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	<-term
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.Stop(stopCtx)
	l.Close()
	os.Exit(0)
}

// Three worker processes, each with 4 slots per queue, never run more
// than a queue's global concurrency limit at once (counted by the jobs
// themselves in a shared table, with the highest count kept), nor more
// than one job per partition on a per-partition queue, nor more claims
// per rate window than the rate limit (counted from the database's claim
// times).
func TestGlobalLimits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.exec(t, `CREATE TABLE conc (name TEXT PRIMARY KEY, cur INTEGER NOT NULL, mx INTEGER NOT NULL)`)
		parts := []string{"a", "b", "c"}
		e.exec(t, `INSERT INTO conc (name, cur, mx) VALUES ('all', 0, 0), ('p:a', 0, 0), ('p:b', 0, 0), ('p:c', 0, 0)`)
		producer, err := jobs.New(e.l, &jobs.Config{Logger: quietLogger(), Queues: limitQueues})
		if err != nil {
			t.Fatal(err)
		}
		const perQueue = 30
		var params []jobs.EnqueueParams
		for i := range perQueue {
			params = append(params,
				jobs.EnqueueParams{Args: testArgs{N: i}, Opts: &jobs.EnqueueOpts{Queue: "limited"}},
				jobs.EnqueueParams{Args: testArgs{N: i}, Opts: &jobs.EnqueueOpts{Queue: "parted", PartitionKey: parts[i%3]}},
				jobs.EnqueueParams{Args: testArgs{N: i}, Opts: &jobs.EnqueueOpts{Queue: "rated"}})
		}
		if _, err := producer.EnqueueManyFast(ctx, params); err != nil {
			t.Fatal(err)
		}
		var children []*child
		for i := range 3 {
			c, _, _ := startChild(t, childOpts{mode: modeLimits, url: e.url, name: fmt.Sprintf("w%d", i)})
			children = append(children, c)
		}
		waitFor(t, 4*time.Minute, func() bool {
			for _, c := range children {
				select {
				case <-c.exited:
					t.Fatalf("worker %s exited: %v\n%s", c.name, c.err, c.stderr)
				default:
				}
			}
			cs, err := producer.Counts(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			return cs[idemtype.JobCompleted] == 3*perQueue
		})
		for _, c := range children {
			c.cmd.Process.Signal(syscall.SIGTERM)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs WHERE attempt <> 1`); n != 0 {
			t.Fatalf("%d jobs ran more than once: a worker's write failed", n)
		}
		if mx := e.count(t, `SELECT mx FROM conc WHERE name = 'all'`); mx > 2 || mx < 1 {
			t.Fatalf("the limited queue ran %d jobs at once; the limit is 2", mx)
		} else {
			t.Logf("limited queue: at most %d at once (limit 2)", mx)
		}
		if mx := e.count(t, `SELECT max(mx) FROM conc WHERE name LIKE 'p:%'`); mx != 1 {
			t.Fatalf("a partition ran %d jobs at once; the limit is 1", mx)
		}
		window := `attempted_at / ` + fmt.Sprint(rateWindowMS)
		if e.driver == "postgres" {
			window = `floor(extract(epoch FROM attempted_at) * 1000 / ` + fmt.Sprint(rateWindowMS) + `)`
		}
		most := e.count(t, `SELECT max(n) FROM (SELECT count(*) AS n FROM idem_jobs WHERE queue = 'rated' GROUP BY `+window+`) w`)
		windows := e.count(t, `SELECT count(DISTINCT `+window+`) FROM idem_jobs WHERE queue = 'rated'`)
		if most > 5 {
			t.Fatalf("%d claims of the rated queue in one window; the limit is 5", most)
		}
		t.Logf("rated queue: at most %d claims per window over %d windows (limit 5)", most, windows)
	})
}
