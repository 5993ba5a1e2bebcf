package prove

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/fingerprint"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
)

// WorkerMain runs one prover worker: it reads its orders from the first
// line of stdin, does the work (arming the crash points named in
// IDEM_CRASHPOINT) and reports each attempt on stdout, one JSON object a
// line. It returns the process's exit code. It is what the hidden `idem
// prove-worker` command runs, and what a test binary runs when IsWorker.
func WorkerMain(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	crashpoint.ArmFromEnv()
	out := newEmitter(stdout)
	in := bufio.NewReaderSize(stdin, 1<<16)
	line, err := in.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		out.emit(wireEvent{Ev: evError, Err: fmt.Sprintf("reading the worker spec from stdin: %v", err)})
		return 2
	}
	var s spec
	if err := json.Unmarshal(line, &s); err != nil {
		out.emit(wireEvent{Ev: evError, Err: fmt.Sprintf("bad worker spec: %v", err)})
		return 2
	}
	w, err := newWorker(ctx, s, in, out, stderr)
	if err != nil {
		out.emit(wireEvent{Ev: evError, Err: err.Error()})
		return 1
	}
	defer w.l.Close()
	if err := w.run(ctx); err != nil {
		out.emit(wireEvent{Ev: evError, Err: err.Error()})
		return 1
	}
	return 0
}

// worker is one prover worker process.
type worker struct {
	s        spec
	l        *idem.Ledger
	db       *sql.DB
	rebind   func(string) string
	in       *bufio.Reader
	out      *emitter
	stderr   io.Writer
	client   *http.Client
	lease    time.Duration
	deadline time.Time
	seq      atomic.Int64
}

