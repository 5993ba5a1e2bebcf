package drivertest

import (
	"errors"
	"slices"
	"strings"
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

// testStepResolve covers an operator's decision about a started step:
// refused under a live lease, for a step that is not started or not there,
// and for a result that is not JSON or too long; applied to a parked run
// (done: checkpointed with the result) and a stale one (not done: its row
// goes), handing the record back in progress with its lease ended, so the
// old holder is fenced out and the next claim reclaims it; forced under a
// live lease.
func testStepResolve(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: time.Minute})
	d := l.Driver()
	ctx := f.ctx
	fence := func(c *idem.Claim) driver.Fence {
		return driver.Fence{Scope: c.Op.Scope, Key: c.Op.Key, Attempt: c.Token, LeaseID: c.Record.LeaseID}
	}
	start := func(key string) *idem.Claim {
		t.Helper()
		c := mustClaim(t, ctx, l, idem.Op{Scope: "s", Key: key, Fingerprint: "fp"}, idem.Acquired)
		for _, st := range []idemtype.Step{
			{Index: -1, Name: "book", State: idemtype.StepRun, Result: []byte(`{}`)},
			{Index: 0, Name: "ride", State: idemtype.StepDone, Result: []byte(`1`)},
			{Index: 1, Name: "charge", State: idemtype.StepStarted},
		} {
			if err := d.StepSave(ctx, driver.Shared, fence(c), st); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	stepsOf := func(key string) map[string]idemtype.Step {
		t.Helper()
		steps, err := l.RunSteps(ctx, "s", key)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]idemtype.Step{}
		for _, st := range steps {
			m[st.Name] = st
		}
		return m
	}
	done := func(step, result string) idem.StepResolution {
		return idem.StepResolution{Step: step, As: idem.VerdictDone, Result: []byte(result)}
	}

	c := start("k")
	for _, tc := range []struct {
		r    idem.StepResolution
		want error
	}{
		{done("charge", `{"id":"ch_1"}`), idem.ErrLiveLease},
		{done("charge", `{"id":`), idem.ErrStepResult},
		{done("charge", `"`+strings.Repeat("x", idem.MaxStepResultLen)+`"`), idem.ErrStepResult},
		{done("nope", `1`), idem.ErrStepNotFound},
		{done("book", `1`), idem.ErrStepNotFound}, // the run's header is no step
		{idem.StepResolution{Step: "charge", As: idem.VerdictFailed}, nil},
	} {
		_, err := l.ResolveStep(ctx, "s", "k", tc.r)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Fatalf("ResolveStep(%s %v): %v, want %v", tc.r.Step, tc.r.As, err, tc.want)
		}
	}
	if err := l.Park(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ResolveStep(ctx, "s", "k", done("ride", `2`)); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("a done step: %v, want refused as not started", err)
	}
	if got := stepsOf("k"); got["charge"].State != idemtype.StepStarted || string(got["ride"].Result) != "1" {
		t.Fatalf("refusals changed the steps: %+v", got)
	}
	rec, err := l.ResolveStep(ctx, "s", "k", done("charge", "{ \"id\": \"ch_1\" }\n"))
	if err != nil || rec.State != idemtype.StateInProgress || !rec.Stale() || rec.Attempt != c.Token {
		t.Fatalf("resolve a parked run's step: %+v, %v; want in progress, lease ended, attempt %d", rec, err, c.Token)
	}
	if got := stepsOf("k")["charge"]; got.State != idemtype.StepDone || string(got.Result) != `{"id":"ch_1"}` {
		t.Fatalf("resolved step %+v, want done with the compacted result", got)
	}
	if _, err := l.ResolveStep(ctx, "s", "k", done("charge", `1`)); err == nil {
		t.Fatal("a step resolved twice")
	}
	if err := d.StepSave(ctx, driver.Shared, fence(c), idemtype.Step{Index: 2, Name: "receipt", State: idemtype.StepDone}); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("the parked holder's checkpoint after resolve: %v, want ErrFenced", err)
	}
	if refs, err := d.StaleRuns(ctx, 10); err != nil || !slices.Contains(refs, idemtype.RunRef{Scope: "s", Key: "k"}) {
		t.Fatalf("StaleRuns after resolve: %v, %v; want the run", refs, err)
	}
	c2 := mustClaim(t, ctx, l, idem.Op{Scope: "s", Key: "k", Fingerprint: "fp"}, idem.Reclaimed)
	if c2.Token != c.Token+1 {
		t.Fatalf("reclaimed with token %d, want %d", c2.Token, c.Token+1)
	}
	if err := l.Complete(ctx, c2, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ResolveStep(ctx, "s", "k", done("charge", `1`)); err == nil {
		t.Fatal("resolved a step of a completed record")
	}

	// A stale run (its holder died mid-call): not done deletes the step.
	c = start("k2")
	clk.Advance(2 * time.Minute)
	rec, err = l.ResolveStep(ctx, "s", "k2", idem.StepResolution{Step: "charge", As: idem.VerdictNotDone})
	if err != nil || rec.State != idemtype.StateInProgress || !rec.Stale() {
		t.Fatalf("resolve a stale run's step: %+v, %v", rec, err)
	}
	if err := d.StepSave(ctx, driver.Shared, fence(c), idemtype.Step{Index: 1, Name: "charge", State: idemtype.StepDone}); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("the dead holder's checkpoint after resolve: %v, want ErrFenced", err)
	}
	if got := stepsOf("k2"); len(got) != 2 || got["ride"].State != idemtype.StepDone {
		t.Fatalf("after not done: %+v, want header and ride only", got)
	}
	if _, err := l.ResolveStep(ctx, "s", "k2", idem.StepResolution{Step: "charge", As: idem.VerdictNotDone}); !errors.Is(err, idem.ErrStepNotFound) {
		t.Fatalf("resolve a deleted step: %v, want ErrStepNotFound", err)
	}

	// Forced under a live lease: the holder is fenced out.
	c = start("k3")
	r := idem.StepResolution{Step: "charge", As: idem.VerdictNotDone, Force: true}
	if _, err := l.ResolveStep(ctx, "s", "k3", r); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Heartbeat(ctx, fence(c), time.Minute); !errors.Is(err, driver.ErrFenced) {
		t.Fatalf("the forced-out holder's heartbeat: %v, want ErrFenced", err)
	}
	if err := l.Complete(ctx, c, idem.Result{Status: 200}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the forced-out holder's completion: %v, want ErrLeaseLost", err)
	}

	if _, err := l.ResolveStep(ctx, "s", "none", done("charge", `1`)); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("no record: %v, want ErrNotFound", err)
	}

	// Stopped runs: k2 and k3 (unfinished, with steps), not k (finished).
	runs, err := l.StoppedRuns(ctx, 10)
	var keys []string
	for _, r := range runs {
		keys = append(keys, r.Record.Key)
		if r.Steps[0].Index != -1 || r.Steps[0].Name != "book" {
			t.Fatalf("run %s steps %+v, want the header first", r.Record.Key, r.Steps)
		}
	}
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"k2", "k3"}) {
		t.Fatalf("StoppedRuns: %v, %v; want k2 and k3", keys, err)
	}
	if runs, err := l.StoppedRuns(ctx, 1); err != nil || len(runs) != 1 {
		t.Fatalf("StoppedRuns(1): %d runs, %v", len(runs), err)
	}
}
