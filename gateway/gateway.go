// Package gateway is the reverse proxy behind `idem serve`: it gives any
// HTTP API, written in any language, Idempotency-Key semantics without a
// code change, by putting idemhttp's lease-bound middleware in front of an
// httputil.ReverseProxy.
//
// The gateway tells apart the two ways an upstream call can fail. If
// nothing was sent (the connection was refused), it answers 502 and
// releases the key: a retry starts clean. If the request was sent and no
// answer came (a timeout, a dropped connection), the outcome is unknown: it
// answers 504 and keeps the claim until its lease ends; after that the
// stale-claim policy applies (by default the next retry is forwarded again
// with the same key, which the upstream should deduplicate on).
//
// Guarded calls to the upstream are not cancelled when the client goes
// away: the answer is recorded and replayed to the client's retry. Several
// gateways on one PostgreSQL database behave as one.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// DefaultTimeout bounds a guarded upstream call, from sending the request
// to the end of the response.
const DefaultTimeout = 30 * time.Second

// Config configures a Gateway. Upstream is required; the rest have
// defaults.
type Config struct {
	// Upstream is the API behind the gateway: http or https, with an
	// optional path prefix. Its redirects of a guarded request to itself
	// (307, 308) are followed; Location headers naming it are pointed
	// back at the gateway (docs/http.md, Redirects).
	Upstream *url.URL
	// Options are the Idempotency-Key semantics (nil = idemhttp defaults).
	Options *idemhttp.Options
	// Timeout bounds a guarded upstream call. A call that was sent and
	// timed out has an unknown outcome (504, claim kept). Requests the
	// middleware does not guard (GET, …) are bounded by the client only.
	// Default DefaultTimeout.
	Timeout time.Duration
	// ReadTimeout bounds how long a request's body may take to arrive,
	// from the moment the gateway starts on the request; a stalled body is
	// cut off (408 body-timeout for a guarded request; nothing claimed).
	// Headers are bounded by the server's ReadHeaderTimeout. 0 means no
	// bound. Unlike http.Server.ReadTimeout it stops at the end of the
	// body, so a slow upstream answer is not mistaken for a client gone.
	ReadTimeout time.Duration
	// Transport makes the upstream calls. Default: a clone of
	// http.DefaultTransport that keeps up to 256 idle connections.
	Transport http.RoundTripper
	// Logger receives proxy errors. Default slog.Default(); Options.Logger
	// defaults to it too.
	Logger *slog.Logger
	// AddedLatency, when set, is told for every guarded request that was
	// forwarded how long the gateway took beyond the upstream call itself
	// (claim, fingerprint, store). metrics.Collector.GatewayAdded fits.
	AddedLatency func(time.Duration)
	// Routes, when set, give routes policies of their own (see Route);
	// requests no route matches get Options.
	Routes []Route
	// TrustedProxies are the addresses of the proxies in front of the
	// gateway (a load balancer, a TLS terminator). A request from one of
	// them keeps its X-Forwarded-For, with the proxy's address appended,
	// and its X-Forwarded-Host, X-Forwarded-Proto and Forwarded go to the
	// upstream as the proxy set them (https, the public host). From any
	// other peer, every peer by default, the gateway sets X-Forwarded-For
	// to the peer's address and -Host and -Proto to what it saw, and
	// drops Forwarded, so that a client cannot tell the upstream it came
	// from elsewhere.
	TrustedProxies []netip.Prefix
	// PreserveHost sends the upstream the Host the client asked for
	// (api.example.com) instead of the upstream's own: for an upstream
	// that serves several sites by name, or checks the host it is called
	// by. The connection still goes to Upstream, and TLS to it verifies
	// Upstream's name. Off by default: the upstream gets its own host, and
	// the client's in X-Forwarded-Host.
	PreserveHost bool
	// CORSOrigins are the origins of the pages that may read the
	// gateway's own answers across origins: exact origins
	// (https://shop.example) or "*". Its answers (409 request-in-flight,
	// 422 key-mismatch, …) then carry Access-Control-Allow-Origin for a
	// request from one of them, with Access-Control-Allow-Credentials for
	// a named origin, and expose Retry-After, so that a page's second
	// fetch of a double submit reads the 409 instead of failing as if the
	// network had. The upstream's answers and their replays keep the
	// upstream's own CORS fields, and preflight OPTIONS requests still go
	// to the upstream: the list widens no policy of the upstream's. Empty
	// by default: the gateway's own answers carry no CORS fields.
	CORSOrigins []string
}

