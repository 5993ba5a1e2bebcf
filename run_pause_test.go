package idem_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// A pausing child is this test binary re-executed with runPauseEnv set to
// a database URL: it books the ride runChildKey with the lease childLease
// and, at runPauseAt ("charge": inside the external charge step, after the
// provider call; "receipt": inside the receipt transaction step, after its
// write), prints "paused" and waits for a line on stdin. Its run's outcome
// goes to stdout: "done", or "refused: lease lost".
const (
	runPauseEnv = "IDEM_RUN_PAUSE_URL"
	runPauseAt  = "IDEM_RUN_PAUSE_AT"
)

func runPauseChildMain() int {
	ctx := context.Background()
	l, err := dburl.Open(ctx, os.Getenv(runPauseEnv), &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		return 3
	}
	defer l.Close()
	in := bufio.NewReader(os.Stdin)
	pause := func() error {
		fmt.Println("paused")
		_, err := in.ReadString('\n')
		return err
	}
	var h hooks
	switch os.Getenv(runPauseAt) {
	case "charge":
		h.afterCharge = pause
	case "receipt":
		h.receiptTx = func(ctx context.Context, tx *sql.Tx) error {
			if l.Driver().Name() == "postgres" {
				// The transaction stays open while the process is stopped:
				// keep the server from ending it (the test cluster ends
				// idle transactions after 5s), so that only the fence can
				// refuse the stale commit.
				if _, err := tx.ExecContext(ctx, `SET LOCAL idle_in_transaction_session_timeout = 0`); err != nil {
					return err
				}
			}
			return pause()
		}
	}
	_, booking := newBooking(l, func() hooks { return h })
	op := idem.Op{Key: os.Getenv(runChildKey), Fingerprint: "fp", Lease: childLease}
	_, err = booking.Run(ctx, l, op, ride{ID: op.Key, Amount: 1200})
	switch {
	case err == nil:
		fmt.Println("done")
		return 0
	case errors.Is(err, idem.ErrLeaseLost):
		fmt.Println("refused: lease lost")
		fmt.Fprintln(os.Stderr, "child: run:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "child: run:", err)
	return 2
}

// TestRunPausedPastLease stops a real process with SIGSTOP in the middle
// of a step, past its lease, and lets it go on after another holder took
// the run over: the stale holder's checkpoint (or its transaction step's
// commit) is refused by the fence, and each step's effect exists once.
//
// charge: stopped inside the external step, after the provider call; the
// parent resumes the run to completion (its lookup finds the charge), then
// continues the child, whose checkpoint is refused before it reaches the
// receipt transaction step. receipt: stopped inside the transaction step
// after its write; on PostgreSQL the parent resumes and completes the run
// meanwhile, and the child's commit is refused. On SQLite the stopped
// child holds the database's only write lock, so nobody can take over
// until it goes on: it is continued once its lease has ended by the
// database clock, its commit is refused all the same, and the parent
// resumes after it.
func TestRunPausedPastLease(t *testing.T) {
	for _, drv := range []string{"sqlite", "postgres"} {
		for _, at := range []string{"charge", "receipt"} {
			t.Run(drv+"/"+at, func(t *testing.T) {
				t.Parallel()
				url := dbURL(t, drv)
				f := &runFixture{t: t, url: url}
				l := f.open(nil)
				createRideTables(t, l)
				_, booking := newBooking(l, func() hooks { return hooks{} })
				key := "paused-" + at
				op := idem.Op{Key: key, Fingerprint: "fp"}

				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), runPauseEnv+"="+url, runChildKey+"="+key, runPauseAt+"="+at)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				lines := make(chan string, 4)
				go func() {
					sc := bufio.NewScanner(stdout)
					for sc.Scan() {
						lines <- sc.Text()
					}
					close(lines)
					exited <- cmd.Wait()
				}()
				cont := sync.OnceFunc(func() { cmd.Process.Signal(syscall.SIGCONT) })
				t.Cleanup(func() { // never leave a stopped or running child behind
					cont()
					cmd.Process.Kill()
				})
				next := func(what string) string {
					t.Helper()
					select {
					case line, ok := <-lines:
						if !ok {
							t.Fatalf("child ended before %s:\n%s", what, stderr.String())
						}
						return line
					case <-time.After(time.Minute):
						t.Fatalf("no %s from the child in a minute", what)
					}
					return ""
				}
				if line := next("pause"); line != "paused" {
					t.Fatalf("child said %q, want paused:\n%s", line, stderr.String())
				}
				if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				waitStale(t, l, key) // the stopped child heartbeats no more
				holdsWriter := drv == "sqlite" && at == "receipt"
				resume := func() {
					t.Helper()
					res, err := booking.Run(t.Context(), l, op, ride{ID: key, Amount: 1200})
					if err != nil || res.Replayed || res.Status != 201 {
						t.Fatalf("resume: %+v, %v", res, err)
					}
				}
				if !holdsWriter {
					resume()
				}
				cont()
				if _, err := io.WriteString(stdin, "go\n"); err != nil {
					t.Fatal(err)
				}
				stdin.Close()
				if line := next("outcome"); line != "refused: lease lost" {
					t.Fatalf("stale child: %q, want its step refused:\n%s", line, stderr.String())
				}
				select {
				case err := <-exited:
					var ee *exec.ExitError
					if !errors.As(err, &ee) || ee.ExitCode() != 1 {
						t.Fatalf("child exit: %v, want 1:\n%s", err, stderr.String())
					}
				case <-time.After(time.Minute):
					t.Fatal("child did not exit in a minute")
				}
				if !strings.Contains(stderr.String(), "lease lost") {
					t.Errorf("child's error: %s", stderr.String())
				}
				if holdsWriter {
					resume()
				}
				wantOnce(t, l, key)
				if _, _, _, calls := effects(t, l, key); calls != 1 {
					t.Errorf("%d provider calls, want 1", calls)
				}
				rec, err := l.Get(t.Context(), "", key)
				if err != nil || rec.State != "succeeded" || rec.Attempt != 2 {
					t.Errorf("record %+v, %v; want succeeded by attempt 2", rec, err)
				}
				if res, err := booking.Run(t.Context(), l, op, ride{ID: key, Amount: 1200}); err != nil || !res.Replayed {
					t.Errorf("retry: %+v, %v; want the stored result", res, err)
				}
			})
		}
	}
}
