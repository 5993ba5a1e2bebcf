// Package prove is idem's fault-injection prover, behind `idem prove`. It
// attacks the ledger with real worker processes — killing them with
// SIGKILL at named crash points, handing the same job to many at once,
// storming one key with retries, pausing a holder past its lease,
// replaying old batches, restarting the database — records what every
// attempt saw (a history of invoke, then ok, fail or unknown), counts the
// effects that really happened, and checks the invariants of TESTING.md
// over both: once, no loss, no mix-up, fenced, bounded stuck, unknown is
// honest.
//
// Workers are the idem binary itself (or a test binary) started again
// with WorkerEnv set; they run WorkerMain. See docs/prove.md.
package prove

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

// Config says what to attack and how hard. The zero value of each field
// means its default.
type Config struct {
	// DB is where the ledger lives: "" or "sqlite" for a temporary SQLite
	// file; "postgres" for a throwaway PostgreSQL cluster started from the
	// system's binaries; or a URL (sqlite:PATH, postgres://…) of a
	// database the prover uses and leaves in place.
	DB string
	// Scenarios to run, by name ("crash-after-call") or variant
	// ("crash-after-call/blind"). Empty means all. With Target, the rows
	// are target/parallel, target/dropped and target/storm.
	Scenarios []string
	// Ops is the number of operations per scenario. Default 50.
	Ops int
	// Workers is how many worker processes run at once. Default 4.
	Workers int
	// Seed makes the choices (which operation dies where, in which order
	// workers take keys) repeatable; 0 picks one, reported in the Report.
	// Timing is never repeatable.
	Seed int64
	// Lease is the lease of the attacked claims; recovery waits for it.
	// Default 1s.
	Lease time.Duration
	// Worker is the command that runs a worker process, such as
	// {"/usr/bin/idem", "prove-worker"}. Required.
	Worker []string
	// Serve is the command that runs the gateway, such as
	// {"/usr/bin/idem", "serve"}; flags are appended. The gateway scenario
	// and Target need it.
	Serve []string
	// NoGuard makes the workers skip the ledger, performing every effect
	// they are asked to. Every scenario that attacks something should
	// then FAIL: it shows that the prover can.
	NoGuard bool
	// Progress, when set, receives live counters while scenarios run; with
	// Live, it is a terminal and one line is redrawn, otherwise a line is
	// written per finished scenario.
	Progress io.Writer
	Live     bool
	// History, when set, receives every event of every history, one JSON
	// object a line, for a failure's post-mortem.
	History io.Writer
	// Target switches to attacking a user's own endpoint (an http:// or
	// https:// URL) through gateways the prover starts; EffectsCmd, a
	// shell command given the key in $1 and $IDEM_KEY, prints how many
	// effects the endpoint performed for it. See target.go.
	Target     string
	EffectsCmd string
}

// Report is the outcome of a run.
type Report struct {
	Seed     int64    `json:"seed"`
	Driver   string   `json:"driver"`
	Database string   `json:"database"`
	Ops      int      `json:"ops"`
	Workers  int      `json:"workers"`
	NoGuard  bool     `json:"no_guard,omitempty"`
	Target   string   `json:"target,omitempty"`
	OK       bool     `json:"ok"`
	Seconds  float64  `json:"seconds"`
	Results  []Result `json:"scenarios"`
}