// Route is a policy for the requests one net/http ServeMux pattern
// matches ("POST /payments/{id}", "/webhooks/"): its own Idempotency-Key
// options, or none at all. The most specific pattern wins, as in
// http.ServeMux; a request no route matches gets Config.Options.
type Route struct {
	// Pattern is an http.ServeMux pattern: [METHOD ][HOST]/[PATH].
	Pattern string
	// Pass forwards the route's requests untouched, never guarded.
	Pass bool
	// Options are the route's semantics (nil = idemhttp defaults); unused
	// under Pass.
	Options *idemhttp.Options
}

// Gateway is an http.Handler forwarding to one upstream.
type Gateway struct {
	l           *idem.Ledger
	fwd         *forwarder
	log         *slog.Logger
	added       func(time.Duration)
	handler     atomic.Pointer[http.Handler]
	readTimeout time.Duration
	cors        *corsPolicy
}

// New builds a gateway on l. The error names every bad option.
func New(l *idem.Ledger, cfg *Config) (*Gateway, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Upstream == nil || (c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https") || c.Upstream.Host == "" {
		return nil, fmt.Errorf("gateway: upstream %v: want an http:// or https:// URL with a host", c.Upstream)
	}
	if err := CheckCORSOrigins(c.CORSOrigins); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if c.Timeout < 0 || c.ReadTimeout < 0 {
		return nil, fmt.Errorf("gateway: timeout %v or read timeout %v is negative", c.Timeout, c.ReadTimeout)
	}
	log := cmp.Or(c.Logger, slog.Default())
	transport := c.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 512
		t.MaxIdleConnsPerHost = 256
		transport = t
	}
	f := &forwarder{timeout: cmp.Or(c.Timeout, DefaultTimeout), log: log}
	upstream := c.Upstream
	cors := newCORSPolicy(c.CORSOrigins)
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			if c.PreserveHost {
				pr.Out.Host = pr.In.Host
			}
			trusted := trusts(c.TrustedProxies, pr.In.RemoteAddr)
			if trusted {
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"] // appended to
			}
			pr.SetXForwarded()
			if trusted {
				for _, h := range [...]string{"X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
					if v := pr.In.Header[h]; v != nil {
						pr.Out.Header[h] = v
					}
				}
			}
			if callFrom(pr.In.Context()) != nil {
				// A guarded answer is stored and replayed to clients that
				// may not accept the coding the first one did: the
				// transport asks for gzip itself and decodes it, so the
				// answer is stored (and sent) as the upstream meant it.
				pr.Out.Header.Del("Accept-Encoding")
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if cors != nil { // only its writer asks
				markAnswered(resp)
			}
			pointBack(resp, upstream)
			return nil
		},
		Transport:    followRedirects{base: transport, upstream: upstream},
		BufferPool:   copyBuffers{},
		ErrorHandler: f.upstreamFailed,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	g := &Gateway{l: l, fwd: f, log: log, added: c.AddedLatency, readTimeout: c.ReadTimeout, cors: cors}
	if err := g.SetRoutes(c.Options, c.Routes); err != nil {
		return nil, err
	}
	return g, nil
}

// pointBack rewrites the URLs of an answer's Location, Content-Location
// and Link fields that point at the upstream itself (it builds absolute
// URLs from the Host it was sent, the upstream's) to the gateway as the
// client reached it: the scheme and host of the X-Forwarded-Proto and
// X-Forwarded-Host sent with the request (the gateway's own view, or a
// trusted proxy's), the upstream's path prefix taken off, as nginx's
// proxy_redirect default does for Location. Left as they were, a client
// following one (a redirect of a POST with its key, a page's next link)
// would reach the upstream past the gateway, or an address it cannot
// reach. Other URLs, and relative ones, are left alone.
func pointBack(resp *http.Response, upstream *url.URL) {
	h := resp.Header
	if !strings.Contains(h.Get("Location"), "://") && !strings.Contains(h.Get("Content-Location"), "://") && h["Link"] == nil {
		return // most answers: nothing to rewrite, nothing spent
	}
	out := resp.Request
	proto, host := first(out.Header.Get("X-Forwarded-Proto")), first(out.Header.Get("X-Forwarded-Host"))
	if proto == "" || host == "" {
		return
	}
	public := func(v string) string {
		u, err := url.Parse(v)
		if err != nil {
			return v
		}
		rest, ok := underUpstream(upstream, u)
		if !ok {
			return v
		}
		u.Scheme, u.Host, u.Path, u.RawPath = proto, host, cmp.Or(rest, "/"), ""
		return u.String()
	}
	for _, name := range [...]string{"Location", "Content-Location"} {
		if v := h.Get(name); strings.Contains(v, "://") {
			h.Set(name, public(v))
		}
	}
	links := h["Link"]
	for i, v := range links {
		if strings.Contains(v, "://") {
			links[i] = linkTargets(v, public)
		}
	}
}

