// Package bench measures what idem costs. Every row runs an idem path and,
// in the same process and run, on the same database with the same
// durability settings, the baseline it must be compared with: the same
// writes done by hand in SQL, the same jobs claimed by a hand-written
// SKIP LOCKED (PostgreSQL) or BEGIN IMMEDIATE (SQLite) loop, the same HTTP
// requests through a bare httputil.ReverseProxy. It reports throughput,
// latency and the ratio idem/baseline; `idem bench` prints it.
//
// Each side of a row gets a fresh database (a new SQLite file, or a new
// database in the throwaway PostgreSQL cluster), so neither side pays for
// the rows the other left. On a database given by URL both sides share it,
// under names (scopes, queues) of their own, which the run deletes at the
// end.
//
// The load is closed-loop: c workers each run one operation after another
// for the duration, after a short warm-up that is not counted. Latency
// percentiles are per operation, from a histogram with 2% buckets.
package bench

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/pgtest"
)

// Row groups, in the order they run.
const (
	GroupLedger      = "ledger"      // claim+complete vs hand-written SQL
	GroupGroupCommit = "groupcommit" // group commit vs one commit per write
	GroupJobs        = "jobs"        // enqueue, claim+complete vs hand-written loops
	GroupGateway     = "gateway"     // keyed POSTs vs a bare reverse proxy
	GroupSQLite      = "sqlite"      // the pure-Go SQLite library vs the cgo one
	GroupScale       = "scale"       // a ledger holding Keys records vs an empty one; pruning under load
	GroupMemory      = "memory"      // peak RSS with 100 guarded 1 MiB responses in flight
	GroupCycles      = "cycles"      // the ledger's size over repeated fills of Keys records and prunes of all of them; tombstoning and deleting tombstones
)

// The bounds of Options.Keys.
const (
	MinKeys = 100
	MaxKeys = 1_000_000_000
)

// Groups lists every row group.
var Groups = []string{GroupLedger, GroupGroupCommit, GroupJobs, GroupGateway, GroupSQLite, GroupScale, GroupMemory, GroupCycles}

// DefaultGroups are the groups a run without Options.Groups measures:
// all but scale and cycles, which fill a database with millions of rows, and
// memory, which writes 100 MiB of responses a slice; they run only when
// asked for.
var DefaultGroups = []string{GroupLedger, GroupGroupCommit, GroupJobs, GroupGateway, GroupSQLite}

// Defaults for a zero Options field.
var (
	DefaultDuration    = 2 * time.Second
	DefaultConcurrency = []int{1, 8, 32}
)

// Options configures Run. A nil *Options means all defaults.
type Options struct {
	// DB is where to measure: "sqlite" (default: a new file in a temporary
	// directory, synchronous=FULL), "sqlite:PATH" (that file), "postgres"
	// (a throwaway cluster from the system's binaries, fsync on), or
	// "postgres://…" (an existing database; rows the run writes are deleted
	// afterwards).
	DB string
	// Duration is how long each side of each row is measured, after a
	// warm-up of a fifth of it (at most 500ms). Default 2s.
	Duration time.Duration
	// Concurrency lists the numbers of concurrent callers each row runs
	// with. Default 1, 8, 32.
	Concurrency []int
	// Groups selects row groups (see Groups). Default DefaultGroups.
	Groups []string
	// Keys is how many completed records the scale rows fill the ledger
	// with before they measure. Default DefaultKeys.
	Keys int
	// CyclePause is how long the cycles rows wait after each prune before
	// the next fill: time for autovacuum to mark the freed space reusable.
	// Default 0: the next fill starts at once.
	CyclePause time.Duration
	// CycleVacuum has the cycles rows prune with PruneOptions.Vacuum: on
	// PostgreSQL a VACUUM of the ledger's table after each prune, inside
	// the prune's time.
	CycleVacuum bool
	// Runs is how many times each row is measured, one run after the
	// other on the same databases (the scale rows: on the same fill); the
	// row then carries the run whose ratio is the median (see Result.Runs).
	// The cycles rows are measured once whatever Runs is. Default 1; at
	// most MaxRuns.
	Runs int
	// Progress, when set, receives one line per measurement as it starts.
	Progress io.Writer
	// GatewayCommand, when set, returns the command that runs the idem
	// CLI with args (`idem serve …`): the memory row then measures the
	// gateway as a user runs it, in a process of its own, and reports that
	// process's peak RSS. The bench sets the command's stdout, stderr and
	// (on Linux) a death signal, and ends and waits for the process before
	// the row returns. `idem bench` passes its own executable. Without it
	// the memory row runs the gateway inside this process and reports the
	// whole process's peak.
	GatewayCommand func(args ...string) *exec.Cmd
}

