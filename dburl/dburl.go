package dburl

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Drivers named by URL.Driver.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// DefaultSQLitePath is the file that the bare words "sqlite" and "sqlite3"
// name: idem.db in the working directory.
const DefaultSQLitePath = "idem.db"

// URL is a parsed database URL.
type URL struct {
	// Driver is SQLite or Postgres.
	Driver string
	// Path is the SQLite file as it is named on disk; nothing in it is
	// decoded (sqlite:p%41.db is the file "p%41.db"). SQLite only.
	Path string
	// Options are the SQLite options given after the path
	// (synchronous=full|normal). SQLite only; nil when none.
	Options url.Values
	// ConnString is the PostgreSQL connection string as a postgres:// URL
	// that pgx (and libpq) accept, without the pool settings. A keyword
	// string is converted to the same settings as URL query parameters.
	// It holds the password when one was given: print Redact(ConnString).
	// PostgreSQL only.
	ConnString string
	// Pool holds the pool settings found in a PostgreSQL URL. Zero fields
	// were not given.
	Pool Pool
}

// Pool is the pool settings a PostgreSQL URL may carry, under the names
// pgxpool reads (pool_max_conns=10 and so on). A zero field was not given.
type Pool struct {
	MaxConns              int32         // pool_max_conns, at least 1
	MinConns              int32         // pool_min_conns
	MinIdleConns          int32         // pool_min_idle_conns
	MaxConnLifetime       time.Duration // pool_max_conn_lifetime
	MaxConnLifetimeJitter time.Duration // pool_max_conn_lifetime_jitter
	MaxConnIdleTime       time.Duration // pool_max_conn_idle_time
	HealthCheckPeriod     time.Duration // pool_health_check_period
	PingTimeout           time.Duration // pool_ping_timeout
	// Pooler is pooler=transaction when the URL reaches PostgreSQL
	// through a pooler in transaction mode (PgBouncer pool_mode=transaction):
	// Open then uses no named prepared statements and jobs poll instead of
	// LISTEN (see postgres.Options.TransactionPooling). pooler=session (or
	// none) changes nothing.
	Pooler string
}

// sqliteOptions are the options a sqlite: URL may carry, with their
// allowed values.
var sqliteOptions = map[string][]string{"synchronous": {"full", "normal"}, "library": {"mattn", "modernc"}}

// Parse reads a database URL in one of the forms in the package
// documentation. Its errors never contain a password: they quote the
// input only through Redact.
func Parse(s string) (URL, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "":
		return URL{}, errors.New("dburl: empty database URL (want sqlite:PATH, postgres://… or host=… dbname=…)")
	case "sqlite", "sqlite3":
		return URL{Driver: SQLite, Path: DefaultSQLitePath}, nil
	case "postgres", "postgresql":
		return URL{}, fmt.Errorf("dburl: %q names no server (want postgres://HOST/DB or host=… dbname=…)", s)
	}
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || !isScheme(scheme) {
		if looksLikeKeywords(s) {
			return parseKeywords(s)
		}
		return URL{}, errors.New("dburl: not a database URL (want sqlite:PATH, postgres://… or host=… dbname=…)")
	}
	switch strings.ToLower(scheme) {
	case "sqlite", "sqlite3":
		return parseSQLite(rest)
	case "postgres", "postgresql":
		if !strings.HasPrefix(rest, "//") {
			return URL{}, fmt.Errorf("dburl: %s URL without //: want %s://HOST/DB", scheme, scheme)
		}
		return parsePostgresURL("postgres:" + rest)
	}
	return URL{}, fmt.Errorf("dburl: unknown database scheme %q (want sqlite:PATH, postgres://… or host=… dbname=…)", scheme)
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, "+", "-" or ".".
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// parseSQLite reads what follows "sqlite:". The path is literal; options
// follow the last "?" when what follows it holds "=", so a file name may
// contain "?" (sqlite:what?.db) but not "?" followed by "=".
func parseSQLite(rest string) (URL, error) {
	rest = strings.TrimPrefix(rest, "//")
	path, query := rest, ""
	if i := strings.LastIndexByte(rest, '?'); i >= 0 && strings.Contains(rest[i+1:], "=") {
		path, query = rest[:i], rest[i+1:]
	}
	if path == "" {
		return URL{}, errors.New("dburl: sqlite: empty path (want sqlite:path/to/idem.db)")
	}
	u := URL{Driver: SQLite, Path: path}
	if query == "" {
		return u, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return URL{}, fmt.Errorf("dburl: sqlite options %q: %v", Redact(query), err)
	}
	for k, v := range q {
		allowed, known := sqliteOptions[k]
		if !known {
			return URL{}, fmt.Errorf("dburl: unknown sqlite option %q (known: synchronous, library)", k)
		}
		if len(v) != 1 || !slices.Contains(allowed, strings.ToLower(v[0])) {
			return URL{}, fmt.Errorf("dburl: sqlite option %s: want one of %s", k, strings.Join(allowed, ", "))
		}
	}
	u.Options = q
	return u, nil
}

