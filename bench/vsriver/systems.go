package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // registers "sqlite": River's SQLite library, and idem's with library=modernc
)

// noop is the job both sides enqueue and work. T is when the producer
// called the enqueue (Unix nanoseconds; 0 for jobs whose latency is not
// measured). The same type serves idem (jobs.Args) and River
// (river.JobArgs): both ask only for Kind.
type noop struct {
	T int64 `json:"t"`
}

// Kind names the job type on both sides.
func (noop) Kind() string { return "noop" }

// settings are the knobs both sides get alike.
type settings struct {
	Workers       int           // workers of the one queue
	FetchCooldown time.Duration // least time between two fetches
	PollInterval  time.Duration // River's FetchPollInterval, idem's PollInterval
	PoolSize      int32         // PostgreSQL connection pool, both sides
}

// system is one job queue under test, on a database of its own, with a
// client that has a no-op worker and has not been started.
type system interface {
	// insertBulk inserts n jobs (T = 0) in batches of batch through the
	// library's fast bulk insert.
	insertBulk(ctx context.Context, n, batch int) error
	// insert enqueues one job, as a producer would.
	insert(ctx context.Context, job noop) error
	// start starts working; every job run is reported to rec.
	start(ctx context.Context) error
	// count returns the number of jobs in state (completed or available),
	// read from the side's own table.
	count(ctx context.Context, state string) (int, error)
	// close stops the client (if started) and closes the database.
	close() error
}

// recorder counts completions (from the side's event subscription, which
// both libraries feed after the completion committed) and keeps each
// job's enqueue→run latency (taken by the worker when it starts).
type recorder struct {
	want      int64
	completed atomic.Int64
	failed    atomic.Int64
	done      chan struct{} // closed when completed reaches want
	doneOnce  sync.Once
	last      atomic.Int64 // Unix ns of the latest completion

	mu  sync.Mutex
	lat []time.Duration
}

func newRecorder(want int) *recorder {
	return &recorder{want: int64(want), done: make(chan struct{}), lat: make([]time.Duration, 0, want)}
}

// ran is called by the worker as the job starts.
func (r *recorder) ran(j noop) {
	if j.T == 0 {
		return
	}
	d := time.Duration(time.Now().UnixNano() - j.T)
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.mu.Unlock()
}

