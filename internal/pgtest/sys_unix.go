//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const platformSupported = true

// runAs is the OS user the PostgreSQL binaries run as when we are root.
type runAs struct {
	name     string
	home     string
	uid, gid uint32
}

// serverUser returns nil when not root (run as ourselves), else the user to
// drop to.
func serverUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			errs = append(errs, fmt.Errorf("user %s: unusable uid %q gid %q", name, u.Uid, u.Gid))
			continue
		}
		return &runAs{name: u.Username, home: u.HomeDir, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root, and initdb refuses root, but no user to run PostgreSQL as: %w", errors.Join(errs...))
}

func sysProcAttr(r *runAs) *syscall.SysProcAttr {
	if r == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: r.uid, Gid: r.gid, Groups: []uint32{}}}
}

func chown(path string, r *runAs) error {
	if r == nil {
		return nil
	}
	return os.Chown(path, int(r.uid), int(r.gid))
}

// searchableByOthers reports whether every directory from / down to dir
// can be traversed by any user (o+x), as the postgres user must when we
// run as root.
func searchableByOthers(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// lockOwner creates dir/owner.lock holding our pid and flocks it; the lock
// lives as long as the returned file stays open (or the process lives).
func lockOwner(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// reapStale stops and removes idem-pg-* directories under base whose owning
// process is gone. See the package documentation.
func reapStale(base, binDir string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		// Creating owner.lock updates the directory's mtime, and the owner
		// flocks it right after creating it: a directory last modified
		// more than staleAfter ago has its lock taken if its owner lives.
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < staleAfter {
			continue
		}
		f, err := os.Open(filepath.Join(dir, lockName))
		if err != nil {
			continue // not ours, or not readable by us
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // owner alive
			continue
		}
		reapDir(dir, binDir, fi)
		f.Close()
	}
}

func reapDir(dir, binDir string, fi os.FileInfo) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	var r *runAs
	if os.Geteuid() == 0 {
		if st.Uid != 0 {
			r = &runAs{uid: st.Uid, gid: st.Gid, home: "/"}
		}
	} else if int(st.Uid) != os.Geteuid() {
		return // somebody else's; we could neither stop nor remove it
	}
	dataDir := filepath.Join(dir, "data")
	if pid, ok := postmasterPID(dataDir); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := &Cluster{binDir: binDir, dir: dir, dataDir: dataDir, user: r}
		c.env = childEnv(r)
		_, _ = c.pgctl(ctx, "stop", "-m", "immediate", "-t", "20")
		cancel()
		if isPostmaster(pid, dataDir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = os.RemoveAll(dir)
}

// postmasterPID returns the pid in dataDir/postmaster.pid when that process
// is alive and (where /proc tells) is the postmaster of dataDir.
func postmasterPID(dataDir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, isPostmaster(pid, dataDir)
}

func isPostmaster(pid int, dataDir string) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		// No /proc (not Linux): trust postmaster.pid, as pg_ctl does.
		_, statErr := os.Stat("/proc/self/cmdline")
		return statErr != nil
	}
	return bytes.Contains(cmdline, []byte(dataDir+"\x00")) || bytes.HasSuffix(cmdline, []byte(dataDir))
}

func reraise(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(os.Getpid(), s)
		time.Sleep(time.Second)
	}
	os.Exit(1)
}

// children returns the pids of ppid's child processes whose command line
// contains match ("" for all), from /proc (Linux only).
func children(ppid int, match string) ([]int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return nil, errors.New("pgtest: listing a server's processes needs /proc (Linux)")
	}
	var out []int
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		if match != "" {
			cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(path), "cmdline"))
			if err != nil || !bytes.Contains(cmdline, []byte(match)) {
				continue
			}
		}
		out = append(out, pid)
	}
	return out, nil
}

type procSignal = syscall.Signal

const (
	sigKill = syscall.SIGKILL
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// sendSignal sends sig to pid; a process already gone is not an error.
func sendSignal(pid int, sig procSignal) error {
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgtest: kill -%d %d: %w", sig, pid, err)
	}
	return nil
}
