package prove

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteTable writes the report as a table, one row per scenario, with
// each failure and note below it and a verdict line at the end.
func WriteTable(w io.Writer, rep *Report) error {
	what := fmt.Sprintf("driver %s (%s), ops %d, workers %d", rep.Driver, rep.Database, rep.Ops, rep.Workers)
	if rep.Target != "" {
		what = fmt.Sprintf("target %s through gateways on %s (%s), ops %d, workers %d", rep.Target, rep.Driver, rep.Database, rep.Ops, rep.Workers)
	}
	fmt.Fprintf(w, "idem prove: %s, seed %d", what, rep.Seed)
	if rep.NoGuard {
		fmt.Fprint(w, ", NO GUARD (workers skip the ledger)")
	}
	fmt.Fprint(w, "\n\n")
	nameW := len("SCENARIO")
	for _, r := range rep.Results {
		nameW = max(nameW, len(r.Name))
	}
	row := func(name, ops, attempts, effects, dups, lost, pu, v string) {
		fmt.Fprintf(w, "%-*s  %5s  %8s  %7s  %10s  %4s  %14s  %s\n", nameW, name, ops, attempts, effects, dups, lost, pu, v)
	}
	row("SCENARIO", "OPS", "ATTEMPTS", "EFFECTS", "DUPLICATES", "LOST", "PARKED/UNKNOWN", "VERDICT")
	for _, r := range rep.Results {
		if r.Skipped {
			row(r.Name, "-", "-", "-", "-", "-", "-", "skipped")
			continue
		}
		effects, dups, lost := itoa(r.Effects), itoa(r.Duplicates), itoa(r.Lost)
		if r.EffectsUnknown {
			effects, dups, lost = "?", "?", "?"
		}
		row(r.Name, itoa(r.Ops), itoa(r.Attempts), effects, dups, lost, itoa(r.Parked)+"/"+itoa(r.Unknown), verdict(r))
	}
	var failed, skipped int
	var lines []string
	for _, r := range rep.Results {
		switch {
		case r.Skipped:
			skipped++
			lines = append(lines, fmt.Sprintf("%s: skipped: %s", r.Name, r.Reason))
		case !r.OK:
			failed++
		}
		for _, f := range r.Failures {
			lines = append(lines, fmt.Sprintf("%s: FAIL: %s", r.Name, f))
		}
		for _, n := range r.Notes {
			lines = append(lines, fmt.Sprintf("%s: note: %s", r.Name, n))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(lines, "\n"))
	}
	ran := len(rep.Results) - skipped
	switch {
	case rep.OK:
		fmt.Fprintf(w, "\nok: all %d scenarios hold (%d skipped) in %.1fs; seed %d\n", ran, skipped, rep.Seconds, rep.Seed)
	default:
		fmt.Fprintf(w, "\nFAIL: %d of %d scenarios failed in %.1fs; repeat the same choices with --seed %d\n", failed, ran, rep.Seconds, rep.Seed)
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func verdict(r Result) string {
	if r.OK && r.Lost > 0 {
		return "ok (loss detected)" // a scenario that must detect a loss did
	}
	if r.OK {
		return "ok"
	}
	return "FAIL"
}

// WriteJSON writes the report as one JSON object, with one object per
// scenario under "scenarios".
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
