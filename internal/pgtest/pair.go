package pgtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// standbyName is the standby's application_name, which the primary's
// synchronous_standby_names lists.
const standbyName = "standby"

// PairOptions for StartPair; nil means defaults.
type PairOptions struct {
	// Async makes replication asynchronous: the primary acknowledges a
	// commit before the standby has it, so a failover can lose
	// acknowledged commits. By default the standby is synchronous
	// (synchronous_standby_names names it, synchronous_commit=on): a
	// commit is acknowledged once the standby has flushed its WAL.
	Async bool
	// Slot makes the standby stream from a physical replication slot, so
	// the primary keeps the WAL a lagging standby still needs.
	Slot bool
	// Settings: extra postgresql.conf settings for both servers.
	Settings map[string]string
}

// Pair is a primary and its streaming standby, both listening on loopback
// TCP. Until Promote the standby is read-only (hot standby).
type Pair struct {
	Primary *Cluster
	Standby *Cluster
	// Async is PairOptions.Async.
	Async bool
}

// StartPair starts a primary (as Start with Options.TCP), takes a base
// backup of it with pg_basebackup into a second cluster directory, and
// starts that as its streaming standby. It returns once the standby
// streams (and, when synchronous, is the primary's synchronous standby),
// so commits on the primary are replicated from the first one. On error
// nothing is left behind.
func StartPair(ctx context.Context, opts *PairOptions) (*Pair, error) {
	if opts == nil {
		opts = &PairOptions{}
	}
	binDir, ok := Available()
	if !ok {
		return nil, errors.New("pgtest: PostgreSQL binaries (initdb, pg_ctl, postgres) not found on PATH or under /usr/lib/postgresql/*/bin")
	}
	if _, err := os.Stat(filepath.Join(binDir, "pg_basebackup")); err != nil {
		return nil, fmt.Errorf("pgtest: a standby needs pg_basebackup next to initdb: %w", err)
	}
	settings := maps.Clone(opts.Settings)
	if settings == nil {
		settings = map[string]string{}
	}
	settings["wal_level"] = "replica"
	settings["hot_standby"] = "on"
	// A standby whose primary died retries every 5s by default, and a
	// promotion may wait out that sleep.
	settings["wal_retrieve_retry_interval"] = "100ms"
	primarySettings := maps.Clone(settings)
	if !opts.Async {
		primarySettings["synchronous_standby_names"] = standbyName
		primarySettings["synchronous_commit"] = "on"
	}
	p := &Pair{Async: opts.Async}
	var err error
	if p.Primary, err = Start(ctx, &Options{TCP: true, Settings: primarySettings}); err != nil {
		return nil, err
	}
	ok = false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	slot := ""
	if opts.Slot {
		slot = standbyName
	}
	standbySettings := maps.Clone(settings)
	standbySettings["primary_conninfo"] = fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", p.Primary.port, superuser, standbyName)
	if slot != "" {
		standbySettings["primary_slot_name"] = slot
	}
	p.Standby, err = start(ctx, &Options{TCP: true, Settings: standbySettings}, func(c *Cluster) error {
		args := []string{"-D", c.dataDir, "-h", "127.0.0.1", "-p", strconv.Itoa(p.Primary.port), "-U", superuser,
			"-X", "stream", "-c", "fast", "--no-sync"}
		if slot != "" {
			args = append(args, "-C", "-S", slot)
		}
		if out, err := c.command(ctx, "pg_basebackup", args...); err != nil {
			return fmt.Errorf("pgtest: pg_basebackup into %s (as %s): %w\n%s", c.dataDir, c.userName(), err, out)
		}
		signalFile := filepath.Join(c.dataDir, "standby.signal")
		if err := os.WriteFile(signalFile, nil, 0o600); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		return chown(signalFile, c.user)
	})
	if err != nil {
		return nil, err
	}
	if err := p.waitStreaming(ctx); err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

// waitStreaming waits until the primary sees the standby streaming (and
// synchronous unless Async).
func (p *Pair) waitStreaming(ctx context.Context) error {
	want := "sync"
	if p.Async {
		want = "async"
	}
	var last string
	for {
		var state, syncState string
		err := p.Primary.queryRow(ctx, "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", []any{standbyName}, &state, &syncState)
		if err == nil && state == "streaming" && syncState == want {
			return nil
		}
		last = fmt.Sprintf("state %q sync_state %q (%v)", state, syncState, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the standby never streamed: %s: %w\nstandby log:\n%s", last, ctx.Err(), p.Standby.LogTail(20))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// URL returns a multi-host URL naming the primary, then the standby, for
// dbname, with target_session_attrs=read-write: a client connects to
// whichever of them accepts writes, so after Promote the same URL reaches
// the new primary.
func (p *Pair) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@%s,%s/%s?sslmode=disable&target_session_attrs=read-write",
		superuser, p.Primary.TCPAddr(), p.Standby.TCPAddr(), url.PathEscape(dbname))
}

// CreateDatabase creates database name on the primary (the standby
// replays it) and returns URL(name). See Cluster.CreateDatabase.
func (p *Pair) CreateDatabase(ctx context.Context, name string) (string, error) {
	if _, err := p.Primary.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	return p.URL(name), nil
}

// KillPrimary is the "primary dies" fault: the postmaster is stopped
// (SIGSTOP, so it starts nothing more), then it and every one of its
// processes (backends, WAL sender, checkpointer) get SIGKILL at once, as
// when a machine dies: no backend lives on to answer a client, nothing is
// flushed or sent to the standby. It returns once the postmaster is gone.
// Linux only (it reads /proc).
func (p *Pair) KillPrimary() error {
	c := p.Primary
	c.mu.Lock()
	defer c.mu.Unlock()
	pid, alive := postmasterPID(c.dataDir)
	if !alive {
		return errors.New("pgtest: the primary is not running")
	}
	if err := sendSignal(pid, sigStop); err != nil {
		return err
	}
	kids, err := children(pid, "")
	if err != nil {
		_ = sendSignal(pid, sigCont)
		return err
	}
	for _, k := range append(kids, pid) {
		if err := sendSignal(k, sigKill); err != nil {
			return err
		}
	}
	c.running = false
	for range 500 {
		if !isPostmaster(pid, c.dataDir) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("pgtest: the primary's postmaster %d outlived SIGKILL", pid)
}

// PauseWALSender stops (SIGSTOP) the primary's WAL sender, so that from
// now on nothing the primary writes reaches the standby. With synchronous
// replication commits then wait; with asynchronous replication they are
// acknowledged, and lost if the primary dies before resume is called.
// resume sends SIGCONT. Linux only (it reads /proc).
func (p *Pair) PauseWALSender() (resume func() error, err error) {
	pid, alive := postmasterPID(p.Primary.dataDir)
	if !alive {
		return nil, errors.New("pgtest: the primary is not running")
	}
	senders, err := children(pid, "walsender")
	if err != nil {
		return nil, err
	}
	if len(senders) == 0 {
		return nil, errors.New("pgtest: the primary has no WAL sender")
	}
	for _, s := range senders {
		if err := sendSignal(s, sigStop); err != nil {
			return nil, err
		}
	}
	return func() error {
		var errs []error
		for _, s := range senders {
			errs = append(errs, sendSignal(s, sigCont))
		}
		return errors.Join(errs...)
	}, nil
}

// Promote turns the standby into a primary (pg_ctl promote, waiting until
// it accepts writes). Promote it after KillPrimary: two primaries would
// each accept writes the other never sees.
func (p *Pair) Promote(ctx context.Context) error {
	out, err := p.Standby.pgctl(ctx, "promote", "-t", "60")
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl promote: %w\n%s\nstandby log:\n%s", err, out, p.Standby.LogTail(20))
	}
	return nil
}

// Close stops both servers and removes their directories.
func (p *Pair) Close() error {
	var errs []error
	if p.Standby != nil {
		errs = append(errs, p.Standby.Close())
	}
	if p.Primary != nil {
		errs = append(errs, p.Primary.Close())
	}
	return errors.Join(errs...)
}
