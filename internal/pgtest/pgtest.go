package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	dirPrefix   = "idem-pg-"
	lockName    = "owner.lock"
	logName     = "postgres.log"
	confName    = "idem.conf"
	superuser   = "idem"
	defaultPort = 5432
	// tcpAttempts bounds retries when another process grabs the free port
	// between our probe and the postmaster's bind.
	tcpAttempts = 5
)

// Options for Start; nil means defaults.
type Options struct {
	// Fsync: default false for tests, since SIGKILL and pg_ctl -m immediate
	// don't need fsync; benchmarks set true. False means fsync=off and
	// full_page_writes=off; synchronous_commit is on either way (see the
	// package documentation).
	Fsync bool
	// TCP: also listen on 127.0.0.1 on a free port (for TCP-proxy fault
	// tests); by default the cluster listens on its unix socket only.
	TCP bool
	// Settings: extra postgresql.conf settings; they override the defaults.
	Settings map[string]string
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster. Its
// methods are safe for concurrent use.
type Cluster struct {
	binDir  string
	dir     string // socket directory, parent of dataDir, removed by Close
	dataDir string
	logFile string
	port    int
	tcp     bool
	user    *runAs // nil: run the binaries as ourselves
	env     []string
	lock    *os.File

	mu       sync.Mutex // serializes Start, Stop and Close
	running  bool
	closed   bool
	settings map[string]string
}

var reapOnce sync.Once

// staleAfter: a leftover directory must be at least this old before
// reapStale considers it (see reapStale). A variable for tests.
var staleAfter = 10 * time.Second

// Start creates and starts a new cluster: initdb (--auth=trust,
// --username=idem, -E UTF8, --no-locale), then pg_ctl start -w. On error
// nothing is left behind; the error includes the tail of the server log when
// there is one.
func Start(ctx context.Context, opts *Options) (*Cluster, error) {
	return start(ctx, opts, func(c *Cluster) error {
		if out, err := c.command(ctx, "initdb", "-D", c.dataDir, "--auth=trust", "--username="+superuser,
			"-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
			return fmt.Errorf("pgtest: initdb in %s (as %s): %w\n%s", c.dataDir, c.userName(), err, out)
		}
		return c.appendInclude()
	})
}

// start makes a cluster directory, fills its data directory with create
// (initdb, or a base backup of another cluster), and starts the server.
func start(ctx context.Context, opts *Options, create func(c *Cluster) error) (*Cluster, error) {
	if opts == nil {
		opts = &Options{}
	}
	binDir, ok := Available()
	if !ok {
		return nil, errors.New("pgtest: PostgreSQL binaries (initdb, pg_ctl, postgres) not found on PATH or under /usr/lib/postgresql/*/bin")
	}
	settings, err := buildSettings(opts)
	if err != nil {
		return nil, err
	}
	u, err := serverUser()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	base := baseDir(u)
	reapOnce.Do(func() {
		reapStale(base, binDir)
		if tmp := os.TempDir(); tmp != base {
			reapStale(tmp, binDir)
		}
	})

	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &Cluster{
		binDir:   binDir,
		dir:      dir,
		dataDir:  filepath.Join(dir, "data"),
		logFile:  filepath.Join(dir, logName),
		port:     defaultPort,
		tcp:      opts.TCP,
		user:     u,
		env:      childEnv(u),
		settings: settings,
	}
	started := false
	defer func() {
		if !started {
			c.Close()
		}
	}()
	if c.lock, err = lockOwner(dir); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := chown(dir, u); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := create(c); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		if c.tcp {
			if c.port, err = freePort(); err != nil {
				return nil, fmt.Errorf("pgtest: picking a TCP port: %w", err)
			}
		}
		if err := c.writeConf(); err != nil {
			return nil, err
		}
		err = c.Start(ctx)
		if err == nil {
			break
		}
		if !c.tcp || attempt == tcpAttempts || !strings.Contains(c.LogTail(20), "could not bind") {
			return nil, err
		}
	}
	started = true
	return c, nil
}

