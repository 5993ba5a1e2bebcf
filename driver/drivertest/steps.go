package drivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// testSteps covers the step rows of multi-step runs: a checkpoint is
// written only under the run's fence (in the driver's own write or the
// caller's transaction, where it rolls back with it); rows list in index
// order with the record's attempt and fingerprint; a takeover's holder
// replaces them; StaleRuns finds runs with a header whose lease ended.
func testSteps(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})
	d := l.Driver()
	ctx := f.ctx
	fence := func(c *idem.Claim) driver.Fence {
		return driver.Fence{Scope: c.Op.Scope, Key: c.Op.Key, Attempt: c.Token, LeaseID: c.Record.LeaseID}
	}
	op := idem.Op{Scope: "s", Key: "k", Fingerprint: "fp"}
	c := mustClaim(t, ctx, l, op, idem.Acquired)
	if err := d.StepSave(ctx, driver.Shared, fence(c), idemtype.Step{Index: -1, Name: "book", State: idemtype.StepRun, Result: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := d.StepSave(ctx, driver.Shared, fence(c), idemtype.Step{Index: 0, Name: "a", State: idemtype.StepStarted}); err != nil {
		t.Fatal(err)
	}
	if err := d.StepSave(ctx, driver.Shared, fence(c), idemtype.Step{Index: 0, Name: "a", State: idemtype.StepDone, Result: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	// In the caller's transaction: rolled back, nothing stays.
	tx := begin(t, ctx, l)
	ex, err := d.Executor(tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StepSave(ctx, ex, fence(c), idemtype.Step{Index: 1, Name: "b", State: idemtype.StepDone, Result: []byte(`2`)}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	steps, err := d.StepList(ctx, "s", "k")
	if err != nil || len(steps) != 2 || steps[0].Index != -1 || steps[0].Name != "book" ||
		steps[1].Index != 0 || steps[1].State != idemtype.StepDone || string(steps[1].Result) != "1" ||
		steps[1].Attempt != 1 || steps[1].Fingerprint != "fp" {
		t.Fatalf("steps %+v, %v; want header and done step a", steps, err)
	}
	if refs, err := d.StaleRuns(ctx, 10); err != nil || len(refs) != 0 {
		t.Fatalf("StaleRuns under a live lease: %v, %v", refs, err)
	}
	clk.Advance(2 * time.Minute)
	if refs, err := d.StaleRuns(ctx, 10); err != nil || len(refs) != 1 || refs[0] != (idemtype.RunRef{Scope: "s", Key: "k"}) {
		t.Fatalf("StaleRuns past the lease: %v, %v", refs, err)
	}
	// Past its lease the old holder is fenced out, in both forms.
	if err := d.StepSave(ctx, driver.Shared, fence(c), idemtype.Step{Index: 1, Name: "b", State: idemtype.StepStarted}); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("stale holder's step: %v, want ErrFenced", err)
	}
	c2 := mustClaim(t, ctx, l, op, idem.Reclaimed)
	tx = begin(t, ctx, l)
	ex, _ = d.Executor(tx)
	if err := d.StepSave(ctx, ex, fence(c), idemtype.Step{Index: 1, Name: "b", State: idemtype.StepDone}); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("stale holder's step in a transaction: %v, want ErrFenced", err)
	}
	tx.Rollback()
	if err := d.StepSave(ctx, driver.Shared, fence(c2), idemtype.Step{Index: 1, Name: "b", State: idemtype.StepDone, Result: []byte(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	steps, _ = d.StepList(ctx, "s", "k")
	if len(steps) != 3 || steps[2].Attempt != 2 {
		t.Fatalf("steps after takeover %+v", steps)
	}
	// Deleted with the result, in one transaction.
	tx = begin(t, ctx, l)
	if err := l.CompleteTx(ctx, tx, c2, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	ex, _ = d.Executor(tx)
	if err := d.StepDelete(ctx, ex, "s", "k"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if steps, err := d.StepList(ctx, "s", "k"); err != nil || len(steps) != 0 {
		t.Fatalf("after delete: %v, %v", steps, err)
	}
}
