package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// testBadInput: every malformed op is refused with an *InputError matching
// ErrInvalid, by Claim, ClaimTx and Do alike, and nothing is written.
func testBadInput(t *testing.T, s *suite) {
	f := s.setup(t)
	l := f.open(&idem.Options{Clock: newClock().Now})
	// Records that must survive untouched.
	for _, k := range []string{"a", "b"} {
		c := mustClaim(t, f.ctx, l, idem.Op{Key: k, Fingerprint: "fp"}, idem.Acquired)
		if err := l.Complete(f.ctx, c, idem.Result{Body: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	before := rowCount(t, l)
	recsBefore, err := l.List(f.ctx, idemtype.ListFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}

	maxKey := strings.Repeat("k", idem.MaxKeyLen)
	bad := []struct {
		name  string
		op    idem.Op
		field string
	}{
		{"empty key", idem.Op{Key: ""}, "key"},
		{"key of 256 bytes", idem.Op{Key: maxKey + "k"}, "key"},
		{"key of 256 bytes in multibyte runes", idem.Op{Key: strings.Repeat("é", 128)}, "key"},
		{"key with newline", idem.Op{Key: "a\nb"}, "key"},
		{"key with carriage return", idem.Op{Key: "a\rb"}, "key"},
		{"key with NUL", idem.Op{Key: "a\x00b"}, "key"},
		{"key with DEL", idem.Op{Key: "a\x7fb"}, "key"},
		{"key with a C1 control", idem.Op{Key: "a\u0085b"}, "key"},
		{"key of invalid UTF-8", idem.Op{Key: "a\xffb"}, "key"},
		{"key of a lone surrogate", idem.Op{Key: "a\xed\xa0\x80b"}, "key"},
		{"scope of 256 bytes", idem.Op{Scope: strings.Repeat("s", idem.MaxScopeLen+1), Key: "k"}, "scope"},
		{"scope with control char", idem.Op{Scope: "t\tenant", Key: "k"}, "scope"},
		{"scope of invalid UTF-8", idem.Op{Scope: "\xc3", Key: "k"}, "scope"},
		{"fingerprint of 256 bytes", idem.Op{Key: "k", Fingerprint: strings.Repeat("f", idem.MaxFingerprintLen+1)}, "fingerprint"},
		{"negative lease", idem.Op{Key: "k", Lease: -time.Second}, "lease"},
		{"lease of 1ns", idem.Op{Key: "k", Lease: time.Nanosecond}, "lease"},
		{"lease beyond the maximum", idem.Op{Key: "k", Lease: 365 * 24 * time.Hour}, "lease"},
		{"negative retention", idem.Op{Key: "k", Retention: -time.Hour}, "retention"},
		{"reconcile without a reconciler", idem.Op{Key: "k", Stale: idem.StaleReconcile}, "stale"},
		// An existing key: a bad field must not turn into a claim of it.
		{"existing key with a bad lease", idem.Op{Key: "a", Fingerprint: "fp", Lease: -1}, "lease"},
	}
	for _, b := range bad {
		ran := false
		fn := func(context.Context, *sql.Tx) ([]byte, error) { ran = true; return nil, nil }
		calls := map[string]func() error{
			"Claim": func() error { _, err := l.Claim(f.ctx, b.op); return err },
			"Do":    func() error { _, err := l.Do(f.ctx, b.op, fn); return err },
			"ClaimTx": func() error {
				tx := begin(t, f.ctx, l)
				defer tx.Rollback()
				_, err := l.ClaimTx(f.ctx, tx, b.op)
				if err == nil {
					err = tx.Commit()
				}
				return err
			},
		}
		for name, call := range calls {
			err := call()
			var ie *idem.InputError
			if !errors.Is(err, idem.ErrInvalid) || !errors.As(err, &ie) {
				t.Errorf("%s with %s: %v, want an *InputError matching ErrInvalid", name, b.name, err)
				continue
			}
			if ie.Field != b.field {
				t.Errorf("%s with %s: error names field %q, want %q (%v)", name, b.name, ie.Field, b.field, err)
			}
		}
		if ran {
			t.Errorf("Do ran its Func for %s", b.name)
		}
		if n := rowCount(t, l); n != before {
			t.Fatalf("after %s: %d rows, want %d: a bad input wrote to the ledger", b.name, n, before)
		}
	}

	// The bounds themselves are fine.
	for _, op := range []idem.Op{
		{Key: maxKey, Fingerprint: strings.Repeat("f", idem.MaxFingerprintLen)},
		{Scope: strings.Repeat("s", idem.MaxScopeLen), Key: "k"},
		{Key: "ключ/ключ", Lease: time.Millisecond},
	} {
		if c, err := l.Claim(f.ctx, op); err != nil || c.Outcome != idem.Acquired {
			t.Errorf("claim at the bounds (key %d bytes, scope %d bytes, lease %v): %v", len(op.Key), len(op.Scope), op.Lease, err)
		}
	}

	// Misused handles are input errors too, and change nothing.
	inflight := mustClaim(t, f.ctx, l, idem.Op{Key: maxKey, Fingerprint: strings.Repeat("f", idem.MaxFingerprintLen)}, idem.InFlight)
	replay := mustClaim(t, f.ctx, l, idem.Op{Key: "a", Fingerprint: "fp"}, idem.Replay)
	for name, err := range map[string]error{
		"Complete(nil)":        l.Complete(f.ctx, nil, idem.Result{}),
		"Complete(in flight)":  l.Complete(f.ctx, inflight, idem.Result{Body: []byte("hijack")}),
		"Fail(replay)":         l.Fail(f.ctx, replay, idem.Result{Body: []byte("hijack")}),
		"Release(replay)":      l.Release(f.ctx, replay),
		"Heartbeat(in flight)": l.Heartbeat(f.ctx, inflight),
		"ClaimTx(nil tx)":      func() error { _, err := l.ClaimTx(f.ctx, nil, idem.Op{Key: "new"}); return err }(),
		"CompleteTx(nil tx)":   l.CompleteTx(f.ctx, nil, inflight, idem.Result{}),
		"Resolve(as in_progress)": func() error {
			_, err := l.Resolve(f.ctx, "", "a", idem.Resolution{As: idemtype.StateInProgress})
			return err
		}(),
	} {
		if !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	recsAfter, err := l.List(f.ctx, idemtype.ListFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(recsAfter) != len(recsBefore)+3 {
		t.Fatalf("List: %d records, want %d", len(recsAfter), len(recsBefore)+3)
	}
	for _, k := range []string{"a", "b"} {
		if r := mustGet(t, f.ctx, l, "", k); r.State != idemtype.StateSucceeded || string(r.Body) != k || r.Attempt != 1 {
			t.Errorf("record %s: %s attempt %d body %q, want untouched", k, r.State, r.Attempt, r.Body)
		}
	}

	// A bad option fails Open with the same kind of error.
	for name, o := range map[string]*idem.Options{
		"negative lease":   {Lease: -time.Second},
		"retention of 1ns": {Retention: time.Nanosecond},
	} {
		if l2, err := f.openLedger(o); !errors.Is(err, idem.ErrInvalid) {
			if l2 != nil {
				l2.Close()
			}
			t.Errorf("Open with %s: %v, want ErrInvalid", name, err)
		}
	}
	if l2, err := f.openLedger(&idem.Options{Stale: idem.StaleReconcile}); err == nil {
		l2.Close()
		t.Errorf("Open with the Reconcile policy and no Reconciler succeeded")
	}
}
