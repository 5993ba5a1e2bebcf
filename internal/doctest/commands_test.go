package doctest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// commandTimeout bounds each documented command: a command still running
// then has hung (servers are handled apart).
const commandTimeout = 2 * time.Minute

// A commandRule decides what becomes of a documented shell line, after
// the rewrites of normalize. The first rule that matches wins; a line no
// rule matches is run and must exit 0.
type commandRule struct {
	name  string
	match *regexp.Regexp
	// skip is why a matching line is not run; "" runs it as below.
	skip string
	// server: the command serves until stopped. It passes when its
	// output says it is listening; it is then stopped.
	server bool
	// absent matches the output of a command that names a record the
	// test's empty ledger does not hold: exit 1 with it passes.
	absent *regexp.Regexp
}

// commandRules lists, in order, every way a documented command is not
// simply run. Each skip says why it cannot run offline in a test.
var commandRules = []commandRule{
	{name: "test suite", match: regexp.MustCompile(`^go test\b`),
		skip: "runs the test suite this test is part of"},
	{name: "build", match: regexp.MustCompile(`^go build\b`),
		skip: "builds idem; this test runs the idem it built from the same source"},
	{name: "running gateway", match: regexp.MustCompile(`^curl\b`),
		skip: "talks to an idem serve the reader started (network); the gateway's answers have their own tests"},
	{name: "PostgreSQL cluster", match: regexp.MustCompile(`--db[ =]postgres(\s|$)`),
		skip: "starts a throwaway PostgreSQL cluster from the system's binaries: minutes"},
	{name: "reader's service", match: regexp.MustCompile(`--target[ =]https?://`),
		skip: "attacks the reader's own running service (network)"},
	{name: "long run", match: regexp.MustCompile(`^idem (prove|bench)\b`),
		skip: "a long run (minutes of load or fault injection); the flags are tested in cmd/idem"},
	{name: "check only", match: regexp.MustCompile(`^idem serve\b.*\s--check(\s|$)`)}, // validates and exits: an ordinary command
	{name: "server", match: regexp.MustCompile(`^idem serve\b`), server: true},
	{name: "names a record", match: regexp.MustCompile(`^idem (keys show|reconcile|jobs (show|retry|discard|cancel)|outbox (show|retry|discard))\b`),
		absent: regexp.MustCompile(`: no (record|job|message)\b`)},
}

// normalize rewrites a documented command into the one the test runs:
// the built idem for "go run ./cmd/idem" and "$bin/idem"; a SQLite file in
// the command's directory for a PostgreSQL server at a documented address
// (the flags are still checked; the database is not what they are about);
// port 0 for listen addresses, with the host kept (an address that is not
// loopback stays one); and an explicit 127.0.0.1:0 for a serve without
// --listen, whose default port may be taken on a shared machine.
func normalize(cmd, dir string) string {
	cmd = goRunIdem.ReplaceAllString(cmd, "${1}idem${2}")
	cmd = postgresURL.ReplaceAllString(cmd, "${1}sqlite:"+filepath.Join(dir, "idem.db"))
	if root, err := moduleRootOnce(); err == nil {
		// A file of the repository (an example config) is read where it is.
		cmd = repoFile.ReplaceAllString(cmd, "${1}"+filepath.ToSlash(root)+"/${2}")
	}
	if strings.HasPrefix(cmd, "idem serve") {
		cmd = listenFlag.ReplaceAllString(cmd, "${1}${2}:0")
		if !strings.Contains(cmd, "--listen") {
			cmd = strings.Replace(cmd, "idem serve", "idem serve --listen 127.0.0.1:0", 1)
		}
	}
	return cmd
}

var (
	goRunIdem   = regexp.MustCompile(`(^|\s)(?:go run \./cmd/idem|"\$bin/idem"|\$bin/idem)(\s|$)`)
	postgresURL = regexp.MustCompile(`((?:--db[ =]|IDEM_DB=))['"]?postgres(?:ql)?://[^\s'"]+['"]?`)
	listenFlag  = regexp.MustCompile(`(--(?:listen|admin)[ =])([^\s:]*):\d+`)
	repoFile    = regexp.MustCompile(`(\s)(examples/\S+)`)
)

