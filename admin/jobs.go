package admin

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// maxDeadScan bounds how many dead jobs one page load reads to find the
// most recent: jobs are listed by id, not by when they died.
const maxDeadScan = 10_000

// LedgerDeadJobs lists dead-lettered jobs straight from the ledger's
// database, for Options.DeadJobs where no jobs client runs (idem serve).
// It only reads: the jobs client it makes is never started. Of the first
// 10,000 dead jobs by id it returns the most recently dead; a database
// without the jobs tables (never migrated past the ledger) shows an error
// in the section.
func LedgerDeadJobs(l *idem.Ledger) DeadJobsFunc {
	c, err := jobs.New(l, &jobs.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return func(ctx context.Context, limit int) ([]DeadJob, error) {
		if err != nil {
			return nil, err
		}
		var dead []*idemtype.JobRow
		for after := int64(0); len(dead) < maxDeadScan; {
			page, err := c.List(ctx, &jobs.ListParams{State: idemtype.JobDead, AfterID: after, Limit: min(1000, maxDeadScan-len(dead))})
			if err != nil {
				return nil, fmt.Errorf("dead jobs: %w", err)
			}
			dead = append(dead, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].ID
		}
		slices.SortFunc(dead, func(a, b *idemtype.JobRow) int {
			return cmp.Or(b.FinalizedAt.Compare(a.FinalizedAt), cmp.Compare(b.ID, a.ID))
		})
		out := make([]DeadJob, 0, min(limit, len(dead)))
		for _, r := range dead[:min(limit, len(dead))] {
			d := DeadJob{Queue: r.Queue, ID: strconv.FormatInt(r.ID, 10), Kind: r.Kind, Key: r.UniqueKey, Attempts: r.Attempt, DiedAt: r.FinalizedAt,
				Metadata: string(r.Metadata), Partition: r.PartitionKey}
			if n := len(r.Errors); n > 0 {
				d.LastError = r.Errors[n-1].Error
			}
			out = append(out, d)
		}
		return out, nil
	}
}
