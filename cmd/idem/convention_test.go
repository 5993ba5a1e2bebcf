package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIConventions checks the one CLI convention in every command: an
// unknown flag or an extra argument is one line on stderr that points at
// the command's help, and exit 2; --help is exit 0 on stdout; --json is a
// switch.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "none.db")
	// Each command with the arguments it needs to get past positional
	// checks, so an extra argument is really extra.
	cmds := []struct {
		name []string
		args []string // valid positional arguments
	}{
		{[]string{"serve"}, nil},
		{[]string{"prove"}, nil},
		{[]string{"bench"}, nil},
		{[]string{"keys", "list"}, nil},
		{[]string{"keys", "show"}, []string{"s", "k"}},
		{[]string{"reconcile"}, []string{"s", "k"}},
		{[]string{"prune"}, nil},
		{[]string{"jobs", "list"}, nil},
		{[]string{"jobs", "show"}, []string{"1"}},
		{[]string{"jobs", "retry"}, []string{"1"}},
		{[]string{"jobs", "discard"}, []string{"1"}},
		{[]string{"outbox", "list"}, nil},
		{[]string{"outbox", "redeliver"}, []string{"msg-1"}},
		{[]string{"migrate"}, nil},
		{[]string{"version"}, nil},
	}
	for _, c := range cmds {
		name := strings.Join(c.name, " ")
		see := "(see idem " + name + " --help)"
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			h := opRun(t, "", append(c.name, "--help")...)
			if h.code != 0 || !strings.Contains(h.stdout, "Usage: idem "+name) || h.stderr != "" {
				t.Errorf("--help: exit %d, stdout %q, stderr %q", h.code, h.stdout, h.stderr)
			}
			for _, bad := range [][]string{
				append(append(append([]string{}, c.name...), c.args...), "--no-such-flag"),
				append(append(append([]string{}, c.name...), "--db", db), append(c.args, "extra")...),
			} {
				if name == "version" && bad[1] == "--db" {
					bad = []string{"version", "extra"}
				}
				r := opRun(t, "", bad...)
				lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
				if r.code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "idem "+name+": ") || !strings.HasSuffix(lines[0], see) || r.stdout != "" {
					t.Errorf("idem %s: exit %d, stderr %q, stdout %q; want exit 2 and one line ending %q", strings.Join(bad, " "), r.code, r.stderr, r.stdout, see)
				}
			}
		})
	}
}

// TestCLIJSONIsASwitch: --json takes no value in any command, so
// "--json --ops 5" is a switch followed by a flag, not a file named
// "--ops"; a file is --out.
func TestCLIJSONIsASwitch(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"prove", "--json", "--ops", "0"}, // --ops 0 is refused after --json parsed as a switch
		{"bench", "--json", "--duration", "1ms"},
		{"version", "--json"},
	} {
		r := opRun(t, "", args...)
		if r.code != 2 {
			t.Errorf("idem %s: exit %d, want 2:\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "flag provided but not defined: -ops") || strings.Contains(r.stderr, "-duration") && strings.Contains(r.stderr, "not defined") {
			t.Errorf("idem %s: --json took the next flag as its value:\n%s", strings.Join(args, " "), r.stderr)
		}
	}
	if r := opRun(t, "", "prove", "--json", "--ops", "0"); !strings.Contains(r.stderr, "--ops and --workers must be at least 1") {
		t.Errorf("idem prove --json --ops 0: %q", r.stderr)
	}
	for _, cmd := range [][]string{{"prove"}, {"bench"}} {
		h := opRun(t, "", append(cmd, "--help")...)
		if !strings.Contains(h.stdout, "-out FILE") || strings.Contains(h.stdout, "-json FILE") {
			t.Errorf("idem %s --help: want --out FILE and a --json switch:\n%s", cmd[0], h.stdout)
		}
	}
}

// TestCLITopLevel: idem --version works, a group alone exits 2 like idem
// alone, prove-worker is not in the help, an unknown command is one line.
func TestCLITopLevel(t *testing.T) {
	t.Parallel()
	if r := opRun(t, "", "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "idem ") {
		t.Errorf("idem --version: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := opRun(t, ""); r.code != 2 {
		t.Errorf("idem: exit %d, want 2", r.code)
	}
	for _, g := range []string{"keys", "jobs", "outbox"} {
		if r := opRun(t, "", g); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "Usage: idem "+g) {
			t.Errorf("idem %s: exit %d, stdout %q, stderr %q; want the help on stderr and exit 2", g, r.code, r.stdout, r.stderr)
		}
		if r := opRun(t, "", g, "nope"); r.code != 2 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "(see idem "+g+" --help)") {
			t.Errorf("idem %s nope: exit %d, stderr %q", g, r.code, r.stderr)
		}
	}
	if r := opRun(t, "", "help"); strings.Contains(r.stdout, "prove-worker") || !strings.Contains(r.stdout, "prove ") {
		t.Errorf("idem help shows prove-worker, or not prove:\n%s", r.stdout)
	}
	if r := opRun(t, "", "nope"); r.code != 2 || r.stderr != "idem: unknown command \"nope\" (see idem --help)\n" {
		t.Errorf("idem nope: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestMigrateSaysWhatWasNew: the first migrate names the migrations it
// applied; the second says nothing was new.
func TestMigrateSaysWhatWasNew(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	r := opRun(t, "", "migrate", "--db", db).must(t, 0)
	if !strings.Contains(r.stdout, "applied") || !strings.Contains(r.stdout, "0001_") {
		t.Errorf("first migrate: %q", r.stdout)
	}
	r = opRun(t, "", "migrate", "--db", db).must(t, 0)
	if !strings.Contains(r.stdout, "nothing new") {
		t.Errorf("second migrate: %q", r.stdout)
	}
}

// TestServeAdminErrorHasOnePrefix: a refused admin option is said once
// ("idem serve: admin: …"), not "idem serve: --admin: admin: …".
func TestServeAdminErrorHasOnePrefix(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "gw.db")
	r := opRun(t, "", "serve", "--demo", "--db", db, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token", "short")
	if r.code != 2 || !strings.Contains(r.stderr, "token") || strings.Contains(r.stderr, "--admin: admin:") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
