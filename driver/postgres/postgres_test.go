package postgres_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/driver/drivertest"
	"github.com/idemdev/idem/driver/postgres"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

var target = drivertest.Target{
	Name:  "postgres",
	NewDB: pgtest.NewDB,
	Open: func(ctx context.Context, url string) (driver.Driver, error) {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, err
		}
		return postgres.New(pool, &postgres.Options{ClosePool: true}), nil
	},
}

func TestMain(m *testing.M) {
	drivertest.Main(m, append([]drivertest.Target{target}, bouncerTargets...)...)
}

func TestConformance(t *testing.T) { drivertest.Run(t, target) }

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
	l, err := dburl.Open(context.Background(), url, nil)
	if err == nil {
		l.Close()
		t.Fatal("open of an unreachable server succeeded")
	}
	if strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("error %q: want the host named and the password left out", err)
	}
	if _, err := dburl.Open(context.Background(), "postgres://%zz", nil); err == nil {
		t.Fatal("open of a malformed URL succeeded")
	}
}

// TestPostgresRestart restarts the shared cluster, so it is not parallel:
// it runs alone, after TestConformance and its parallel subtests are done.
func TestPostgresRestart(t *testing.T) {
	c := pgtest.Shared(t)
	drivertest.RunRestart(t, target, pgtest.NewDB(t), c.Restart)
}