// MaxRuns bounds Options.Runs.
const MaxRuns = 100

// Result is one row: an idem path next to its baseline.
type Result struct {
	Group       string  `json:"group"`
	Name        string  `json:"name"`
	Driver      string  `json:"driver"`
	Concurrency int     `json:"concurrency"`
	OpsPerSec   float64 `json:"ops_per_s"`
	// P50 and P99 are per operation, in milliseconds; nil where the
	// operation's latency cannot be observed from outside (a job queue's
	// claim-to-completion).
	P50 *float64 `json:"p50_ms"`
	P99 *float64 `json:"p99_ms"`
	// Baseline names what the row is compared with.
	Baseline        string   `json:"baseline"`
	BaselineOpsPerS float64  `json:"baseline_ops_per_s"`
	BaselineP50     *float64 `json:"baseline_p50_ms"`
	BaselineP99     *float64 `json:"baseline_p99_ms"`
	Ratio           float64  `json:"ratio"`
	// CPU time of the whole process per operation, in microseconds: what
	// a side costs the processor, load generator included.
	CPUPerOp         float64 `json:"cpu_us_per_op"`
	BaselineCPUPerOp float64 `json:"baseline_cpu_us_per_op"`
	// The share of the whole machine's CPU (all cores, all processes,
	// a database server's too) that was busy while each side ran.
	MachineBusy         float64 `json:"machine_cpu_busy"`
	BaselineMachineBusy float64 `json:"baseline_machine_cpu_busy"`
	Note                string  `json:"note,omitempty"`
	DurationSeconds     float64 `json:"duration_s"`
	Durability          string  `json:"durability"`
	PeakRSSMegabytes    float64 `json:"peak_rss_mb,omitempty"`
	// Scale rows: Keys is how many filled records the idem side's ledger
	// held when the row began, FillSeconds how long filling them took, and
	// BytesPerKey what each took on disk (table and indexes, see Note for
	// how it was measured).
	Keys        int     `json:"keys,omitempty"`
	FillSeconds float64 `json:"fill_s,omitempty"`
	BytesPerKey float64 `json:"bytes_per_key,omitempty"`
	// The prune row: the database's size before and after the prune (the
	// SQLite file's pages, without the WAL; PostgreSQL's pg_database_size).
	DiskBytesBefore int64 `json:"disk_bytes_before,omitempty"`
	DiskBytesAfter  int64 `json:"disk_bytes_after,omitempty"`
	// Runs, with Options.Runs above 1, is how many times the row was
	// measured; every other number of the row (ops/s, latencies, CPU,
	// note) is the median run's: the run whose ratio is the median (with
	// an even Runs, the lower of the two middle ones). RatioMin and
	// RatioMax are the lowest and highest ratio of the runs. A run whose
	// baseline measured nothing has no ratio: it is left out of the median
	// and the range, and the note says so. All three are absent from the
	// JSON of a single run.
	Runs     int      `json:"runs,omitempty"`
	RatioMin *float64 `json:"ratio_min,omitempty"`
	RatioMax *float64 `json:"ratio_max,omitempty"`
}

// median returns the run of one row's runs whose ratio is the median,
// with Runs, RatioMin and RatioMax set when there is more than one run
// (see Result.Runs). Runs without a ratio (the baseline measured nothing,
// or a ratio that is not a finite number) are not ranked; when no run has
// a ratio, the first run is returned with ratio 0 and no range.
func median(runs []Result) Result {
	if len(runs) == 1 {
		return runs[0]
	}
	var ranked []Result
	for _, r := range runs {
		if r.BaselineOpsPerS > 0 && !math.IsNaN(r.Ratio) && !math.IsInf(r.Ratio, 0) {
			ranked = append(ranked, r)
		}
	}
	if len(ranked) == 0 {
		out := runs[0]
		out.Runs, out.Ratio = len(runs), 0
		out.Note = joinNote(out.Note, fmt.Sprintf("no run of %d had a ratio: the baseline measured nothing", len(runs)))
		return out
	}
	slices.SortStableFunc(ranked, func(a, b Result) int { return cmp.Compare(a.Ratio, b.Ratio) })
	out := ranked[(len(ranked)-1)/2]
	out.Runs = len(runs)
	out.RatioMin, out.RatioMax = &ranked[0].Ratio, &ranked[len(ranked)-1].Ratio
	if left := len(runs) - len(ranked); left > 0 {
		out.Note = joinNote(out.Note, fmt.Sprintf("the median and range of the %d of %d runs whose baseline measured something", len(ranked), len(runs)))
	}
	return out
}

