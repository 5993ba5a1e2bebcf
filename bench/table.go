package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints results as an aligned table: one line per row, idem's
// numbers, the baseline's, and the ratio idem/baseline (throughput). A row
// measured more than once (Result.Runs) shows its median ratio with the
// range of its runs' ratios, "1.02× (0.95–1.10)", and every other number
// of the median run.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tdriver\tcallers\tops/s\tp50 ms\tp99 ms\tcpu µs/op\tbusy\tbaseline ops/s\tp50 ms\tp99 ms\tcpu µs/op\tbusy\tratio\t")
	runs := 0
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t\n", r.Name, r.Driver, r.Concurrency,
			rate(r.OpsPerSec), ms(r.P50), ms(r.P99), r.CPUPerOp, pct(r.MachineBusy),
			rate(r.BaselineOpsPerS), ms(r.BaselineP50), ms(r.BaselineP99), r.BaselineCPUPerOp, pct(r.BaselineMachineBusy), ratio(r))
		runs = max(runs, r.Runs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if runs > 1 {
		fmt.Fprintf(w, "  every row measured %d times, one run after the other: its numbers are the run whose ratio is the median, (min–max) the range of the runs' ratios\n", runs)
	}
	seen := map[string]bool{}
	for _, r := range results {
		if !seen[r.Name] {
			seen[r.Name] = true
			fmt.Fprintf(w, "  %s: baseline = %s\n", r.Name, r.Baseline)
		}
	}
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(w, "  %s, %s: %s\n", r.Name, callers(r.Concurrency), r.Note)
		}
	}
	return nil
}

// ratio is a row's ratio column: "1.02", or for a row of several runs
// "1.02× (0.95–1.10)".
func ratio(r Result) string {
	s := fmt.Sprintf("%.2f", r.Ratio)
	if r.Runs <= 1 {
		return s
	}
	if r.RatioMin == nil || r.RatioMax == nil {
		return s + "× (no range)"
	}
	return fmt.Sprintf("%s× (%.2f–%.2f)", s, *r.RatioMin, *r.RatioMax)
}

func pct(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*v, 'f', 0, 64) + "%"
}

func rate(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func ms(p *float64) string {
	if p == nil {
		return "-"
	}
	if *p < 10 {
		return strconv.FormatFloat(*p, 'f', 2, 64)
	}
	return strconv.FormatFloat(*p, 'f', 1, 64)
}

// WriteJSON writes one JSON object per row, one per line.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// callers says how many concurrent callers a row ran: "1 caller", "8 callers".
func callers(n int) string {
	if n == 1 {
		return "1 caller"
	}
	return strconv.Itoa(n) + " callers"
}
