package outbox_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/outbox"
)

const (
	helperEnv = "IDEM_OUTBOX_HELPER" // set to the database URL: run a relay until killed
)

// helperMain runs a relay (with whatever crash point the environment arms)
// and never returns.
func helperMain() {
	ctx := context.Background()
	l, err := dburl.Open(ctx, os.Getenv(helperEnv), &idem.Options{Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	ob, err := outbox.New(l, fastConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	if err := ob.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	time.Sleep(time.Minute)
	os.Exit(4) // the crash point should have fired long before
}