// medians is median for measurements that make several rows at once:
// runs[k] are run k's rows, in the same order every run.
func medians(runs [][]Result) []Result {
	if len(runs) == 0 {
		return nil
	}
	out := make([]Result, len(runs[0]))
	for i := range out {
		row := make([]Result, len(runs))
		for k := range runs {
			row[k] = runs[k][i]
		}
		out[i] = median(row)
	}
	return out
}

func joinNote(note, more string) string {
	if note == "" {
		return more
	}
	return note + "; " + more
}

func newResult(group, name, baseline string, drv *database, c int, d time.Duration, idem, base Stat, latency bool) Result {
	r := Result{
		Group: group, Name: name, Driver: drv.driver, Concurrency: c, Baseline: baseline,
		OpsPerSec: idem.PerSec(), BaselineOpsPerS: base.PerSec(),
		DurationSeconds: d.Seconds(), Durability: drv.durability,
	}
	if latency {
		r.P50, r.P99 = msPtr(idem.P50), msPtr(idem.P99)
		r.BaselineP50, r.BaselineP99 = msPtr(base.P50), msPtr(base.P99)
	}
	r.CPUPerOp = float64(idem.CPUPerOp()) / float64(time.Microsecond)
	r.BaselineCPUPerOp = float64(base.CPUPerOp()) / float64(time.Microsecond)
	r.MachineBusy, r.BaselineMachineBusy = idem.MachineBusy(), base.MachineBusy()
	if r.BaselineOpsPerS > 0 {
		r.Ratio = r.OpsPerSec / r.BaselineOpsPerS
	}
	return r
}

func msPtr(d time.Duration) *float64 {
	v := float64(d) / float64(time.Millisecond)
	return &v
}

// Run measures every selected row and returns them in order. It stops at
// the first failure: a row that could not be measured is an error, never a
// number.
func Run(ctx context.Context, opts *Options) ([]Result, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.Duration = cmp.Or(o.Duration, DefaultDuration)
	if len(o.Concurrency) == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if len(o.Groups) == 0 {
		o.Groups = DefaultGroups
	}
	o.Keys = cmp.Or(o.Keys, DefaultKeys)
	o.Runs = cmp.Or(o.Runs, 1)
	if o.Runs < 1 || o.Runs > MaxRuns {
		return nil, fmt.Errorf("bench: runs %d is outside [1, %d]", o.Runs, MaxRuns)
	}
	if o.Keys < MinKeys || o.Keys > MaxKeys {
		return nil, fmt.Errorf("bench: keys %d is outside [%d, %d]", o.Keys, MinKeys, MaxKeys)
	}
	for _, g := range o.Groups {
		if !slices.Contains(Groups, g) {
			return nil, fmt.Errorf("bench: unknown row group %q (known: %s)", g, strings.Join(Groups, ", "))
		}
	}
	for _, c := range o.Concurrency {
		if c < 1 || c > 1024 {
			return nil, fmt.Errorf("bench: concurrency %d is outside [1, 1024]", c)
		}
	}
	if o.Duration < 100*time.Millisecond || o.Duration > time.Hour {
		return nil, fmt.Errorf("bench: duration %v is outside [100ms, 1h]", o.Duration)
	}
	db, err := openDatabase(ctx, cmp.Or(o.DB, "sqlite"))
	if err != nil {
		return nil, err
	}
	defer db.close()
	r := &runner{o: o, db: db}
	var out []Result
	for _, g := range Groups {
		if !slices.Contains(o.Groups, g) {
			continue
		}
		rows, err := r.group(ctx, g)
		out = append(out, rows...)
		if err != nil {
			return out, fmt.Errorf("bench: %s on %s: %w", g, db.driver, err)
		}
	}
	return out, nil
}

type runner struct {
	o           Options
	db          *database
	ledgerCache map[int][]ledgerStat     // by concurrency, one per run: the ledger and group-commit rows share it
	hand        map[*idem.Ledger]*sql.DB // the baselines' own SQLite pools (handDB)
	runTag      string                   // said after each progress line while repeat runs: " (run 2 of 3)"
}

