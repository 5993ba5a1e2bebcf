package drivertest

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// testFill: a driver that fills in bulk (driver.Filler) writes records the
// ledger reads as any completed record (replayed with their response, then
// tombstoned and deleted by Prune on time), keyed by random UUIDv4s spread
// over the scopes, and its size report grows with them.
func testFill(t *testing.T, s *suite) {
	const (
		n         = 300
		retention = time.Hour
		ttl       = time.Hour
	)
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now})
	filler, ok := l.Driver().(driver.Filler)
	if !ok {
		t.Skipf("%s does not implement driver.Filler", l.Driver().Name())
	}
	size0, err := filler.LedgerSize(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 1024)
	sample, err := filler.FillCompleted(f.ctx, driver.FillParams{N: n, Scope: "fill", Scopes: 7, Body: body,
		Retention: retention, TombstoneTTL: ttl, Age: time.Minute, Sample: 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(sample) < 5 || len(sample) > 100 {
		t.Fatalf("asked for a sample of about 30 keys, got %d", len(sample))
	}
	scopes := map[string]bool{}
	for _, k := range sample {
		scopes[k.Scope] = true
		if !uuidV4.MatchString(k.Key) {
			t.Errorf("key %q is not a UUIDv4", k.Key)
		}
		c := mustClaim(t, f.ctx, l, idem.Op{Scope: k.Scope, Key: k.Key, Fingerprint: "fill"}, idem.Replay)
		if c.Result.Status != 201 || !bytes.Equal(c.Result.Body, body) {
			t.Fatalf("replay of a filled key: status %d, %d bytes", c.Result.Status, len(c.Result.Body))
		}
		r := mustGet(t, f.ctx, l, k.Scope, k.Key)
		if want := t0.Add(-time.Minute); !r.CompletedAt.Equal(want) || !r.ExpiresAt.Equal(want.Add(retention)) || !r.TombstoneUntil.Equal(want.Add(retention+ttl)) {
			t.Fatalf("filled record: completed %v expires %v tombstone until %v; want %v, +%v, +%v", r.CompletedAt, r.ExpiresAt, r.TombstoneUntil, want, retention, retention+ttl)
		}
	}
	if len(scopes) < 2 {
		t.Errorf("the sample spans %d scope(s); the fill spreads keys over 7", len(scopes))
	}
	size1, err := filler.LedgerSize(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if grew := size1.Ledger - size0.Ledger; grew < n*1024 || size1.File < size1.Ledger || size1.How == "" {
		t.Errorf("size after filling %d records of 1 KiB: %+v (before: %+v)", n, size1, size0)
	}
	clk.Advance(retention + ttl)
	st, err := l.Prune(f.ctx, nil)
	if err != nil || st.Tombstoned != n || st.Deleted != n {
		t.Fatalf("prune past every filled record's window: %+v, %v; want %d tombstoned and deleted", st, err, n)
	}
	mustClaim(t, f.ctx, l, idem.Op{Scope: sample[0].Scope, Key: sample[0].Key, Fingerprint: "fill"}, idem.Acquired)
}
