package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// gatewayCmds is an Options.GatewayCommand that runs bin and remembers
// every command it made.
type gatewayCmds struct {
	bin  string
	args []string // put before the bench's own (e.g. a bad flag)
	mu   sync.Mutex
	cmds []*exec.Cmd
}

func (g *gatewayCmds) command(args ...string) *exec.Cmd {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(args) > 0 && args[0] == "serve" && len(g.args) > 0 {
		args = append(append([]string{"serve"}, g.args...), args[1:]...)
	}
	cmd := exec.Command(g.bin, args...)
	g.cmds = append(g.cmds, cmd)
	return cmd
}

// killWhenServing kills the process of bin once it holds more than 50
// open files: it listens and the load's connections are open, so it is
// being measured. It gives up after a minute.
func killWhenServing(t *testing.T, bin string) {
	for range 600 {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			b, err := os.ReadFile(f)
			if err != nil || !bytes.HasPrefix(b, []byte(bin+"\x00")) {
				continue
			}
			dir := filepath.Dir(f)
			if fds, _ := os.ReadDir(filepath.Join(dir, "fd")); len(fds) > 50 {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Error("the gateway process never served the load")
}

// checkReaped: every process the row started was waited for, and no
// process of bin runs any more.
func (g *gatewayCmds) checkReaped(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.cmds) == 0 {
		t.Fatal("the row started no gateway process")
	}
	for _, cmd := range g.cmds {
		if cmd.Process != nil && cmd.ProcessState == nil {
			t.Errorf("idem serve (pid %d) was not waited for", cmd.Process.Pid)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err == nil && bytes.HasPrefix(b, []byte(g.bin+"\x00")) {
			t.Errorf("a process of %s outlives the row: %s", g.bin, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// buildIdem builds the idem CLI into dir, with -race when the tests run
// with it: not to watch the gateway (nothing here judges its speed or
// size), but so that the build reuses the packages the race-built tests
// compiled (a build without it compiles them all again: most of a minute
// on a busy CI machine).
func buildIdem(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "idem")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, "github.com/idemdev/idem/cmd/idem")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestMemoryRowGatewayProcess runs the memory row with the gateway as
// `idem serve` in its own process, on SQLite and on a shared PostgreSQL
// database, and when that process cannot start, never listens, or dies
// while it is measured: the row reports the process's peak, or an error,
// and the process is always waited for and gone. Nothing here judges a
// speed or a size.
func TestMemoryRowGatewayProcess(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs Linux /proc")
	}
	shared := buildIdem(t, t.TempDir())
	// Each subtest runs its own link to the binary, so that it can look
	// for its own processes only.
	bin := func(t *testing.T) string {
		b := filepath.Join(t.TempDir(), "idem")
		if err := os.Link(shared, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	row := func(ctx context.Context, t *testing.T, spec string, g *gatewayCmds) ([]Result, error) {
		db, err := openDatabase(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer db.close()
		r := &runner{o: Options{Runs: 1, GatewayCommand: g.command}, db: db}
		return r.memoryRowsFor(ctx, 500*time.Millisecond)
	}

	for _, drv := range []string{"sqlite", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			t.Parallel()
			spec := "sqlite"
			if drv == "postgres" {
				spec = pgtest.NewDB(t) // shared: the row must delete what the gateway wrote
			}
			g := &gatewayCmds{bin: bin(t)}
			res, err := row(t.Context(), t, spec, g)
			g.checkReaped(t)
			if err != nil {
				t.Fatal(err)
			}
			// The database URL (a password, on PostgreSQL) is not on the
			// command line, which every user of the machine can read.
			for _, cmd := range g.cmds {
				for _, a := range cmd.Args {
					if strings.Contains(a, "postgres://") || strings.HasPrefix(a, "sqlite:") {
						t.Errorf("idem serve's command line holds the database URL: %q", cmd.Args)
					}
				}
			}
			if len(res) != 1 {
				t.Fatalf("%d rows, want 1", len(res))
			}
			r := res[0]
			if r.Group != GroupMemory || r.Name != "gateway 1 MiB responses" || r.Driver != drv || r.Concurrency != largeInFlight {
				t.Errorf("row %+v", r)
			}
			if r.OpsPerSec <= 0 || r.BaselineOpsPerS <= 0 {
				t.Errorf("a side measured nothing: %+v", r)
			}
			if r.PeakRSSMegabytes <= 0 || !strings.Contains(r.Note, "idem serve in a process of its own") {
				t.Errorf("peak %v MiB, note %q", r.PeakRSSMegabytes, r.Note)
			}
			if drv == "postgres" {
				drv, err := dburl.OpenDriver(t.Context(), spec)
				if err != nil {
					t.Fatal(err)
				}
				defer drv.Close()
				var n int
				if err := drv.DB().QueryRowContext(t.Context(), "SELECT count(*) FROM idem_keys").Scan(&n); err != nil || n != 0 {
					t.Errorf("idem_keys holds %d rows after the row (%v); it must delete what the gateway wrote", n, err)
				}
			}
		})
	}

	t.Run("exits before listening", func(t *testing.T) {
		t.Parallel()
		g := &gatewayCmds{bin: bin(t), args: []string{"--no-such-flag"}}
		_, err := row(t.Context(), t, "sqlite", g)
		g.checkReaped(t)
		if err == nil || !strings.Contains(err.Error(), "exited before it listened") {
			t.Errorf("err %v", err)
		}
	})

	t.Run("never listens", func(t *testing.T) {
		t.Parallel()
		// A process that prints nothing: the row's context ends the wait.
		g := &gatewayCmds{bin: bin(t)}
		sleeper := func(args ...string) *exec.Cmd {
			cmd := exec.Command("sleep", "600")
			g.mu.Lock()
			g.cmds = append(g.cmds, cmd)
			g.mu.Unlock()
			return cmd
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		db, err := openDatabase(ctx, "sqlite")
		if err != nil {
			t.Fatal(err)
		}
		defer db.close()
		r := &runner{o: Options{Runs: 1, GatewayCommand: sleeper}, db: db}
		_, err = r.memoryRowsFor(ctx, 500*time.Millisecond)
		t.Logf("row: %v", err)
		if err == nil {
			t.Error("a gateway that never listened was measured")
		}
		g.mu.Lock()
		cmd := g.cmds[0]
		g.mu.Unlock()
		if cmd.ProcessState == nil {
			t.Error("the process that never listened was not waited for")
		}
	})

	t.Run("stops uncleanly", func(t *testing.T) {
		t.Parallel()
		// A wrapper that, told to stop, stops idem serve and exits 3: the
		// row must be an error, not a number.
		g := &gatewayCmds{bin: bin(t)}
		wrapped := func(args ...string) *exec.Cmd {
			cmd := exec.Command("sh", append([]string{"-c", `"$0" "$@" & pid=$!; trap 'kill $pid; wait $pid; exit 3' TERM; wait $pid`, g.bin}, args...)...)
			g.mu.Lock()
			g.cmds = append(g.cmds, cmd)
			g.mu.Unlock()
			return cmd
		}
		db, err := openDatabase(t.Context(), "sqlite")
		if err != nil {
			t.Fatal(err)
		}
		defer db.close()
		r := &runner{o: Options{Runs: 1, GatewayCommand: wrapped}, db: db}
		rows, err := r.memoryRowsFor(t.Context(), 500*time.Millisecond)
		g.checkReaped(t)
		if err == nil || !strings.Contains(err.Error(), "did not stop cleanly") {
			t.Errorf("rows %v, err %v; want an unclean stop's error", rows, err)
		}
	})

	t.Run("dies while measured", func(t *testing.T) {
		t.Parallel()
		g := &gatewayCmds{bin: bin(t)}
		killed := make(chan struct{})
		go func() {
			defer close(killed)
			killWhenServing(t, g.bin)
		}()
		_, err := row(t.Context(), t, "sqlite", g)
		<-killed
		t.Logf("row: %v", err)
		g.checkReaped(t)
		if err == nil {
			t.Error("a gateway killed while measured gave a row")
		}
	})
}

// TestMemoryRowInProcess: without Options.GatewayCommand the row runs the
// gateway inside the bench process and says so.
func TestMemoryRowInProcess(t *testing.T) {
	t.Parallel()
	db, err := openDatabase(t.Context(), "sqlite")
	if err != nil {
		t.Fatal(err)
	}
	defer db.close()
	r := &runner{o: Options{Runs: 1}, db: db}
	res, err := r.memoryRowsFor(t.Context(), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].OpsPerSec <= 0 || res[0].BaselineOpsPerS <= 0 || !strings.Contains(res[0].Note, "whole bench process") {
		t.Errorf("rows %+v", res)
	}
}
