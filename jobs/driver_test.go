package jobs_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// The driver seam, exercised directly on every database: these are the
// properties the jobs package builds on.

// Claimers racing on separate pools never take one job twice, and each
// claim respects its limit.
func TestDriverClaimRace(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const n, claimers, limit = 300, 6, 7
		ins := make([]driver.JobInsert, n)
		for i := range ins {
			ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 5}
		}
		if _, _, err := e.l.Driver().EnqueueJobs(ctx, driver.Shared, ins); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[int64]int{}
		var wg sync.WaitGroup
		for i := range claimers {
			drv := openLedger(t, e.url).Driver()
			wg.Go(func() {
				for {
					rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "c", Limit: limit, LeaseID: int64(i), Lease: time.Minute})
					if err != nil {
						t.Error(err)
						return
					}
					if len(rows) > limit {
						t.Errorf("claim returned %d rows, limit %d", len(rows), limit)
					}
					if len(rows) == 0 {
						return
					}
					mu.Lock()
					for _, r := range rows {
						seen[r.ID]++
						if r.State != idemtype.JobRunning || r.Attempt != 1 {
							t.Errorf("claimed row %+v", r)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("%d distinct jobs claimed, want %d", len(seen), n)
		}
		for id, k := range seen {
			if k != 1 {
				t.Fatalf("job %d claimed %d times", id, k)
			}
		}
	})
}

