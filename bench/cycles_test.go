package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemdev/idem/internal/pgtest"
)

// checkCycles: one row per cycle, each having filled and then pruned all
// of its keys. Nothing here judges a speed or a size's growth.
func checkCycles(t *testing.T, res []Result, keys int) {
	t.Helper()
	if len(res) != pruneCycles+2 {
		t.Fatalf("%d rows, want %d: %+v", len(res), pruneCycles+2, res)
	}
	for i, name := range []string{fmt.Sprintf("cycles: tombstone %d keys past retention", keys), fmt.Sprintf("cycles: delete %d tombstones past their window", keys)} {
		r := res[pruneCycles+i]
		if r.Group != GroupCycles || r.Name != name || r.Keys != keys || r.OpsPerSec <= 0 || r.Ratio <= 0 {
			t.Errorf("row %d: %+v, want %q measured", pruneCycles+i, r, name)
		}
	}
	// Deleting the tombstones gives their space back: SQLite's sweep hands
	// pages back as it goes, and the PostgreSQL test vacuums after each step.
	if tomb, del := res[pruneCycles], res[pruneCycles+1]; del.DiskBytesAfter >= tomb.DiskBytesAfter {
		t.Errorf("idem_keys %d bytes after deleting the tombstones, %d before: no space given back", del.DiskBytesAfter, tomb.DiskBytesAfter)
	}
	for i, r := range res[:pruneCycles] {
		if r.Group != GroupCycles || r.Keys != keys || !strings.HasSuffix(r.Name, fmt.Sprintf("cycle %d", i+1)) {
			t.Errorf("row %d: group %q keys %d name %q", i, r.Group, r.Keys, r.Name)
		}
		if r.OpsPerSec <= 0 || r.BaselineOpsPerS <= 0 || r.FillSeconds <= 0 {
			t.Errorf("%s: measured nothing: %+v", r.Name, r)
		}
		// Every cycle prunes exactly the keys it filled: none left from before.
		if !strings.Contains(r.Note, fmt.Sprintf("pruned %d records", keys)) {
			t.Errorf("%s: note %q, want all %d records pruned", r.Name, r.Note, keys)
		}
		if r.DiskBytesBefore < int64(keys)*1024 || r.DiskBytesAfter <= 0 {
			t.Errorf("%s: idem_keys %d bytes after filling %d records of 1 KiB, %d after pruning", r.Name, r.DiskBytesBefore, keys, r.DiskBytesAfter)
		}
	}
}

func TestCyclesSQLite(t *testing.T) {
	t.Parallel()
	res, err := Run(t.Context(), &Options{Groups: []string{GroupCycles}, Keys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	checkCycles(t, res, 2000)
}

func TestCyclesPostgres(t *testing.T) {
	t.Parallel()
	pgtest.RequireBinaries(t)
	res, err := Run(t.Context(), &Options{DB: "postgres", Groups: []string{GroupCycles}, Keys: 2000, CycleVacuum: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCycles(t, res, 2000)
	for _, r := range res[:pruneCycles] {
		if !strings.Contains(r.Note, "includes a VACUUM of") {
			t.Errorf("%s: note %q, want the VACUUM's time", r.Name, r.Note)
		}
	}
}
