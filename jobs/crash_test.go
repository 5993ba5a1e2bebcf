package jobs_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/jobs"
)

// stressParams sizes TestWorkersKilled. CI runs a small default; the full
// run of the issue is IDEM_JOBS_STRESS=1 (8 processes, 10,000 jobs). Each
// knob can also be set alone: IDEM_JOBS_PROCS, IDEM_JOBS_N, IDEM_JOBS_KILLS
// (parent SIGKILLs), IDEM_JOBS_CRASHES (children armed with a crash point),
// IDEM_JOBS_SEED.
type stressParams struct {
	procs, jobs, kills, crashes, slots int
	lease, poll                        time.Duration
	seed                               uint64
}

func stressFromEnv(t *testing.T) stressParams {
	p := stressParams{procs: 4, jobs: 2000, kills: 4, crashes: 6, slots: 4, lease: 2 * time.Second, poll: 100 * time.Millisecond}
	if os.Getenv("IDEM_JOBS_STRESS") == "1" {
		p.procs, p.jobs, p.kills, p.crashes = 8, 10000, 16, 24
	}
	for env, dst := range map[string]*int{"IDEM_JOBS_PROCS": &p.procs, "IDEM_JOBS_N": &p.jobs, "IDEM_JOBS_KILLS": &p.kills, "IDEM_JOBS_CRASHES": &p.crashes} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a number", env, v)
			}
			*dst = n
		}
	}
	p.seed = rand.Uint64()
	if v := os.Getenv("IDEM_JOBS_SEED"); v != "" {
		p.seed, _ = strconv.ParseUint(v, 10, 64)
	}
	return p
}

var crashPoints = []string{crashpoint.JobAfterClaim, crashpoint.JobBeforeCommit, crashpoint.JobAfterCommit}

