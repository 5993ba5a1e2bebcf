package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
)

// jobsSeeded is a database with one job in each state on queue email:
//
//	dead       unique key welcome-1, died of "smtp: 550 mailbox unavailable"
//	completed  unique key welcome-2, result {"sent":true}
//	running    unique key welcome-3, held by worker w-1 for an hour
//	available  unique key welcome-4
type jobsSeeded struct {
	url                             string
	dead, completed, running, avail int64
}

func jobsSeed(t *testing.T) jobsSeeded {
	t.Helper()
	ctx := context.Background()
	s := jobsSeeded{url: "sqlite:" + filepath.Join(t.TempDir(), "idem.db")}
	l, err := dburl.Open(ctx, s.url, &idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := jobs.New(l, &jobs.Config{Logger: slog.New(slog.DiscardHandler), Queues: map[string]jobs.QueueConfig{"email": {}}})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 4)
	for i := range ids {
		r, err := c.Enqueue(ctx, jobs.Raw{Name: "send-welcome", Data: []byte(`{"to":"a@example.com"}`)},
			&jobs.EnqueueOpts{Queue: "email", UniqueKey: "welcome-" + strconv.Itoa(i+1)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = r.Job.ID
	}
	s.dead, s.completed, s.running, s.avail = ids[0], ids[1], ids[2], ids[3]
	drv := l.Driver()
	rows, err := drv.ClaimJobs(ctx, driver.ClaimJobsParams{Queue: "email", Worker: "w-1", Limit: 3, LeaseID: 7, Lease: time.Hour})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %v %v", rows, err)
	}
	finish := func(r idemtype.JobRow, p driver.FinishJobParams) {
		t.Helper()
		p.JobFence = driver.JobFence{ID: r.ID, Attempt: r.Attempt, LeaseID: r.LeaseID}
		if err := drv.FinishJob(ctx, driver.Shared, p); err != nil {
			t.Fatal(err)
		}
	}
	finish(rows[0], driver.FinishJobParams{State: idemtype.JobDead, Error: "smtp: 550 mailbox unavailable"})
	finish(rows[1], driver.FinishJobParams{State: idemtype.JobCompleted, Result: []byte(`{"sent":true}`)})
	return s
}

func TestJobsAndOutboxAloneListSubcommands(t *testing.T) {
	t.Parallel()
	r := opRun(t, "", "jobs").must(t, 2) // like idem alone: help on stderr
	for _, sub := range []string{"list", "show", "retry", "discard", "cancel", "pause", "resume", "queues"} {
		if !strings.Contains(r.stderr, sub) {
			t.Errorf("idem jobs lacks %q:\n%s", sub, r.stderr)
		}
	}
	r = opRun(t, "", "outbox").must(t, 2)
	if !strings.Contains(r.stderr, "list") || !strings.Contains(r.stderr, "redeliver") {
		t.Errorf("idem outbox:\n%s", r.stderr)
	}
	for _, cmd := range []string{"jobs", "outbox"} {
		r = opRun(t, "", cmd, "drop").must(t, 2)
		if !strings.Contains(r.stderr, `unknown subcommand "drop"`) || r.stdout != "" {
			t.Errorf("idem %s drop: stderr %q", cmd, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"jobs", "list", "--help"}, {"jobs", "show", "--help"}, {"jobs", "retry", "--help"}, {"jobs", "discard", "--help"}, {"jobs", "cancel", "--help"},
		{"jobs", "pause", "--help"}, {"jobs", "resume", "--help"}, {"jobs", "queues", "--help"},
		{"outbox", "list", "--help"}, {"outbox", "redeliver", "--help"}, {"help", "outbox"},
	} {
		r := opRun(t, "", args...).must(t, 0)
		usage := "Usage: idem " + strings.Join(args[:2], " ")
		if args[0] == "help" {
			usage = "Usage: idem " + args[1]
		}
		if !strings.Contains(r.stdout, usage) || !strings.Contains(r.stdout, "Exit codes") || r.stderr != "" {
			t.Errorf("%v:\n%s\nstderr: %s", args, r.stdout, r.stderr)
		}
	}
}

func TestJobsList(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	r := opRun(t, "", "jobs", "list", "--db", s.url).must(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("want a header and 4 rows:\n%s", r.stdout)
	}
	for _, want := range []string{"email", "send-welcome", "welcome-1", "died just now", "smtp: 550 mailbox unavailable", "completed", "held by w-1, lease ends in", "due just now", "1/25"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}

	var got []jobJSON
	r = opRun(t, "", "jobs", "list", "--db", s.url, "--state", "dead", "--json").must(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if len(got) != 1 || got[0].ID != s.dead || got[0].State != idemtype.JobDead || got[0].LastError != "smtp: 550 mailbox unavailable" ||
		got[0].UniqueKey != "welcome-1" || got[0].FinalizedAt == nil || got[0].Args != nil {
		t.Errorf("dead: %+v", got)
	}

	r = opRun(t, "", "jobs", "list", "--db", s.url, "--limit", "2").must(t, 0)
	if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 2 || !strings.Contains(r.stderr, "--after "+strconv.FormatInt(s.completed, 10)) {
		t.Errorf("limit: %d rows, stderr %q", n, r.stderr)
	}
	r = opRun(t, "", "jobs", "list", "--db", s.url, "--after", strconv.FormatInt(s.completed, 10), "--json").must(t, 0)
	got = nil
	json.Unmarshal([]byte(r.stdout), &got)
	if len(got) != 2 || got[0].ID != s.running {
		t.Errorf("after: %+v", got)
	}
	r = opRun(t, "", "jobs", "list", "--db", s.url, "--queue", "sms", "--json").must(t, 0)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("an empty list is [] in JSON, got %s", r.stdout)
	}

	for _, args := range [][]string{{"--state", "failed"}, {"--limit", "0"}, {"--after", "-1"}, {"extra"}, {"--bogus"}} {
		r := opRun(t, "", append([]string{"jobs", "list", "--db", s.url}, args...)...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "--help)") {
			t.Errorf("%v: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestJobsShow(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	r := opRun(t, "", "jobs", "show", "--db", s.url, strconv.FormatInt(s.dead, 10)).must(t, 0)
	for _, want := range []string{"state:      dead", "attempt:    1 of 25", "unique key: welcome-1", `{"to":"a@example.com"}`, "error 1:", "smtp: 550 mailbox unavailable"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	var j jobJSON
	r = opRun(t, "", "jobs", "show", "--json", strconv.FormatInt(s.completed, 10), "--db", s.url).must(t, 0)
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	if j.Result == nil || j.Result.Data != `{"sent":true}` || j.Args == nil || j.Args.Encoding != "utf-8" || len(j.Errors) != 0 {
		t.Errorf("show --json: %+v", j)
	}

	r = opRun(t, "", "jobs", "show", "--db", s.url, "999").must(t, 1)
	if !strings.Contains(r.stderr, "no job 999") || r.stdout != "" {
		t.Errorf("unknown id: %q", r.stderr)
	}
	for _, args := range [][]string{{}, {"abc"}, {"0"}, {"1", "2"}} {
		r := opRun(t, "", append([]string{"jobs", "show", "--db", s.url}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--help)") {
			t.Errorf("%v: exit %d stderr %q", args, r.code, r.stderr)
		}
	}
}

func TestJobsRetry(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	dead := strconv.FormatInt(s.dead, 10)
	r := opRun(t, "", "jobs", "retry", "--db", s.url, dead, "--attempts", "3").must(t, 0)
	if !strings.Contains(r.stdout, "requeued job "+dead) || !strings.Contains(r.stdout, "attempt 2 of 4 next") {
		t.Errorf("retry: %s", r.stdout)
	}
	var j jobJSON
	json.Unmarshal([]byte(opRun(t, "", "jobs", "show", "--json", "--db", s.url, dead).must(t, 0).stdout), &j)
	if j.State != idemtype.JobAvailable || j.MaxAttempts != 4 || len(j.Errors) != 1 {
		t.Errorf("after retry: %+v", j)
	}

	r = opRun(t, "", "jobs", "retry", "--db", s.url, dead).must(t, 1)
	if !strings.Contains(r.stderr, "refused: job "+dead+" is available, not dead") {
		t.Errorf("second retry: %q", r.stderr)
	}
	r = opRun(t, "", "jobs", "retry", "--db", s.url, "999").must(t, 1)
	if !strings.Contains(r.stderr, "no job 999") {
		t.Errorf("unknown id: %q", r.stderr)
	}
	opRun(t, "", "jobs", "retry", "--db", s.url, "--attempts", "0", dead).must(t, 2)
}

func TestJobsDiscard(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	avail := strconv.FormatInt(s.avail, 10)
	r := opRun(t, "", "jobs", "discard", "--db", s.url, avail).must(t, 1)
	if !strings.Contains(r.stderr, "refused: job "+avail+" is available, not dead; only dead jobs are discarded without --force") {
		t.Errorf("discard available: %q", r.stderr)
	}
	r = opRun(t, "", "jobs", "discard", "--db", s.url, "--force", avail).must(t, 0)
	if !strings.Contains(r.stdout, "discarded job "+avail) || !strings.Contains(r.stdout, "was available") {
		t.Errorf("discard --force: %s", r.stdout)
	}
	opRun(t, "", "jobs", "discard", "--db", s.url, strconv.FormatInt(s.dead, 10)).must(t, 0)
	for _, id := range []int64{s.avail, s.dead} {
		r = opRun(t, "", "jobs", "show", "--db", s.url, strconv.FormatInt(id, 10)).must(t, 1)
		if !strings.Contains(r.stderr, "no job") {
			t.Errorf("show after discard: %q", r.stderr)
		}
	}
	r = opRun(t, "", "jobs", "discard", "--db", s.url, "999").must(t, 1)
	if !strings.Contains(r.stderr, "no job 999") {
		t.Errorf("unknown id: %q", r.stderr)
	}
}

// Like every operator command, jobs and outbox never create a database.
func TestJobsNeedAnExistingDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.db")
	for _, args := range [][]string{{"jobs", "list"}, {"jobs", "retry", "1"}, {"outbox", "list"}, {"outbox", "redeliver", "x"}} {
		r := opRun(t, "", append(args, "--db", "sqlite:"+path)...).must(t, 1)
		if !strings.Contains(r.stderr, "no database at") {
			t.Errorf("%v: %q", args, r.stderr)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a database was created: %v", err)
	}
}

// idem serve --admin lists the database's dead jobs, though the gateway
// runs no jobs client.
func TestServeAdminShowsDeadJobs(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	gw := startGateway(t, []string{"IDEM_DB=" + s.url, "IDEM_DEMO=true", "IDEM_ADMIN=127.0.0.1:0"})
	if gw.admin == "" {
		t.Fatalf("no admin address in the log:\n%s", gw.out.String())
	}
	resp, err := http.Get(gw.admin + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin /: %v %v", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	for _, want := range []string{"welcome-1", "send-welcome", "smtp: 550 mailbox unavailable"} {
		if !strings.Contains(body, want) {
			t.Errorf("admin page lacks %q", want)
		}
	}
	if strings.Contains(body, "jobs-off") || strings.Contains(body, "welcome-2") {
		t.Error("the jobs section should list the dead job alone")
	}
	if !strings.Contains(body, `<section id="queues">`) || !regexp.MustCompile(`<td>email</td><td>running</td><td>1</td><td class="age">[^<]*</td><td>1</td><td>1</td><td>1</td><td>0</td>`).MatchString(body) {
		t.Error("the queues section should show queue email and its jobs by state")
	}
}

func TestJobsCancel(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	avail, running := strconv.FormatInt(s.avail, 10), strconv.FormatInt(s.running, 10)
	r := opRun(t, "", "jobs", "cancel", "--db", s.url, avail).must(t, 0)
	if !strings.Contains(r.stdout, "cancelled job "+avail) || !strings.Contains(r.stdout, "was available") {
		t.Errorf("cancel available: %s", r.stdout)
	}
	r = opRun(t, "", "jobs", "cancel", "--db", s.url, avail).must(t, 0)
	if !strings.Contains(r.stdout, "already cancelled") {
		t.Errorf("cancel twice: %s", r.stdout)
	}
	var j jobJSON
	json.Unmarshal([]byte(opRun(t, "", "jobs", "cancel", "--json", "--db", s.url, running).must(t, 0).stdout), &j)
	if j.State != idemtype.JobCancelled || j.FinalizedAt == nil || j.Priority != 1 {
		t.Errorf("cancel running --json: %+v", j)
	}
	r = opRun(t, "", "jobs", "list", "--db", s.url, "--state", "cancelled").must(t, 0)
	if !strings.Contains(r.stdout, "cancelled just now") || strings.Count(r.stdout, "\n") != 3 {
		t.Errorf("list --state cancelled:\n%s", r.stdout)
	}
	r = opRun(t, "", "jobs", "cancel", "--db", s.url, strconv.FormatInt(s.completed, 10)).must(t, 1)
	if !strings.Contains(r.stderr, "is completed; only available and running jobs are cancelled") {
		t.Errorf("cancel completed: %q", r.stderr)
	}
	r = opRun(t, "", "jobs", "cancel", "--db", s.url, "999").must(t, 1)
	if !strings.Contains(r.stderr, "no job 999") {
		t.Errorf("unknown id: %q", r.stderr)
	}
	opRun(t, "", "jobs", "cancel", "--db", s.url).must(t, 2)
	opRun(t, "", "jobs", "list", "--db", s.url, "--state", "snoozed").must(t, 2)
}

// pause and resume act on the shared row every claim reads; queues and
// list show it; a bad queue name or argument count is a usage error.
func TestJobsPauseResume(t *testing.T) {
	t.Parallel()
	s := jobsSeed(t)
	r := opRun(t, "", "jobs", "pause", "--db", s.url, "email").must(t, 0)
	if !strings.Contains(r.stdout, "queue email is paused (since just now)") {
		t.Errorf("pause: %q", r.stdout)
	}
	opRun(t, "", "jobs", "pause", "--db", s.url, "reports").must(t, 0) // no jobs yet: paused all the same
	r = opRun(t, "", "jobs", "list", "--db", s.url, "--state", "available").must(t, 0)
	if !strings.Contains(r.stdout, "queue paused; due") {
		t.Errorf("list of a paused queue's jobs:\n%s", r.stdout)
	}
	r = opRun(t, "", "jobs", "queues", "--db", s.url).must(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "STATUS") || !strings.Contains(lines[0], "OLDEST WAITING") || !strings.Contains(lines[1], "email") || !strings.Contains(lines[1], "paused just now") ||
		!strings.Contains(lines[2], "reports") {
		t.Fatalf("queues:\n%s", r.stdout)
	}
	if f := strings.Fields(lines[1]); strings.Join(f[len(f)-5:], " ") != "1 1 1 1 0" {
		t.Errorf("email's counts (available running completed dead cancelled): %v", f)
	}

	var q queueJSON
	if err := json.Unmarshal([]byte(opRun(t, "", "jobs", "resume", "--json", "--db", s.url, "email").must(t, 0).stdout), &q); err != nil || q.Paused || q.PausedAt != nil {
		t.Errorf("resume --json: %+v, %v", q, err)
	}
	var qs []queueJSON
	if err := json.Unmarshal([]byte(opRun(t, "", "jobs", "queues", "--json", "--db", s.url).must(t, 0).stdout), &qs); err != nil ||
		len(qs) != 2 || qs[0].Paused || qs[0].Jobs[idemtype.JobDead] != 1 || !qs[1].Paused || qs[1].PausedAt == nil {
		t.Errorf("queues --json: %+v, %v", qs, err)
	}
	r = opRun(t, "", "jobs", "resume", "--db", s.url, "email").must(t, 0)
	if !strings.Contains(r.stdout, "queue email is running") {
		t.Errorf("resume twice: %q", r.stdout)
	}
	if r = opRun(t, "", "jobs", "list", "--db", s.url, "--state", "available").must(t, 0); strings.Contains(r.stdout, "queue paused") {
		t.Errorf("list after resume:\n%s", r.stdout)
	}
	r = opRun(t, "", "jobs", "pause", "--db", s.url, "no spaces").must(t, 1)
	if !strings.Contains(r.stderr, "use letters, digits") {
		t.Errorf("bad name: %q", r.stderr)
	}
	opRun(t, "", "jobs", "pause", "--db", s.url).must(t, 2)
	opRun(t, "", "jobs", "resume", "--db", s.url, "a", "b").must(t, 2)
	opRun(t, "", "jobs", "queues", "--db", s.url, "extra").must(t, 2)
}
