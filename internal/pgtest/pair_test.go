package pgtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func startPair(t *testing.T, ctx context.Context, opts *PairOptions) (*Pair, string) {
	t.Helper()
	requireBinaries(t)
	p, err := StartPair(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	url, err := p.CreateDatabase(ctx, "pair")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(url, p.Primary.TCPAddr()+","+p.Standby.TCPAddr()) || !strings.Contains(url, "target_session_attrs=read-write") {
		t.Fatalf("pair URL %s", url)
	}
	return p, url
}

// A synchronous standby has every acknowledged commit when the primary is
// killed; a commit it does not have was never acknowledged. After Promote
// the same multi-host URL reaches the new primary.
func TestPairSynchronousFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, url := startPair(t, ctx, &PairOptions{Slot: true})
	conn := connect(t, ctx, url)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}
	// The standby is read-only: a read-write URL to it alone is refused.
	if c, err := connectErr(ctx, strings.Replace(url, p.Primary.TCPAddr()+",", "", 1)); err == nil {
		c.Close(ctx)
		t.Fatal("connected read-write to the standby before promotion")
	}
	resume, err := p.PauseWALSender()
	if err != nil {
		t.Fatal(err)
	}
	defer resume()
	// With the standby cut off, a commit is not acknowledged.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = conn.Exec(wctx, "INSERT INTO t VALUES (100)")
	wcancel()
	if err == nil {
		t.Fatal("a commit was acknowledged while the synchronous standby could not have it")
	}
	if err := p.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := p.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	after := connect(t, ctx, url)
	var n, max int
	if err := after.QueryRow(ctx, "SELECT count(*), max(x) FROM t").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != 10 || max != 9 {
		t.Fatalf("after failover: %d rows, max %d; want the 10 acknowledged ones", n, max)
	}
	if _, err := after.Exec(ctx, "INSERT INTO t VALUES (11)"); err != nil {
		t.Fatalf("writing to the promoted standby: %v", err)
	}
}

// With asynchronous replication a commit is acknowledged before the
// standby has it: kill the primary then, and the promoted standby has lost
// it. (This is what the prover's failover/async must detect.)
func TestPairAsynchronousLoses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, url := startPair(t, ctx, &PairOptions{Async: true})
	conn := connect(t, ctx, url)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// Wait until the standby has the table.
	for {
		var lag bool
		if err := p.Primary.queryRow(ctx, "SELECT replay_lsn < pg_current_wal_lsn() FROM pg_stat_replication", nil, &lag); err != nil {
			t.Fatal(err)
		}
		if !lag {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.PauseWALSender(); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatalf("an asynchronous commit waited for the standby: %v", err)
	}
	if err := p.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := p.KillPrimary(); err == nil {
		t.Fatal("killed a dead primary")
	}
	if err := p.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, ctx, url).QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("after failover: %d rows; want 1 (the acknowledged second one lost)", n)
	}
}

func connectErr(ctx context.Context, url string) (interface{ Close(context.Context) error }, error) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	return c, nil
}
