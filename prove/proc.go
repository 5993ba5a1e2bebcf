package prove

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/procsig"
	"github.com/idemdev/idem/internal/syncbuf"
)

// proc is a running worker process.
type proc struct {
	t      *trial
	cmd    *exec.Cmd
	pid    int
	stdin  io.WriteCloser
	ctl    chan wireEvent // events that are not attempts: ready, listening, claimed, error
	stderr *syncbuf.Tail
	done   chan struct{}
	err    error // cmd.Wait's answer, set before done closes
}

// start runs a worker with spec s, crash points armed by crash (the
// IDEM_CRASHPOINT syntax; "" arms none).
func (t *trial) start(ctx context.Context, s spec, crash string) (*proc, error) {
	s.DB, s.Scope, s.NoGuard = cmp.Or(t.workerDB, t.r.db.url), t.scope, t.r.cfg.NoGuard
	if s.LeaseMS == 0 {
		s.LeaseMS = t.lease.Milliseconds()
	}
	if s.DeadlineMS == 0 {
		s.DeadlineMS = t.deadline.Milliseconds()
	}
	line, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	p, err := t.spawn(ctx, t.r.cfg.Worker, crash, true, nil)
	if err != nil {
		return nil, err
	}
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		p.kill()
		<-p.done
		return nil, fmt.Errorf("worker %d: sending its orders: %w (stderr: %s)", p.pid, err, p.stderr)
	}
	return p, nil
}

// spawn starts argv with crash points armed by crash. With events, its
// stdout is a worker's event stream; otherwise it is discarded. Its stderr
// is kept (the tail, for failure messages) and also copied to also.
func (t *trial) spawn(ctx context.Context, argv []string, crash string, events bool, also io.Writer) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	// No IDEM_* setting of the user's (IDEM_DB, IDEM_LEASE, …) may change
	// what a worker or a gateway does: only the arguments say.
	cmd.Env = append(withoutIdemEnv(os.Environ()), WorkerEnv+"=1", crashpoint.EnvVar+"="+crash)
	p := &proc{t: t, cmd: cmd, ctl: make(chan wireEvent, 64), stderr: &syncbuf.Tail{Max: 8 << 10}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if also != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, also)
	}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	p.pid = cmd.Process.Pid
	t.track(p)
	if events {
		go p.read(stdout)
	} else {
		go func() {
			io.Copy(io.Discard, stdout)
			p.exited()
		}()
	}
	go func() {
		select {
		case <-ctx.Done():
			p.kill()
		case <-p.done:
		}
	}()
	return p, nil
}

// withoutIdemEnv drops every IDEM_ variable from env.
func withoutIdemEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "IDEM_") {
			out = append(out, kv)
		}
	}
	return out
}

// read turns the worker's stdout into history events and control events,
// then waits for the process and ends its unanswered attempts as Unknown.
func (p *proc) read(stdout io.Reader) {
	prefix := fmt.Sprintf("pid %d/", p.pid)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e wireEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			p.t.fail("worker %d wrote garbage: %q", p.pid, sc.Text())
			continue
		}
		proc := fmt.Sprintf("%sg%d", prefix, e.G)
		switch e.Ev {
		case evInvoke:
			p.t.record(Event{Proc: proc, Op: e.Key, Type: Invoke})
		case evOK:
			p.t.record(Event{Proc: proc, Op: e.Key, Type: OK, Value: e.Body, Replay: e.Replay})
		case evFail:
			p.t.record(Event{Proc: proc, Op: e.Key, Type: Fail, Kind: e.Kind, Err: e.Err})
		case evUnknown:
			p.t.record(Event{Proc: proc, Op: e.Key, Type: Unknown, Err: e.Err})
		case evError:
			p.t.fail("worker %d: %s", p.pid, e.Err)
		default:
			select {
			case p.ctl <- e:
			default:
				p.t.fail("worker %d: too many unread events (last %q)", p.pid, e.Ev)
			}
		}
	}
	p.exited()
}

// exited waits for the process, ends its unanswered attempts as Unknown
// and closes done.
func (p *proc) exited() {
	p.err = p.cmd.Wait()
	reason := "process exited"
	if p.killed() {
		reason = "process killed"
	}
	p.t.h.abandon(fmt.Sprintf("pid %d/", p.pid), reason)
	close(p.ctl)
	close(p.done)
}

// killed reports whether the worker died of SIGKILL (call after done).
func (p *proc) killed() bool {
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// wait waits for the worker to exit. It is an error if the worker failed,
// or if it died of SIGKILL when killOK is false.
func (p *proc) wait(ctx context.Context, killOK bool) error {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		<-p.done
		return fmt.Errorf("worker %d: %w", p.pid, ctx.Err())
	}
	switch {
	case p.err == nil:
		return nil
	case p.killed() && killOK:
		return nil
	}
	return fmt.Errorf("worker %d: %v; stderr:\n%s", p.pid, p.err, p.stderr)
}

// expect waits for the worker's next control event, which must be want.
func (p *proc) expect(ctx context.Context, want string) (wireEvent, error) {
	select {
	case e, ok := <-p.ctl:
		if !ok {
			<-p.done
			return e, fmt.Errorf("worker %d exited (%v) before it was %s; stderr:\n%s", p.pid, p.err, want, p.stderr)
		}
		if e.Ev != want {
			return e, fmt.Errorf("worker %d reported %q, want %q", p.pid, e.Ev, want)
		}
		return e, nil
	case <-ctx.Done():
		return wireEvent{}, fmt.Errorf("worker %d: waiting until it is %s: %w", p.pid, want, ctx.Err())
	}
}

// send writes one command line to the worker's stdin.
func (p *proc) send(cmd string) error {
	_, err := io.WriteString(p.stdin, cmd+"\n")
	return err
}

// kill kills the worker, stopped or not.
func (p *proc) kill() {
	p.cmd.Process.Signal(procsig.Cont)
	p.cmd.Process.Kill()
}

// pause sends SIGSTOP and waits until the kernel shows the worker stopped.
func (p *proc) pause(ctx context.Context) error {
	if err := p.cmd.Process.Signal(procsig.Stop); err != nil {
		return fmt.Errorf("SIGSTOP worker %d: %w", p.pid, err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.pid)
	if _, err := os.Stat(stat); err != nil {
		return nil // no procfs: the signal is delivered before the worker runs again anyway
	}
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return fmt.Errorf("worker %d: %w", p.pid, err)
		}
		// pid (comm) state …: the state follows the last ')'.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && (s[i+2] == 'T' || s[i+2] == 't') {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// terminate asks the process to stop (SIGTERM).
func (p *proc) terminate() { p.cmd.Process.Signal(syscall.SIGTERM) }

// resume sends SIGCONT.
func (p *proc) resume() error { return p.cmd.Process.Signal(procsig.Cont) }
