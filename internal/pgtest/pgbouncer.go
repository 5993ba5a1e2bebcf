package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequirePgBouncerEnv names the environment variable that, set to 1, turns
// "no pgbouncer binary" from a skip into a failure (set it in CI).
const RequirePgBouncerEnv = "IDEM_REQUIRE_PGBOUNCER"

// PoolMode is PgBouncer's pool_mode: when a server connection goes back to
// the pool.
type PoolMode string

const (
	// SessionPooling: a client keeps one server connection until it
	// disconnects. Everything PostgreSQL offers works.
	SessionPooling PoolMode = "session"
	// TransactionPooling: a client holds a server connection for one
	// transaction (or one statement outside a transaction). Session state
	// (LISTEN, named prepared statements before PgBouncer 1.21, SET,
	// session advisory locks) does not survive between transactions.
	TransactionPooling PoolMode = "transaction"
)

// BouncerOptions for StartPgBouncer; nil means session pooling.
type BouncerOptions struct {
	// Mode is pool_mode; default SessionPooling.
	Mode PoolMode
	// PoolSize is default_pool_size: server connections per database and
	// user. Default 100 in session mode, where each client connection
	// holds one for its life, so it must cover every client (idem's pool,
	// its committers and its LISTEN connection, in every process); 10 in
	// transaction mode, fewer than idem's pool, so that clients really
	// share server connections.
	PoolSize int
}

// PgBouncer is a running PgBouncer in front of a Cluster, listening on
// 127.0.0.1 with trust authentication (an auth_file naming the cluster's
// user). It runs as the same OS user as the cluster's server (PgBouncer
// refuses root too), from a directory of its own holding pgbouncer.ini,
// userlist.txt and pgbouncer.log.
type PgBouncer struct {
	dir  string
	port int
	mode PoolMode
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, set before done closes

	closeOnce sync.Once
	closeErr  error
}

// PgBouncerBinary returns the path of the pgbouncer binary: on PATH, else
// /usr/sbin/pgbouncer (Debian's, which is not on a user's PATH).
func PgBouncerBinary() (string, bool) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, true
	}
	const debian = "/usr/sbin/pgbouncer"
	if fi, err := os.Stat(debian); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return debian, true
	}
	return "", false
}

