package prove

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// targetScenario attacks a user's own endpoint (Config.Target) through gateways
// the prover starts in front of it: one row per attack, each on its own
// operations. The endpoint sees POSTs with a JSON body
// {"idem_prove": KEY, "amount": 100} and the forwarded Idempotency-Key.
// With Config.EffectsCmd the effects are counted too: the command (run by
// sh -c, with the key in $1 and in $IDEM_KEY) prints how many times the
// endpoint performed the effect for that key.
var targetScenario = scenario{
	Scenario: Scenario{Name: "target", Variants: []string{attackParallel, attackDropped, attackStorm},
		Summary: "your endpoint through a gateway: parallel duplicates, dropped responses, retry storms"},
	skip: skipGateway,
	run:  runTargetTrial,
}

// CheckTarget returns an error unless raw is a usable Config.Target.
func CheckTarget(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("target %q is not an http:// or https:// URL with a host", raw)
	}
	return nil
}

func runTargetTrial(ctx context.Context, t *trial) error {
	u, err := url.Parse(t.r.cfg.Target)
	if err != nil {
		return err
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	upstream := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	t.ledgerKey = t.wireKey
	if cmd := t.r.cfg.EffectsCmd; cmd != "" {
		t.countOnly = true
		t.effects = func(ctx context.Context) (map[string][]string, error) { return t.countEffects(ctx, cmd) }
	} else {
		t.effectsUnknown = true
		t.effects = func(context.Context) (map[string][]string, error) { return nil, nil }
	}
	pool := &gatewayPool{t: t, args: t.serveArgs(upstream, "redo")}
	if err := pool.start(ctx, t.r.cfg.Workers, ""); err != nil {
		return err
	}
	a := newAttacker(t, path, pool.base)
	a.run(ctx, t.variant)
	err = pool.stop(ctx)
	t.note("%s answered: %s", t.r.cfg.Target, a.summary())
	return err
}

// countEffects runs the effects command for every operation.
func (t *trial) countEffects(ctx context.Context, command string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, op := range t.keys {
		key := t.wireKey(op)
		cmd := exec.CommandContext(ctx, "sh", "-c", command, "idem-prove", key)
		cmd.Env = append(os.Environ(), "IDEM_KEY="+key)
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("--effects-cmd for %s: %w", key, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--effects-cmd for %s printed %q, want a count", key, strings.TrimSpace(string(b)))
		}
		out[op] = make([]string, n)
	}
	return out, nil
}
