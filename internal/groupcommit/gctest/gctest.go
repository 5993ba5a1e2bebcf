// Package gctest holds the group-commit tests that every driver runs from
// its own package (they need the driver's internals to put a failing
// statement into a batch): a failing statement fails only its caller,
// results never cross callers, and a crash in the middle of a batch loses
// only writes nobody was told about.
//
// It uses the driver interface only, never package idem, so that a
// driver's internal tests can import it.
package gctest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/syncbuf"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/groupcommit"
)

// claimParams is a claim of key in scope with its own lease id.
func claimParams(scope, key string, leaseID int64) driver.ClaimParams {
	return driver.ClaimParams{Scope: scope, Key: key, Fingerprint: "fp", LeaseID: leaseID,
		Lease: time.Hour, Retention: time.Hour, TombstoneTTL: time.Hour}
}

// Recorder wraps a driver's commit functions and remembers whether a batch
// held a write of a given key together with other writes.
type Recorder struct {
	mu    sync.Mutex
	mixed map[string]bool // key -> seen in a batch of two or more
}

// Wrap returns commit, recording each batch first.
func (r *Recorder) Wrap(commit func([]*groupcommit.Write)) func([]*groupcommit.Write) {
	return func(batch []*groupcommit.Write) {
		if len(batch) > 1 {
			r.mu.Lock()
			if r.mixed == nil {
				r.mixed = map[string]bool{}
			}
			for _, w := range batch {
				r.mixed[w.Key] = true
			}
			r.mu.Unlock()
		}
		commit(batch)
	}
}

func (r *Recorder) wasMixed(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mixed[key]
}