// Result is one scenario's counts and verdict.
type Result struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Ops    int    `json:"ops"`
	// Attempts counts every attempt at an operation, by any process.
	Attempts int `json:"attempts"`
	// Effects counts the effects that happened (rows in the effects table,
	// or calls the provider counted as effects).
	Effects int `json:"effects"`
	// EffectsUnknown: nobody counted the effects (--target without
	// --effects-cmd); Effects, Duplicates and Lost are then 0 and mean
	// nothing.
	EffectsUnknown bool `json:"effects_unknown,omitempty"`
	// Duplicates counts effects beyond the first per operation.
	Duplicates int `json:"duplicates"`
	// Lost counts operations acknowledged ok whose effect is missing.
	Lost int `json:"lost"`
	// Unknown counts operations that had an attempt whose outcome nobody
	// could know (killed, timed out, connection lost), or that are parked.
	Unknown int `json:"unknown"`
	// Parked counts operations parked for reconciliation.
	Parked int `json:"parked"`
	// Replays counts attempts answered from the ledger.
	Replays int `json:"replays"`
	// Fenced counts writes refused because their holder lost its lease.
	Fenced int `json:"fenced"`
	// Expired counts replays past retention that were detected.
	Expired int `json:"expired"`
	// MixUps counts operations whose acknowledged results differ from
	// each other or from the effect that happened.
	MixUps int `json:"mixups"`
	// Stuck counts operations left in progress after every worker ended.
	Stuck int `json:"stuck"`
	// Unfinished counts operations that never settled (no ok, not parked).
	Unfinished int      `json:"unfinished"`
	OK         bool     `json:"ok"`
	Skipped    bool     `json:"skipped,omitempty"`
	Reason     string   `json:"reason,omitempty"` // why it was skipped
	Failures   []string `json:"failures,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	Seconds    float64  `json:"seconds"`
}

// Defaults.
const (
	DefaultOps     = 50
	DefaultWorkers = 4
	DefaultLease   = time.Second
)

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Ops < 0:
		return c, fmt.Errorf("ops %d: must be positive", c.Ops)
	case c.Workers < 0:
		return c, fmt.Errorf("workers %d: must be positive", c.Workers)
	case c.Lease < 0 || (c.Lease > 0 && c.Lease < 50*time.Millisecond):
		return c, fmt.Errorf("lease %v: must be at least 50ms", c.Lease)
	case len(c.Worker) == 0:
		return c, errors.New("no worker command (Config.Worker)")
	}
	if c.Ops == 0 {
		c.Ops = DefaultOps
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	for c.Seed == 0 {
		c.Seed = rand.Int64()
	}
	return c, nil
}

// runner is one run: a database, the parent's own ledger on it, and the
// scenarios.
type runner struct {
	cfg    Config
	db     *database
	ledger *idem.Ledger
	runID  string
	prog   *progress
}

// Run runs the selected scenarios one after another and reports. The
// error is for a run that could not be made (bad config, no database, an
// interruption); a scenario that fails is a Result with OK false.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var todo []selected
	if cfg.Target != "" {
		if err := CheckTarget(cfg.Target); err != nil {
			return nil, err
		}
		if todo, err = selectFrom([]scenario{targetScenario}, cfg.Scenarios); err != nil {
			return nil, err
		}
	} else if todo, err = selectScenarios(cfg.Scenarios); err != nil {
		return nil, err
	}
	start := time.Now()
	db, err := openDatabase(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	defer db.cleanup()
	r := &runner{cfg: cfg, db: db, runID: fmt.Sprintf("%x-%d", time.Now().UnixMilli(), os.Getpid())}
	if err := r.open(ctx); err != nil {
		return nil, err
	}
	defer func() { r.ledger.Close() }()
	r.prog = newProgress(cfg.Progress, cfg.Live, len(todo))

	rep := &Report{Seed: cfg.Seed, Driver: db.driver, Database: db.desc, Ops: cfg.Ops, Workers: cfg.Workers, NoGuard: cfg.NoGuard, Target: cfg.Target}
	for i, sel := range todo {
		if ctx.Err() != nil {
			break
		}
		rep.Results = append(rep.Results, r.runTrial(ctx, i, sel))
	}
	if !db.owned {
		r.dropEffects(rep.Results)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.OK = len(rep.Results) == len(todo) && !slices.ContainsFunc(rep.Results, func(r Result) bool { return !r.OK })
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("interrupted: %w", err)
	}
	return rep, nil
}

// open opens the parent's ledger (applying the schema once, before any
// worker opens it) and creates the effects table.
func (r *runner) open(ctx context.Context) error {
	l, err := dburl.Open(ctx, r.db.url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := createEffects(ctx, l.Driver().DB()); err != nil {
		l.Close()
		return err
	}
	r.ledger = l
	return nil
}

// reopen replaces the parent's ledger, whose connections a database
// restart broke.
func (r *runner) reopen(ctx context.Context) error {
	old := r.ledger
	err := r.open(ctx)
	if err == nil {
		old.Close()
	}
	return err
}

// dropEffects removes this run's effect rows from a user's database. The
// ledger records stay (under scopes named prove-<run>/…) until retention
// and the tombstone window end and idem prune removes them.
func (r *runner) dropEffects(results []Result) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, rb := r.ledger.Driver().DB(), rebinder(r.ledger.Driver())
	for _, res := range results {
		dropEffects(ctx, db, rb, r.scope(res.Name))
	}
}

// scope is the ledger scope of one scenario in this run: runs never see
// each other's keys, even on a shared database.
func (r *runner) scope(name string) string { return "prove-" + r.runID + "/" + name }

// trialSeed derives a scenario's random stream from the run's seed and
// the scenario's name, so a scenario makes the same choices whether it
// runs alone or with others.
func trialSeed(seed int64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}