// parsePostgresURL takes the pool settings out of a postgres:// URL.
func parsePostgresURL(s string) (URL, error) {
	base, query := s, ""
	if i := queryStart(s); i >= 0 {
		base, query = s[:i], s[i+1:]
	}
	u := URL{Driver: Postgres}
	var kept []string
	for _, pair := range strings.Split(query, "&") {
		if pair == "" {
			continue
		}
		rk, rv, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(rk)
		if err != nil {
			return URL{}, fmt.Errorf("dburl: postgres URL %q: bad query parameter name", Redact(s))
		}
		if strings.HasPrefix(k, "pool_") || k == "pooler" {
			v, err := url.QueryUnescape(rv)
			if err != nil {
				return URL{}, fmt.Errorf("dburl: postgres URL: %s: bad value", k)
			}
			if err := u.Pool.set(k, v); err != nil {
				return URL{}, err
			}
			continue
		}
		kept = append(kept, pair)
	}
	u.ConnString = base
	if len(kept) > 0 {
		u.ConnString += "?" + strings.Join(kept, "&")
	}
	return u, nil
}

// queryStart returns the index of the "?" that starts a postgres URL's
// query, or -1. It splits as libpq and pgx do: the userinfo ends at the
// first "@" when it comes before any "/", and may hold a "?".
func queryStart(s string) int {
	from := 0
	if i := strings.Index(s, "://"); i >= 0 {
		from = i + 3
	}
	if i := strings.IndexAny(s[from:], "@/"); i >= 0 && s[from+i] == '@' {
		from += i + 1
	}
	if i := strings.IndexByte(s[from:], '?'); i >= 0 {
		return from + i
	}
	return -1
}

// set stores one pool setting.
func (p *Pool) set(k, v string) error {
	bad := func(want string) error { return fmt.Errorf("dburl: %s=%q: want %s", k, v, want) }
	count := func(dst *int32, min int64) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < min {
			return bad(fmt.Sprintf("an integer, at least %d", min))
		}
		*dst = int32(n)
		return nil
	}
	dur := func(dst *time.Duration) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return bad("a duration such as 30s or 1h")
		}
		*dst = d
		return nil
	}
	switch k {
	case "pooler":
		if v != "session" && v != "transaction" {
			return bad("session or transaction")
		}
		p.Pooler = v
		return nil
	case "pool_max_conns":
		return count(&p.MaxConns, 1)
	case "pool_min_conns":
		return count(&p.MinConns, 0)
	case "pool_min_idle_conns":
		return count(&p.MinIdleConns, 0)
	case "pool_max_conn_lifetime":
		return dur(&p.MaxConnLifetime)
	case "pool_max_conn_lifetime_jitter":
		return dur(&p.MaxConnLifetimeJitter)
	case "pool_max_conn_idle_time":
		return dur(&p.MaxConnIdleTime)
	case "pool_health_check_period":
		return dur(&p.HealthCheckPeriod)
	case "pool_ping_timeout":
		return dur(&p.PingTimeout)
	}
	return fmt.Errorf("dburl: unknown pool setting %q (known: pooler, pool_max_conns, pool_min_conns, pool_min_idle_conns, pool_max_conn_lifetime, pool_max_conn_lifetime_jitter, pool_max_conn_idle_time, pool_health_check_period, pool_ping_timeout)", k)
}

// String returns the URL in the form Parse reads back: sqlite:PATH with
// its options, or the PostgreSQL connection string with the pool
// settings. It holds the password: print Redact(u.String()).
func (u URL) String() string {
	switch u.Driver {
	case SQLite:
		s := "sqlite:" + u.Path
		if len(u.Options) > 0 {
			s += "?" + u.Options.Encode()
		}
		return s
	case Postgres:
		q := u.Pool.values()
		if len(q) == 0 {
			return u.ConnString
		}
		sep := "?"
		if queryStart(u.ConnString) >= 0 {
			sep = "&"
		}
		return u.ConnString + sep + q.Encode()
	}
	return ""
}

// values returns the settings that were given, under pgxpool's names.
func (p Pool) values() url.Values {
	q := url.Values{}
	for _, c := range []struct {
		k string
		n int32
	}{{"pool_max_conns", p.MaxConns}, {"pool_min_conns", p.MinConns}, {"pool_min_idle_conns", p.MinIdleConns}} {
		if c.n != 0 {
			q.Set(c.k, strconv.Itoa(int(c.n)))
		}
	}
	for _, c := range []struct {
		k string
		d time.Duration
	}{{"pool_max_conn_lifetime", p.MaxConnLifetime}, {"pool_max_conn_lifetime_jitter", p.MaxConnLifetimeJitter},
		{"pool_max_conn_idle_time", p.MaxConnIdleTime}, {"pool_health_check_period", p.HealthCheckPeriod}, {"pool_ping_timeout", p.PingTimeout}} {
		if c.d != 0 {
			q.Set(c.k, c.d.String())
		}
	}
	if p.Pooler != "" {
		q.Set("pooler", p.Pooler)
	}
	return q
}
