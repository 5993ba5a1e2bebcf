package dburl_test

import (
	"fmt"

	"github.com/idemdev/idem/dburl"
)

func ExampleParse() {
	for _, s := range []string{
		"sqlite",
		"sqlite:/var/lib/idem/p%41.db?synchronous=normal",
		"host=db.example dbname=ledger user=app password='s3 cret' pool_max_conns=10",
		"postgres://app:s3cret@h1:5432,h2:5432/ledger?target_session_attrs=read-write",
	} {
		u, err := dburl.Parse(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		switch u.Driver {
		case dburl.SQLite:
			fmt.Printf("sqlite file %q, options %q, %s\n", u.Path, u.Options.Encode(), u.SQLiteURI())
		case dburl.Postgres:
			fmt.Printf("postgres %s, pool_max_conns %d\n", dburl.Redact(u.ConnString), u.Pool.MaxConns)
		}
	}
	_, err := dburl.Parse("mysql://app:s3cret@db.example/ledger")
	fmt.Println(err)
	// Output:
	// sqlite file "idem.db", options "", file:idem.db
	// sqlite file "/var/lib/idem/p%41.db", options "synchronous=normal", file:/var/lib/idem/p%2541.db
	// postgres postgres://?host=db.example&dbname=ledger&user=app&password=xxxxx, pool_max_conns 10
	// postgres postgres://app:xxxxx@h1:5432,h2:5432/ledger?target_session_attrs=read-write, pool_max_conns 0
	// dburl: unknown database scheme "mysql" (want sqlite:PATH, postgres://… or host=… dbname=…)
}

func ExampleRedact() {
	fmt.Println(dburl.Redact("mysql://app:s3cret@db.example/ledger"))
	fmt.Println(dburl.Redact("postgres://db.example/ledger?user=app&password=s3cret"))
	fmt.Println(dburl.Redact("host=db.example password='s3 cret' dbname=ledger"))
	// Output:
	// mysql://app:xxxxx@db.example/ledger
	// postgres://db.example/ledger?user=app&password=xxxxx
	// host=db.example password=xxxxx dbname=ledger
}