// TestWorkersKilled runs worker processes over one queue while killing
// them: at named crash points (after claim, after the effect before its
// commit, after the commit) and by SIGKILL from here at random moments,
// restarting each. At the end every job's effect exists exactly once,
// nothing is lost, and no job ever stayed running much past its lease.
func TestWorkersKilled(t *testing.T) {
	p := stressFromEnv(t)
	forEachDriver(t, func(t *testing.T, e *env) {
		rng := rand.New(rand.NewPCG(p.seed, 1))
		t.Logf("seed %d (IDEM_JOBS_SEED): %d processes × %d slots, %d jobs, %d kills, %d crash points, lease %v, poll %v",
			p.seed, p.procs, p.slots, p.jobs, p.kills, p.crashes, p.lease, p.poll)
		ctx := context.Background()
		producer, err := jobs.New(e.l, &jobs.Config{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < p.jobs; i += 500 {
			var batch []jobs.EnqueueParams
			for n := i; n < min(i+500, p.jobs); n++ {
				batch = append(batch, jobs.EnqueueParams{Args: testArgs{N: n}, Opts: &jobs.EnqueueOpts{UniqueKey: "job-" + strconv.Itoa(n)}})
			}
			if _, err := producer.EnqueueMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}

		start := time.Now()
		crashesLeft, spawned := p.crashes, 0
		spawn := func() *child {
			spawned++
			o := childOpts{mode: modeWorker, url: e.url, name: fmt.Sprintf("w%d", spawned), lease: p.lease, poll: p.poll, slots: p.slots}
			if crashesLeft > 0 {
				crashesLeft--
				o.crash = fmt.Sprintf("%s:%d", crashPoints[rng.IntN(len(crashPoints))], 1+rng.IntN(max(p.jobs/p.procs/4, 1)))
			}
			c, _, _ := startChild(t, o)
			return c
		}
		kids := make([]*child, p.procs)
		for i := range kids {
			kids[i] = spawn()
		}
		var (
			killsLeft   = p.kills
			crashDeaths = map[string]int{}
			maxOverdue  time.Duration
			deadline    = start.Add(3 * time.Minute)
		)
		for {
			done := e.count(t, `SELECT count(*) FROM idem_jobs WHERE state = 'completed'`)
			if done == p.jobs {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d jobs completed after %v", done, p.jobs, time.Since(start))
			}
			if overdue := oldestExpiredLease(t, e); overdue > maxOverdue {
				maxOverdue = overdue
			}
			// Kill at evenly spread points of progress, a random victim.
			if killsLeft > 0 && done >= (p.kills-killsLeft+1)*p.jobs/(p.kills+1) {
				killsLeft--
				kids[rng.IntN(len(kids))].cmd.Process.Signal(syscall.SIGKILL)
			}
			for i, k := range kids {
				select {
				case <-k.exited:
				default:
					continue
				}
				if !k.killed() {
					t.Fatalf("worker %s exited without being killed: %v\n%s", k.name, k.err, k.stderr)
				}
				if k.armed != "" {
					crashDeaths[strings.Split(k.armed, ":")[0]]++
				}
				kids[i] = spawn()
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(start)
		for _, k := range kids {
			k.cmd.Process.Signal(syscall.SIGKILL)
			<-k.exited
		}

		if n := e.count(t, `SELECT count(*) FROM effects`); n != p.jobs {
			t.Errorf("effects = %d, want %d", n, p.jobs)
		}
		if n := e.count(t, `SELECT count(*) FROM (SELECT job_id FROM effects GROUP BY job_id HAVING count(*) > 1) d`); n != 0 {
			t.Errorf("%d jobs have more than one effect", n)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs j WHERE NOT EXISTS (SELECT 1 FROM effects f WHERE f.job_id = j.id)`); n != 0 {
			t.Errorf("%d jobs have no effect", n)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs WHERE state <> 'completed'`); n != 0 {
			t.Errorf("%d jobs not completed", n)
		}
		// The effect row carries the attempt that wrote it: it must be the
		// attempt that completed the job.
		if n := e.count(t, `SELECT count(*) FROM effects f JOIN idem_jobs j ON j.id = f.job_id WHERE f.attempt <> j.attempt`); n != 0 {
			t.Errorf("%d effects were written by an attempt other than the completing one", n)
		}
		reruns := e.count(t, `SELECT coalesce(sum(attempt - 1), 0) FROM idem_jobs`)
		// Not stuck: a dead worker's job must be rescued once its lease
		// ends. How soon is a measurement (logged below), not an assertion:
		// on a loaded 2-core machine a rescue waits for the scheduler, so
		// the bound is a liveness bound, far above any scheduling delay.
		if bound := time.Minute; maxOverdue > bound {
			t.Errorf("a job stayed running %v past its lease (liveness bound %v)", maxOverdue, bound)
		}
		t.Logf("%d jobs in %v (%.0f jobs/s); %d processes started, kills by crash point %v; %d re-runs; max time running past lease %v",
			p.jobs, took.Round(time.Millisecond), float64(p.jobs)/took.Seconds(), spawned, crashDeaths, reruns, maxOverdue.Round(time.Millisecond))
	})
}

// oldestExpiredLease is how long ago the earliest lease of a still-running
// job ended (0 if none has).
func oldestExpiredLease(t *testing.T, e *env) time.Duration {
	t.Helper()
	var ms int64
	var query string
	if e.driver == "postgres" {
		query = `SELECT coalesce(max(extract(epoch FROM now() - lease_until) * 1000), 0)::bigint FROM idem_jobs WHERE state = 'running' AND lease_until < now()`
	} else {
		query = `SELECT coalesce(max(CAST(unixepoch('subsec') * 1000 AS INTEGER) - lease_until), 0) FROM idem_jobs WHERE state = 'running' AND lease_until < CAST(unixepoch('subsec') * 1000 AS INTEGER)`
	}
	if err := e.db.QueryRow(query).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestStaleWorkerCannotComplete pauses a worker (SIGSTOP) while it holds a
// job, for three times its lease; another worker re-claims the job and
// completes it; then the paused worker resumes (SIGCONT) and tries to
// complete: it is refused with ErrLeaseLost, and there is one effect.
func TestStaleWorkerCannotComplete(t *testing.T) {
	const lease = time.Second
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		producer, err := jobs.New(e.l, &jobs.Config{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		res, err := producer.Enqueue(ctx, testArgs{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		stale, out, in := startChild(t, childOpts{mode: modeHoldStop, url: e.url, name: "stale", lease: lease, poll: 50 * time.Millisecond, slots: 1, stdin: true})
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("stale worker: %v", err)
		}
		if want := fmt.Sprintf("holding %d 1\n", res.Job.ID); line != want {
			t.Fatalf("stale worker said %q, want %q", line, want)
		}
		if err := stale.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()

		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, effectWorker("successor"))
		successor, err := jobs.New(e.l, &jobs.Config{Workers: ws, Lease: lease, PollInterval: 50 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := successor.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			r, err := successor.Get(ctx, res.Job.ID)
			return err == nil && r.State == idemtype.JobCompleted
		})
		if err := successor.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(paused.Add(3 * lease)))

		if err := stale.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(in, "go")
		line, err = out.ReadString('\n')
		if err != nil {
			t.Fatalf("stale worker after SIGCONT: %v", err)
		}
		if !strings.Contains(line, jobs.ErrLeaseLost.Error()) {
			t.Fatalf("stale worker's completion: %q, want %v", line, jobs.ErrLeaseLost)
		}
		<-stale.exited
		if n := e.count(t, `SELECT count(*) FROM effects`); n != 1 {
			t.Fatalf("effects = %d, want 1", n)
		}
		if n := e.count(t, `SELECT count(*) FROM effects WHERE worker = 'successor' AND attempt = 2`); n != 1 {
			t.Fatalf("the effect is not the successor's (attempt 2)")
		}
		r, err := successor.Get(ctx, res.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != idemtype.JobCompleted || r.Attempt != 2 || len(r.Errors) != 1 || !strings.Contains(r.Errors[0].Error, "lease expired") {
			t.Fatalf("job after takeover: state %s attempt %d errors %+v", r.State, r.Attempt, r.Errors)
		}
	})
}