// StartPgBouncer starts PgBouncer in front of c, forwarding every database
// name to c over its unix socket, and waits until it accepts connections.
// Close stops it; the cluster stays.
func StartPgBouncer(ctx context.Context, c *Cluster, opts *BouncerOptions) (*PgBouncer, error) {
	var o BouncerOptions
	if opts != nil {
		o = *opts
	}
	if o.Mode == "" {
		o.Mode = SessionPooling
	}
	if o.Mode != SessionPooling && o.Mode != TransactionPooling {
		return nil, fmt.Errorf("pgtest: pgbouncer pool mode %q: want session or transaction", o.Mode)
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 100
		if o.Mode == TransactionPooling {
			o.PoolSize = 10
		}
	}
	bin, ok := PgBouncerBinary()
	if !ok {
		return nil, errors.New("pgtest: pgbouncer not found on PATH or at /usr/sbin/pgbouncer")
	}
	dir, err := os.MkdirTemp(filepath.Dir(c.dir), "idem-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := chown(dir, c.user); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	for attempt := 1; ; attempt++ {
		b, err := startBouncer(ctx, bin, dir, c, o)
		if err == nil {
			return b, nil
		}
		if attempt == tcpAttempts || !strings.Contains(err.Error(), "in use") {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

func startBouncer(ctx context.Context, bin, dir string, c *Cluster, o BouncerOptions) (*PgBouncer, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pgtest: picking a TCP port: %w", err)
	}
	b := &PgBouncer{dir: dir, port: port, mode: o.Mode, done: make(chan struct{})}
	logFile := filepath.Join(dir, "pgbouncer.log")
	os.Remove(logFile)
	files := map[string]string{
		"userlist.txt": fmt.Sprintf("%q \"\"\n", superuser),
		"pgbouncer.ini": fmt.Sprintf(`; Written by idem's pgtest.
[databases]
* = host=%s port=%d user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
max_db_connections = 0
server_lifetime = 3600
server_idle_timeout = 60
logfile = %s
pidfile = %s
ignore_startup_parameters = extra_float_digits
`, c.dir, c.port, superuser, port, filepath.Join(dir, "userlist.txt"), superuser, o.Mode, o.PoolSize,
			logFile, filepath.Join(dir, "pgbouncer.pid")),
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		if err := chown(path, c.user); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	// Not CommandContext: ctx bounds the start, not the process's life.
	cmd := exec.Command(bin, "-q", filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	cmd.Env = c.env
	cmd.SysProcAttr = bouncerProcAttr(c.user)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: starting %s: %w", bin, err)
	}
	b.cmd = cmd
	go func() {
		b.err = cmd.Wait()
		close(b.done)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.DialTimeout("tcp", b.Addr(), time.Second)
		if err == nil {
			conn.Close()
			return b, nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(logFile)
			return nil, fmt.Errorf("pgtest: pgbouncer exited at start (%v):\n%s%s", b.err, out.String(), log)
		case <-ctx.Done():
			b.Close()
			return nil, fmt.Errorf("pgtest: waiting for pgbouncer on %s: %w", b.Addr(), ctx.Err())
		case <-tick.C:
		}
	}
}

// Addr returns "127.0.0.1:PORT".
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Mode returns the pool mode PgBouncer runs in.
func (b *PgBouncer) Mode() PoolMode { return b.mode }

// URL returns postgres://idem@127.0.0.1:PORT/dbname?sslmode=disable: the
// database dbname of the cluster, through PgBouncer. It says nothing of the
// pool mode; a client in transaction mode adds what it needs.
func (b *PgBouncer) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", superuser, b.Addr(), url.PathEscape(dbname))
}

// LogTail returns the last n lines of PgBouncer's log.
func (b *PgBouncer) LogTail(n int) string {
	data, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	if err != nil {
		return fmt.Sprintf("(no pgbouncer log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Close stops PgBouncer (SIGTERM: an immediate shutdown in PgBouncer 1.18,
// clients are cut; SIGKILL after 5s for versions that wait for clients) and
// removes its directory. It is safe to call more than once.
func (b *PgBouncer) Close() error {
	b.closeOnce.Do(func() {
		select {
		case <-b.done:
		default:
			b.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-b.done:
			case <-time.After(5 * time.Second):
				b.cmd.Process.Kill()
				<-b.done
			}
		}
		b.closeErr = os.RemoveAll(b.dir)
	})
	return b.closeErr
}

// NewPgBouncer starts PgBouncer in mode in front of the test binary's
// shared cluster, creates a fresh database there (NewDB) and returns
// PgBouncer's URL for it. PgBouncer is stopped in t.Cleanup. If pgbouncer is
// missing it skips the test (fails it if IDEM_REQUIRE_PGBOUNCER=1).
func NewPgBouncer(t testing.TB, mode PoolMode) (*PgBouncer, string) {
	t.Helper()
	if _, ok := PgBouncerBinary(); !ok {
		Missing(t, RequirePgBouncerEnv, "pgtest: pgbouncer not found on PATH or at /usr/sbin/pgbouncer (Debian package pgbouncer)")
	}
	c := Shared(t)
	direct := NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := StartPgBouncer(ctx, c, &BouncerOptions{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after NewDB's cleanup, so it runs first: PgBouncer lets go
	// of its server connections before the database is dropped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", b.LogTail(30))
		}
		b.Close()
	})
	return b, b.URL(dbFromConnURL(direct))
}

// dbFromConnURL returns the database name of a URL made by Cluster.URL.
func dbFromConnURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}
