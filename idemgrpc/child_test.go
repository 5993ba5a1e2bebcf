package idemgrpc_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemgrpc"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/pgtest"
)

// The child server process (the test binary re-executed) is configured by
// these variables.
const (
	envChildDB      = "IDEMGRPC_CHILD_DB"      // ledger URL
	envChildAddr    = "IDEMGRPC_CHILD_ADDR"    // where to listen
	envChildEffects = "IDEMGRPC_CHILD_EFFECTS" // file the handler appends one line per effect to
	envChildLease   = "IDEMGRPC_CHILD_LEASE"   // Options.Lease
)

func isChild() bool { return os.Getenv(envChildDB) != "" }

// childMain serves the test service behind idemgrpc until killed. Its
// handler's effect is a line appended to a file and synced: it survives
// SIGKILL.
func childMain() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "child:", err); os.Exit(3) }
	ctx := context.Background()
	l, err := dburl.Open(ctx, os.Getenv(envChildDB), &idem.Options{Logger: quiet})
	if err != nil {
		fail(err)
	}
	var lis net.Listener
	for range 100 { // the killed predecessor's port may take a moment to free
		if lis, err = net.Listen("tcp", os.Getenv(envChildAddr)); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		fail(err)
	}
	// The effect is keyed, as a downstream that deduplicates on the
	// forwarded key is: a line in the effects file per key, written once.
	// Every run is also appended to the runs file.
	effects, runs := os.Getenv(envChildEffects), os.Getenv(envChildEffects)+".runs"
	effect := func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		key := strings.Join(md.Get(idemgrpc.MetadataKey), "")
		if err := appendLine(runs, key); err != nil {
			return nil, err
		}
		done, _ := os.ReadFile(effects)
		if !strings.Contains(string(done), key+" ") {
			if err := appendLine(effects, key+" "+in.GetValue()); err != nil {
				return nil, err
			}
		}
		return wrapperspb.String("done:" + in.GetValue()), nil
	}
	lease, _ := time.ParseDuration(os.Getenv(envChildLease))
	opts := &idemgrpc.Options{SharedScope: true, Lease: lease, Logger: quiet}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(l, opts)))
	srv.RegisterService(&paymentsDesc, handleFunc(effect))
	fmt.Println("ready")
	fail(srv.Serve(lis))
}

// appendLine appends line to the file at path and syncs it: it survives
// SIGKILL.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		return err
	}
	return f.Sync()
}

// startChild runs the test binary as a child server; crash arms a crash
// point in it ("" for none). It returns once the child listens.
func startChild(env []string, crash string) (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, crashpoint.EnvVar+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	if crash != "" {
		cmd.Env = append(cmd.Env, crashpoint.EnvVar+"="+crash)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("child did not start: %q, %v", line, err)
	}
	return cmd, nil
}

// A server killed (SIGKILL) mid-call, restarted on the same database: the
// client's retries (one key) end with one effect.
//
//   - after-commit: the effect and the recorded answer are there, the
//     response never left; the retry gets the stored answer.
//   - after-call: the handler's effect is done but its answer was not
//     recorded; the retry is told the call is in flight until the lease
//     ends, then the call runs again with the same key, which the keyed
//     effect recognises.
func TestServerKilledMidCall(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		for _, crash := range []string{crashpoint.AfterCommit, crashpoint.AfterCall} {
			t.Run(driver+"/"+crash, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				url := "sqlite:" + filepath.Join(dir, "idem.db")
				if driver == "postgres" {
					url = pgtest.NewDB(t)
				}
				killAndRestart(t, dir, url, crash)
			})
		}
	}
}

func killAndRestart(t *testing.T, dir, url, crash string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	effects := filepath.Join(dir, "effects")
	env := []string{envChildDB + "=" + url, envChildAddr + "=" + addr, envChildEffects + "=" + effects, envChildLease + "=300ms"}

	first, err := startChild(env, crash)
	if err != nil {
		t.Fatal(err)
	}
	restarted := make(chan *exec.Cmd, 1)
	died := make(chan error, 1)
	go func() {
		died <- first.Wait()
		c, err := startChild(env, "")
		if err != nil {
			t.Error(err)
		}
		restarted <- c
	}()
	t.Cleanup(func() {
		first.Process.Kill() // if the test ended before the crash point
		if c := <-restarted; c != nil {
			c.Process.Kill()
			c.Wait()
		}
	})

	copts := &idemgrpc.ClientOptions{MaxAttempts: 1000, MaxElapsed: 50 * time.Second, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
	cc := dial(t, addr, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(copts)))
	r := call(testCtx(t), cc, chargeMethod, "", "order-7")
	if err := <-died; err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("first server ended with %v, want signal: killed", err)
	}
	if r.err != nil || r.out.GetValue() != "done:order-7" {
		t.Fatalf("got %+v", r)
	}
	wantRuns, wantReplayed := 1, true
	if crash == crashpoint.AfterCall {
		wantRuns, wantReplayed = 2, false
	}
	if r.replayed != wantReplayed {
		t.Errorf("replayed: %v, want %v", r.replayed, wantReplayed)
	}
	lines := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
	}
	if e := lines(effects); len(e) != 1 {
		t.Fatalf("effects %q, want 1", e)
	}
	if runs := lines(effects + ".runs"); len(runs) != wantRuns || runs[0] != runs[len(runs)-1] {
		t.Fatalf("runs %q: want %d with one key", runs, wantRuns)
	}
}
