package drivertest

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/syncbuf"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/procsig"
)

// Child processes are the test binary run again (the standard library's
// helper-process idiom): Main sees childRoleEnv and runs the role instead of
// the tests. A child reports on stdout, one JSON event per line.
const (
	childRoleEnv = "IDEM_DRIVERTEST_CHILD"
	childArgsEnv = "IDEM_DRIVERTEST_ARGS"
)

// childArgs is what a child is told, as JSON in childArgsEnv.
type childArgs struct {
	Target     string
	DB         string
	Scope      string
	Keys       []string
	Goroutines int
	LeaseMS    int64
	ClockMS    int64 // a fixed injected clock (Unix ms); 0 means the database clock
	Body       string
}

// event is one line a child writes on stdout.
type event struct {
	Event     string         `json:"event"` // ready, acquired, claimed, done, complete, summary, error
	PID       int            `json:"pid"`
	Key       string         `json:"key,omitempty"`
	Token     int64          `json:"token,omitempty"`
	Outcome   string         `json:"outcome,omitempty"`
	Body      string         `json:"body,omitempty"`
	Err       string         `json:"err,omitempty"`
	LeaseLost bool           `json:"lease_lost,omitempty"`
	Counts    map[string]int `json:"counts,omitempty"`
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan event
	stderr *syncbuf.Buffer
	done   chan struct{}
	err    error // cmd.Wait's answer, set before done closes
}

// startChild runs the test binary as a child in role. env adds variables
// (IDEM_CRASHPOINT=…); crash points are disarmed unless env arms them.
func startChild(t testing.TB, role string, args childArgs, env ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	a, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childArgsEnv+"="+string(a), crashpoint.EnvVar+"=")
	cmd.Env = append(cmd.Env, env...)
	c := &child{cmd: cmd, events: make(chan event, 1<<14), stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = event{Event: "garbage", Err: sc.Text()}
			}
			c.events <- e
		}
		close(c.events)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			cmd.Process.Signal(procsig.Cont) // a stopped child cannot die of SIGKILL until continued on some systems
			cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("child %s (pid %d) stderr:\n%s", role, cmd.Process.Pid, c.stderr.String())
		}
	})
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// next returns the child's next event, which must be named want.
func (c *child) next(t testing.TB, want string) event {
	t.Helper()
	select {
	case e, ok := <-c.events:
		if !ok {
			<-c.done
			t.Fatalf("child %d exited (%v) before reporting %q; stderr:\n%s", c.pid(), c.err, want, c.stderr.String())
		}
		if e.Event != want {
			t.Fatalf("child %d reported %+v, want event %q", c.pid(), e, want)
		}
		return e
	case <-time.After(2 * time.Minute):
		t.Fatalf("child %d reported nothing for 2 minutes (want %q); stderr:\n%s", c.pid(), want, c.stderr.String())
	}
	panic("unreachable")
}

// wait waits for the child to exit and returns its remaining events and
// cmd.Wait's error.
func (c *child) wait(t testing.TB) ([]event, error) {
	t.Helper()
	var evs []event
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case e, ok := <-c.events:
			if !ok {
				<-c.done
				return evs, c.err
			}
			evs = append(evs, e)
		case <-timeout:
			t.Fatalf("child %d still running after 2 minutes; stderr:\n%s", c.pid(), c.stderr.String())
		}
	}
}

// mustExitZero waits for a clean exit.
func (c *child) mustExitZero(t testing.TB) []event {
	t.Helper()
	evs, err := c.wait(t)
	if err != nil {
		t.Fatalf("child %d: %v; stderr:\n%s", c.pid(), err, c.stderr.String())
	}
	for _, e := range evs {
		if e.Event == "error" || e.Event == "garbage" {
			t.Fatalf("child %d reported %+v", c.pid(), e)
		}
	}
	return evs
}

// mustBeKilled waits for the child and checks that it died of SIGKILL, as
// an armed crash point makes it.
func (c *child) mustBeKilled(t testing.TB) {
	t.Helper()
	evs, err := c.wait(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child %d exited with %v and events %+v, want signal: killed; stderr:\n%s", c.pid(), err, evs, c.stderr.String())
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL || err.Error() != "signal: killed" {
		t.Fatalf("child %d: %v, want signal: killed; stderr:\n%s", c.pid(), err, c.stderr.String())
	}
	for _, e := range evs {
		t.Fatalf("killed child %d reported %+v before dying", c.pid(), e)
	}
}

// stop sends SIGSTOP and waits until the kernel shows the child stopped.
func (c *child) stop(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Signal(procsig.Stop); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", c.pid())
	if _, err := os.Stat(stat); err != nil {
		return // no procfs: the signal is delivered before the child runs again anyway
	}
	waitFor(t, "the child to stop", func() bool {
		b, err := os.ReadFile(stat)
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i > 0 && i+2 < len(s) && (s[i+2] == 'T' || s[i+2] == 't')
	})
}

func (c *child) cont(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Signal(procsig.Cont); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
}

// emitter writes events as JSON lines, one at a time.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(ev event) {
	ev.PID = os.Getpid()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.enc.Encode(ev)
}

