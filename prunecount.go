package idem

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// PruneCount reports, without writing, what Prune run until done would
// change if it ran now: records it would tombstone and rows it would
// delete (a completed record already past its tombstone window counts in
// both, as Prune counts the record it deletes at once). Batches is 0. Time moves
// on between a count and a real prune, so the real totals may be larger.
func (l *Ledger) PruneCount(ctx context.Context) (idemtype.PruneCounts, error) {
	cn, ok := l.drv.(driver.Counter)
	if !ok {
		return idemtype.PruneCounts{}, ErrNoCount
	}
	r, err := cn.CountPrunable(ctx)
	if err != nil {
		return idemtype.PruneCounts{}, fmt.Errorf("idem: prune count: %w", err)
	}
	return r, nil
}
