package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemdev/idem/driver"
)

// ErrNoCount means the ledger's driver cannot count records (it does not
// implement driver.Counter).
var ErrNoCount = errors.New("idem: this driver cannot count records")

// Counts is how many records need watching, by the database clock.
type Counts struct {
	InProgress int64 // in progress, live or stale
	Stale      int64 // in progress with the lease ended (included in InProgress)
	Parked     int64 // waiting for an operator or a reconciler
}

// Count counts in-progress, stale and parked records without reading them,
// for gauges and dashboards. Each count stops at limit (limit <= 0: no
// limit): a count equal to limit means "at least limit". Give ctx a short
// deadline when calling it on every scrape.
func (l *Ledger) Count(ctx context.Context, limit int) (Counts, error) {
	cn, ok := l.drv.(driver.Counter)
	if !ok {
		return Counts{}, ErrNoCount
	}
	c, err := cn.CountOpen(ctx, limit)
	if err != nil {
		return Counts{}, fmt.Errorf("idem: count: %w", err)
	}
	return Counts{InProgress: c.InProgress, Stale: c.Stale, Parked: c.Parked}, nil
}