// complete is called for each completion event.
func (r *recorder) complete() {
	r.last.Store(time.Now().UnixNano())
	if r.completed.Add(1) >= r.want {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// wait returns when want jobs completed, or with ctx's error.
func (r *recorder) wait(ctx context.Context) error {
	select {
	case <-r.done:
		if n := r.failed.Load(); n > 0 {
			return fmt.Errorf("%d jobs failed", n)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d of %d jobs completed (%d failed): %w", r.completed.Load(), r.want, r.failed.Load(), ctx.Err())
	}
}

// latencies returns the recorded enqueue→run latencies, sorted.
func (r *recorder) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.lat)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

var quiet = slog.New(slog.DiscardHandler)

// ---- idem ----

type idemSystem struct {
	l       *idem.Ledger
	c       *jobs.Client
	rec     *recorder
	unsub   func()
	started bool
}

func openIdem(ctx context.Context, dbURL string, s settings, rec *recorder) (*idemSystem, error) {
	l, err := dburl.Open(ctx, dbURL, &idem.Options{Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("idem: open: %w", err)
	}
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[noop]) error {
		rec.ran(j.Args)
		return nil
	}))
	c, err := jobs.New(l, &jobs.Config{
		Queues:        map[string]jobs.QueueConfig{jobs.DefaultQueue: {MaxWorkers: s.Workers}},
		Workers:       ws,
		PollInterval:  s.PollInterval,
		FetchCooldown: s.FetchCooldown,
		Logger:        quiet,
		EventBuffer:   int(rec.want) + 1024, // never drop the events the count rests on
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("idem: jobs.New: %w", err)
	}
	return &idemSystem{l: l, c: c, rec: rec}, nil
}

func (s *idemSystem) insertBulk(ctx context.Context, n, batch int) error {
	params := make([]jobs.EnqueueParams, 0, batch)
	for done := 0; done < n; done += len(params) {
		params = params[:0]
		for range min(batch, n-done) {
			params = append(params, jobs.EnqueueParams{Args: noop{}})
		}
		if _, err := s.c.EnqueueManyFast(ctx, params); err != nil {
			return fmt.Errorf("idem: EnqueueManyFast: %w", err)
		}
	}
	return nil
}

func (s *idemSystem) insert(ctx context.Context, job noop) error {
	_, err := s.c.Enqueue(ctx, job, nil)
	return err
}

func (s *idemSystem) start(ctx context.Context) error {
	events, unsub := s.c.Subscribe(jobs.EventCompleted, jobs.EventFailed, jobs.EventDead)
	s.unsub = unsub
	go func() {
		for e := range events {
			if e.Kind == jobs.EventCompleted {
				s.rec.complete()
			} else {
				s.rec.failed.Add(1)
			}
		}
	}()
	if err := s.c.Start(ctx); err != nil {
		return fmt.Errorf("idem: Start: %w", err)
	}
	s.started = true
	return nil
}

func (s *idemSystem) count(ctx context.Context, state string) (int, error) {
	q := `SELECT count(*) FROM idem_jobs WHERE state = ?`
	if s.l.Driver().Name() == "postgres" {
		q = `SELECT count(*) FROM idem_jobs WHERE state = $1`
	}
	var n int
	err := s.l.DB().QueryRowContext(ctx, q, state).Scan(&n)
	return n, err
}

func (s *idemSystem) close() error {
	var errs []error
	if s.started {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, s.c.Stop(ctx))
		cancel()
	}
	if s.unsub != nil {
		s.unsub()
	}
	if n := s.c.DroppedEvents(); n > 0 {
		errs = append(errs, fmt.Errorf("idem: %d events dropped", n))
	}
	errs = append(errs, s.l.Close())
	return errors.Join(errs...)
}

// ---- River ----

type riverSystem[TTx any] struct {
	c        *river.Client[TTx]
	rec      *recorder
	unsub    func()
	started  bool
	countSQL func(ctx context.Context, state string) (int, error)
	closeDB  func()
}

// riverConfig is River's client configuration: the benchmark settings of
// River's own `river bench` (FetchCooldown 2ms, FetchPollInterval 20ms)
// with the worker count of the run.
func riverConfig(s settings, rec *recorder) *river.Config {
	ws := river.NewWorkers()
	river.AddWorker(ws, river.WorkFunc(func(ctx context.Context, j *river.Job[noop]) error {
		rec.ran(j.Args)
		return nil
	}))
	return &river.Config{
		FetchCooldown:     s.FetchCooldown,
		FetchPollInterval: s.PollInterval,
		Logger:            quiet,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.Workers}},
		Workers:           ws,
	}
}

// openRiverSQLite opens path as River's SQLite driver asks (River's docs and
// its own CLI: modernc.org/sqlite, WAL, one connection), with idem's
// durability: synchronous=FULL and a busy timeout.
func openRiverSQLite(ctx context.Context, path string, s settings, rec *recorder) (system, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("river: open sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	drv := riversqlite.New(db)
	if err := riverMigrate(ctx, drv); err != nil {
		db.Close()
		return nil, err
	}
	c, err := river.NewClient(drv, riverConfig(s, rec))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("river: NewClient: %w", err)
	}
	return &riverSystem[*sql.Tx]{c: c, rec: rec, closeDB: func() { db.Close() },
		countSQL: func(ctx context.Context, state string) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM river_job WHERE state = ?`, state).Scan(&n)
			return n, err
		}}, nil
}

func openRiverPostgres(ctx context.Context, dbURL string, s settings, rec *recorder) (system, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("river: %w", err)
	}
	cfg.MaxConns = s.PoolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("river: connect: %w", err)
	}
	drv := riverpgxv5.New(pool)
	if err := riverMigrate(ctx, drv); err != nil {
		pool.Close()
		return nil, err
	}
	c, err := river.NewClient(drv, riverConfig(s, rec))
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: NewClient: %w", err)
	}
	return &riverSystem[pgx.Tx]{c: c, rec: rec, closeDB: pool.Close,
		countSQL: func(ctx context.Context, state string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = $1`, state).Scan(&n)
			return n, err
		}}, nil
}

