package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/idemdev/idem/internal/syncbuf"
)

// The gateway in a process of its own: `idem serve`, as a user runs it,
// started by the bench through Options.GatewayCommand and always ended
// (and waited for) before the row returns, whatever went wrong.

// gatewayStartTimeout bounds how long `idem serve` may take to listen
// (it opens and migrates its ledger first).
const gatewayStartTimeout = time.Minute

// gatewayStopTimeout bounds its drain after SIGTERM; then it is killed.
const gatewayStopTimeout = 15 * time.Second

var (
	listeningRE = regexp.MustCompile(`idem serve: listening on (http://[0-9A-Za-z.:\[\]]+)`)
	// A collection's line of GODEBUG=gctrace=1: the heap at its start,
	// at its end, and live (marked), then the heap goal, in MiB.
	gctraceRE = regexp.MustCompile(`^gc \d+ @.* (\d+)->(\d+)->(\d+) MB, (\d+) MB goal`)
)

// gatewayProc is one running `idem serve`.
type gatewayProc struct {
	cmd  *exec.Cmd
	url  string        // http://127.0.0.1:port
	pid  string        // its process id, as /proc names it
	idle uint64        // its resident set once it listened, before any load (bytes; 0 where unknown)
	tail *syncbuf.Tail // the last of its stderr, for errors
	gc   gcPeaks
	done chan struct{}
	err  error // from Wait, once done is closed
}

// startGatewayProc runs command("serve", …, more…) in front of upstream
// on the ledger at dbURL and waits until it listens. On any error the process is
// killed and waited for before startGatewayProc returns. The URL goes in
// $IDEM_DB, not on the command line, where any user of the machine could
// read its password (ps, /proc/PID/cmdline).
func startGatewayProc(ctx context.Context, command func(args ...string) *exec.Cmd, upstream, dbURL string, more ...string) (*gatewayProc, error) {
	cmd := command(append([]string{"serve", "--listen", "127.0.0.1:0", "--upstream", upstream, "--log-level", "warn"}, more...)...)
	if cmd == nil {
		return nil, errors.New("GatewayCommand returned no command")
	}
	setDeathSignal(cmd)
	// The collector reports each collection on stderr: the Go heap's
	// peaks, read from outside.
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	godebug := "gctrace=1"
	if v := envOf(cmd, "GODEBUG"); v != "unset" && v != "" {
		godebug = v + ",gctrace=1"
	}
	cmd.Env = append(env, "GODEBUG="+godebug, "IDEM_DB="+dbURL) // the last value of a key wins
	p := &gatewayProc{cmd: cmd, tail: &syncbuf.Tail{Max: 4 << 10}, done: make(chan struct{})}
	cmd.Stdout = p.tail
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting idem serve: %w", err)
	}
	p.pid = strconv.Itoa(cmd.Process.Pid)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := gctraceRE.FindStringSubmatch(line); m != nil {
				p.gc.add(m[1:])
				continue
			}
			p.tail.Write([]byte(line + "\n"))
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		p.err = cmd.Wait() // after the pipe is read to its end, as Wait wants
		close(p.done)
	}()
	t := time.NewTimer(gatewayStartTimeout)
	defer t.Stop()
	select {
	case p.url = <-ready:
		p.idle, _ = procMemory(p.pid)
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("idem serve exited before it listened (%v): %s", p.err, p.tail.String())
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("idem serve: %w", ctx.Err())
	case <-t.C:
		p.kill()
		return nil, fmt.Errorf("idem serve did not listen within %v: %s", gatewayStartTimeout, p.tail.String())
	}
}

// kill ends the process at once and waits for it.
func (p *gatewayProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// stop asks the process to drain and stop (SIGTERM), kills it if it has
// not within gatewayStopTimeout, and waits for it. It returns an error
// when the process had already exited, or did not stop cleanly.
func (p *gatewayProc) stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("idem serve exited while it was measured (%v): %s", p.err, p.tail.String())
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.kill()
		return nil
	}
	t := time.NewTimer(gatewayStopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("idem serve did not stop cleanly (%v): %s", p.err, p.tail.String())
		}
		return nil
	case <-t.C:
		p.kill()
		return fmt.Errorf("idem serve did not stop within %v of SIGTERM; killed", gatewayStopTimeout)
	}
}

// alive reports an error when the process has exited.
func (p *gatewayProc) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("idem serve exited while it was measured (%v): %s", p.err, p.tail.String())
	default:
		return nil
	}
}

// gcPeaks are the largest Go heap figures of the collections reported
// since the last take, in MiB.
type gcPeaks struct {
	mu                     sync.Mutex
	start, live, goal, gcs uint64
}

func (g *gcPeaks) add(mib []string) {
	var v [4]uint64
	for i, s := range mib {
		v[i], _ = strconv.ParseUint(s, 10, 64)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.start, g.live, g.goal = max(g.start, v[0]), max(g.live, v[2]), max(g.goal, v[3])
	g.gcs++
}

// take returns the peaks and starts them again.
func (g *gcPeaks) take() (start, live, goal, gcs uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	start, live, goal, gcs = g.start, g.live, g.goal, g.gcs
	g.start, g.live, g.goal, g.gcs = 0, 0, 0, 0
	return start, live, goal, gcs
}
