package prove

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/crashpoint"
)

// The multi-step scenario runs Ledger.Run over three steps per operation:
// a row in the effects table (TxStep), a charge at a provider that honours
// the forwarded step key (CallStep), and a notification at a provider that
// can only be asked by key (variant lookup) or not at all (variant blind).
// Workers die at a random step crash point; fresh workers resume the runs.

// Step names of the prover's runs.
const (
	stepRow    = "row"
	stepCharge = "charge"
	stepNotify = "notify"
)

// stepPoints are the step crash points, and how often a fresh run of the
// three steps hits each.
var stepPoints = []struct {
	name string
	hits int
}{
	{crashpoint.StepStarted, 2},         // charge, notify
	{crashpoint.StepAfterCall, 2},       // charge, notify
	{crashpoint.StepBeforeCommit, 1},    // row
	{crashpoint.StepAfterCheckpoint, 3}, // row, charge, notify
}

// runBody is a run's result: the results of its three steps.
type runBody struct {
	Row    string `json:"row"`
	Charge string `json:"charge"`
	Notify string `json:"notify"`
}

func (b runBody) String() string {
	j, _ := json.Marshal(b)
	return string(j)
}

func runMultiStep(ctx context.Context, t *trial) error {
	mode := providerMode(t.variant)
	if mode != lookup && mode != blind {
		return fmt.Errorf("unknown notification provider %q", mode)
	}
	charges, err := startProvider(keyed)
	if err != nil {
		return err
	}
	defer charges.close()
	notes, err := startProvider(mode)
	if err != nil {
		return err
	}
	defer notes.close()
	t.allowParked = mode == blind
	t.effects = func(ctx context.Context) (map[string][]string, error) {
		return t.stepEffects(ctx, charges, notes)
	}
	s := spec{Role: roleSteps, Provider: charges.url, Notifier: notes.url, Notify: string(mode)}
	return t.attackAndRecoverAt(ctx, s, func(n int) string {
		p := stepPoints[t.intN(len(stepPoints))]
		return fmt.Sprintf("%s:%d", p.name, 1+t.intN(n*p.hits))
	})
}

// stepEffects counts each operation's effects per step: the row in the
// effects table, the charge and the notification at their providers (a
// charge repeated with its key counts once there). An operation whose
// three steps each happened once has one effect, the run's whole result;
// one with a step twice has as many as its most repeated step (so the
// check counts the duplicates); one with some steps missing has none (and
// must not have been acknowledged). A partial run must be parked at the
// notification, with its row and charge done once.
func (t *trial) stepEffects(ctx context.Context, charges, notes *provider) (map[string][]string, error) {
	rows, err := localEffects(ctx, t.r.ledger.Driver().DB(), rebinder(t.r.ledger.Driver()), t.scope)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	var twice, partial []string
	for _, k := range t.keys {
		r := rows[k]
		c := charges.effectsOf(idem.StepKey(t.scope, k, stepCharge))
		n := notes.effectsOf(idem.StepKey(t.scope, k, stepNotify))
		if most := max(len(r), len(c), len(n)); most > 1 {
			twice = append(twice, fmt.Sprintf("%s (row×%d charge×%d notify×%d)", k, len(r), len(c), len(n)))
			out[k] = make([]string, most)
			continue
		}
		if len(r) == 1 && len(c) == 1 && len(n) == 1 {
			out[k] = []string{runBody{Row: r[0], Charge: c[0], Notify: n[0]}.String()}
			continue
		}
		if len(r)+len(c)+len(n) == 0 {
			continue
		}
		if len(r) != 1 || len(c) != 1 {
			partial = append(partial, fmt.Sprintf("%s (row×%d charge×%d notify×%d)", k, len(r), len(c), len(n)))
		}
	}
	t.explain("steps with more than one effect", twice)
	t.explain("runs stopped before their notification without their row and charge", partial)
	return out, nil
}

// effectsOf returns the effects performed under the forwarded key.
func (p *provider) effectsOf(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.effects[key]...)
}

