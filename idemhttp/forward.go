package idemhttp

import (
	"net/http"
	"time"

	"github.com/idemdev/idem"
)

// Forwarder is a guarded handler that passes each request on to another
// server, as idem's gateway does, and says what became of the call. The
// middleware settles the key from that answer: a handler that is not a
// proxy tells it instead through Release and Unknown.
type Forwarder interface {
	// Forward sends r on and writes what came back, or its own error
	// answer, to w. c is the claim the request runs under, or nil when the
	// request is not guarded (pass it on as it is). A guarded call should
	// not end with the client: the middleware records its answer.
	Forward(w http.ResponseWriter, r *http.Request, c *idem.Claim) Forwarded
}

// Forwarded is what a Forwarder knows of one call.
type Forwarded struct {
	// Delivery says whether the call reached the upstream and came back.
	Delivery Delivery
	// Took is how long the upstream call took, for Options.AddedLatency;
	// zero when nothing was sent.
	Took time.Duration
}

// Delivery is what became of a forwarded call.
type Delivery int

// What a forwarded call can come to.
const (
	// Answered: the upstream answered and w holds its answer, which
	// settles the key as a handler's answer would (stored, or released for
	// the statuses that mean "nothing done").
	Answered Delivery = iota
	// NotSent: nothing of the request reached the upstream. The key is
	// released and w's answer goes to the client unstored; a retry starts
	// clean.
	NotSent
	// NoAnswer: the request was sent and no answer came. The outcome is
	// unknown: w's answer goes to the client unstored and the claim is kept
	// until its lease ends, when the stale-claim policy decides.
	NoAnswer
)

// NewProxy returns the lease-bound middleware in front of f, for a handler
// that forwards (see Forwarder): the gateway is NewProxy and a reverse
// proxy. Unlike New, a response f flushes is still held and stored whole
// (a proxy flushes whatever it copies), except text/event-stream, which
// goes through as it comes and is recorded as not replayable. The error
// names every bad option.
func NewProxy(l *idem.Ledger, opts *Options, f Forwarder) (http.Handler, error) {
	if f == nil {
		panic("idemhttp: nil Forwarder")
	}
	g, err := buildGuard(l, opts, false)
	if err != nil {
		return nil, err
	}
	g.fwd = f
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, nil) }), nil
}

// pass hands a request that is not guarded to the handler or forwarder.
func (g *guard) pass(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if g.fwd != nil {
		g.fwd.Forward(w, r, nil)
		return
	}
	next.ServeHTTP(w, r)
}

// handle runs a guarded request's handler, or forwards it and records what
// became of the call as the handler's verdict; it returns how long the
// upstream took.
func (g *guard) handle(w http.ResponseWriter, r *http.Request, next http.Handler, ctl *control) time.Duration {
	if g.fwd == nil {
		next.ServeHTTP(w, r)
		return 0
	}
	res := g.fwd.Forward(w, r, ctl.claim)
	switch res.Delivery {
	case NotSent:
		ctl.verdict.Store(int32(verdictRelease))
	case NoAnswer:
		ctl.verdict.Store(int32(verdictUnknown))
	}
	return res.Took
}
