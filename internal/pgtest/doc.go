// Package pgtest runs a throwaway PostgreSQL cluster built from the system's
// binaries, for tests and for the `idem prove` and `idem bench` commands. It
// never uses Docker and never downloads anything.
//
// # Binaries
//
// initdb, pg_ctl and postgres must sit in one directory. Available looks for
// initdb on PATH first (following symlinks, so /usr/local/bin/initdb ->
// /usr/lib/postgresql/15/bin/initdb resolves to the real directory, which is
// where initdb itself looks for postgres), then under
// /usr/lib/postgresql/*/bin, picking the highest version. PostgreSQL 13 or
// newer is needed (DROP DATABASE ... WITH (FORCE)); 15 is what CI runs.
//
// # Layout and lifetime
//
// Start makes a fresh directory with os.MkdirTemp (in os.TempDir, or /tmp
// when that path is too long for a unix socket or, as root, not searchable
// by the postgres user) named idem-pg-*, holding:
//
//	data/           the cluster (initdb --auth=trust --username=idem -E UTF8 --no-locale)
//	data/idem.conf  our settings, included from postgresql.conf
//	.s.PGSQL.<port> the unix socket (unix_socket_directories = the directory)
//	postgres.log    the server log (pg_ctl -l), see LogTail
//	owner.lock      the owning process's pid, flock(2)ed while it lives
//
// Every run gets a new directory, so a leftover from a crashed run can never
// collide with the next one. The owning process holds an exclusive flock on
// owner.lock for as long as the Cluster is open; the kernel drops it when the
// process dies, however it dies (SIGKILL, a test timeout panic). The first
// Start in each process reaps leftovers: an idem-pg-* directory whose
// owner.lock can be locked (so its owner is dead) and that is older than a few
// seconds gets its postmaster (pid from data/postmaster.pid, checked against
// /proc/<pid>/cmdline on Linux) stopped with pg_ctl stop -m immediate, and is
// removed. A directory whose owner lives is never touched.
//
// # Running as root
//
// initdb, pg_ctl and postgres refuse to run as root. When os.Geteuid() == 0
// (this sandbox and CI), they are run as the OS user "postgres" (looked up
// with os/user; "nobody" if there is no postgres user) through
// exec.Cmd.SysProcAttr.Credential, with supplementary groups cleared, HOME
// and USER set for that user, and the working directory set to the cluster
// directory (the caller's working directory may not be readable by that
// user). The cluster directory is chowned to that user before initdb, so the
// data directory, socket and log file all belong to it; t.TempDir() is not
// used because its directories are 0700 and root-owned. The test process,
// still root, connects over the unix socket as database user idem with trust
// authentication. When not root, everything runs as the current user.
//
// PG*, LANG and LC_* variables are removed from the children's environment
// (PGDATA or PGPORT from the caller's shell must not redirect pg_ctl) and
// LC_ALL=C is set, so log messages are predictable.
//
// # Settings
//
// max_connections=300, idle_in_transaction_session_timeout=5s (proves no
// transaction is held open across work), shared_buffers=128MB, no TCP
// listener (or 127.0.0.1 with Options.TCP, on a free port picked by the
// kernel; a start that loses the port race is retried on another port),
// and, unless Options.Fsync, fsync=off and full_page_writes=off. A cluster
// without fsync survives SIGKILL of clients and pg_ctl stop -m immediate,
// which is all the tests inflict (only an OS crash would lose data); only
// benchmarks need Fsync.
//
// synchronous_commit stays on even without Fsync: with it off, a commit is
// acknowledged before its WAL is written to the OS at all, and pg_ctl stop
// -m immediate loses it (measured: a committed row was gone after Restart),
// which would make the restart fault report false losses. With fsync=off a
// synchronous commit only costs a write(2).
//
// Options.Settings are written last and override all of these, except
// port, listen_addresses and unix_socket_directories, which Start manages.
//
// # Test helpers
//
// Main, NewDB and Shared give each test binary one cluster, started lazily
// on first use (with TCP enabled), so packages that go test ./... runs in
// parallel each get their own. Main closes it after m.Run, and also on
// SIGINT or SIGTERM. Each NewDB creates a fresh database (from template0) and
// drops it again in t.Cleanup. Tests that call Restart or Stop on the shared
// cluster disturb every other test of the same binary that is using it at
// the time: don't mark them t.Parallel, or Start a private cluster.
package pgtest
