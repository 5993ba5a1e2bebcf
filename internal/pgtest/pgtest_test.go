package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func requireBinaries(t *testing.T) string {
	t.Helper()
	dir, ok := Available()
	if !ok {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal("PostgreSQL binaries not found")
		}
		t.Skip("PostgreSQL binaries not found")
	}
	return dir
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func dbFromURL(url string) string {
	_, rest, _ := strings.Cut(strings.TrimPrefix(url, "postgres://"), "/")
	db, _, _ := strings.Cut(rest, "?")
	return db
}

func show(t *testing.T, ctx context.Context, conn *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
		t.Fatalf("SHOW %s: %v", name, err)
	}
	return v
}

func TestCluster(t *testing.T) {
	binDir := requireBinaries(t)
	t.Logf("binaries in %s, euid %d", binDir, os.Geteuid())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := time.Now()
	c, err := Start(ctx, &Options{TCP: true, Settings: map[string]string{"application_name": "pgtest's"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start (initdb + pg_ctl start) took %v; dir %s", time.Since(start), c.Dir())
	defer c.Close()

	if c.TCPAddr() == "" || !strings.HasPrefix(c.TCPURL("x"), "postgres://idem@127.0.0.1:") {
		t.Fatalf("TCPAddr %q TCPURL %q", c.TCPAddr(), c.TCPURL("x"))
	}
	if _, err := c.CreateDatabase(ctx, "Bad-Name"); err == nil {
		t.Fatal("CreateDatabase accepted an invalid name")
	}

	start = time.Now()
	urlA, err := c.CreateDatabase(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CreateDatabase took %v; URL %s", time.Since(start), urlA)
	urlB, err := c.CreateDatabase(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if urlA != c.URL("alpha") || urlA == urlB {
		t.Fatalf("URLs %q %q", urlA, urlB)
	}

	for _, url := range []string{urlA, urlB, c.TCPURL("alpha")} {
		conn := connect(t, ctx, url)
		var one int
		var db string
		if err := conn.QueryRow(ctx, "SELECT 1, current_database()").Scan(&one, &db); err != nil || one != 1 {
			t.Fatalf("SELECT 1 via %s: %d, %v", url, one, err)
		}
		if want := dbFromURL(url); db != want {
			t.Fatalf("current_database() = %q via %s", db, url)
		}
		for name, want := range map[string]string{
			"idle_in_transaction_session_timeout": "5s",
			"max_connections":                     "300",
			"fsync":                               "off",
			"synchronous_commit":                  "on",
			"full_page_writes":                    "off",
			"shared_buffers":                      "128MB",
			"server_encoding":                     "UTF8",
			"lc_collate":                          "C",
			"application_name":                    "pgtest's",
		} {
			if got := show(t, ctx, conn, name); got != want {
				t.Errorf("SHOW %s = %q, want %q", name, got, want)
			}
		}
		conn.Close(ctx)
	}

	// A committed row survives the "database restart" fault.
	conn := connect(t, ctx, urlA)
	if _, err := conn.Exec(ctx, "CREATE TABLE kv (k text PRIMARY KEY, v text); INSERT INTO kv VALUES ('a', 'committed')"); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restart took %v", time.Since(start))
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("old connection survived the restart")
	}
	conn = connect(t, ctx, urlA)
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM kv WHERE k = 'a'").Scan(&v); err != nil || v != "committed" {
		t.Fatalf("after restart: %q, %v\n%s", v, err, c.LogTail(20))
	}
	if tail := c.LogTail(50); !strings.Contains(tail, "immediate shutdown") {
		t.Errorf("log tail lacks the immediate shutdown:\n%s", tail)
	}
	if tail := c.LogTail(3); strings.Count(tail, "\n") != 2 {
		t.Errorf("LogTail(3) = %q", tail)
	}

	// Idle in transaction past 5s: the server ends the session.
	tx := connect(t, ctx, urlB)
	if _, err := tx.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	if _, err := tx.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("a transaction stayed open past idle_in_transaction_session_timeout")
	}

	// Stop and Start explicitly, fast mode, on the same TCP port.
	addr := c.TCPAddr()
	if err := c.Stop(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, false); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if c.TCPAddr() != addr {
		t.Fatalf("TCP address moved from %s to %s", addr, c.TCPAddr())
	}
	connect(t, ctx, c.TCPURL("beta"))

	dir := c.Dir()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left %s: %v", dir, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestUnixOnlyDefaults(t *testing.T) {
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.TCPAddr() != "" || c.TCPURL("postgres") != "" {
		t.Fatalf("TCP without Options.TCP: %q %q", c.TCPAddr(), c.TCPURL("postgres"))
	}
	conn := connect(t, ctx, c.URL("postgres"))
	if got := show(t, ctx, conn, "listen_addresses"); got != "" {
		t.Fatalf("listen_addresses = %q", got)
	}
	if _, err := Start(ctx, &Options{Settings: map[string]string{"port": "1"}}); err == nil {
		t.Fatal("Start accepted a managed setting")
	}
	fc, err := Start(ctx, &Options{Fsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	conn = connect(t, ctx, fc.URL("postgres"))
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
		if got := show(t, ctx, conn, name); got != "on" {
			t.Errorf("Fsync: SHOW %s = %q", name, got)
		}
	}
}

// Several clusters at once, as when go test ./... runs test binaries in
// parallel: distinct directories and ports.
func TestConcurrentStarts(t *testing.T) {
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 3
	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() { clusters[i], errs[i] = Start(ctx, &Options{TCP: true}) })
	}
	wg.Wait()
	t.Logf("%d concurrent Starts took %v", n, time.Since(start))
	seen := map[string]bool{}
	for i, c := range clusters {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer c.Close()
		if seen[c.Dir()] || seen[c.TCPAddr()] {
			t.Fatalf("duplicate dir or port: %s %s", c.Dir(), c.TCPAddr())
		}
		seen[c.Dir()], seen[c.TCPAddr()] = true, true
		var one int
		conn := connect(t, ctx, c.TCPURL("postgres"))
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	var first string
	t.Run("sub/test name", func(t *testing.T) {
		first = NewDB(t)
		t.Logf("first NewDB (starting the shared cluster) took %v: %s", time.Since(start), first)
		connect(t, ctx, first).Close(ctx) // an open session must not block the drop
	})
	start = time.Now()
	second := NewDB(t)
	t.Logf("second NewDB took %v: %s", time.Since(start), second)
	if first == second {
		t.Fatal("NewDB returned the same database twice")
	}
	conn := connect(t, ctx, second)
	var db string
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(db, "t_testnewdb_") {
		t.Fatalf("database name %q", db)
	}
	firstName := dbFromURL(first)
	if !strings.HasPrefix(firstName, "t_testnewdb_sub_test_name_") {
		t.Fatalf("database name %q", firstName)
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", firstName).Scan(&exists); err != nil || exists {
		t.Fatalf("database %s still exists after its test: %v %v", firstName, exists, err)
	}
	if a, b := Shared(t), Shared(t); a != b || a.TCPAddr() == "" {
		t.Fatal("Shared is not one cluster with TCP")
	}
}

func TestSharedRestart(t *testing.T) {
	url := NewDB(t)
	c := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(t, ctx, url)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var x int
	if err := connect(t, ctx, url).QueryRow(ctx, "SELECT x FROM t").Scan(&x); err != nil || x != 42 {
		t.Fatalf("after restart: %d %v", x, err)
	}

	// A test that dies between Stop and Start must not break later ones.
	if err := c.Stop(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := connect(t, ctx, NewDB(t)).Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestDBName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"TestFoo", "t_testfoo_7"},
		{"TestFoo/sub-case#01", "t_testfoo_sub_case_01_7"},
		{"Test/__/x", "t_test_x_7"},
		{strings.Repeat("A", 100), "t_" + strings.Repeat("a", 40) + "_7"},
	} {
		if got := dbName(tc.in, 7); got != tc.want || !dbNameRE.MatchString(got) {
			t.Errorf("dbName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := dbName(strings.Repeat("x", 200), 1<<63); !dbNameRE.MatchString(got) {
		t.Errorf("dbName too long: %q", got)
	}
}

func TestCompareVersions(t *testing.T) {
	if compareVersions("9.6", "10") >= 0 || compareVersions("15", "10") <= 0 || compareVersions("15", "15.2") >= 0 {
		t.Fatal("compareVersions misorders")
	}
}

// A test binary killed with SIGKILL leaves its cluster running; the next
// Start's reaper stops it and removes its directory, and leaves live
// clusters alone.
func TestReapStale(t *testing.T) {
	if os.Getenv("PGTEST_HELPER") == "1" {
		return
	}
	binDir := requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	live, err := Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperLeaveCluster$", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_HELPER=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "PGTEST_DIR="); ok {
			dir = d
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if dir == "" {
		t.Fatal("helper printed no directory")
	}
	dataDir := filepath.Join(dir, "data")
	pid, alive := postmasterPID(dataDir)
	if !alive {
		t.Fatalf("the killed helper's postmaster is not running (pid %d)", pid)
	}

	old := staleAfter
	staleAfter = 0
	defer func() { staleAfter = old }()
	reapStale(filepath.Dir(dir), binDir)

	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reaper left %s: %v", dir, err)
	}
	if isPostmaster(pid, dataDir) {
		t.Fatalf("reaper left postmaster %d running", pid)
	}
	conn := connect(t, ctx, live.URL("postgres"))
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("reaper disturbed a live cluster: %v", err)
	}
}

// TestHelperLeaveCluster is the child of TestReapStale: it starts a cluster,
// prints its directory and waits to be killed.
func TestHelperLeaveCluster(t *testing.T) {
	if os.Getenv("PGTEST_HELPER") != "1" {
		t.Skip("helper process for TestReapStale")
	}
	c, err := Start(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("PGTEST_DIR=%s\n", c.Dir())
	time.Sleep(time.Minute)
}