// In a batch of finishes each write is fenced on its own: stale ones
// change nothing and are reported, the others apply.
func TestDriverFinishJobsFencesEachRow(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		drv := e.l.Driver()
		ins := make([]driver.JobInsert, 4)
		for i := range ins {
			ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 5}
		}
		if _, _, err := drv.EnqueueJobs(ctx, driver.Shared, ins); err != nil {
			t.Fatal(err)
		}
		lease := rand.Int64()
		rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "w", Limit: 4, LeaseID: lease, Lease: time.Minute})
		if err != nil || len(rows) != 4 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		fence := func(r idemtype.JobRow) driver.JobFence {
			return driver.JobFence{ID: r.ID, Attempt: r.Attempt, LeaseID: r.LeaseID}
		}
		stale := fence(rows[1])
		stale.Attempt-- // an older claim
		wrongLease := fence(rows[2])
		wrongLease.LeaseID++
		fenced, err := drv.FinishJobs(ctx, []driver.FinishJobParams{
			{JobFence: fence(rows[0]), State: idemtype.JobCompleted, Result: []byte("r0")},
			{JobFence: stale, State: idemtype.JobCompleted},
			{JobFence: wrongLease, State: idemtype.JobDead, Error: "x"},
			{JobFence: fence(rows[3]), State: idemtype.JobAvailable, Delay: time.Hour, Error: "retry me"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{false, true, true, false}; !equal(fenced, want) {
			t.Fatalf("fenced = %v, want %v", fenced, want)
		}
		got := func(r idemtype.JobRow) idemtype.JobRow {
			j, err := drv.GetJob(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
		if j := got(rows[0]); j.State != idemtype.JobCompleted || string(j.Result) != "r0" || j.FinalizedAt.IsZero() {
			t.Errorf("completed row: %+v", j)
		}
		if j := got(rows[1]); j.State != idemtype.JobRunning {
			t.Errorf("stale finish changed the row: %+v", j)
		}
		if j := got(rows[3]); j.State != idemtype.JobAvailable || len(j.Errors) != 1 || j.Errors[0].Error != "retry me" ||
			j.Errors[0].Attempt != 1 || j.RunAt.Sub(j.Now) < 59*time.Minute {
			t.Errorf("retried row: %+v", j)
		}
		// The same rules hold for the single, transactional form.
		if err := drv.FinishJob(ctx, driver.Shared, driver.FinishJobParams{JobFence: fence(rows[0]), State: idemtype.JobCompleted}); !errors.Is(err, driver.ErrFenced) {
			t.Errorf("finishing a completed job: %v, want ErrFenced", err)
		}
		if _, err := drv.HeartbeatJob(ctx, stale, time.Minute); !errors.Is(err, driver.ErrFenced) {
			t.Errorf("stale heartbeat: %v, want ErrFenced", err)
		}
		if until, err := drv.HeartbeatJob(ctx, fence(rows[1]), time.Hour); err != nil || time.Until(until) < 59*time.Minute {
			t.Errorf("heartbeat: %v, %v", until, err)
		}
	})
}

// FinishAndClaimJobs ends claims, each fenced on its own, and then claims,
// in one transaction: a job the ends hand back is claimable by the claim
// that rides with them.
func TestDriverFinishAndClaimJobs(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		drv, ok := e.l.Driver().(driver.JobFinishClaimer)
		if !ok { // both drivers claim along with their ends: a driver that stopped must fail here, not skip
			t.Fatalf("%s does not implement driver.JobFinishClaimer", e.l.Driver().Name())
		}
		ins := make([]driver.JobInsert, 4)
		for i := range ins {
			ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 5}
		}
		enq, _, err := e.l.Driver().EnqueueJobs(ctx, driver.Shared, ins)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := e.l.Driver().ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "w", Limit: 3, LeaseID: rand.Int64(), Lease: time.Minute})
		if err != nil || len(rows) != 3 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		fence := func(r idemtype.JobRow) driver.JobFence {
			return driver.JobFence{ID: r.ID, Attempt: r.Attempt, LeaseID: r.LeaseID}
		}
		stale := fence(rows[2])
		stale.LeaseID++
		lease := rand.Int64()
		fenced, claimed, err := drv.FinishAndClaimJobs(ctx, []driver.FinishJobParams{
			{JobFence: fence(rows[0]), State: idemtype.JobCompleted},
			{JobFence: fence(rows[1]), State: idemtype.JobAvailable}, // a release
			{JobFence: stale, State: idemtype.JobCompleted},
			{JobFence: fence(rows[2]), State: idemtype.JobAvailable, Delay: time.Hour, Snooze: true},
		}, driver.ClaimJobsParams{Queue: "q", Worker: "w", Limit: 5, LeaseID: lease, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{false, false, true, false}; !equal(fenced, want) {
			t.Fatalf("fenced = %v, want %v", fenced, want)
		}
		got := map[int64]bool{}
		for _, r := range claimed {
			if r.State != idemtype.JobRunning || r.LeaseID != lease {
				t.Errorf("claimed row: %+v", r)
			}
			got[r.ID] = true
		}
		// The released job and the one never claimed; not the snoozed one.
		want := map[int64]bool{rows[1].ID: true}
		for _, r := range enq {
			if r.ID != rows[0].ID && r.ID != rows[1].ID && r.ID != rows[2].ID {
				want[r.ID] = true
			}
		}
		if len(got) != 2 || !got[rows[1].ID] || len(want) != 2 || !maps.Equal(got, want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
		if j, err := e.l.Driver().GetJob(ctx, rows[0].ID); err != nil || j.State != idemtype.JobCompleted || j.FinalizedAt.IsZero() {
			t.Errorf("completed row: %+v, %v", j, err)
		}
		if j, err := e.l.Driver().GetJob(ctx, rows[2].ID); err != nil || j.State != idemtype.JobAvailable || j.MaxAttempts != 6 {
			t.Errorf("snoozed row: %+v, %v", j, err)
		}
	})
}