// linkTargets returns a Link field value (RFC 8288: "<uri>; rel=next,
// <uri>; rel=last") with each target URI replaced by f of it.
func linkTargets(v string, f func(string) string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(v, '<')
		j := strings.IndexByte(v[i+1:], '>')
		if i < 0 || j < 0 {
			b.WriteString(v)
			return b.String()
		}
		b.WriteString(v[:i+1])
		b.WriteString(f(v[i+1 : i+1+j]))
		v = v[i+1+j:]
	}
}

// first is the first of a comma-separated list, as a chain of proxies
// may leave in X-Forwarded-Proto and X-Forwarded-Host: the client's.
func first(v string) string {
	f, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(f)
}

// trusts reports whether remoteAddr (an http.Request's, ip:port) is in
// one of proxies.
func trusts(proxies []netip.Prefix, remoteAddr string) bool {
	if len(proxies) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// SetRoutes replaces the gateway's policies: defaults for requests no
// route matches, and the routes. The change is atomic: a request is
// handled wholly under the old policies or wholly under the new ones, and
// on an error (which names the route) the old ones stay. The upstream,
// its connections and the ledger are kept; keys already claimed or stored
// stay as they are.
func (g *Gateway) SetRoutes(defaults *idemhttp.Options, routes []Route) error {
	def, err := g.proxy(defaults)
	if err != nil {
		return err
	}
	h := def
	if len(routes) > 0 {
		mux := http.NewServeMux()
		root := false
		for _, rt := range routes {
			var rh http.Handler = passHandler{g.fwd}
			if !rt.Pass {
				if rh, err = g.proxy(rt.Options); err != nil {
					return fmt.Errorf("gateway: route %q: %w", rt.Pattern, err)
				}
			}
			if err := handle(mux, rt.Pattern, rh); err != nil {
				return err
			}
			root = root || rt.Pattern == "/"
		}
		if !root {
			mux.Handle("/", def) // unmatched requests get the defaults, never the mux's 404 or 405
		}
		h = mux
	}
	g.handler.Store(&h)
	return nil
}

// proxy is idemhttp's middleware with opts in front of the forwarder.
func (g *Gateway) proxy(o *idemhttp.Options) (http.Handler, error) {
	opts := idemhttp.Options{}
	if o != nil {
		opts = *o
	}
	opts.Logger = cmp.Or(opts.Logger, g.log)
	if g.added != nil {
		opts.AddedLatency = g.added
	}
	return idemhttp.NewProxy(g.l, &opts, g.fwd)
}

// handle registers h at pattern, turning the mux's panic on a bad or
// conflicting pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("gateway: route %q: %v", pattern, p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// passHandler forwards requests unguarded.
type passHandler struct{ f *forwarder }

func (p passHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.f.Forward(w, r, nil) }

// deadlineBody lifts the read deadline once the body has been read (or
// closed): net/http keeps reading the connection in the background after
// the body, to notice a client that went away, and an expired deadline
// there would cancel the request as if it had.
type deadlineBody struct {
	io.ReadCloser
	rc      http.ResponseController
	cleared atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.clear()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	b.clear()
	return b.ReadCloser.Close()
}

func (b *deadlineBody) clear() {
	if b.cleared.CompareAndSwap(false, true) {
		b.rc.SetReadDeadline(time.Time{})
	}
}

// timedRequest is a copy of a request whose body is a deadlineBody, both
// in one allocation.
//
// The body goes on a copy, not on the request net/http handed over.
// Before it writes an answer, net/http looks at that request's body: one
// of its own with much left unread (a 413 for a declared length over the
// limit, a 400 for a bad key, each answered before reading) ends the
// connection after the answer; one of another type it first reads 256 KiB
// of. A client that sends its body only after a 100 Continue (curl past
// 1 MiB) or after the answer got no answer until it gave up waiting.
type timedRequest struct {
	req  http.Request
	body deadlineBody
}

// ServeHTTP guards r and forwards it: idemhttp's middleware in front of
// the forwarder, with the whole request read under the read timeout.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, r = g.cors.withCORS(w, r)
	if g.readTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(g.readTimeout)) == nil {
			t := &timedRequest{req: *r}
			t.body.ReadCloser, t.body.rc = r.Body, *rc
			t.req.Body = &t.body
			r = &t.req
		}
	}
	(*g.handler.Load()).ServeHTTP(w, r)
}

