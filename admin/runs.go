package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
)

// runRow is a multi-step run stopped between steps, as the runs section
// shows it: its record, its registered name (if any) and its steps.
type runRow struct {
	row
	RunName string
	Steps   []stepRow
}

// stepRow is one step of a stopped run. CanResolve marks a started step
// (an external call whose outcome is unknown) of a parked or in-progress
// record: the step form applies, with force when the lease is live.
type stepRow struct {
	Scope, Key  string
	Index       int
	Name        string
	State       idemtype.StepState
	Attempt     int64
	ResultBytes int
	StepKey     string
	CanResolve  bool
	Live        bool
}

// stepConfirm is what a step resolution will do, shown before it is done.
type stepConfirm struct {
	Scope, Key, Step, As, Result, StepKey string
	Done, Force                           bool
}

// stepArg carries the page into the step form's template.
type stepArg struct {
	Page page
	Step stepRow
}

func newRunRow(r idem.StoppedRun) runRow {
	out := runRow{row: newRow(r.Record)}
	for _, s := range r.Steps {
		if s.Index < 0 {
			out.RunName = s.Name
			continue
		}
		out.Steps = append(out.Steps, stepRow{Scope: r.Record.Scope, Key: r.Record.Key, Index: s.Index, Name: s.Name, State: s.State,
			Attempt: s.Attempt, ResultBytes: len(s.Result), StepKey: idem.StepKey(r.Record.Scope, r.Record.Key, s.Name),
			CanResolve: s.State == idemtype.StepStarted && out.CanSettle, Live: out.Live})
	}
	return out
}

// runs lists the stopped runs, at most ListLimit.
func (s *server) runs(ctx context.Context) ([]runRow, string) {
	runs, err := s.l.StoppedRuns(ctx, s.o.ListLimit)
	if err != nil {
		return nil, err.Error()
	}
	out := make([]runRow, len(runs))
	for i, r := range runs {
		out[i] = newRunRow(r)
	}
	return out, ""
}

// reconcileStep resolves one started step of a stopped run
// (idem.Ledger.ResolveStep), after a review page, with the protections of
// reconcile: Write, the form token, and (for every POST) same origin.
func (s *server) reconcileStep(w http.ResponseWriter, r *http.Request) {
	if !s.writeForm(w, r, true, maxFormBody, "reconcile") {
		return
	}
	f := r.PostForm
	scope, key, step := f.Get("scope"), f.Get("key"), f.Get("step")
	fail := func(status int, msg string) {
		p := s.build(w, r, scope, key, true)
		p.Error = msg
		s.render(w, status, "index.html", p)
	}
	res := idem.StepResolution{Step: step, Force: f.Get("force") == "on"}
	var result []byte
	switch f.Get("as") {
	case "done":
		res.As = idem.VerdictDone
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(f.Get("result"))); err != nil {
			fail(http.StatusBadRequest, "not resolved: the result is not JSON ("+err.Error()+"); give what the step returned, as JSON")
			return
		}
		if b.Len() > idem.MaxStepResultLen {
			fail(http.StatusBadRequest, fmt.Sprintf("not resolved: the result is %d bytes of JSON, more than %d", b.Len(), idem.MaxStepResultLen))
			return
		}
		result = b.Bytes()
	case "not-done":
		res.As = idem.VerdictNotDone
		if f.Get("result") != "" {
			fail(http.StatusBadRequest, "not resolved: a step that is not done stores no result; leave the result empty")
			return
		}
	default:
		fail(http.StatusBadRequest, "choose done or not done")
		return
	}
	res.Result = result
	if f.Get("confirm") != "yes" {
		// Check what can be checked now, then show what will happen;
		// nothing is written until the operator confirms.
		if msg, status := s.stepRefusal(r.Context(), scope, key, step, res.Force); msg != "" {
			fail(status, msg)
			return
		}
		p := s.build(w, r, scope, key, true)
		p.StepConfirm = &stepConfirm{Scope: scope, Key: key, Step: step, As: f.Get("as"), Result: string(result),
			StepKey: idem.StepKey(scope, key, step), Done: res.As == idem.VerdictDone, Force: res.Force}
		s.render(w, http.StatusOK, "index.html", p)
		return
	}
	rec, err := s.l.ResolveStep(r.Context(), scope, key, res)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		fail(http.StatusNotFound, "no record for this scope and key")
		return
	case errors.Is(err, idem.ErrStepNotFound):
		fail(http.StatusNotFound, "no step "+show(step)+" in this run")
		return
	case errors.Is(err, idem.ErrLiveLease):
		fail(http.StatusConflict, liveLease(rec))
		return
	case errors.Is(err, idem.ErrStepResult):
		fail(http.StatusBadRequest, "not resolved: "+err.Error())
		return
	case err != nil && rec.State != "":
		fail(http.StatusConflict, "refused: "+err.Error())
		return
	case err != nil:
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	s.log.InfoContext(r.Context(), "operator resolved a step from the admin page", "scope", scope, "key", s.logKey(key),
		"fingerprint", rec.Fingerprint, "attempt", rec.Attempt, "step", step, "as", res.As.String(),
		"result_bytes", len(result), "force", res.Force, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/?"+url.Values{"scope": {scope}, "key": {key}, "resolved": {""}}.Encode(), http.StatusSeeOther)
}

// stepRefusal says why a step resolution would be refused now, with the
// answer's status, or "" if it may go ahead. ResolveStep checks again.
func (s *server) stepRefusal(ctx context.Context, scope, key, step string, force bool) (string, int) {
	rec, err := s.l.Get(ctx, scope, key)
	if errors.Is(err, idem.ErrNotFound) {
		return "no record for this scope and key", http.StatusNotFound
	}
	if err != nil {
		return err.Error(), http.StatusInternalServerError
	}
	steps, err := s.l.RunSteps(ctx, scope, key)
	if err != nil {
		return err.Error(), http.StatusInternalServerError
	}
	for _, st := range steps {
		if st.Index < 0 || st.Name != step {
			continue
		}
		switch {
		case st.State != idemtype.StepStarted:
			return "refused: the step is " + string(st.State) + ", not started: its outcome is known", http.StatusConflict
		case rec.State != idemtype.StateParked && rec.State != idemtype.StateInProgress:
			return "refused: the record is " + string(rec.State) + ", not parked or in progress", http.StatusConflict
		case rec.State == idemtype.StateInProgress && !rec.Stale() && !force:
			return liveLease(rec), http.StatusConflict
		}
		return "", 0
	}
	return "no step " + show(step) + " in this run", http.StatusNotFound
}
