package drivertest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"pgregory.net/rapid"
)

// The model test drives random sequences of claims, finishes, heartbeats,
// prunes and clock moves over a few keys in two scopes, and checks every
// answer (outcome, token, stored result) against a tiny in-memory model of
// the state machine in DESIGN.md.

const (
	modelLease     = 10 * time.Second
	modelRetention = time.Minute
	modelTTL       = time.Minute
)

type mkey struct{ scope, key string }

// mrec is the model of one record; a key without one is "none".
type mrec struct {
	state   idemtype.State
	attempt int64
	fp      string
	holder  int // which claim holds it (stands for the lease id)
	lease   time.Time
	expires time.Time
	tomb    time.Time
	updated time.Time
	status  int
	body    []byte
}

type mclaim struct {
	c      *idem.Claim
	k      mkey
	holder int
}

type model struct {
	recs    map[mkey]*mrec
	holders int
}

// claim applies a claim to the model and returns what the ledger must say.
func (m *model) claim(k mkey, fp string, now time.Time) (out idem.Outcome, r *mrec) {
	r = m.recs[k]
	take := func(o idem.Outcome) (idem.Outcome, *mrec) {
		if r == nil {
			r = &mrec{}
			m.recs[k] = r
		}
		m.holders++
		*r = mrec{state: idemtype.StateInProgress, attempt: r.attempt + 1, fp: fp, holder: m.holders, lease: now.Add(modelLease), updated: now}
		return o, r
	}
	if r == nil {
		return take(idem.Acquired)
	}
	done := r.state == idemtype.StateSucceeded || r.state == idemtype.StateFailed || r.state == idemtype.StateTombstone
	switch {
	case r.state == idemtype.StateReleased || (done && !r.tomb.After(now)):
		return take(idem.Acquired)
	case r.fp != fp:
		return idem.Mismatch, r
	case r.state == idemtype.StateInProgress && r.lease.After(now):
		return idem.InFlight, r
	case r.state == idemtype.StateInProgress:
		return take(idem.Reclaimed)
	case done && r.state != idemtype.StateTombstone && r.expires.After(now):
		return idem.Replay, r
	case done:
		return outcomeExpired, r
	default:
		return idem.Parked, r
	}
}

// held reports whether h still holds its key at now.
func (m *model) held(h mclaim, now time.Time) (*mrec, bool) {
	r := m.recs[h.k]
	return r, r != nil && r.state == idemtype.StateInProgress && r.holder == h.holder && r.lease.After(now)
}

func (m *model) prune(now time.Time) {
	for k, r := range m.recs {
		if (r.state == idemtype.StateSucceeded || r.state == idemtype.StateFailed) && !r.expires.After(now) {
			r.state, r.status, r.body = idemtype.StateTombstone, 0, nil
			r.updated = now
		}
		if (r.state == idemtype.StateTombstone && !r.tomb.After(now)) ||
			(r.state == idemtype.StateReleased && !r.updated.Add(modelRetention).After(now)) {
			delete(m.recs, k)
		}
	}
}

// seedRapid fixes rapid's seed for this check and logs it (IDEM_TEST_SEED
// or -rapid.seed choose it). The returned func puts a seed it chose back,
// so that -count=N draws a new one each time.
func seedRapid(t *testing.T) (restore func()) {
	f := flag.Lookup("rapid.seed")
	if f == nil {
		t.Log("rapid seed: chosen by rapid, printed on failure")
		return func() {}
	}
	restore = func() {}
	if f.Value.String() == "0" {
		seed := rand.Uint64() | 1
		if v := os.Getenv(SeedEnv); v != "" {
			if s, err := strconv.ParseUint(v, 10, 64); err == nil {
				seed = s
			}
		}
		f.Value.Set(strconv.FormatUint(seed, 10))
		restore = func() { f.Value.Set("0") }
	}
	t.Logf("rapid seed %s (replay with -rapid.seed=%s or %s=%s)", f.Value, f.Value, SeedEnv, f.Value)
	return restore
}

