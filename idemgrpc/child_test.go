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
	effect := func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		f, err := os.OpenFile(os.Getenv(envChildEffects), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if _, err := fmt.Fprintln(f, in.GetValue()); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		return wrapperspb.String("done:" + in.GetValue()), nil
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(l, &idemgrpc.Options{SharedScope: true, Logger: quiet})))
	srv.RegisterService(&paymentsDesc, handleFunc(effect))
	fmt.Println("ready")
	fail(srv.Serve(lis))
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

// A server killed (SIGKILL) after the handler's effect and its recorded
// answer, before the response left: restarted on the same database, it
// answers the client's retry (same key) from the ledger. One effect.
func TestServerKilledMidCall(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			url := "sqlite:" + filepath.Join(dir, "idem.db")
			if driver == "postgres" {
				url = pgtest.NewDB(t)
			}
			killAndRestart(t, dir, url)
		})
	}
}

func killAndRestart(t *testing.T, dir, url string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	effects := filepath.Join(dir, "effects")
	env := []string{envChildDB + "=" + url, envChildAddr + "=" + addr, envChildEffects + "=" + effects}

	first, err := startChild(env, crashpoint.AfterCommit)
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
	if r.err != nil || r.out.GetValue() != "done:order-7" || !r.replayed {
		t.Fatalf("got %+v, want the stored answer replayed", r)
	}
	if err := <-died; err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("first server ended with %v, want signal: killed", err)
	}
	b, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "\n"); got != 1 {
		t.Fatalf("%d effects, want 1:\n%s", got, b)
	}
}
