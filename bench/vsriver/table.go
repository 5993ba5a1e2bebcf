package main

import (
	"fmt"
	"slices"
	"strings"
)

// results holds every run's value of each metric: db → metric → side → values,
// in run order.
type results map[string]map[string]map[string][]float64

func (r results) add(db, metric, side string, v float64) {
	if r[db] == nil {
		r[db] = map[string]map[string][]float64{}
	}
	if r[db][metric] == nil {
		r[db][metric] = map[string][]float64{}
	}
	r[db][metric][side] = append(r[db][metric][side], v)
}

// metricRows are the table's rows, in order: the metric, its label, and
// whether lower is better.
var metricRows = []struct {
	metric, label string
	lowerBetter   bool
}{
	{wlDrain, "drain, pre-inserted (jobs/s)", false},
	{wlBulk, "bulk insert (jobs/s)", false},
	{wlSteady, "steady: producers insert one at a time while working (jobs/s)", false},
	{mLatency, "enqueue→run p99 in steady (ms, lower is better)", true},
}

var dbLabel = map[string]string{"sqlite": "SQLite", "postgres": "PostgreSQL"}

// table renders the results as Markdown: per database and metric, each
// side's median and range over the runs, and the ratio by which idem is
// ahead (idem/River for rates, River/idem for latency: above 1 means idem
// is ahead), computed per run, as its median and range.
func (r results) table(dbs []string, runs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| workload | database | idem (median, range) | River (median, range) | idem ahead by (median, range) |\n")
	b.WriteString("| --- | --- | ---: | ---: | --- |\n")
	for _, row := range metricRows {
		for _, db := range dbs {
			sides := r[db][row.metric]
			if sides == nil {
				continue
			}
			idemV, riverV := sides["idem"], sides["river"]
			ratio := "–"
			if len(idemV) > 0 && len(idemV) == len(riverV) {
				rs := make([]float64, len(idemV))
				for i := range idemV {
					if row.lowerBetter {
						rs[i] = riverV[i] / idemV[i]
					} else {
						rs[i] = idemV[i] / riverV[i]
					}
				}
				ratio = fmt.Sprintf("**%.2f×** (%.2f–%.2f)", median(rs), slices.Min(rs), slices.Max(rs))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.label, dbLabel[db], summary(idemV), summary(riverV), ratio)
		}
	}
	fmt.Fprintf(&b, "\n%d runs; ratios are computed per run: idem/River for jobs/s, River/idem for p99, so above 1 means idem is ahead.\n", runs)
	return b.String()
}

// summary is "median (min–max)", or "–" for no values.
func summary(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s–%s)", num(median(v)), num(slices.Min(v)), num(slices.Max(v)))
}

// num prints a rate without decimals and a small number (milliseconds) with
// three significant digits.
func num(f float64) string {
	if f >= 100 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.3g", f)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