// URL returns a pgx-compatible URL for dbname over the unix socket, such as
// postgres://idem@/dbname?host=/tmp/idem-pg-123&port=5432&sslmode=disable.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable",
		superuser, url.PathEscape(dbname), queryEscapePath(c.dir), c.port)
}

// TCPURL returns postgres://idem@127.0.0.1:PORT/dbname?sslmode=disable, or
// "" unless the cluster was started with Options.TCP.
func (c *Cluster) TCPURL(dbname string) string {
	if !c.tcp {
		return ""
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", superuser, c.TCPAddr(), url.PathEscape(dbname))
}

// TCPAddr returns "127.0.0.1:PORT", or "" unless Options.TCP.
func (c *Cluster) TCPAddr() string {
	if !c.tcp {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
}

// Dir returns the cluster's directory (socket directory, parent of the data
// directory and the log), which Close removes.
func (c *Cluster) Dir() string { return c.dir }

var dbNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// CreateDatabase creates database name (from template0) and returns
// URL(name). name must match [a-z0-9_]{1,63}.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	if !dbNameRE.MatchString(name) {
		return "", fmt.Errorf("pgtest: invalid database name %q: want [a-z0-9_]{1,63}", name)
	}
	if err := c.admin(ctx, `CREATE DATABASE "`+name+`" TEMPLATE template0`); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// dropDatabase drops name, disconnecting its sessions.
func (c *Cluster) dropDatabase(ctx context.Context, name string) error {
	if !dbNameRE.MatchString(name) {
		return fmt.Errorf("pgtest: invalid database name %q", name)
	}
	return c.admin(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
}

func (c *Cluster) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// queryRow runs one query on the postgres database and scans its row.
func (c *Cluster) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// Stop stops the server with pg_ctl stop -m immediate (no shutdown
// checkpoint: the next start runs crash recovery) or -m fast. Stopping a
// stopped cluster does nothing.
func (c *Cluster) Stop(ctx context.Context, immediate bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgtest: cluster is closed")
	}
	return c.stopLocked(ctx, immediate)
}

func (c *Cluster) stopLocked(ctx context.Context, immediate bool) error {
	if !c.running {
		// A start that failed or was canceled may have left a postmaster.
		if _, alive := postmasterPID(c.dataDir); !alive {
			return nil
		}
	}
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	out, err := c.pgctl(ctx, "stop", "-m", mode, "-t", "60")
	if err != nil {
		if _, alive := postmasterPID(c.dataDir); alive {
			return fmt.Errorf("pgtest: pg_ctl stop -m %s: %w\n%s\nserver log:\n%s", mode, err, out, c.LogTail(20))
		}
	}
	c.running = false
	return nil
}

// Start starts the server again after Stop (pg_ctl start -w), on the same
// socket and port. Starting a running cluster does nothing.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgtest: cluster is closed")
	}
	if c.running {
		return nil
	}
	out, err := c.pgctl(ctx, "start", "-l", c.logFile, "-t", "60")
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %w\n%s\nserver log (%s):\n%s", err, out, c.logFile, c.LogTail(30))
	}
	c.running = true
	return nil
}

// Restart is the "database restart" fault: Stop(immediate), then Start.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(ctx, true); err != nil {
		return err
	}
	return c.Start(ctx)
}