func newWorker(ctx context.Context, s spec, in *bufio.Reader, out *emitter, stderr io.Writer) (*worker, error) {
	w := &worker{
		s: s, in: in, out: out, stderr: stderr,
		client:   &http.Client{Timeout: 10 * time.Second},
		lease:    time.Duration(s.LeaseMS) * time.Millisecond,
		deadline: time.Now().Add(time.Duration(cmp.Or(s.DeadlineMS, 120_000)) * time.Millisecond),
	}
	opts := &idem.Options{
		Lease: w.lease,
		// Tombstones outlive any run, so a replay after retention is
		// reported as expired (replay-batch).
		TombstoneTTL: time.Hour,
		Logger:       slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	switch s.Stale {
	case "", "redo":
		opts.Stale = idem.StaleRedo
	case "park":
		opts.Stale = idem.StalePark
	case "reconcile":
		opts.Stale, opts.Reconciler = idem.StaleReconcile, w.reconcile
	default:
		return nil, fmt.Errorf("unknown stale policy %q", s.Stale)
	}
	l, err := dburl.Open(ctx, s.DB, opts)
	for err != nil && s.RetryErrors && time.Now().Before(w.deadline) && ctx.Err() == nil {
		// A worker that starts while the database restarts waits for it.
		time.Sleep(100 * time.Millisecond)
		l, err = dburl.Open(ctx, s.DB, opts)
	}
	if err != nil {
		return nil, err
	}
	w.l, w.db, w.rebind = l, l.Driver().DB(), rebinder(l.Driver())
	return w, nil
}

func (w *worker) run(ctx context.Context) error {
	switch w.s.Role {
	case roleDo:
		return w.runEach(ctx, w.doOnce)
	case roleCall:
		return w.runEach(ctx, w.callOnce)
	case roleSteps:
		return w.runEach(ctx, w.stepsOnce)
	case roleServer:
		return w.runServer(ctx)
	case roleHold:
		return w.runHold(ctx)
	case roleJobs:
		return w.runJobs(ctx)
	case roleBroker:
		return w.runBroker(ctx)
	case roleKafka:
		return w.runKafka(ctx)
	}
	return fmt.Errorf("unknown worker role %q", w.s.Role)
}

// waitGo reports ready and waits for the parent's "go" (or the end of
// stdin), so that many workers start at the same instant.
func (w *worker) waitGo() {
	w.out.emit(wireEvent{Ev: evReady})
	w.in.ReadString('\n')
}

// op is the ledger operation for key: the fingerprint is the request's,
// and never changes between attempts.
func (w *worker) op(key string) idem.Op {
	fp, _ := fingerprint.Sum(request(w.s.Scope, key))
	return idem.Op{
		Scope: w.s.Scope, Key: key, Fingerprint: fp,
		Lease: w.lease, Retention: time.Duration(w.s.RetentionMS) * time.Millisecond,
	}
}

// request is the request body a client sends for key, every time.
func request(scope, key string) []byte {
	return fmt.Appendf(nil, `{"scope":%q,"op":%q,"amount":100}`, scope, key)
}

// newBody is the result of one execution of key: unique per execution, so
// that a duplicate or a mixed-up replay cannot pass for the original.
func (w *worker) newBody(key string) string {
	return fmt.Sprintf(`{"op":%q,"pid":%d,"n":%d}`, key, os.Getpid(), w.seq.Add(1))
}

// attempt is one try at key. It returns the result body, whether the
// ledger replayed it, or an error classified by settle.
type attempt func(ctx context.Context, key string) (body string, replay bool, err error)

// runEach runs try over every key, on Goroutines goroutines that each take
// all keys in the same order (so that, with more than one, they collide).
func (w *worker) runEach(ctx context.Context, try attempt) error {
	if w.s.WaitGo {
		w.waitGo()
	}
	var wg sync.WaitGroup
	for g := range max(1, w.s.Goroutines) {
		wg.Go(func() {
			for _, k := range w.s.Keys {
				time.Sleep(time.Duration(w.s.PaceMS) * time.Millisecond)
				w.settle(ctx, g, k, try)
			}
		})
	}
	wg.Wait()
	return nil
}

// settle runs attempts at key until one settles it, reporting each. An
// attempt that certainly did nothing is a fail; one whose outcome is not
// known (an error from the database, a dead connection) is unknown.
func (w *worker) settle(ctx context.Context, g int, key string, try attempt) {
	backoff := 2 * time.Millisecond
	for {
		w.out.emit(wireEvent{Ev: evInvoke, G: g, Key: key})
		body, replay, err := try(ctx, key)
		if err == nil {
			w.out.emit(wireEvent{Ev: evOK, G: g, Key: key, Body: body, Replay: replay})
			return
		}
		kind, retry := w.classify(err)
		if kind != "" {
			w.out.emit(wireEvent{Ev: evFail, G: g, Key: key, Kind: kind, Err: err.Error()})
		} else {
			w.out.emit(wireEvent{Ev: evUnknown, G: g, Key: key, Err: err.Error()})
		}
		if !retry || time.Now().After(w.deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// classify names why an attempt certainly did nothing ("" when its
// outcome is unknown) and whether to try again.
func (w *worker) classify(err error) (kind string, retry bool) {
	switch {
	case errors.Is(err, idem.ErrInFlight):
		return failInFlight, w.s.RetryInFlight
	case errors.Is(err, idem.ErrLeaseLost):
		return failLeaseLost, true // rolled back: the retry finds out who finished
	case errors.Is(err, idem.ErrParked):
		return failParked, false
	case errors.Is(err, idem.ErrExpired):
		return failExpired, false
	case errors.Is(err, idem.ErrMismatch):
		return failMismatch, false
	case errors.Is(err, idem.ErrFailed):
		return failFailed, false
	}
	return "", w.s.RetryErrors
}

// doOnce runs key through Ledger.Do; the effect is a row written in the
// same transaction as the done mark.
func (w *worker) doOnce(ctx context.Context, key string) (string, bool, error) {
	body := w.newBody(key)
	if w.s.NoGuard {
		return body, false, w.unguardedLocal(ctx, key, body)
	}
	res, err := w.l.Do(ctx, w.op(key), func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		return []byte(body), insertEffect(ctx, tx, w.rebind, w.s.Scope, key, body)
	})
	return string(res.Body), res.Replayed, err
}

// unguardedLocal is doOnce without idem, dying at the same crash points.
func (w *worker) unguardedLocal(ctx context.Context, key, body string) error {
	crashpoint.Hit(crashpoint.AfterClaim)
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := insertEffect(ctx, tx, w.rebind, w.s.Scope, key, body); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.BeforeCommit)
	if err := tx.Commit(); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	return nil
}

// commitLocal writes key's effect and completes c in one transaction. The
// effect is written first, so that only the fence inside CompleteTx can
// keep a stale holder's effect out.
func (w *worker) commitLocal(ctx context.Context, c *idem.Claim, key, body string) error {
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := insertEffect(ctx, tx, w.rebind, w.s.Scope, key, body); err != nil {
		return err
	}
	if c != nil {
		if err := w.l.CompleteTx(ctx, tx, c, idem.Result{Status: http.StatusOK, Body: []byte(body)}); err != nil {
			return err
		}
	}
	crashpoint.Hit(crashpoint.BeforeCommit)
	if err := tx.Commit(); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	return nil
}

// callOnce claims key, calls the counting provider with the key forwarded,
// and completes the claim with the provider's answer. The provider's
// effect is external: nothing rolls it back.
func (w *worker) callOnce(ctx context.Context, key string) (string, bool, error) {
	if w.s.NoGuard {
		crashpoint.Hit(crashpoint.AfterClaim)
		resp, err := w.callProvider(ctx, key)
		if err != nil {
			return "", false, err
		}
		crashpoint.Hit(crashpoint.AfterCall)
		return resp, false, nil
	}
	c, err := w.l.Claim(ctx, w.op(key))
	if err != nil {
		return "", false, err
	}
	switch c.Outcome {
	case idem.Replay:
		return string(c.Result.Body), true, nil
	case idem.InFlight, idem.Mismatch, idem.Parked:
		return "", false, &idem.ConflictError{Outcome: c.Outcome, Record: c.Record}
	}
	crashpoint.Hit(crashpoint.AfterClaim)
	resp, err := w.callProvider(ctx, key)
	if err != nil {
		// The request may have reached the provider: the claim stays until
		// its lease ends, and the stale-claim policy decides.
		return "", false, fmt.Errorf("call the provider (outcome unknown): %v", err)
	}
	crashpoint.Hit(crashpoint.AfterCall)
	if err := w.l.Complete(ctx, c, idem.Result{Status: http.StatusOK, Body: []byte(resp)}); err != nil {
		// %v, not %w: the provider's effect happened, so this attempt did
		// not "certainly do nothing", whatever the ledger says.
		return "", false, fmt.Errorf("complete after the provider's effect: %v", err)
	}
	return resp, false, nil
}

// callProvider performs the external effect: POST /effect with the
// operation's key as Idempotency-Key.
func (w *worker) callProvider(ctx context.Context, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.s.Provider+"/effect", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Idempotency-Key", providerKey(w.s.Scope, key))
	resp, err := w.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("provider answered %s: %s", resp.Status, b)
	}
	return string(b), nil
}

// reconcile is the Reconciler for a provider that can be asked by key.
func (w *worker) reconcile(ctx context.Context, rec idemtype.Record) (idem.Verdict, idem.Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.s.Provider+"/lookup", nil)
	if err != nil {
		return idem.VerdictUnknown, idem.Result{}, err
	}
	req.Header.Set("Idempotency-Key", providerKey(rec.Scope, rec.Key))
	resp, err := w.client.Do(req)
	if err != nil {
		return idem.VerdictUnknown, idem.Result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return idem.VerdictUnknown, idem.Result{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return idem.VerdictDone, idem.Result{Status: http.StatusOK, Body: b}, nil
	case http.StatusNotFound:
		return idem.VerdictNotDone, idem.Result{}, nil
	}
	return idem.VerdictUnknown, idem.Result{}, nil
}

// providerKey is the key forwarded downstream for (scope, key).
func providerKey(scope, key string) string { return scope + "/" + key }
