package admin

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// dbTotals is what the database says for every gateway: records by state
// and the counters every Reporter stored.
type dbTotals struct {
	Counts   driver.StateCounts
	CountsOK bool
	// Reported is false when no process has reported yet: the page falls
	// back to this process's collector.
	Reported                                                       bool
	Duplicates, Replays, Mismatches, Reclaims, Expired, LeasesLost int64
	Sources                                                        []source
	SourcesErr                                                     string
}

// source is one reporting process and when it last reported.
type source struct {
	Name string
	At   time.Time
	Ago  string
}

// maxSources bounds the sources the page lists (the totals sum them all).
const maxSources = 20

// recentSection is the most recently updated records.
type recentSection struct {
	Available bool
	Items     []recentRow
	Err       string
}

type recentRow struct {
	driver.RecentRecord
	Shown    string // the key, or its hash under HashKeys
	Hashed   bool
	Stale    bool
	Replayed string // when last replayed
}

// refreshChoices are the page's automatic refresh periods, in seconds (0:
// off).
var refreshChoices = []int{0, 5, 30}

// defaultRefresh is the refresh of a page that did not choose one: every
// 30 seconds when read-only; off with writes allowed, where a reload would
// wipe a half-filled reconcile form.
func (s *server) defaultRefresh() int {
	if s.o.Write {
		return 0
	}
	return 30
}

// refresh parses the refresh query parameter: "off", "5" or "30".
func (s *server) refresh(v string) int {
	if v == "off" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && slices.Contains(refreshChoices, n) {
		return n
	}
	return s.defaultRefresh()
}

// activity fills the database totals and the recent list, when the
// driver keeps them.
func (s *server) activity(ctx context.Context, p *page) {
	drv, ok := s.l.Driver().(driver.Activity)
	if !ok {
		return
	}
	p.Recent.Available = true
	t := &dbTotals{}
	p.DB = t
	c, err := drv.CountStates(ctx, countCap)
	if err != nil {
		p.CountErr = err.Error()
	} else {
		t.Counts, t.CountsOK = c, true
		p.Counts = &idemtype.OpenCounts{InProgress: c.InProgress, Stale: c.Stale, Parked: c.Parked}
	}
	counters, err := drv.ActivitySources(ctx)
	if err != nil {
		t.SourcesErr = err.Error()
	}
	last := map[string]time.Time{}
	for _, sc := range counters {
		switch sc.Name {
		case CounterDuplicates:
			t.Duplicates += sc.Value
		case CounterReplays:
			t.Replays += sc.Value
		case CounterMismatches:
			t.Mismatches += sc.Value
		case CounterReclaims:
			t.Reclaims += sc.Value
		case CounterExpired:
			t.Expired += sc.Value
		case CounterLeasesLost:
			t.LeasesLost += sc.Value
		}
		if sc.UpdatedAt.After(last[sc.Source]) {
			last[sc.Source] = sc.UpdatedAt
		}
	}
	t.Reported = len(last) > 0
	now := time.Now()
	for name, at := range last {
		t.Sources = append(t.Sources, source{Name: name, At: at, Ago: since(at, now)})
	}
	slices.SortFunc(t.Sources, func(a, b source) int { return b.At.Compare(a.At) })
	p.SourcesMore = max(0, len(t.Sources)-maxSources)
	t.Sources = t.Sources[:min(len(t.Sources), maxSources)]

	recs, err := drv.RecentRecords(ctx, s.o.ListLimit)
	if err != nil {
		p.Recent.Err = err.Error()
		return
	}
	for _, r := range recs {
		row := recentRow{RecentRecord: r, Shown: r.Key, Stale: r.State == idemtype.StateInProgress && !r.LeaseUntil.After(r.Now)}
		if s.o.HashKeys {
			row.Shown, row.Hashed = idem.KeyHash(r.Key), true
		}
		if !r.LastReplayedAt.IsZero() {
			row.Replayed = since(r.LastReplayedAt, r.Now)
		}
		p.Recent.Items = append(p.Recent.Items, row)
	}
}
