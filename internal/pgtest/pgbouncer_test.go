package pgtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Through PgBouncer, a client reaches the right database in both modes.
// Two clients with pgx's statement cache keep their prepared statements in
// session mode; in transaction mode they share server connections, and the
// second prepare of one statement collides (42P05): the behaviour that
// idem's driver detects and that pooler=transaction avoids.
func TestPgBouncer(t *testing.T) {
	for _, mode := range []PoolMode{SessionPooling, TransactionPooling} {
		t.Run(string(mode), func(t *testing.T) {
			b, url := NewPgBouncer(t, mode)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if !strings.HasPrefix(url, "postgres://idem@127.0.0.1:") || b.Mode() != mode {
				t.Fatalf("URL %q mode %q", url, b.Mode())
			}
			clients := []*pgx.Conn{connect(t, ctx, url), connect(t, ctx, url)}
			var collisions int
			for range 3 {
				for _, cn := range clients {
					var db string
					err := cn.QueryRow(ctx, "SELECT current_database()").Scan(&db)
					var pgErr *pgconn.PgError
					switch {
					case errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000"):
						collisions++
					case err != nil:
						t.Fatal(err)
					case db != dbFromConnURL(url):
						t.Fatalf("current_database() = %q through %s", db, url)
					}
				}
			}
			if (collisions > 0) != (mode == TransactionPooling) {
				t.Fatalf("%s mode: %d prepared-statement collisions", mode, collisions)
			}
			for _, cn := range clients {
				cn.Close(ctx)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if cn, err := pgx.Connect(ctx, url); err == nil {
				cn.Close(ctx)
				t.Fatal("PgBouncer still answers after Close")
			}
		})
	}
	if _, err := StartPgBouncer(context.Background(), nil, &BouncerOptions{Mode: "statement"}); err == nil {
		t.Fatal("StartPgBouncer accepted pool mode statement")
	}
}
