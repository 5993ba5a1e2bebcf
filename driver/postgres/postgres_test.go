package postgres_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/drivertest"
	"github.com/idemdev/idem/internal/pgtest"
)

func TestMain(m *testing.M) { drivertest.Main(m) }

func TestConformance(t *testing.T) {
	drivertest.Run(t, "postgres", pgtest.NewDB)
}

// TestConnectError: an unreachable server is an error naming the server,
// never carrying the password from the URL.
func TestConnectError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	url := "postgres://idem:s3cret-pw@" + addr + "/idem?sslmode=disable&connect_timeout=5"
	l, err := idem.Open(context.Background(), url, nil)
	if err == nil {
		l.Close()
		t.Fatal("open of an unreachable server succeeded")
	}
	if strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("error %q: want the host named and the password left out", err)
	}
	if _, err := idem.Open(context.Background(), "postgres://%zz", nil); err == nil {
		t.Fatal("open of a malformed URL succeeded")
	}
}

// TestPostgresRestart restarts the shared cluster, so it is not parallel:
// it runs alone, after TestConformance and its parallel subtests are done.
func TestPostgresRestart(t *testing.T) {
	c := pgtest.Shared(t)
	drivertest.RunRestart(t, pgtest.NewDB(t), c.Restart)
}
