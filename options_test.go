package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// TestHashedKeysInErrors: under HashKeysInLogs the ledger's errors, which
// end up in logs, name a key by its hash, never as given.
func TestHashedKeysInErrors(t *testing.T) {
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), &idem.Options{HashKeysInLogs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const key = "alice@example.com"
	op := idem.Op{Key: key, Fingerprint: "fp"}
	if _, err := l.Do(ctx, op, func(context.Context, *sql.Tx) ([]byte, error) {
		return nil, idem.Permanent(errors.New("card declined"))
	}); !errors.Is(err, idem.ErrFailed) {
		t.Fatalf("first Do: %v", err)
	}
	_, failed := l.Do(ctx, op, nil)
	op.Fingerprint = "other"
	_, mismatch := l.Do(ctx, op, nil)
	for _, err := range []error{failed, mismatch} {
		if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), idem.KeyHash(key)) {
			t.Errorf("error %v: want the key's hash, not the key", err)
		}
	}
}

// TestPruneDutyBounds: a pace outside (0.05, 1] is refused before any
// statement runs.
func TestPruneDutyBounds(t *testing.T) {
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, d := range []float64{-1, 0.01, 1.5, math.NaN()} {
		if err := (&idem.PruneOptions{Duty: d}).Validate(); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Validate, Duty %v: %v, want ErrInvalid", d, err)
		}
		if _, err := l.Prune(ctx, &idem.PruneOptions{Duty: d}); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Duty %v: %v, want ErrInvalid", d, err)
		}
	}
	for _, d := range []float64{0, 0.05, 1} {
		if err := (&idem.PruneOptions{Duty: d}).Validate(); err != nil {
			t.Errorf("Validate, Duty %v: %v", d, err)
		}
	}
	if _, err := l.Prune(ctx, &idem.PruneOptions{Duty: 1}); err != nil {
		t.Errorf("Duty 1: %v", err)
	}
}
