package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fullDisk is a driver whose writes that record a result fail, as on a
// full disk; claims and releases work.
type fullDisk struct{ driver.Driver }

func (d fullDisk) Finish(ctx context.Context, q driver.Executor, p driver.FinishParams) error {
	if p.State == idemtype.StateSucceeded || p.State == idemtype.StateFailed {
		return errors.New("database or disk is full")
	}
	return d.Driver.Finish(ctx, q, p)
}

// A response that reaches its client but cannot be recorded is logged as
// an error and counted, never passed over silently.
func TestRecordFailureCounted(t *testing.T) {
	t.Parallel()
	base := openLedger(t, "sqlite")
	l, err := idem.New(t.Context(), fullDisk{base.Driver()}, &idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	m := metrics.New("sqlite")
	h := newCounter()
	mw, _ := idemhttp.New(l, &idemhttp.Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)),
		RecordFailed: func() { m.ResponseUnrecorded(metrics.FaceHTTP) }})
	url := serve(t, mw(h)).URL
	if r := do(t, "POST", url, `{}`, "Idempotency-Key: k"); r.status != 201 {
		t.Fatalf("the client should get the answer it was given: %d", r.status)
	}
	want := `
# HELP idem_responses_unrecorded_total Responses delivered to their client but not recorded because the ledger write failed (disk full, database gone): the claim ends with its lease, then the stale-claim policy applies.
# TYPE idem_responses_unrecorded_total counter
idem_responses_unrecorded_total{driver="sqlite",face="http"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "idem_responses_unrecorded_total"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "not recorded") || !strings.Contains(out, "stale=redo") {
		t.Fatalf("no error line naming the failure and the policy:\n%s", out)
	}
}

// A large response whose temporary file fails is held in memory, and an
// operator is told once, not once a request: with many in flight the
// process holds them all.
func TestSpillFailureIsLoggedOnce(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	var logs bytes.Buffer
	var mu sync.Mutex
	big := strings.Repeat("x", 200<<10)
	h := newCounter()
	h.before = func(w http.ResponseWriter, r *http.Request) bool {
		io.WriteString(w, big)
		return true
	}
	dir := t.TempDir()
	mw, err := idemhttp.New(l, &idemhttp.Options{SpillDir: dir, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, mw(h)).URL
	if err := os.Remove(dir); err != nil { // the directory goes after the middleware is made
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b", "c"} {
		if r := do(t, "POST", url, `{}`, "Idempotency-Key: "+key); r.status != 200 || r.body != big {
			t.Fatalf("key %s: %d, %d bytes", key, r.status, len(r.body))
		}
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "held in memory"); n != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, dir) {
		t.Fatalf("want one warning naming %s, got %d:\n%s", dir, n, out)
	}
}
