package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/inbox"
)

// A message delivered three times is applied once; a fourth delivery with
// a changed payload is refused.
func ExampleInbox_Process() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example-")
	defer os.RemoveAll(dir)
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	in, _ := inbox.New(l, nil)
	in.DB().Exec(`CREATE TABLE credits (amount INTEGER)`)

	credit := func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO credits (amount) VALUES (10)`)
		return err
	}
	for range 3 {
		dup, err := in.Process(ctx, "payments", "pay-1", []byte(`{"amount":10}`), credit)
		fmt.Println("duplicate:", dup, err)
	}
	_, err = in.Process(ctx, "payments", "pay-1", []byte(`{"amount":99}`), credit)
	fmt.Println("changed payload is a mismatch:", errors.Is(err, idem.ErrMismatch))

	var total int
	in.DB().QueryRow(`SELECT sum(amount) FROM credits`).Scan(&total)
	fmt.Println("credited:", total)
	// Output:
	// duplicate: false <nil>
	// duplicate: true <nil>
	// duplicate: true <nil>
	// changed payload is a mismatch: true
	// credited: 10
}