// An expired lease is rescued by the next claim: back to available with an
// error recorded, or dead when it was the last attempt.
func TestDriverRescueExpiredLeases(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		drv := e.l.Driver()
		if _, _, err := drv.EnqueueJobs(ctx, driver.Shared, []driver.JobInsert{
			{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 2},
			{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 1},
		}); err != nil {
			t.Fatal(err)
		}
		rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "dead-worker", Limit: 2, LeaseID: 1, Lease: 100 * time.Millisecond})
		if err != nil || len(rows) != 2 {
			t.Fatalf("claim: %d, %v", len(rows), err)
		}
		time.Sleep(150 * time.Millisecond)
		again, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "w2", Limit: 2, LeaseID: 2, Lease: time.Minute, RescueLimit: 10})
		if err != nil || len(again) != 0 {
			t.Fatalf("the rescuing claim itself took %d jobs (%v); rescued jobs are claimable from the next claim", len(again), err)
		}
		again, err = drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "w2", Limit: 2, LeaseID: 2, Lease: time.Minute, RescueLimit: 10})
		if err != nil || len(again) != 1 || again[0].ID != rows[0].ID || again[0].Attempt != 2 {
			t.Fatalf("second claim: %+v, %v", again, err)
		}
		if len(again[0].Errors) != 1 || again[0].Errors[0].Error != "lease expired: worker dead-worker stopped heartbeating" {
			t.Fatalf("rescued job errors: %+v", again[0].Errors)
		}
		if j, _ := drv.GetJob(ctx, rows[1].ID); j.State != idemtype.JobDead || j.FinalizedAt.IsZero() {
			t.Fatalf("job out of attempts: %s, want dead", j.State)
		}
	})
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A batch of completions (written by one statement on SQLite) completes
// the jobs still held and reports the others fenced: one cancelled, one
// claimed again since. A claim's rows carry what the claim wrote, as the
// database has it.
func TestDriverCompletionsFencedInBatch(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		drv := e.l.Driver()
		ins := make([]driver.JobInsert, 5)
		for i := range ins {
			ins[i] = driver.JobInsert{Queue: "q", Kind: "k", Args: []byte("{}"), MaxAttempts: 5}
		}
		if _, _, err := drv.EnqueueJobs(ctx, driver.Shared, ins); err != nil {
			t.Fatal(err)
		}
		lease := rand.Int64()
		rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "q", Worker: "w1", Limit: 5, LeaseID: lease, Lease: time.Minute})
		if err != nil || len(rows) != 5 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		for _, r := range rows {
			j, err := drv.GetJob(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Queue != j.Queue || r.State != j.State || r.LeaseID != j.LeaseID || !r.LeaseUntil.Equal(j.LeaseUntil) ||
				r.ClaimedBy != j.ClaimedBy || !r.AttemptedAt.Equal(j.AttemptedAt) || !r.UpdatedAt.Equal(j.UpdatedAt) ||
				!r.FinalizedAt.Equal(j.FinalizedAt) || r.Attempt != j.Attempt || r.Kind != j.Kind || string(r.Args) != string(j.Args) {
				t.Fatalf("claimed row %+v\nin the database %+v", r, j)
			}
		}
		if _, _, err := drv.CancelJob(ctx, rows[1].ID); err != nil {
			t.Fatal(err)
		}
		stale := driver.JobFence{ID: rows[3].ID, Attempt: rows[3].Attempt - 1, LeaseID: lease}
		ps := []driver.FinishJobParams{
			{JobFence: driver.JobFence{ID: rows[0].ID, Attempt: rows[0].Attempt, LeaseID: lease}, State: idemtype.JobCompleted},
			{JobFence: driver.JobFence{ID: rows[1].ID, Attempt: rows[1].Attempt, LeaseID: lease}, State: idemtype.JobCompleted},
			{JobFence: driver.JobFence{ID: rows[2].ID, Attempt: rows[2].Attempt, LeaseID: lease}, State: idemtype.JobAvailable, Error: "again"},
			{JobFence: stale, State: idemtype.JobCompleted},
			{JobFence: driver.JobFence{ID: rows[4].ID, Attempt: rows[4].Attempt, LeaseID: lease}, State: idemtype.JobCompleted},
		}
		fenced, err := drv.FinishJobs(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{false, true, false, true, false}; !equal(fenced, want) {
			t.Fatalf("fenced = %v, want %v", fenced, want)
		}
		want := []idemtype.JobState{idemtype.JobCompleted, idemtype.JobCancelled, idemtype.JobAvailable, idemtype.JobRunning, idemtype.JobCompleted}
		for i, r := range rows {
			j, err := drv.GetJob(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State != want[i] {
				t.Errorf("job %d: %s, want %s", i, j.State, want[i])
			}
			if j.State == idemtype.JobCompleted && (j.FinalizedAt.IsZero() || !j.LeaseUntil.IsZero() || j.Result != nil) {
				t.Errorf("completed job %d: %+v", i, j)
			}
		}
	})
}