// shellLines returns the commands of a shell block: continuation lines
// joined, comments and blank lines dropped, a leading "$ " prompt removed.
func shellLines(b block) (lines []string, at []int) {
	pending, start := "", 0
	for i, text := range b.lines {
		if pending == "" {
			start = b.line + i
		}
		if strings.HasSuffix(text, "\\") {
			pending += strings.TrimSuffix(text, "\\") + " "
			continue
		}
		line := strings.TrimSpace(stripComment(pending + text))
		pending = ""
		line = strings.TrimPrefix(line, "$ ")
		if line != "" {
			lines, at = append(lines, line), append(at, start)
		}
	}
	return lines, at
}

// stripComment removes a # comment: a # that starts a word outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i]
		}
	}
	return s
}

// builtDir is where buildIdem put idem, for TestMain to remove.
var builtDir atomic.Pointer[string]

// buildIdem builds ./cmd/idem once per test binary and returns its
// directory.
var buildIdem = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "doctest-idem")
	if err != nil {
		return "", err
	}
	builtDir.Store(&dir)
	root, err := moduleRootOnce()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "idem"), "./cmd/idem")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/idem: %v\n%s", err, out)
	}
	return dir, nil
})

// TestMain removes the idem the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if dir := builtDir.Load(); dir != nil {
		os.RemoveAll(*dir)
	}
	os.Exit(code)
}

// TestShellCommands runs the documented shell commands (see the package
// documentation): each block in a temporary directory of its own, its lines
// in order, under the rules of commandRules. Every line not run is logged
// with its rule.
func TestShellCommands(t *testing.T) {
	t.Parallel()
	bin, err := buildIdem()
	if err != nil {
		t.Fatal(err)
	}
	_, jqErr := exec.LookPath("jq")
	for _, b := range allBlocks(t, "sh", "bash", "shell", "console") {
		t.Run(b.where(), func(t *testing.T) {
			t.Parallel()
			if b.skip != "" {
				t.Logf("%s: shell block not run: %s", b.where(), b.skip)
				return
			}
			dir := t.TempDir()
			// Operators' commands read an existing ledger: give them an
			// empty one, at the default --db (sqlite:idem.db).
			if out, code := runCommand("idem migrate", dir, bin); code != 0 {
				t.Fatalf("idem migrate: exit %d:\n%s", code, out)
			}
			env := ""
			lines, at := shellLines(b)
			for i, line := range lines {
				where := fmt.Sprintf("%s:%d", b.file, at[i])
				cmd := normalize(line, dir)
				if strings.HasPrefix(cmd, "export ") {
					env += cmd + "\n"
					continue
				}
				rule := ruleFor(cmd)
				switch {
				case rule != nil && rule.skip != "":
					t.Logf("%s: not run (%s: %s): %s", where, rule.name, rule.skip, line)
					continue
				case jqErr != nil && strings.Contains(cmd, "| jq"):
					t.Logf("%s: not run (jq is not installed): %s", where, line)
					continue
				}
				if rule != nil && rule.server {
					runServer(t, where, line, env+"exec "+cmd, dir, bin)
					continue
				}
				out, code := runCommand(env+cmd, dir, bin)
				if code == 1 && rule != nil && rule.absent != nil && rule.absent.MatchString(out) {
					t.Logf("%s: ran, found nothing in the empty ledger (%s): %s", where, rule.name, line)
					continue
				}
				if code != 0 {
					t.Errorf("%s: %s\nexits %d (run as: %s):\n%s", where, line, code, cmd, out)
					continue
				}
				t.Logf("%s: ran: %s", where, line)
			}
		})
	}
}

func ruleFor(cmd string) *commandRule {
	for i := range commandRules {
		if commandRules[i].match.MatchString(cmd) {
			return &commandRules[i]
		}
	}
	return nil
}