// stepsOnce books key's three steps with Ledger.Run.
func (w *worker) stepsOnce(ctx context.Context, key string) (string, bool, error) {
	if w.s.NoGuard {
		return w.unguardedSteps(ctx, key)
	}
	res, err := w.l.Run(ctx, w.op(key), func(r *idem.Run) (idem.Result, error) {
		var b runBody
		var err error
		b.Row, err = idem.TxStep(r, stepRow, func(ctx context.Context, tx *sql.Tx) (string, error) {
			body := w.newBody(key)
			return body, insertEffect(ctx, tx, w.rebind, w.s.Scope, key, body)
		})
		if err != nil {
			return idem.Result{}, err
		}
		// The charge's provider deduplicates on the key: a started charge
		// is always safe to call again.
		b.Charge, err = idem.CallStep(r, stepCharge, func(ctx context.Context, k string) (string, error) {
			return w.postEffect(ctx, w.s.Provider, k)
		}, idem.StepLookup(func(context.Context, string) (string, idem.Verdict, error) {
			return "", idem.VerdictNotDone, nil
		}))
		if err != nil {
			return idem.Result{}, err
		}
		notify := func(ctx context.Context, k string) (string, error) { return w.postEffect(ctx, w.s.Notifier, k) }
		if w.s.Notify == string(lookup) {
			b.Notify, err = idem.CallStep(r, stepNotify, notify, idem.StepLookup(func(ctx context.Context, k string) (string, idem.Verdict, error) {
				return w.lookupEffect(ctx, w.s.Notifier, k)
			}))
		} else {
			b.Notify, err = idem.CallStep(r, stepNotify, notify) // nobody can tell: parks
		}
		if err != nil {
			return idem.Result{}, err
		}
		return idem.Result{Status: http.StatusOK, Body: []byte(b.String())}, nil
	})
	return string(res.Body), res.Replayed, err
}

// unguardedSteps is stepsOnce without idem, dying at the same points.
func (w *worker) unguardedSteps(ctx context.Context, key string) (string, bool, error) {
	var b runBody
	b.Row = w.newBody(key)
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return "", false, err
	}
	defer tx.Rollback()
	if err := insertEffect(ctx, tx, w.rebind, w.s.Scope, key, b.Row); err != nil {
		return "", false, err
	}
	crashpoint.Hit(crashpoint.StepBeforeCommit)
	if err := tx.Commit(); err != nil {
		return "", false, err
	}
	crashpoint.Hit(crashpoint.StepAfterCheckpoint)
	for _, step := range []struct {
		name, url string
		v         *string
	}{{stepCharge, w.s.Provider, &b.Charge}, {stepNotify, w.s.Notifier, &b.Notify}} {
		crashpoint.Hit(crashpoint.StepStarted)
		v, err := w.postEffect(ctx, step.url, idem.StepKey(w.s.Scope, key, step.name))
		if err != nil {
			return "", false, err
		}
		crashpoint.Hit(crashpoint.StepAfterCall)
		*step.v = v
		crashpoint.Hit(crashpoint.StepAfterCheckpoint)
	}
	return b.String(), false, nil
}

// postEffect performs one effect at the provider at base, with key as
// its Idempotency-Key, and returns the provider's answer.
func (w *worker) postEffect(ctx context.Context, base, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/effect", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Idempotency-Key", key)
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
		return "", fmt.Errorf("provider answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// lookupEffect asks the provider at base what happened under key.
func (w *worker) lookupEffect(ctx context.Context, base, key string) (string, idem.Verdict, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/lookup", nil)
	if err != nil {
		return "", idem.VerdictUnknown, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := w.client.Do(req)
	if err != nil {
		return "", idem.VerdictUnknown, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", idem.VerdictUnknown, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return string(b), idem.VerdictDone, nil
	case http.StatusNotFound:
		return "", idem.VerdictNotDone, nil
	}
	return "", idem.VerdictUnknown, nil
}
