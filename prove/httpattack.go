package prove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemdev/idem/idemhttp"
)

// scopeHeader carries the trial's scope to the gateways it starts
// (--scope-header), so that its keys are its own and the prover can read
// their records.
const scopeHeader = "X-Prove-Scope"

// The attacks a client makes on one operation through a gateway.
const (
	attackParallel = "parallel" // k clients send it at the same instant
	attackDropped  = "dropped"  // the client gives up before the answer, then retries
	attackStorm    = "storm"    // three client timeouts while the upstream works, then patience
)

// Attack timing: the upstream is made slower than a dropped or stormed
// client's patience, so the client really gives up while it works.
const (
	dropAfter      = 20 * time.Millisecond
	dropDelay      = 150 * time.Millisecond
	parallelCopies = 4
)

// attacker sends operations through gateways and records what came back.
type attacker struct {
	t      *trial
	base   func(attempt int) string // a gateway's base URL for an attempt
	path   string
	client *http.Client

	mu       sync.Mutex
	statuses map[string]int // "201", "409 request-in-flight", "timeout", … → count
}

func newAttacker(t *trial, path string, base func(int) string) *attacker {
	return &attacker{
		t: t, base: base, path: path, statuses: map[string]int{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
	}
}

// wireKey is the Idempotency-Key an operation is sent with: unique to the
// run, so that an upstream that remembers keys never sees one twice across
// runs.
func (t *trial) wireKey(op string) string { return providerKey(t.scope, op) }

// run attacks every operation, the attack chosen in turn (or the one given).
func (a *attacker) run(ctx context.Context, only string) {
	kinds := []string{attackParallel, attackDropped, attackStorm}
	if only != "" {
		kinds = []string{only}
	}
	sem := make(chan struct{}, 2*a.t.r.cfg.Workers)
	var wg sync.WaitGroup
	for i, op := range a.t.shuffled() {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			switch kinds[i%len(kinds)] {
			case attackParallel:
				a.parallel(ctx, i, op)
			case attackDropped:
				a.dropped(ctx, i, op)
			default:
				a.storm(ctx, i, op)
			}
		})
	}
	wg.Wait()
	a.client.CloseIdleConnections()
}

// parallel releases parallelCopies clients on op at once; each keeps at
// it until it has an answer.
func (a *attacker) parallel(ctx context.Context, i int, op string) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range parallelCopies {
		wg.Go(func() {
			<-start
			a.patient(ctx, fmt.Sprintf("client %d.%d", i, c), op, c, 0)
		})
	}
	close(start)
	wg.Wait()
}

// dropped sends op and hangs up before the (slow) answer, then retries.
func (a *attacker) dropped(ctx context.Context, i int, op string) {
	proc := fmt.Sprintf("client %d", i)
	if a.send(ctx, proc, op, i, dropAfter, dropDelay) {
		return
	}
	a.patient(ctx, proc, op, i+1, dropDelay)
}

// storm gives up on op three times while the upstream works, then waits.
func (a *attacker) storm(ctx context.Context, i int, op string) {
	proc := fmt.Sprintf("client %d", i)
	for n := range stormTimeouts {
		if a.send(ctx, proc, op, i+n, stormTimeout, stormWork) {
			return
		}
	}
	a.patient(ctx, proc, op, i+stormTimeouts, stormWork)
}

// patient sends op until it has an answer, backing off after a 409 or an
// error, until the trial's deadline.
func (a *attacker) patient(ctx context.Context, proc, op string, attempt int, delay time.Duration) {
	deadline := time.Now().Add(a.t.deadline)
	backoff := 5 * time.Millisecond
	for n := attempt; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
		if a.send(ctx, proc, op, n, stormPatience, delay) {
			return
		}
		sleep(ctx, backoff/2+rand.N(backoff))
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// send makes one attempt and records it; it reports whether the operation
// is settled (answered, or refused for good).
func (a *attacker) send(ctx context.Context, proc, op string, attempt int, timeout, delay time.Duration) bool {
	a.t.record(Event{Proc: proc, Op: op, Type: Invoke})
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"idem_prove": a.t.wireKey(op), "amount": 100})
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, a.base(attempt)+a.path, bytes.NewReader(body))
	if err != nil {
		a.t.record(Event{Proc: proc, Type: Unknown, Err: err.Error()})
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", a.t.wireKey(op))
	req.Header.Set(scopeHeader, a.t.scope)
	req.Header.Set(delayHeader, strconv.FormatInt(delay.Milliseconds(), 10))
	resp, err := a.client.Do(req)
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		a.count("client gave up")
		a.t.record(Event{Proc: proc, Type: Unknown, Err: fmt.Sprintf("client gave up after %v", timeout)})
		return false
	case err != nil:
		a.count("connection error")
		a.t.record(Event{Proc: proc, Type: Unknown, Err: err.Error()})
		return false
	}
	problem := problemType(resp, answer)
	label := strconv.Itoa(resp.StatusCode)
	if problem != "" {
		label += " " + problem
	}
	replay := resp.Header.Get("Idempotent-Replayed") == "true"
	if replay {
		label += " replayed"
	}
	a.count(label)
	switch {
	case problem == "":
		// The upstream's own answer, first-hand or replayed.
		a.t.record(Event{Proc: proc, Type: OK, Value: string(answer), Replay: replay})
		return true
	case problem == "request-in-flight":
		a.t.record(Event{Proc: proc, Type: Fail, Kind: failInFlight, Err: label})
		return false
	case problem == "operation-parked":
		a.t.record(Event{Proc: proc, Type: Fail, Kind: failParked, Err: label})
		return true
	case problem == "key-mismatch":
		a.t.record(Event{Proc: proc, Type: Fail, Kind: failMismatch, Err: label})
		return true
	case problem == "key-expired":
		a.t.record(Event{Proc: proc, Type: Fail, Kind: failExpired, Err: label})
		return true
	case problem == "upstream-unreachable" || problem == "ledger-unavailable" || problem == "lease-lost":
		// Nothing was done (or it rolled back): the retry starts clean.
		a.t.record(Event{Proc: proc, Type: Fail, Kind: problem, Err: label})
		return false
	case resp.StatusCode >= 500:
		a.t.record(Event{Proc: proc, Type: Unknown, Err: label})
		return false
	}
	// Any other refusal (a bad key, a body too large) is the gateway's
	// final answer to this request.
	a.t.record(Event{Proc: proc, Type: Fail, Kind: problem, Err: label})
	return true
}

func (a *attacker) count(label string) {
	a.mu.Lock()
	a.statuses[label]++
	a.mu.Unlock()
}

// summary lists what the gateway answered, most frequent first.
func (a *attacker) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	labels := make([]string, 0, len(a.statuses))
	for l := range a.statuses {
		labels = append(labels, l)
	}
	slices.SortFunc(labels, func(x, y string) int {
		if c := a.statuses[y] - a.statuses[x]; c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = fmt.Sprintf("%s ×%d", l, a.statuses[l])
	}
	return strings.Join(parts, ", ")
}

// problemType returns the last segment of an idem problem's type URI, or
// "" for an answer that is not the gateway's own.
func problemType(resp *http.Response, body []byte) string {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	t, ok := strings.CutPrefix(p.Type, idemhttp.ProblemBase)
	if !ok {
		return ""
	}
	return t
}
