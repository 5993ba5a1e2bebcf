package brokertest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/pgtest"
)

// RequireEnv names the environment variable that, set to 1, turns "no
// broker binary" from a skip into a failure (CI sets it).
const RequireEnv = "IDEM_REQUIRE_BROKERS"

var shared struct {
	mu      sync.Mutex
	servers map[string]*Server
	errs    map[string]error
}

// Main runs the package's tests (closing the shared PostgreSQL cluster, as
// pgtest.Main does), then closes the shared brokers, then exits.
//
//	func TestMain(m *testing.M) { brokertest.Main(m) }
func Main(m *testing.M) {
	code := pgtest.Run(m)
	shared.mu.Lock()
	for _, s := range shared.servers {
		if err := s.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "brokertest: closing %s: %v\n", s.kind, err)
		}
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// Skip skips t (fails it if IDEM_REQUIRE_BROKERS=1) when kind's server
// binary is missing.
func Skip(t testing.TB, kind string) {
	t.Helper()
	if _, ok := Available(kind); ok {
		return
	}
	pgtest.Missing(t, RequireEnv, fmt.Sprintf("brokertest: no %s server binary installed", kind))
}

// Shared returns the test binary's broker of kind, started on first use
// and running (restarted if a test stopped it). Skips as Skip does.
func Shared(t testing.TB, kind string) *Server {
	t.Helper()
	Skip(t, kind)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.servers == nil {
		shared.servers, shared.errs = map[string]*Server{}, map[string]error{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, ok := shared.servers[kind]
	if !ok && shared.errs[kind] == nil {
		s, shared.errs[kind] = Start(ctx, kind, "")
		if s != nil {
			shared.servers[kind] = s
		}
	}
	if err := shared.errs[kind]; err != nil {
		t.Fatalf("brokertest: starting %s: %v", kind, err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("brokertest: restarting %s: %v", kind, err)
	}
	return s
}