func (r *runner) group(ctx context.Context, g string) ([]Result, error) {
	switch g {
	case GroupLedger:
		return r.ledgerRows(ctx)
	case GroupGroupCommit:
		return r.groupCommitRows(ctx)
	case GroupJobs:
		return r.jobRows(ctx)
	case GroupSQLite:
		return r.sqliteRows(ctx)
	case GroupScale:
		return r.scaleRows(ctx)
	case GroupMemory:
		return r.memoryRows(ctx)
	case GroupCycles:
		return r.cycleRows(ctx)
	default:
		return r.gatewayRows(ctx)
	}
}

func (r *runner) progress(format string, a ...any) {
	if r.o.Progress != nil {
		fmt.Fprintf(r.o.Progress, format+"%s\n", append(a, r.runTag)...)
	}
}

// repeat calls measure Options.Runs times, one after the other, with k
// counting the runs from 0; while it runs, progress lines say which run
// they belong to. It stops at the first error.
func (r *runner) repeat(measure func(k int) error) error {
	defer func() { r.runTag = "" }()
	for k := range r.o.Runs {
		if r.o.Runs > 1 {
			r.runTag = fmt.Sprintf(" (run %d of %d)", k+1, r.o.Runs)
		}
		if err := measure(k); err != nil {
			return err
		}
	}
	return nil
}

// medianRun is repeat for a measurement that makes one row: it returns
// the median of measure's rows (see median).
func (r *runner) medianRun(measure func(k int) (Result, error)) (Result, error) {
	var runs []Result
	err := r.repeat(func(k int) error {
		res, err := measure(k)
		runs = append(runs, res)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return median(runs), nil
}

// quiet discards the logs of the components under load.
var quiet = slog.New(slog.DiscardHandler)

// database hands out fresh databases of one kind.
type database struct {
	driver     string // sqlite or postgres
	durability string // e.g. "synchronous=FULL" or "fsync=on synchronous_commit=on"
	sync       string // SQLite's synchronous setting: full or normal
	fresh      func(ctx context.Context) (url string, err error)
	close      func()
	// shared: fresh returns the same database every time; each measurement
	// deletes its rows (by scope or queue) instead of dropping it.
	shared bool
}

var seq atomic.Int64

// name makes a run-unique name for a scope, queue or database.
func name(prefix string) string {
	return prefix + "_" + strconv.FormatInt(int64(os.Getpid()), 36) + "_" + strconv.FormatInt(seq.Add(1), 36)
}

func openDatabase(ctx context.Context, spec string) (*database, error) {
	switch {
	case spec == "sqlite" || spec == "sqlite:" || spec == "sqlite3":
		dir, err := os.MkdirTemp("", "idem-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		return &database{
			driver: "sqlite", durability: "synchronous=FULL (WAL)", sync: "full",
			fresh: func(context.Context) (string, error) {
				return "sqlite:" + filepath.Join(dir, name("bench")+".db"), nil
			},
			close: func() { os.RemoveAll(dir) },
		}, nil
	case spec == "postgres" || spec == "postgresql":
		c, err := pgtest.Start(ctx, &pgtest.Options{Fsync: true})
		if err != nil {
			return nil, fmt.Errorf("bench: starting a throwaway PostgreSQL: %w", err)
		}
		return &database{
			driver: "postgres", durability: "fsync=on synchronous_commit=on (throwaway cluster)",
			fresh: func(ctx context.Context) (string, error) { return c.CreateDatabase(ctx, name("bench")) },
			close: func() { c.Close() },
		}, nil
	}
	u, err := dburl.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err) // never holds the password
	}
	if u.Driver == dburl.Postgres {
		return &database{driver: "postgres", durability: "as configured on the server", shared: true,
			fresh: func(context.Context) (string, error) { return spec, nil }, close: func() {}}, nil
	}
	dur, sync := "synchronous=FULL (WAL)", "full"
	if strings.EqualFold(u.Options.Get("synchronous"), "normal") {
		dur, sync = "synchronous=NORMAL (WAL)", "normal"
	}
	return &database{driver: "sqlite", durability: dur, sync: sync, shared: true,
		fresh: func(context.Context) (string, error) { return spec, nil }, close: func() {}}, nil
}

// errUnexpected marks an operation whose answer was not the one a fresh
// key must get: the benchmark is measuring something else than it claims.
var errUnexpected = errors.New("unexpected answer")