// command returns the shell running script in dir, with bin first on PATH,
// without the caller's IDEM_ variables, in a process group of its own.
func command(ctx context.Context, script, dir, bin string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-e", "-c", script)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// runCommand runs script to its end (bounded by commandTimeout) and returns
// its combined output and exit code (-1 when it was stopped).
func runCommand(script, dir, bin string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := command(ctx, script, dir, bin)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out) + "\n(stopped after " + commandTimeout.String() + ")", -1
	}
	if err != nil && cmd.ProcessState == nil {
		return err.Error(), -1
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// runServer starts script, a server, and waits until its output says it
// is listening (pass) or it exits (fail); then stops it.
func runServer(t *testing.T, where, line, script, dir, bin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := command(ctx, script, dir, bin)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	exited := make(chan error, 1)
	go func() { err := cmd.Wait(); pw.Close(); exited <- err }()
	var out bytes.Buffer
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		found := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if !found && strings.Contains(sc.Text(), "listening on") {
				found = true
				listening <- true
			}
		}
		if !found {
			listening <- false
		}
	}()
	ok := <-listening
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	err := <-exited
	if !ok {
		t.Errorf("%s: %s\ndid not start serving (%v; run as: %s):\n%s", where, line, err, strings.TrimPrefix(script[strings.LastIndex(script, "\n")+1:], "exec "), out.String())
		return
	}
	t.Logf("%s: started, then stopped: %s", where, line)
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"go run ./cmd/idem serve --demo", "idem serve --listen 127.0.0.1:0 --demo"},
		{`"$bin/idem" prove --ops 20`, "idem prove --ops 20"},
		{"idem serve --listen :8080 --admin :9090", "idem serve --listen :0 --admin :0"},
		{"idem serve --listen=127.0.0.1:8080", "idem serve --listen=127.0.0.1:0"},
		{"export IDEM_DB=postgres://idem@db.internal/idem IDEM_UPSTREAM=http://api.internal:9000", "export IDEM_DB=sqlite:/d/idem.db IDEM_UPSTREAM=http://api.internal:9000"},
		{"export IDEM_DB='postgres://idem@db.internal:5432/idem?sslmode=verify-full'", "export IDEM_DB=sqlite:/d/idem.db"},
		{"idem keys list --db postgres://u@h/db", "idem keys list --db sqlite:/d/idem.db"},
		{"idem bench --db postgres", "idem bench --db postgres"},
	}
	for _, tt := range tests {
		if got := normalize(tt.in, "/d"); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if r := ruleFor("idem bench --db postgres"); r == nil || r.name != "PostgreSQL cluster" {
		t.Errorf("ruleFor(bench --db postgres) = %+v", r)
	}
	lines, at := shellLines(block{line: 10, lines: []string{"idem a \\", "  --b  # c", "", "# only", "echo '#x' # y", "$ idem v"}})
	if want := []string{"idem a    --b", "echo '#x'", "idem v"}; strings.Join(lines, "|") != strings.Join(want, "|") || at[0] != 10 || at[1] != 14 || at[2] != 15 {
		t.Errorf("shellLines = %q at %v", lines, at)
	}
}

// TestBenchDurationAgrees checks that docs/performance.md says what
// `idem bench --help` says about how long a run takes: the two disagreed
// once, and only one of them is read at a time.
func TestBenchDurationAgrees(t *testing.T) {
	t.Parallel()
	bin, err := buildIdem()
	if err != nil {
		t.Fatal(err)
	}
	out, code := runCommand("idem bench --help", t.TempDir(), bin)
	if code != 0 {
		t.Fatalf("idem bench --help: exit %d:\n%s", code, out)
	}
	spaces := regexp.MustCompile(`\s+`)
	help := spaces.ReplaceAllString(out, " ")
	m := regexp.MustCompile(`run takes about ([a-z -]+? minutes?)`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("idem bench --help no longer says how long a run takes (\"run takes about … minutes\"); update this test and docs/performance.md:\n%s", out)
	}
	doc, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "performance.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(spaces.ReplaceAllString(string(doc), " "), "run takes about "+m[1]) {
		t.Errorf("idem bench --help says a run takes about %s; docs/performance.md should say the same (\"run takes about %s\")", m[1], m[1])
	}
}