func testModel(t *testing.T, s *suite) {
	f := s.setup(t)
	clk := newClock()
	l := f.open(&idem.Options{Clock: clk.Now, Lease: modelLease, Retention: modelRetention, TombstoneTTL: modelTTL})
	defer seedRapid(t)()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		prefix := fmt.Sprintf("run%d-", run) // each run its own keys in the shared database
		var keys []mkey
		for _, sc := range []string{"s1", "s2"} {
			for _, k := range []string{"a", "b", "c"} {
				keys = append(keys, mkey{prefix + sc, k})
			}
		}
		m := &model{recs: map[mkey]*mrec{}}
		var claims []mclaim
		var touched *mkey

		check := func(k mkey) {
			got, err := l.Get(f.ctx, k.scope, k.key)
			want := m.recs[k]
			if want == nil {
				if !errors.Is(err, idem.ErrNotFound) {
					rt.Fatalf("get %v: %+v, %v; model has no record", k, got, err)
				}
				return
			}
			if err != nil {
				rt.Fatalf("get %v: %v; model has %+v", k, err, *want)
			}
			if got.State != want.state || got.Attempt != want.attempt || got.Fingerprint != want.fp {
				rt.Fatalf("get %v: state %s attempt %d fp %q; model %s %d %q", k, got.State, got.Attempt, got.Fingerprint, want.state, want.attempt, want.fp)
			}
			if got.State == idemtype.StateInProgress && !got.LeaseUntil.Equal(want.lease) {
				rt.Fatalf("get %v: lease until %v; model %v", k, got.LeaseUntil, want.lease)
			}
			if !bytes.Equal(got.Body, want.body) || got.Status != want.status {
				rt.Fatalf("get %v: result %d %q; model %d %q", k, got.Status, got.Body, want.status, want.body)
			}
		}
		pickClaim := func(rt *rapid.T) mclaim {
			if len(claims) == 0 {
				rt.Skip("no claims yet")
			}
			return claims[rapid.IntRange(0, len(claims)-1).Draw(rt, "claim")]
		}
		finish := func(rt *rapid.T, name string, st idemtype.State, write func(*idem.Claim, idem.Result) error) {
			h := pickClaim(rt)
			res := idem.Result{Status: rapid.IntRange(0, 599).Draw(rt, "status"), Body: rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(rt, "body")}
			if st == idemtype.StateReleased || st == idemtype.StateParked {
				res = idem.Result{}
			}
			now := clk.Now()
			r, ok := m.held(h, now)
			err := write(h.c, res)
			switch {
			case ok && err != nil:
				rt.Fatalf("%s by holder %d of %v: %v; model says it holds the key", name, h.holder, h.k, err)
			case !ok && !errors.Is(err, idem.ErrLeaseLost):
				rt.Fatalf("%s by holder %d of %v: %v; model says ErrLeaseLost", name, h.holder, h.k, err)
			case ok:
				r.state, r.holder, r.lease, r.updated = st, 0, now, now
				r.status, r.body = res.Status, res.Body
				if st == idemtype.StateSucceeded || st == idemtype.StateFailed {
					r.expires, r.tomb = now.Add(modelRetention), now.Add(modelRetention+modelTTL)
				}
			}
			touched = &h.k
		}

		rt.Repeat(map[string]func(*rapid.T){
			"claim": func(rt *rapid.T) {
				k := rapid.SampledFrom(keys).Draw(rt, "key")
				fp := rapid.SampledFrom([]string{"fp1", "fp1", "fp1", "fp2"}).Draw(rt, "fp")
				now := clk.Now()
				c, err := l.Claim(f.ctx, idem.Op{Scope: k.scope, Key: k.key, Fingerprint: fp})
				want, r := m.claim(k, fp, now)
				touched = &k
				if want == outcomeExpired {
					var ce *idem.ConflictError
					if !errors.Is(err, idem.ErrExpired) || !errors.As(err, &ce) || ce.Record.Attempt != r.attempt {
						rt.Fatalf("claim %v %s: %+v, %v; model says expired at attempt %d", k, fp, c, err, r.attempt)
					}
					return
				}
				if err != nil {
					rt.Fatalf("claim %v %s: %v; model says %v", k, fp, err, want)
				}
				if c.Outcome != want {
					rt.Fatalf("claim %v %s: %v (record %s attempt %d); model says %v (%s attempt %d)", k, fp, c.Outcome, c.Record.State, c.Record.Attempt, want, r.state, r.attempt)
				}
				if want.Held() {
					if c.Token != r.attempt || !c.LeaseUntil.Equal(r.lease) {
						rt.Fatalf("claim %v: token %d lease %v; model %d %v", k, c.Token, c.LeaseUntil, r.attempt, r.lease)
					}
					claims = append(claims, mclaim{c: c, k: k, holder: r.holder})
					if len(claims) > 8 {
						claims = claims[1:]
					}
					return
				}
				if c.Record.Attempt != r.attempt {
					rt.Fatalf("claim %v: %v at attempt %d; model attempt %d", k, want, c.Record.Attempt, r.attempt)
				}
				if want == idem.Replay && (!bytes.Equal(c.Result.Body, r.body) || c.Result.Status != r.status || c.Record.State != r.state) {
					rt.Fatalf("claim %v: replay %s %d %q; model %s %d %q", k, c.Record.State, c.Result.Status, c.Result.Body, r.state, r.status, r.body)
				}
			},
			"complete": func(rt *rapid.T) {
				finish(rt, "Complete", idemtype.StateSucceeded, func(c *idem.Claim, r idem.Result) error { return l.Complete(f.ctx, c, r) })
			},
			"fail": func(rt *rapid.T) {
				finish(rt, "Fail", idemtype.StateFailed, func(c *idem.Claim, r idem.Result) error { return l.Fail(f.ctx, c, r) })
			},
			"release": func(rt *rapid.T) {
				finish(rt, "Release", idemtype.StateReleased, func(c *idem.Claim, _ idem.Result) error { return l.Release(f.ctx, c) })
			},
			"park": func(rt *rapid.T) {
				finish(rt, "Park", idemtype.StateParked, func(c *idem.Claim, _ idem.Result) error { return l.Park(f.ctx, c) })
			},
			"heartbeat": func(rt *rapid.T) {
				h := pickClaim(rt)
				now := clk.Now()
				r, ok := m.held(h, now)
				err := l.Heartbeat(f.ctx, h.c)
				switch {
				case ok && err != nil:
					rt.Fatalf("heartbeat by holder %d of %v: %v; model says it holds the key", h.holder, h.k, err)
				case !ok && !errors.Is(err, idem.ErrLeaseLost):
					rt.Fatalf("heartbeat by holder %d of %v: %v; model says ErrLeaseLost", h.holder, h.k, err)
				case ok:
					r.lease = now.Add(modelLease)
					if !h.c.LeaseUntil.Equal(r.lease) {
						rt.Fatalf("heartbeat: lease until %v, model %v", h.c.LeaseUntil, r.lease)
					}
				}
				touched = &h.k
			},
			"advance": func(rt *rapid.T) {
				d := rapid.SampledFrom([]time.Duration{
					time.Second, 5 * time.Second, modelLease - time.Millisecond, modelLease, modelLease + time.Millisecond,
					30 * time.Second, modelRetention, modelRetention + modelTTL,
				}).Draw(rt, "advance")
				clk.Advance(d)
				touched = nil
			},
			"prune": func(rt *rapid.T) {
				if _, err := l.Prune(f.ctx, nil); err != nil {
					rt.Fatalf("prune: %v", err)
				}
				m.prune(clk.Now())
				touched = nil
				for _, k := range keys {
					check(k)
				}
			},
			"": func(rt *rapid.T) {
				if touched != nil {
					check(*touched)
				}
			},
		})
		for _, k := range keys {
			check(k)
		}
	})
}

// outcomeExpired is the model's name for a claim refused with ErrExpired,
// which Claim reports as an error rather than an outcome.
const outcomeExpired = idem.Outcome(-1)
