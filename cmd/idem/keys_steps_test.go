package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// TestKeysShowSteps: keys show lists an unfinished run's steps: name,
// state, attempt, result size and the step key of each.
func TestKeysShowSteps(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	l, err := dburl.Open(ctx, url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runs := idem.NewRuns()
	down := errors.New("provider down")
	book := idem.AddRun(runs, "book-ride/v1", func(r *idem.Run, in string) (idem.Result, error) {
		if _, err := idem.TxStep(r, "create-ride", func(context.Context, *sql.Tx) (string, error) { return "ride-" + in, nil }); err != nil {
			return idem.Result{}, err
		}
		_, err := idem.CallStep(r, "charge", func(context.Context, string) (string, error) { return "", down })
		return idem.Result{}, err
	})
	if _, err := book.Run(ctx, l, idem.Op{Scope: "acct-1", Key: "ride-9"}, "9"); !errors.Is(err, down) {
		t.Fatal(err)
	}
	l.Close()

	r := opRun(t, "", "keys", "show", "--db", url, "acct-1", "ride-9").must(t, 0)
	stepKey := idem.StepKey("acct-1", "ride-9", "charge")
	for _, want := range []string{`run: book-ride/v1 \(input 3 bytes\)`, `STEP\s+NAME\s+STATE\s+ATTEMPT\s+RESULT\s+STEP KEY`,
		`0\s+create-ride\s+done\s+1\s+8 bytes`, `1\s+charge\s+started\s+1\s+0 bytes\s+` + stepKey} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("show lacks %s:\n%s", want, r.stdout)
		}
	}
	r = opRun(t, "", "keys", "show", "--db", url, "--json", "acct-1", "ride-9").must(t, 0)
	var rec recordJSON
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if rec.Run == nil || rec.Run.Name != "book-ride/v1" || len(rec.Steps) != 2 || rec.Steps[1].StepKey != stepKey ||
		rec.Steps[0].State != "done" || rec.Steps[0].ResultBytes != 8 || rec.Steps[1].State != "started" {
		t.Errorf("json: %+v %+v", rec.Run, rec.Steps)
	}
}
