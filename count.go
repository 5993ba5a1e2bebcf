package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// ErrNoCount means the ledger's driver cannot count records (it does not
// implement driver.Counter).
var ErrNoCount = errors.New("idem: this driver cannot count records")

// Count counts in-progress, stale and parked records without reading them,
// for gauges and dashboards. Each count stops at limit (limit <= 0: no
// limit): a count equal to limit means "at least limit". Give ctx a short
// deadline when calling it on every scrape.
func (l *Ledger) Count(ctx context.Context, limit int) (idemtype.OpenCounts, error) {
	cn, ok := l.drv.(driver.Counter)
	if !ok {
		return idemtype.OpenCounts{}, ErrNoCount
	}
	c, err := cn.CountOpen(ctx, limit)
	if err != nil {
		return idemtype.OpenCounts{}, fmt.Errorf("idem: count: %w", err)
	}
	return c, nil
}
