package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/pgtest"
)

func TestPruneDryRunThenPrune(t *testing.T) {
	t.Parallel()
	s := opSeed(t)

	r := opRun(t, "", "prune", "--db", s.url, "--dry-run").must(t, 0)
	if strings.TrimSpace(r.stdout) != "dry run: would tombstone 2 and delete 1 (nothing written)" {
		t.Errorf("dry run: %q", r.stdout)
	}
	if rec, err := s.get(t, "", "gone-1"); err != nil || rec.State != idemtype.StateSucceeded {
		t.Fatalf("the dry run wrote: %+v %v", rec, err)
	}

	r = opRun(t, "", "prune", "--db", s.url, "--batch", "1", "--json").must(t, 0)
	var got pruneJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if got.Tombstoned != 2 || got.Deleted != 1 || !got.Complete || got.Batches < 2 {
		t.Errorf("prune: %+v", got)
	}
	if n := strings.Count(r.stderr, "idem prune: batch "); n != got.Batches {
		t.Errorf("%d progress lines for %d batches:\n%s", n, got.Batches, r.stderr)
	}
	if rec, _ := s.get(t, "", "expired-1"); rec.State != idemtype.StateTombstone || rec.Body != nil {
		t.Errorf("expired-1 after prune: %+v", rec)
	}
	if _, err := s.get(t, "", "gone-1"); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("gone-1 after prune: %v", err)
	}
	for _, key := range []string{"parked-1", "stale-1", "live-1", "binary-1"} {
		if _, err := s.get(t, "", key); err != nil {
			t.Errorf("prune touched %s: %v", key, err)
		}
	}
	r = opRun(t, "", "prune", "--db", s.url).must(t, 0)
	if !strings.HasPrefix(r.stdout, "pruned: 0 tombstoned, 0 deleted in 1 batches") {
		t.Errorf("second prune: %q", r.stdout)
	}
}

func TestPruneStopsAtMaxBatchesAndSaysWhatIsLeft(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	r := opRun(t, "", "prune", "--db", s.url, "--batch", "1", "--max-batches", "1").must(t, 0)
	if !strings.Contains(r.stdout, "pruned: 1 tombstoned") || !strings.Contains(r.stdout, "in 1 batches") ||
		!strings.Contains(r.stdout, "1 to tombstone and") || !strings.Contains(r.stdout, "remain; run again") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
}

// TestPruneDuty: the sweep's pacing changes when it runs, not what it
// changes; the smallest share allowed and back to back alike sweep all.
func TestPruneDuty(t *testing.T) {
	t.Parallel()
	for _, duty := range []string{"1", "0.05"} {
		s := opSeed(t)
		r := opRun(t, "", "prune", "--db", s.url, "--batch", "1", "--duty", duty, "--json").must(t, 0)
		var got pruneJSON
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("--duty %s: %v: %s", duty, err, r.stdout)
		}
		if got.Tombstoned != 2 || got.Deleted != 1 || !got.Complete {
			t.Errorf("--duty %s: %+v", duty, got)
		}
	}
}

// TestPruneVacuum: --vacuum on PostgreSQL vacuums the ledger's table after
// a sweep that changed rows and says how long it took; a sweep that
// changed nothing, and SQLite, run none.
func TestPruneVacuum(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"postgres", "sqlite"} {
		var s opSeeded
		if db == "postgres" {
			s = opSeedAt(t, pgtest.NewDB(t))
		} else {
			s = opSeed(t)
		}
		r := opRun(t, "", "prune", "--db", s.url, "--vacuum", "--json").must(t, 0)
		var got pruneJSON
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("%s: %v: %s", db, err, r.stdout)
		}
		if got.Tombstoned != 2 || got.Deleted != 1 || !got.Complete {
			t.Errorf("%s: %+v", db, got)
		}
		if vacuumed := got.VacuumSeconds != nil; vacuumed != (db == "postgres") {
			t.Errorf("%s: vacuumed %v: %s", db, vacuumed, r.stdout)
		}
		r = opRun(t, "", "prune", "--db", s.url, "--vacuum").must(t, 0)
		if strings.Contains(r.stdout, "vacuumed") {
			t.Errorf("%s: a sweep that changed nothing vacuumed:\n%s", db, r.stdout)
		}
	}
}

// TestPruneVacuumRefused: a role that may prune the ledger but not vacuum
// its table gets the sweep done and counted, and exit 1 naming what it
// lacks, not a report of a sweep stopped early.
func TestPruneVacuumRefused(t *testing.T) {
	t.Parallel()
	s := opSeedAt(t, pgtest.NewDB(t))
	r := opRun(t, "", "prune", "--db", pgtest.NewRole(t, s.url, "SELECT, INSERT, UPDATE, DELETE"), "--vacuum")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "pruned: 2 tombstoned, 1 deleted") || strings.Contains(r.stdout, "stopped before the end") ||
		!strings.Contains(r.stderr, "the sweep is complete, its vacuum failed") || !strings.Contains(r.stderr, "may not vacuum idem_keys") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestPruneRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := opSeed(t)
	for _, args := range [][]string{{"--batch", "0"}, {"--max-batches", "-1"}, {"--duty", "0"}, {"--duty", "1.5"}, {"--duty", "NaN"}, {"now"}, {"--log-format", "xml"}} {
		r := opRun(t, "", append([]string{"prune", "--db", s.url}, args...)...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, stderr %s", args, r.code, r.stderr)
		}
		if args[0] == "--duty" && !strings.Contains(r.stderr, "--duty "+args[1]+": want a share") {
			t.Errorf("%v: stderr %s", args, r.stderr) // refused for its value, not as an unknown flag
		}
	}
}
