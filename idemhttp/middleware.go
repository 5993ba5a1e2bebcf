package idemhttp

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
)

// ledgerTimeout bounds every ledger call the middleware makes on a
// request's behalf; they run detached from the client (see guard).
const ledgerTimeout = 10 * time.Second

// New returns the lease-bound middleware: it claims the key, runs the
// handler under a heartbeated lease, then records the response and answers.
// Use it where the work is external (an HTTP call, a message, a file): a
// retry after a crash is handled again with the same key, which the handler
// should pass downstream. The error names every bad option.
func New(l *idem.Ledger, opts *Options) (func(http.Handler) http.Handler, error) {
	return newGuard(l, opts, false)
}

// Middleware is New that panics on bad options, for use in route tables:
//
//	mux.Handle("POST /payouts", idemhttp.Middleware(l, nil)(payouts))
func Middleware(l *idem.Ledger, opts *Options) func(http.Handler) http.Handler {
	return must(New(l, opts))
}

// NewTx returns the transaction-bound middleware: it opens a transaction on
// the ledger's database, claims the key inside it, hands it to the handler
// (Tx), and commits the handler's effects, the key's completion and the
// stored response in that one commit, before the client sees anything. A
// crash at any point leaves either all of it or none of it; a concurrent
// duplicate waits for the commit instead of getting 409. Use it where the
// effect is rows in the same database (a payment record, a ledger entry).
//
// The transaction lives as long as the handler: on SQLite it holds the
// database's only writer, so guarded requests (and every other write to the
// file) run one at a time. See docs/http.md.
func NewTx(l *idem.Ledger, opts *Options) (func(http.Handler) http.Handler, error) {
	return newGuard(l, opts, true)
}

// TxMiddleware is NewTx that panics on bad options.
func TxMiddleware(l *idem.Ledger, opts *Options) func(http.Handler) http.Handler {
	return must(NewTx(l, opts))
}

func must(mw func(http.Handler) http.Handler, err error) func(http.Handler) http.Handler {
	if err != nil {
		panic(err)
	}
	return mw
}

// buildGuard checks opts and makes the middleware's state.
func buildGuard(l *idem.Ledger, opts *Options, tx bool) (*guard, error) {
	if l == nil {
		panic("idemhttp: nil *idem.Ledger")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	g := &guard{l: l, cfg: cfg, tx: tx}
	if cfg.maxInFlight > 0 {
		g.inflight = make(chan struct{}, cfg.maxInFlight)
	}
	return g, nil
}

// guard is one configured middleware.
type guard struct {
	l      *idem.Ledger
	cfg    *config
	tx     bool
	secret scopeSecret
	// inflight holds a token per guarded request being handled; nil
	// when MaxInFlight is 0.
	inflight chan struct{}
	// fwd, when set (NewProxy), is the handler: a proxy that says what
	// became of each call.
	fwd Forwarder
	// spillWarned is when a response last could not spill to a file and
	// that was logged (Unix nanoseconds): once a minute at most.
	spillWarned atomic.Int64
}

func newGuard(l *idem.Ledger, opts *Options, tx bool) (func(http.Handler) http.Handler, error) {
	g, err := buildGuard(l, opts, tx)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, next) })
	}, nil
}

func (g *guard) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	start := time.Now() // AddedLatency counts from here: body, scope, fingerprint, claim, record
	if !g.cfg.methods[r.Method] {
		g.pass(w, r, next)
		return
	}
	done, ok := g.enter()
	if !ok {
		WriteProblem(w, Problem{Type: ProblemTooBusy, Title: "Too many requests in flight", Status: http.StatusServiceUnavailable,
			Detail: "The server is handling as many guarded requests as it allows; nothing was done. Retry with the same key.", RetryAfter: 1})
		return
	}
	var into prepared
	p, prob := g.cfg.prepare(r, func() ([]byte, error) { return g.secret.get(r, g.l) }, &into)
	if prob != nil {
		done()
		WriteProblem(w, *prob)
		return
	}
	if p == nil {
		done() // unguarded: its body is not held
		g.pass(w, r, next)
		return
	}
	defer done()
	if g.tx {
		g.serveTx(w, r, next, g.cfg.op(p))
	} else {
		g.serveLease(w, r, next, g.cfg.op(p), start)
	}
}

// detached is the request's context without its cancellation: a client
// that goes away must not cancel a claim or a completion half way.
func detached(r *http.Request) (context.Context, context.CancelFunc) {
	return ledgerContext(context.WithoutCancel(r.Context()))
}

// ledgerContext bounds one ledger call made on a request's behalf; base is
// the request's context without its cancellation.
func ledgerContext(base context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(base, ledgerTimeout)
}

// enter takes an in-flight token, if MaxInFlight asks for one; ok is
// false when none is free. done gives it back.
func (g *guard) enter() (done func(), ok bool) {
	if g.inflight == nil {
		return func() {}, true
	}
	select {
	case g.inflight <- struct{}{}:
		return sync.OnceFunc(func() { <-g.inflight }), true
	default:
		return nil, false
	}
}
