package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// TestNoCommandPrintsTheDBPassword runs every command with a password in
// --db, in each form a user may write one, and checks that nothing it
// prints (stdout, stderr, JSON) holds the password (issue 10 item 9).
func TestNoCommandPrintsTheDBPassword(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET-pw"
	dir := t.TempDir()
	dbs := []string{
		"sqlite:" + filepath.Join(dir, "idem.db") + "?password=" + secret,
		"sqlite:" + filepath.Join(dir, "idem.db") + "?synchronous=normal&password=" + secret,
		"postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=5",
		"postgresql://127.0.0.1:1/db?user=u&password=" + secret + "&sslmode=disable",
		"postgres://u:" + secret + "@127.0.0.1:1,127.0.0.1:2/db?sslmode=disable",
		"host=127.0.0.1 port=1 user=u password=" + secret + " dbname=db sslmode=disable",
		"host=127.0.0.1 port=1 user=u password='" + secret + " x' dbname=db sslmode=disable",
		"mysql://u:" + secret + "@127.0.0.1/db",
		"postgres:u:" + secret + "@h",
		"u:" + secret + "@127.0.0.1/db",
		"postgres://u:" + secret + "@127.0.0.1:1/db?pool_max_conns=nope",
		"postgres://u:" + secret + "@127.0.0.1:1/db?pool_max_conns=4",
		"host=127.0.0.1 password='" + secret,
		"postgres://u:" + secret + "@[::1/db",
	}
	cmds := [][]string{
		{"keys", "list"}, {"keys", "list", "--json"}, {"keys", "show", "s", "k"}, {"keys", "show", "--json", "s", "k"},
		{"reconcile", "--as", "release", "s", "k"}, {"reconcile", "--json", "--log-format", "json", "--as", "release", "s", "k"},
		{"prune"}, {"prune", "--json"}, {"prune", "--dry-run"},
		{"jobs", "list"}, {"jobs", "list", "--json"}, {"jobs", "show", "1"}, {"jobs", "retry", "1"}, {"jobs", "discard", "1"},
		{"outbox", "list"}, {"outbox", "list", "--json"},
		{"migrate"}, {"migrate", "--print"},
		{"serve", "--upstream", "http://127.0.0.1:1"},
		{"prove", "--ops", "1"}, {"bench", "--duration", "100ms"},
	}
	for _, db := range dbs {
		for _, c := range cmds {
			if (c[0] == "prove" || c[0] == "bench") && strings.HasPrefix(db, "host=") || c[0] == "serve" && strings.HasPrefix(db, "sqlite") {
				// would run a real prove or bench, or serve a file
				continue
			}
			args := append(append([]string{}, c...), "--db", db)
			r := opRun(t, "", args...)
			if r.code == 0 && c[0] != "migrate" {
				t.Errorf("idem %s: exit 0 on a database that is not there", strings.Join(args, " "))
			}
			if strings.Contains(r.stderr, "dburl: ") || strings.Contains(r.stderr, "--db: --db") {
				t.Errorf("idem %s: doubled prefix: %s", strings.Join(c, " "), r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stdout+r.stderr, "S3CRET") {
				t.Errorf("idem %s shows the password:\nstdout: %s\nstderr: %s", strings.Join(c, " "), r.stdout, r.stderr)
			}
		}
	}
}

// TestServeStartupHidesTheDBPassword runs idem serve on a real PostgreSQL
// with a password in --db (URL and keyword forms; the test cluster trusts
// local users, so the password is accepted and ignored) and reads
// everything it prints until it listens.
func TestServeStartupHidesTheDBPassword(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET-serve"
	pg := pgtest.NewDB(t)
	u, err := url.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	withPW := *u
	withPW.User = url.UserPassword(u.User.Username(), secret)
	kw := "host=" + q.Get("host") + " port=" + q.Get("port") + " user=" + u.User.Username() +
		" password='" + secret + "' dbname=" + strings.TrimPrefix(u.Path, "/") + " sslmode=disable"
	for _, db := range []string{withPW.String(), kw, pg + "&password=" + secret} {
		for _, format := range []string{"text", "json"} {
			// The upstream carries the password too: its URL is printed.
			out, code := serveUntilListening(t, "serve", "--db", db, "--upstream", "http://api:"+secret+"@127.0.0.1:1", "--listen", "127.0.0.1:0", "--log-format", format, "--log-level", "debug")
			if code != 0 || !strings.Contains(out, "listening on") {
				t.Errorf("serve --db %s: exit %d:\n%s", dburl.Redact(db), code, out)
			}
			if strings.Contains(out, secret) {
				t.Errorf("serve shows the password:\n%s", out)
			}
		}
	}
}

// serveUntilListening runs a command that serves until its context ends,
// ends it once it says it listens, and returns all it printed.
func serveUntilListening(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stdout bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := dispatch(ctx, args, strings.NewReader(""), &stdout, pw)
		pw.Close()
		done <- code
	}()
	var all strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "listening on") {
			cancel()
		}
	}
	code := <-done
	return stdout.String() + all.String(), code
}