// runChild is a child process's main. It returns the exit code.
func runChild(role string, targets []Target) int {
	out := &emitter{enc: json.NewEncoder(os.Stdout)}
	var a childArgs
	if err := json.Unmarshal([]byte(os.Getenv(childArgsEnv)), &a); err != nil {
		out.emit(event{Event: "error", Err: fmt.Sprintf("bad %s: %v", childArgsEnv, err)})
		return 2
	}
	ctx := context.Background()
	opts := &idem.Options{Logger: testLogger()}
	if a.LeaseMS > 0 {
		opts.Lease = time.Duration(a.LeaseMS) * time.Millisecond
	}
	if a.ClockMS != 0 {
		opts.Clock = fixedClock(time.UnixMilli(a.ClockMS))
	}
	i := slices.IndexFunc(targets, func(tg Target) bool { return tg.Name == a.Target })
	if i < 0 {
		out.emit(event{Event: "error", Err: fmt.Sprintf("no target %q given to drivertest.Main", a.Target)})
		return 2
	}
	l, err := targets[i].openLedger(ctx, a.DB, opts)
	if err != nil {
		out.emit(event{Event: "error", Err: err.Error()})
		return 1
	}
	defer l.Close()
	switch role {
	case "race":
		err = childRace(ctx, l, a, out)
	case "do":
		err = childDo(ctx, l, a, out)
	case "hold":
		err = childHold(ctx, l, a, out)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		out.emit(event{Event: "error", Err: err.Error()})
		return 1
	}
	return 0
}

// childRace waits for the parent's go (stdin closed), then races its
// goroutines over every key. Each acquisition writes its effect with
// CompleteTx and is reported; the other outcomes are counted.
func childRace(ctx context.Context, l *idem.Ledger, a childArgs, out *emitter) error {
	out.emit(event{Event: "ready"})
	io.Copy(io.Discard, os.Stdin) // the parent closes stdin to release every child at once

	var (
		mu     sync.Mutex
		counts = map[string]int{}
		errs   []error
		wg     sync.WaitGroup
	)
	start := make(chan struct{})
	for g := range a.Goroutines {
		wg.Go(func() {
			<-start
			for i := range a.Keys {
				key := a.Keys[(i+g*7+os.Getpid())%len(a.Keys)]
				c, err := l.Claim(ctx, idem.Op{Scope: a.Scope, Key: key, Fingerprint: "fp"})
				if err == nil && c.Outcome == idem.Acquired {
					err = completeWithEffect(ctx, l, c, idem.Result{Status: 200, Body: []byte("done " + key)})
					if err == nil {
						out.emit(event{Event: "acquired", Key: key, Token: c.Token})
					}
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("key %s: %w", key, err))
				} else {
					counts[c.Outcome.String()]++
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	out.emit(event{Event: "summary", Counts: counts})
	return errors.Join(errs...)
}

// childDo runs one l.Do whose Func writes an effect row; the parent arms a
// crash point through the environment.
func childDo(ctx context.Context, l *idem.Ledger, a childArgs, out *emitter) error {
	key := a.Keys[0]
	res, err := l.Do(ctx, idem.Op{Scope: a.Scope, Key: key, Fingerprint: "fp"}, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		if err := insertEffect(ctx, l, tx, a.Scope, key, 0); err != nil {
			return nil, err
		}
		return []byte(a.Body), nil
	})
	if err != nil {
		return err
	}
	out.emit(event{Event: "done", Key: key, Body: string(res.Body)})
	return nil
}

// childHold claims a key, reports it, waits for the parent's go on stdin
// (the parent stops it meanwhile), then tries to complete and reports how
// that went.
func childHold(ctx context.Context, l *idem.Ledger, a childArgs, out *emitter) error {
	key := a.Keys[0]
	c, err := l.Claim(ctx, idem.Op{Scope: a.Scope, Key: key, Fingerprint: "fp"})
	if err != nil {
		return err
	}
	out.emit(event{Event: "claimed", Key: key, Token: c.Token, Outcome: c.Outcome.String()})
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("waiting for go: %q, %v", line, err)
	}
	err = l.Complete(ctx, c, idem.Result{Status: 200, Body: []byte(a.Body)})
	ev := event{Event: "complete", Key: key, Token: c.Token, LeaseLost: errors.Is(err, idem.ErrLeaseLost)}
	if err != nil {
		ev.Err = err.Error()
	}
	out.emit(ev)
	return nil
}