// FailingStatement submits, alongside concurrent claims and finishes, writes
// whose statement fails in the database (badInsert, an INSERT of (scope,
// key) into idem_keys that violates NOT NULL), until a failing write has
// shared a batch with others. Every failing write must fail, and every
// other caller must get its own, correct answer; the failure must not roll
// back anybody else's write.
//
// submit hands a raw write to d's group commit; rec must wrap d's commit.
func FailingStatement(t *testing.T, d driver.Driver, rec *Recorder, submit func(context.Context, *groupcommit.Write) error, badInsert string) {
	ctx := t.Context()
	const goods, bads = 40, 3
	mixed := 0
	for round := 0; round < 200 && (mixed == 0 || round < 5); round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, goods+bads)
		for i := range goods {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				key := fmt.Sprintf("good-%d-%d", round, i)
				leaseID := int64(round*1000 + i + 1)
				rec, created, err := d.Claim(ctx, driver.Shared, claimParams("fail", key, leaseID))
				switch {
				case err != nil:
					errs <- fmt.Errorf("claim %s: %w", key, err)
					return
				case !created || rec.Key != key || rec.Scope != "fail" || rec.LeaseID != leaseID || rec.Attempt != 1:
					errs <- fmt.Errorf("claim %s: created=%v record %s/%s lease %d attempt %d", key, created, rec.Scope, rec.Key, rec.LeaseID, rec.Attempt)
					return
				}
				err = d.Finish(ctx, driver.Shared, driver.FinishParams{Fence: driver.Fence{Scope: "fail", Key: key, Attempt: 1, LeaseID: leaseID},
					State: idemtype.StateSucceeded, Status: 200, Body: []byte("body-" + key)})
				if err != nil {
					errs <- fmt.Errorf("finish %s: %w", key, err)
				}
			}()
		}
		var badKeys []string
		for i := range bads {
			key := fmt.Sprintf("bad-%d-%d", round, i)
			badKeys = append(badKeys, key)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ran := false
				err := submit(ctx, &groupcommit.Write{Key: "fail\x00" + key, Query: badInsert, Args: []any{"fail", key},
					Exec: func(int64) error { ran = true; return nil }})
				if err == nil || ran {
					errs <- fmt.Errorf("a write whose statement must fail answered err=%v ran=%v", err, ran)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, k := range badKeys {
			if rec.wasMixed("fail\x00" + k) {
				mixed++
			}
		}
	}
	if mixed == 0 {
		t.Fatal("in 200 rounds no failing write shared a batch with another write; the test tested nothing")
	}
	t.Logf("%d failing writes shared a batch with other writes", mixed)
	recs, err := d.List(ctx, idemtype.ListFilter{Scope: "fail", Limit: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != idemtype.StateSucceeded || string(r.Body) != "body-"+r.Key {
			t.Errorf("record %s: %s %q, want succeeded with its own body", r.Key, r.State, r.Body)
		}
	}
}

// Race releases 1,000 callers at once through one closed channel, half on
// keys of their own and half on 8 keys they share, in 3 scopes. Every
// caller must get the record of its own scope and key; a key is created
// once; a caller that lost sees the winner's lease id; the winner's
// heartbeat and finish succeed; a replay carries the winner's body.
func Race(t *testing.T, d driver.Driver) {
	ctx := t.Context()
	const callers = 1000
	type id struct{ scope, key string }
	var (
		mu      sync.Mutex
		winners = map[id]int{}
		seen    = map[id][]idemtype.Record{}
	)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := id{scope: "s" + strconv.Itoa(i%3), key: "own-" + strconv.Itoa(i)}
			if i%2 == 1 {
				k.key = "shared-" + strconv.Itoa(i%16)
			}
			leaseID := int64(i + 1)
			<-start
			var (
				rec     idemtype.Record
				created bool
				err     error
			)
			for range 64 {
				if rec, created, err = d.Claim(ctx, driver.Shared, claimParams(k.scope, k.key, leaseID)); !errors.Is(err, driver.ErrConflict) {
					break
				}
			}
			if err != nil {
				errs <- fmt.Errorf("caller %d: claim: %w", i, err)
				return
			}
			if rec.Scope != k.scope || rec.Key != k.key {
				errs <- fmt.Errorf("caller %d asked for %s/%s and got the record of %s/%s", i, k.scope, k.key, rec.Scope, rec.Key)
				return
			}
			if !created {
				if rec.LeaseID == leaseID {
					errs <- fmt.Errorf("caller %d: not created, yet the record carries its own lease id", i)
				}
				mu.Lock()
				seen[k] = append(seen[k], rec)
				mu.Unlock()
				return
			}
			if rec.LeaseID != leaseID || rec.Attempt != 1 {
				errs <- fmt.Errorf("caller %d created %s/%s with lease %d attempt %d, want lease %d attempt 1", i, k.scope, k.key, rec.LeaseID, rec.Attempt, leaseID)
				return
			}
			mu.Lock()
			if w, dup := winners[k]; dup {
				errs <- fmt.Errorf("callers %d and %d both created %s/%s", w, i, k.scope, k.key)
			}
			winners[k] = i
			mu.Unlock()
			f := driver.Fence{Scope: k.scope, Key: k.key, Attempt: 1, LeaseID: leaseID}
			if _, err := d.Heartbeat(ctx, f, time.Hour); err != nil {
				errs <- fmt.Errorf("caller %d: heartbeat: %w", i, err)
				return
			}
			if err := d.Finish(ctx, driver.Shared, driver.FinishParams{Fence: f, State: idemtype.StateSucceeded, Status: 200,
				Body: []byte("caller-" + strconv.Itoa(i))}); err != nil {
				errs <- fmt.Errorf("caller %d: finish: %w", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if want := callers/2 + 3*8; len(winners) != want {
		// Own keys by their caller; 8 shared keys (odd i%16) in each of 3 scopes.
		t.Errorf("%d keys created, want %d", len(winners), want)
	}
	for k, recs := range seen {
		w, ok := winners[k]
		if !ok {
			t.Errorf("%s/%s: seen by losers, created by nobody", k.scope, k.key)
			continue
		}
		for _, r := range recs {
			if r.LeaseID != int64(w+1) {
				t.Errorf("%s/%s: a loser saw lease %d, the winner (caller %d) holds %d", k.scope, k.key, r.LeaseID, w, w+1)
			}
			if r.State == idemtype.StateSucceeded && string(r.Body) != "caller-"+strconv.Itoa(w) {
				t.Errorf("%s/%s: a loser saw body %q, the winner wrote caller-%d", k.scope, k.key, r.Body, w)
			}
		}
	}
	for k, w := range winners {
		r, err := d.Get(ctx, k.scope, k.key)
		if err != nil || r.State != idemtype.StateSucceeded || string(r.Body) != "caller-"+strconv.Itoa(w) {
			t.Errorf("%s/%s after the race: %s %q %v, want succeeded with caller-%d", k.scope, k.key, r.State, r.Body, err, w)
		}
	}
}

// ChildEnv names the variable that makes a test binary a crash child; its
// value is the database URL.
const ChildEnv = "IDEM_GCTEST_CHILD"

// event is one line a crash child prints, after the write it reports was
// answered.
type event struct {
	Ev    string `json:"ev"` // claim, finish, phase
	Key   string `json:"key,omitempty"`
	Token int64  `json:"token,omitempty"`
	Phase int    `json:"phase,omitempty"`
}

// Child is the crash child's work: answered writes, printed as they are
// answered, first one at a time (batches of one), then from 64 goroutines
// on keys of their own and 8 shared ones, until the armed crash point kills
// the process in the middle of a batch. It never returns normally: if
// nothing killed it within a minute, it exits with status 3.
func Child(d driver.Driver) {
	ctx := context.Background()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(e event) {
		b, _ := json.Marshal(e)
		mu.Lock()
		out.Write(append(b, '\n'))
		out.Flush() // one write(2) per event: what was printed survives SIGKILL
		mu.Unlock()
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "gctest child:", err)
		os.Exit(2)
	}
	var lease atomic.Int64
	work := func(key string) {
		leaseID := lease.Add(1)
		rec, created, err := d.Claim(ctx, driver.Shared, claimParams("crash", key, leaseID))
		if errors.Is(err, driver.ErrConflict) {
			return
		}
		if err != nil {
			fail(fmt.Errorf("claim %s: %w", key, err))
		}
		if !created {
			return
		}
		emit(event{Ev: "claim", Key: key, Token: rec.Attempt})
		err = d.Finish(ctx, driver.Shared, driver.FinishParams{Fence: driver.Fence{Scope: "crash", Key: key, Attempt: rec.Attempt, LeaseID: leaseID},
			State: idemtype.StateSucceeded, Status: 200, Body: []byte("body-" + key)})
		if err != nil {
			fail(fmt.Errorf("finish %s: %w", key, err))
		}
		emit(event{Ev: "finish", Key: key})
	}
	for i := range 20 {
		work("alone-" + strconv.Itoa(i))
	}
	emit(event{Ev: "phase", Phase: 2})
	for g := range 64 {
		go func() {
			for j := 0; ; j++ {
				if g%2 == 0 {
					work("g" + strconv.Itoa(g) + "-" + strconv.Itoa(j))
				} else {
					work("shared-" + strconv.Itoa(j%8))
				}
			}
		}()
	}
	time.Sleep(time.Minute)
	fmt.Fprintln(os.Stderr, "gctest child: the crash point never fired")
	os.Exit(3)
}

// Crash runs the test binary again as a crash child on url (the driver's
// test must call Child when ChildEnv is set, from a test named testName),
// with the mid-batch crash point armed at a random hit, and waits for the
// SIGKILL. Then, on a driver opened by reopen: every write the child
// printed as answered is there; every record is whole (a succeeded record
// carries its own body and completion time, an in-progress one none); and
// the database takes new claims.
func Crash(t *testing.T, url, testName string, reopen func(t *testing.T) driver.Driver) {
	seed := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv("IDEM_TEST_SEED"), 10, 64); err == nil {
		seed = s
	}
	hit := 2 + rand.New(rand.NewPCG(seed, 0)).IntN(20)
	t.Logf("seed %d (IDEM_TEST_SEED): crash at hit %d of %s", seed, hit, crashpoint.MidBatch)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^"+testName+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), ChildEnv+"="+url, crashpoint.EnvVar+"="+crashpoint.MidBatch+":"+strconv.Itoa(hit))
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var events []event
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Ev != "" {
			events = append(events, e)
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	killed := false
	if errors.As(err, &ee) {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	}
	if !killed {
		t.Fatalf("child: %v, want killed by SIGKILL at %s\nstderr:\n%s", err, crashpoint.MidBatch, stderr.String())
	}

	claimed, finished := map[string]int64{}, map[string]bool{}
	phase2 := false
	for _, e := range events {
		switch e.Ev {
		case "claim":
			claimed[e.Key] = e.Token
		case "finish":
			finished[e.Key] = true
		case "phase":
			phase2 = true
		}
	}
	if !phase2 || len(finished) < 20 {
		t.Fatalf("the child died before its concurrent phase (%d finished)", len(finished))
	}
	t.Logf("the child was answered %d claims and %d finishes before it died", len(claimed), len(finished))

	d := reopen(t)
	ctx := t.Context()
	for _, key := range slices.Sorted(maps.Keys(claimed)) {
		r, err := d.Get(ctx, "crash", key)
		switch {
		case err != nil:
			t.Errorf("answered claim of %s lost: %v", key, err)
		case r.Attempt < claimed[key]:
			t.Errorf("%s: attempt %d, the child was answered token %d", key, r.Attempt, claimed[key])
		case finished[key] && (r.State != idemtype.StateSucceeded || string(r.Body) != "body-"+key):
			t.Errorf("answered finish of %s lost: %s %q", key, r.State, r.Body)
		}
	}
	recs, err := d.List(ctx, idemtype.ListFilter{Scope: "crash", Limit: 10_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		switch r.State {
		case idemtype.StateSucceeded:
			if string(r.Body) != "body-"+r.Key || r.CompletedAt.IsZero() || r.ExpiresAt.IsZero() {
				t.Errorf("%s: succeeded but body %q completed %v expires %v", r.Key, r.Body, r.CompletedAt, r.ExpiresAt)
			}
		case idemtype.StateInProgress:
			if len(r.Body) != 0 || !r.CompletedAt.IsZero() {
				t.Errorf("%s: in progress with body %q completed %v", r.Key, r.Body, r.CompletedAt)
			}
		default:
			t.Errorf("%s: state %s; nobody wrote it", r.Key, r.State)
		}
		if r.Attempt != 1 {
			t.Errorf("%s: attempt %d; nobody took it over", r.Key, r.Attempt)
		}
	}
	t.Logf("%d records after the crash", len(recs))
	if _, created, err := d.Claim(ctx, driver.Shared, claimParams("crash", "after", 1)); err != nil || !created {
		t.Fatalf("claim after the crash: created=%v err=%v", created, err)
	}
}