// LogTail returns the last n lines of the server log, for failure messages.
func (c *Cluster) LogTail(n int) string {
	f, err := os.Open(c.logFile)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	defer f.Close()
	const maxRead = 1 << 20
	if fi, err := f.Stat(); err == nil && fi.Size() > maxRead {
		f.Seek(-maxRead, io.SeekEnd)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(reading server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if n >= 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Close stops the server (immediate) and removes its directory. It is safe
// to call more than once; later calls return nil.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.stopLocked(ctx, true); err != nil {
		errs = append(errs, err)
		if pid, ok := postmasterPID(c.dataDir); ok {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	if c.lock != nil {
		c.lock.Close()
	}
	return errors.Join(errs...)
}

// pgctl runs pg_ctl -D dataDir -w args...
func (c *Cluster) pgctl(ctx context.Context, args ...string) (string, error) {
	return c.command(ctx, "pg_ctl", append([]string{"-D", c.dataDir, "-w"}, args...)...)
}

// command runs one of the PostgreSQL binaries as the server user, in the
// cluster directory, and returns its combined output.
func (c *Cluster) command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	cmd.SysProcAttr = sysProcAttr(c.user)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl start hands the postmaster a redirected stdout (-l), so
	// nothing should hold our pipe open; don't wait forever if it does.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func (c *Cluster) userName() string {
	if c.user == nil {
		return "current user"
	}
	return fmt.Sprintf("user %s (uid %d)", c.user.name, c.user.uid)
}

// appendInclude makes postgresql.conf include idem.conf, which writeConf
// (re)writes.
func (c *Cluster) appendInclude() error {
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# Added by idem's pgtest.\ninclude '%s'\n", confName)
	if err2 := f.Close(); err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

func (c *Cluster) writeConf() error {
	s := maps.Clone(c.settings)
	s["port"] = strconv.Itoa(c.port)
	s["unix_socket_directories"] = c.dir
	if c.tcp {
		s["listen_addresses"] = "127.0.0.1"
	} else {
		s["listen_addresses"] = ""
	}
	var b strings.Builder
	b.WriteString("# Written by idem's pgtest.\n")
	for _, k := range slices.Sorted(maps.Keys(s)) {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(s[k], "'", "''"))
	}
	path := filepath.Join(c.dataDir, confName)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := chown(path, c.user); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

var settingNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

func buildSettings(opts *Options) (map[string]string, error) {
	onOff := "off"
	if opts.Fsync {
		onOff = "on"
	}
	s := map[string]string{
		"max_connections":                     "300",
		"idle_in_transaction_session_timeout": "5s",
		"shared_buffers":                      "128MB",
		"fsync":                               onOff,
		// Always on. With synchronous_commit=off a commit returns before
		// its WAL is even written to the OS, and pg_ctl stop -m immediate
		// then loses it: acknowledged rows vanish across the restart
		// fault. With fsync=off, a synchronous commit costs one write(2).
		"synchronous_commit": "on",
		"full_page_writes":   onOff,
		"logging_collector":  "off",
		"log_destination":    "stderr",
	}
	for k, v := range opts.Settings {
		k = strings.ToLower(strings.TrimSpace(k))
		if !settingNameRE.MatchString(k) {
			return nil, fmt.Errorf("pgtest: invalid setting name %q", k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return nil, fmt.Errorf("pgtest: invalid value for setting %s: %q", k, v)
		}
		switch k {
		case "port", "unix_socket_directories", "listen_addresses":
			return nil, fmt.Errorf("pgtest: setting %s is managed by pgtest (use Options.TCP)", k)
		}
		s[k] = v
	}
	return s, nil
}

// baseDir is where cluster directories go: os.TempDir(), unless a socket
// path under it would be too long (sun_path holds 107 bytes) or, when
// running the server as another user, that user can't reach it.
func baseDir(u *runAs) string {
	base := os.TempDir()
	if len(base) > 60 || (u != nil && !searchableByOthers(base)) {
		return "/tmp"
	}
	return base
}

// childEnv is our environment without PG*, LANG and LC_* (PGDATA, PGPORT
// and friends must not redirect pg_ctl), with LC_ALL=C and, when running as
// another user, that user's HOME, USER and LOGNAME.
func childEnv(u *runAs) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		if u != nil && (k == "HOME" || k == "USER" || k == "LOGNAME") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LC_ALL=C")
	if u != nil {
		home := u.home
		if home == "" {
			home = "/"
		}
		env = append(env, "HOME="+home)
		if u.name != "" {
			env = append(env, "USER="+u.name, "LOGNAME="+u.name)
		}
	}
	return env
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// queryEscapePath escapes p for a URL query value, leaving '/' (allowed in
// a query) readable.
func queryEscapePath(p string) string {
	return strings.ReplaceAll(url.QueryEscape(p), "%2F", "/")
}