// forwarder is the idemhttp.Forwarder behind the middleware: a reverse
// proxy that tells "nothing sent" from "sent, no answer".
type forwarder struct {
	proxy   *httputil.ReverseProxy
	timeout time.Duration
	log     *slog.Logger
}

// call is one guarded upstream call, carried in its request's context to
// the proxy's hooks.
type call struct {
	claim *idem.Claim
	// sent records whether any byte of the request may have reached the
	// upstream. Headers written to a connection count, even if unflushed:
	// when in doubt, the outcome is unknown, never "not sent".
	sent     atomic.Bool
	delivery idemhttp.Delivery
}

type callKey struct{}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// Forward sends r upstream. A guarded call is detached from the client:
// once sent, it runs to its answer so that the answer can be recorded,
// whether or not the client waits.
func (f *forwarder) Forward(w http.ResponseWriter, r *http.Request, c *idem.Claim) idemhttp.Forwarded {
	if c == nil {
		f.proxy.ServeHTTP(w, r) // not guarded: a plain proxy
		return idemhttp.Forwarded{}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), f.timeout)
	defer cancel()
	cl := &call{claim: c}
	ctx = context.WithValue(ctx, callKey{}, cl)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { cl.sent.Store(true) },
	})
	start := time.Now()
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
	res := idemhttp.Forwarded{Delivery: cl.delivery}
	if cl.sent.Load() {
		res.Took = max(time.Since(start), 1)
	}
	return res
}

// upstreamFailed answers a failed upstream call and tells the middleware
// what it means for the key.
func (f *forwarder) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	cl := callFrom(ctx)
	switch {
	case cl == nil:
		level := slog.LevelWarn
		if errors.Is(err, context.Canceled) {
			level = slog.LevelDebug // the client went away
		}
		f.log.Log(ctx, level, "gateway: upstream call failed", slog.Any("err", err))
		status := http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		w.WriteHeader(status)
	case !cl.sent.Load():
		cl.delivery = idemhttp.NotSent
		f.log.WarnContext(ctx, "gateway: upstream unreachable; nothing sent, key released", slog.String("key", idem.KeyHash(cl.claim.Op.Key)), slog.Any("err", err))
		idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemUpstreamDown, Title: "Upstream unreachable", Status: http.StatusBadGateway,
			Detail: "The upstream could not be reached and nothing was sent to it. The key is free: retry with the same key.", RetryAfter: 1})
	default:
		cl.delivery = idemhttp.NoAnswer
		c := cl.claim
		f.log.WarnContext(ctx, "gateway: upstream did not answer; outcome unknown, claim kept until its lease ends",
			slog.String("key", idem.KeyHash(c.Op.Key)), slog.Int64("attempt", c.Token), slog.Any("err", err))
		wait := int(max(c.Op.Lease.Round(time.Second)/time.Second, 1))
		idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemUpstreamUnknown, Title: "Upstream outcome unknown", Status: http.StatusGatewayTimeout,
			Detail: fmt.Sprintf("The request was sent upstream but no answer came (%v); it may or may not have taken effect. Retry with the same key: until the claim's lease ends (%v) you get 409, after that %s.",
				err, c.Op.Lease, afterLease(c.Op.Stale)), RetryAfter: wait})
	}
}

// afterLease says what a retry meets once an unknown outcome's lease has
// ended, under the stale-claim policy in force.
func afterLease(p idem.StalePolicy) string {
	switch p {
	case idem.StalePark:
		return "the key is parked: a retry gets 409 operation-parked until an operator decides what happened (idem reconcile)"
	case idem.StaleReconcile:
		return "the reconciler finds out whether it took effect, and the request is forwarded again with the same key only if it did not"
	}
	return "the request is forwarded again with the same key"
}

// copyBuffers lends the proxy the buffers it copies answers through, so
// that each forwarded request does not leave a 32 KiB one behind: with
// large answers in flight the heap holds them, and the collector's target
// (twice the live heap) grows with whatever else is garbage.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Get returns a buffer.
func (copyBuffers) Get() []byte { return *copyBufferPool.Get().(*[]byte) }

// Put takes a buffer back.
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