func riverMigrate[TTx any](ctx context.Context, drv riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return fmt.Errorf("river: migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river: migrate: %w", err)
	}
	return nil
}

func (s *riverSystem[TTx]) insertBulk(ctx context.Context, n, batch int) error {
	params := make([]river.InsertManyParams, 0, batch)
	for done := 0; done < n; done += len(params) {
		params = params[:0]
		for range min(batch, n-done) {
			params = append(params, river.InsertManyParams{Args: noop{}})
		}
		if _, err := s.c.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("river: InsertManyFast: %w", err)
		}
	}
	return nil
}

func (s *riverSystem[TTx]) insert(ctx context.Context, job noop) error {
	_, err := s.c.Insert(ctx, job, nil)
	return err
}

func (s *riverSystem[TTx]) start(ctx context.Context) error {
	events, unsub := s.c.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: int(s.rec.want) + 1024,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	s.unsub = unsub
	go func() {
		for e := range events {
			if e.Kind == river.EventKindJobCompleted {
				s.rec.complete()
			} else {
				s.rec.failed.Add(1)
			}
		}
	}()
	if err := s.c.Start(ctx); err != nil {
		return fmt.Errorf("river: Start: %w", err)
	}
	s.started = true
	return nil
}

func (s *riverSystem[TTx]) count(ctx context.Context, state string) (int, error) {
	return s.countSQL(ctx, state)
}

func (s *riverSystem[TTx]) close() error {
	var err error
	if s.started {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = s.c.Stop(ctx)
		cancel()
	}
	if s.unsub != nil {
		s.unsub()
	}
	s.closeDB()
	return err
}

// ---- databases ----

// databases hands out a fresh database per side per workload: a new file
// in dir for SQLite, a new database on the server at pgURL for PostgreSQL.
type databases struct {
	kind  string // "sqlite" or "postgres"
	dir   string // SQLite files
	pgURL string // PostgreSQL: any database of the server; new ones are made beside it
	seq   int
}

// fresh returns a new database's location (a file path or a URL) and a
// function that removes it.
func (d *databases) fresh(ctx context.Context, side string) (string, func(), error) {
	d.seq++
	name := fmt.Sprintf("vsriver_%s_%d", side, d.seq)
	if d.kind == "sqlite" {
		return d.dir + "/" + name + ".db", func() {}, nil
	}
	admin, err := pgx.Connect(ctx, d.pgURL)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %w", err)
	}
	defer admin.Close(ctx)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`); err != nil {
		return "", nil, err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+ident); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(d.pgURL)
	if err != nil {
		return "", nil, fmt.Errorf("postgres URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if admin, err := pgx.Connect(ctx, d.pgURL); err == nil {
			admin.Exec(ctx, `DROP DATABASE IF EXISTS `+ident+` WITH (FORCE)`)
			admin.Close(ctx)
		}
	}, nil
}

// open opens side ("idem" or "river") on a fresh database.
func (d *databases) open(ctx context.Context, side string, s settings, rec *recorder) (system, func(), error) {
	where, drop, err := d.fresh(ctx, side)
	if err != nil {
		return nil, nil, err
	}
	var sys system
	switch {
	case side == "idem" && d.kind == "sqlite":
		sys, err = openIdem(ctx, "sqlite:"+where+"?library=modernc", s, rec)
	case side == "idem":
		u, _ := url.Parse(where)
		q := u.Query()
		q.Set("pool_max_conns", fmt.Sprint(s.PoolSize))
		u.RawQuery = q.Encode()
		sys, err = openIdem(ctx, u.String(), s, rec)
	case d.kind == "sqlite":
		sys, err = openRiverSQLite(ctx, where, s, rec)
	default:
		sys, err = openRiverPostgres(ctx, where, s, rec)
	}
	if err != nil {
		drop()
		return nil, nil, err
	}
	return sys, drop, nil
}
