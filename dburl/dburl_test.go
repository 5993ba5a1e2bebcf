package dburl_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem/dburl"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestParseSQLite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, path, opts string
	}{
		{"sqlite", "idem.db", ""},
		{"sqlite3", "idem.db", ""},
		{"SQLite", "idem.db", ""},
		{"sqlite:gw.db", "gw.db", ""},
		{"sqlite://gw.db", "gw.db", ""},
		{"sqlite:///var/lib/idem.db", "/var/lib/idem.db", ""},
		{"sqlite3:gw.db", "gw.db", ""},
		{"sqlite:gw.db?synchronous=normal", "gw.db", "synchronous=normal"},
		{"sqlite:p%41.db", "p%41.db", ""},
		{"sqlite:t1#x.db", "t1#x.db", ""},
		{"sqlite:what?.db", "what?.db", ""},
		{"sqlite:we?ird.db?synchronous=full", "we?ird.db", "synchronous=full"},
		{"sqlite:my dir/ü.db", "my dir/ü.db", ""},
	} {
		u, err := dburl.Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if u.Driver != dburl.SQLite || u.Path != tc.path || u.Options.Encode() != tc.opts {
			t.Errorf("Parse(%q) = driver %q path %q options %q; want sqlite %q %q", tc.in, u.Driver, u.Path, u.Options.Encode(), tc.path, tc.opts)
		}
		if back, err := dburl.Parse(u.String()); err != nil || back.Path != u.Path || back.Options.Encode() != u.Options.Encode() {
			t.Errorf("Parse(%q).String() = %q does not read back: %+v %v", tc.in, u.String(), back, err)
		}
	}
}

func TestParsePostgres(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in                   string
		host, db, user, pass string
		port                 uint16
		pool                 dburl.Pool
		fallbacks            int
	}{
		{in: "postgres://u:pw@db.example:5433/ledger?sslmode=disable", host: "db.example", port: 5433, db: "ledger", user: "u", pass: "pw"},
		{in: "postgresql://u@localhost/ledger?sslmode=disable", host: "localhost", port: 5432, db: "ledger", user: "u"},
		{in: "postgres://u:p%40ss@h1:5432,h2:5433/ledger?target_session_attrs=read-write&sslmode=disable", host: "h1", port: 5432, db: "ledger", user: "u", pass: "p@ss", fallbacks: 1},
		{in: "postgres://u:pw@h/db?sslmode=disable&pool_max_conns=7&pool_max_conn_idle_time=90s", host: "h", port: 5432, db: "db", user: "u", pass: "pw",
			pool: dburl.Pool{MaxConns: 7, MaxConnIdleTime: 90 * time.Second}},
		{in: "host=db.example port=5433 dbname=ledger user=u password='a b\\'c' sslmode=disable", host: "db.example", port: 5433, db: "ledger", user: "u", pass: "a b'c"},
		{in: "host=/var/run/postgresql dbname=ledger sslmode=disable pool_max_conns=3", host: "/var/run/postgresql", port: 5432, db: "ledger", pool: dburl.Pool{MaxConns: 3}},
		{in: "host=h1,h2 port=5432,5433 dbname=d sslmode=disable", host: "h1", port: 5432, db: "d", fallbacks: 1},
		{in: "postgres://u@bouncer:6432/db?pooler=transaction&sslmode=disable", host: "bouncer", port: 6432, db: "db", user: "u",
			pool: dburl.Pool{Pooler: "transaction"}},
		{in: "host=bouncer port=6432 dbname=db sslmode=disable pooler=session pool_max_conns=4", host: "bouncer", port: 6432, db: "db", pool: dburl.Pool{Pooler: "session", MaxConns: 4}},
	} {
		u, err := dburl.Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if u.Driver != dburl.Postgres || u.Pool != tc.pool {
			t.Errorf("Parse(%q) = driver %q pool %+v; want postgres %+v", tc.in, u.Driver, u.Pool, tc.pool)
		}
		if !strings.HasPrefix(u.ConnString, "postgres://") || strings.Contains(u.ConnString, "pool") {
			t.Errorf("Parse(%q).ConnString = %q: want a postgres:// URL without pool settings", tc.in, u.ConnString)
		}
		// What pgx reads from the connection string is what was asked for.
		cfg, err := pgconn.ParseConfig(u.ConnString)
		if err != nil {
			t.Errorf("pgx cannot read ConnString of %q: %v", tc.in, err)
			continue
		}
		if cfg.Host != tc.host || cfg.Port != tc.port || cfg.Database != tc.db || (tc.user != "" && cfg.User != tc.user) || cfg.Password != tc.pass || len(cfg.Fallbacks) != tc.fallbacks {
			t.Errorf("pgx reads %q as host %q port %d db %q user %q password %q fallbacks %d", tc.in, cfg.Host, cfg.Port, cfg.Database, cfg.User, cfg.Password, len(cfg.Fallbacks))
		}
		if len(cfg.RuntimeParams) > 0 {
			t.Errorf("pgx would send %v to the server for %q", cfg.RuntimeParams, tc.in)
		}
		if back, err := dburl.Parse(u.String()); err != nil || back.Pool != u.Pool {
			t.Errorf("Parse(%q).String() does not read back: %+v %v", tc.in, back, err)
		}
	}
}

func TestParseErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"mysql://u:S3CRET@h/db", `unknown database scheme "mysql"`},
		{"", "empty"},
		{"postgres", "names no server"},
		{"postgres:S3CRET@h", "want postgres://"},
		{"sqlite:", "empty path"},
		{"sqlite:x.db?password=S3CRET", "unknown sqlite option"},
		{"sqlite:x.db?synchronous=off", "want one of full, normal"},
		{"host=h password='S3CRET", "unterminated"},
		{"postgres://u:S3CRET@h/db?pool_max_conns=zero", "pool_max_conns"},
		{"postgres://u:S3CRET@h/db?pool_bogus=1", "unknown pool setting"},
		{"postgres://u:S3CRET@h/db?pooler=statement", "want session or transaction"},
		{"just S3CRET words", "not a database URL"},
	} {
		_, err := dburl.Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q): no error", tc.in)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): %v; want it to say %q", tc.in, err, tc.want)
		}
		if strings.Contains(err.Error(), "S3CRET") {
			t.Errorf("Parse(%q): error shows the secret: %v", tc.in, err)
		}
	}
}

// A multi-host URL (a primary and its standbys) parses, keeps every host
// and target_session_attrs for pgx, and is redacted in either form.
func TestParsePostgresMultiHost(t *testing.T) {
	for _, in := range []string{
		"postgres://u:s3cret@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write&pool_max_conns=5",
		"host=10.0.0.1,10.0.0.2 port=5432,5433 user=u password=s3cret dbname=db target_session_attrs=read-write pool_max_conns=5",
	} {
		u, err := dburl.Parse(in)
		if err != nil {
			t.Fatalf("%s: %v", dburl.Redact(in), err)
		}
		if u.Driver != dburl.Postgres || u.Pool.MaxConns != 5 {
			t.Fatalf("%s: %+v", dburl.Redact(in), u.Pool)
		}
		cfg, err := pgconn.ParseConfig(u.ConnString)
		if err != nil {
			t.Fatalf("pgx rejects %s: %v", dburl.Redact(u.ConnString), err)
		}
		// pgx tries each host (twice under sslmode=prefer: TLS, then not).
		hosts := map[string]bool{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port): true}
		for _, f := range cfg.Fallbacks {
			hosts[fmt.Sprintf("%s:%d", f.Host, f.Port)] = true
		}
		if len(hosts) != 2 || !hosts["10.0.0.1:5432"] || !hosts["10.0.0.2:5433"] || cfg.Password != "s3cret" || cfg.ValidateConnect == nil {
			t.Errorf("%s: hosts %v (want both), target_session_attrs kept: %v", dburl.Redact(in), hosts, cfg.ValidateConnect != nil)
		}
		for _, s := range []string{dburl.Redact(in), dburl.Redact(u.ConnString), dburl.Redact(u.String())} {
			if strings.Contains(s, "s3cret") || !strings.Contains(s, "10.0.0.2") {
				t.Errorf("redacted: %s", s)
			}
		}
	}
}
