package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
