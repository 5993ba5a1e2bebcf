package prove

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/idemdev/idem/internal/crashpoint"
)

// The gateway scenario runs Workers `idem serve` processes on the run's
// database in front of the counting provider, and attacks them over HTTP:
//
//	attack       parallel duplicates, dropped responses and retry storms;
//	             the upstream deduplicates nothing, so every forwarded call
//	             is an effect and the gateway alone keeps them to one
//	crash-keyed  each gateway is SIGKILLed after the upstream answered,
//	             before recording it; the upstream honours the forwarded
//	             key and the gateway redoes (--stale redo): one effect
//	crash-blind  the same, an upstream that honours nothing and a gateway
//	             that parks (--stale park): at most one effect, parked

const (
	gwAttack     = "attack"
	gwCrashKeyed = "crash-keyed"
	gwCrashBlind = "crash-blind"
)

func skipGateway(r *runner) string {
	switch {
	case len(r.cfg.Serve) == 0:
		return "needs the idem serve command (Config.Serve)"
	case r.cfg.NoGuard && r.cfg.Target == "":
		return "the gateway has no unguarded mode"
	}
	return ""
}

func runGateway(ctx context.Context, t *trial) error {
	mode, stale, crash := blind, "redo", ""
	switch t.variant {
	case gwAttack:
		// Nobody dies here, so no lease needs to end: a long one keeps a
		// loaded machine's slow heartbeat from turning into a legitimate
		// redo, which this blind upstream would count as a duplicate.
		t.lease = max(t.lease, 30*time.Second)
	case gwCrashKeyed:
		mode, crash = keyed, crashpoint.AfterCall
	case gwCrashBlind:
		stale, crash = "park", crashpoint.AfterCall
		t.allowParked = true
	default:
		return fmt.Errorf("unknown gateway variant %q", t.variant)
	}
	up, err := startProvider(mode)
	if err != nil {
		return err
	}
	defer up.close()
	t.effects = func(context.Context) (map[string][]string, error) { return up.effectsIn(t.scope), nil }
	t.ledgerKey = t.wireKey

	pool := &gatewayPool{t: t, args: t.serveArgs(up.url, stale)}
	if err := pool.start(ctx, t.r.cfg.Workers, crash); err != nil {
		return err
	}
	a := newAttacker(t, "/effect", pool.base)
	only := ""
	if crash != "" {
		only = attackParallel // the crash is the attack; every copy races the kill
	}
	a.run(ctx, only)
	err = pool.stop(ctx)
	t.note("the gateways answered: %s", a.summary())
	return err
}

// serveArgs is the idem serve command for the trial's gateways.
func (t *trial) serveArgs(upstream, stale string) []string {
	return append(slices.Clone(t.r.cfg.Serve),
		"--upstream", upstream, "--db", t.r.db.url,
		"--scope-header", scopeHeader, "--lease", t.lease.String(), "--stale", stale,
		"--log-level", "warn")
}

// gatewayPool keeps n gateways running: a slot whose gateway dies (by its
// armed crash point) gets a fresh one, armed again while the kill budget
// lasts (at the second to fifth hit, so that every gateway records
// something before it dies and the run makes progress).
type gatewayPool struct {
	t    *trial
	args []string

	mu       sync.Mutex
	crash    string
	kills    int // armed replacements left
	addrs    []string
	procs    []*proc
	stopping bool
	wg       sync.WaitGroup
	errs     []error
}

func (g *gatewayPool) start(ctx context.Context, n int, crash string) error {
	g.addrs, g.procs = make([]string, n), make([]*proc, n)
	g.crash, g.kills = crash, len(g.t.keys)/5
	for i := range n {
		armed := ""
		if crash != "" {
			armed = fmt.Sprintf("%s:%d", crash, 1+g.t.intN(3))
		}
		if err := g.launch(ctx, i, armed); err != nil {
			return err
		}
	}
	return nil
}

// launch starts slot i's gateway and, in the background, replaces it when
// it dies.
func (g *gatewayPool) launch(ctx context.Context, i int, crash string) error {
	p, addr, err := g.t.startGateway(ctx, g.args, crash)
	if err != nil {
		return err
	}
	g.mu.Lock()
	if g.stopping {
		// stop began while this replacement started: it took its list of
		// gateways before this one was in it, so this one ends itself.
		g.mu.Unlock()
		p.terminate()
		<-p.done
		return nil
	}
	g.addrs[i], g.procs[i] = addr, p
	g.mu.Unlock()
	g.wg.Go(func() {
		<-p.done
		g.mu.Lock()
		stopping := g.stopping
		g.mu.Unlock()
		if stopping {
			return
		}
		if !p.killed() || crash == "" {
			g.fail(fmt.Errorf("gateway %d exited: %v; stderr:\n%s", p.pid, p.err, p.stderr))
		}
		next := ""
		g.mu.Lock()
		if g.kills > 0 {
			g.kills--
			next = fmt.Sprintf("%s:%d", g.crash, 2+g.t.intN(4))
		}
		g.mu.Unlock()
		if err := g.launch(ctx, i, next); err != nil {
			g.fail(err)
		}
	})
	return nil
}

func (g *gatewayPool) fail(err error) {
	g.mu.Lock()
	g.errs = append(g.errs, err)
	g.mu.Unlock()
}

// base is the URL of the gateway for an attempt: attempts go round the
// slots.
func (g *gatewayPool) base(attempt int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return "http://" + g.addrs[attempt%len(g.addrs)]
}

// stop drains every gateway (SIGTERM) and waits for them.
func (g *gatewayPool) stop(ctx context.Context) error {
	g.mu.Lock()
	g.stopping = true
	procs := slices.Clone(g.procs)
	g.mu.Unlock()
	for _, p := range procs {
		p.terminate()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			p.kill()
			<-p.done
		}
	}
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// startGateway runs an idem serve on a free loopback port and waits until
// it accepts connections. The port is picked here and handed over, since
// what serve prints is for people; a port taken in between makes serve
// exit, and another port is tried.
func (t *trial) startGateway(ctx context.Context, argv []string, crash string) (*proc, string, error) {
	var last error
	for range 5 {
		addr, err := freeAddr()
		if err != nil {
			return nil, "", err
		}
		p, err := t.spawn(ctx, append(slices.Clone(argv), "--listen", addr), crash, false, nil)
		if err != nil {
			return nil, "", err
		}
		if err := waitListening(ctx, p, addr); err != nil {
			last = err
			p.kill()
			<-p.done
			if ctx.Err() != nil {
				return nil, "", err
			}
			continue
		}
		return p, addr, nil
	}
	return nil, "", last
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until addr accepts a connection, or p exits.
func waitListening(ctx context.Context, p *proc, addr string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("idem serve exited (%v) before listening on %s: %s", p.err, addr, p.stderr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("idem serve did not listen on %s within a minute: %s", addr, p.stderr)
}
