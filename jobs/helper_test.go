package jobs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/jobs"
)

// A worker process is this test binary re-executed with helperEnv set to a
// mode; TestMain hands it to helperMain before any test runs.
const (
	helperEnv    = "IDEM_JOBS_HELPER"
	helperURL    = "IDEM_JOBS_HELPER_URL"
	helperName   = "IDEM_JOBS_HELPER_NAME"
	helperLease  = "IDEM_JOBS_HELPER_LEASE"
	helperPoll   = "IDEM_JOBS_HELPER_POLL"
	helperSlots  = "IDEM_JOBS_HELPER_SLOTS"
	helperPeriod = "IDEM_JOBS_HELPER_PERIOD"
	modeWorker   = "worker"   // work the default queue with effectWorker until SIGTERM
	modeHoldStop = "hold"     // claim one job, say so, wait for a line on stdin, then try to complete it
	modePeriodic = "periodic" // as worker, and enqueue periodic job "tick" every IDEM_JOBS_HELPER_PERIOD
)

// helperMain runs a worker process and exits.
func helperMain() {
	if os.Getenv(helperEnv) == modeLimits {
		limitsMain() // limits_test.go
	}
	ctx := context.Background()
	lease, _ := time.ParseDuration(os.Getenv(helperLease))
	poll, _ := time.ParseDuration(os.Getenv(helperPoll))
	slots, _ := strconv.Atoi(os.Getenv(helperSlots))
	name := os.Getenv(helperName)
	l, err := dburl.Open(ctx, os.Getenv(helperURL), &idem.Options{Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: open:", err)
		os.Exit(3)
	}
	ws := jobs.NewWorkers()
	done := make(chan struct{})
	var periodic []jobs.PeriodicJob
	switch os.Getenv(helperEnv) {
	case modeWorker:
		jobs.AddWorker(ws, effectWorker(name))
	case modePeriodic:
		jobs.AddWorker(ws, effectWorker(name))
		period, _ := time.ParseDuration(os.Getenv(helperPeriod))
		periodic = []jobs.PeriodicJob{{Name: "tick", Schedule: jobs.Every(period), RunOnStart: true,
			Args: func() (jobs.Args, *jobs.EnqueueOpts) { return testArgs{}, nil }}}
	case modeHoldStop:
		var once sync.Once
		jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[testArgs]) error {
			fmt.Printf("holding %d %d\n", j.ID, j.Attempt)
			bufio.NewReader(os.Stdin).ReadString('\n')
			// Try to complete whatever the context says: the fence, not the
			// context, must be what stops a stale worker.
			ctx = context.WithoutCancel(ctx)
			err := completeWithEffect(ctx, j, name)
			fmt.Printf("complete: %v\n", err)
			once.Do(func() { close(done) })
			return err
		}))
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode")
		os.Exit(3)
	}
	c, err := jobs.New(l, &jobs.Config{
		Workers: ws, Lease: lease, PollInterval: poll, ID: name, Logger: quietLogger(),
		Queues:       map[string]jobs.QueueConfig{jobs.DefaultQueue: {MaxWorkers: slots}},
		PeriodicJobs: periodic,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	if err := c.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper: start:", err)
		os.Exit(3)
	}
	if periodic != nil {
		fmt.Println("started")
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	select {
	case <-term:
	case <-done:
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c.Stop(stopCtx)
	l.Close()
	os.Exit(0)
}

// completeWithEffect writes an effect row and completes j in one
// transaction.
func completeWithEffect(ctx context.Context, j *jobs.Job[testArgs], worker string) error {
	tx, err := j.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, rebindFor(j.DB(), `INSERT INTO effects (job_id, worker, attempt) VALUES (?, ?, ?)`),
		j.ID, worker, j.Attempt); err != nil {
		return err
	}
	if err := j.CompleteTx(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

// child is one running worker process.
type child struct {
	name   string
	cmd    *exec.Cmd
	armed  string // IDEM_CRASHPOINT it was started with
	stderr *bytes.Buffer
	exited chan struct{}
	err    error // set when exited closes
}

type childOpts struct {
	mode, url, name, crash string
	lease, poll, period    time.Duration
	slots                  int
	stdin                  bool
}

func startChild(t testing.TB, o childOpts) (*child, *bufio.Reader, *os.File) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"="+o.mode, helperURL+"="+o.url, helperName+"="+o.name,
		helperLease+"="+o.lease.String(), helperPoll+"="+o.poll.String(), helperSlots+"="+strconv.Itoa(o.slots),
		helperPeriod+"="+o.period.String(),
		crashpoint.EnvVar+"="+o.crash, "IDEM_TEST_LOG="+os.Getenv("IDEM_TEST_LOG"))
	c := &child{name: o.name, cmd: cmd, armed: o.crash, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: c.stderr}
	var stdin *os.File
	if o.stdin {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, stdin = r, w
		t.Cleanup(func() { w.Close() })
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if r, ok := cmd.Stdin.(*os.File); ok {
		r.Close()
	}
	stdout := bufio.NewReader(out)
	if !o.stdin {
		go func() { // nobody reads it: drain so the child never blocks
			for {
				if _, err := stdout.ReadString('\n'); err != nil {
					return
				}
			}
		}()
	}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.exited
	})
	return c, stdout, stdin
}

// killed reports whether the child died of SIGKILL (ours or a crash
// point's).
func (c *child) killed() bool {
	ee, ok := c.err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
