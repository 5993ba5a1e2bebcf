package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/admin"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/gateway"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/internal/demo"
	"github.com/idemdev/idem/metrics"
)

// demoDB is the ledger of `idem serve --demo` when no --db is given: its
// own file, emptied on every start, as the demo's charge counter is.
const demoDB = "idem-demo.db"

const serveUsage = "idem serve --upstream URL [--listen ADDR] [--db URL] [--config FILE] [flags]\n       idem serve --demo [flags]\n       idem serve --config FILE --check [flags]"

func init() {
	register(command{
		name:    "serve",
		usage:   serveUsage,
		summary: "run the gateway: Idempotency-Key semantics in front of any HTTP API",
		run:     runServe,
	})
}

// serveConfig is everything `idem serve` was told.
type serveConfig struct {
	upstream, listen, db, admin   string
	openDB, driver                string // --db as dburl.Open takes it, and its driver (check)
	adminToken                    string
	adminWrite                    bool
	pruneEvery                    time.Duration
	reportEvery                   time.Duration
	demo, requireKey              bool
	configFile                    string // --config
	checkOnly                     bool   // --check
	routes                        []gateway.Route
	dbSet                         bool // --db (or IDEM_DB) was given
	scopeHeader, keyFrom, methods string
	jwtKeys                       string // --jwt-keys
	anonymousScope                string
	lease, retention              time.Duration
	maxBody, maxResponse          byteSize
	memoryLimit                   byteSize // 0: off
	onConflict, on5xx, stale      string
	releaseStatus                 string
	waitTimeout, timeout, drain   time.Duration
	readTimeout, idleTimeout      time.Duration
	maxInFlight                   int
	allowHeaders, exclude         string
	log                           *logFlags
	idemOpts                      idemhttp.Options
	ledgerOpts                    idem.Options
	upstreamURL                   *url.URL
	trustedProxies                string // --trusted-proxies
	preserveHost                  bool
	cors                          string // --cors-origins
	corsOrigins                   []string
	trusted                       []netip.Prefix
	tlsCert, tlsKey, clientCA     string      // --tls-cert, --tls-key, --client-ca
	tlsConfig                     *tls.Config // from them; nil: plain HTTP
}

func serveFlags(stderr io.Writer) (*flag.FlagSet, *serveConfig) {
	fs := newFlagSet("serve", serveUsage, stderr)
	c := &serveConfig{maxBody: idemhttp.DefaultMaxBody, maxResponse: idemhttp.DefaultMaxResponse}
	fs.StringVar(&c.upstream, "upstream", "", "`URL` of the API to put idem in front of (required unless --demo)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "`address` to serve on (HTTP/1.1; HTTP/2 over TLS, or in the clear with prior knowledge)")
	fs.StringVar(&c.db, "db", "sqlite:idem.db", "ledger database `URL`: sqlite:PATH, or postgres://… (or host=… dbname=…) for several gateways (--demo without --db: "+demoDB+", emptied on start)")
	fs.StringVar(&c.admin, "admin", "", "`address` for the admin page, /healthz and /metrics (off when empty)")
	fs.StringVar(&c.adminToken, "admin-token", "", "`token` required by the admin page (needed when --admin is not loopback; at least 16 bytes)")
	fs.BoolVar(&c.adminWrite, "admin-write", false, "let the admin page reconcile parked and stale claims")
	fs.DurationVar(&c.pruneEvery, "prune-every", 10*time.Minute, "run the retention sweep this often (0 disables; see idem prune)")
	fs.DurationVar(&c.reportEvery, "report-every", 5*time.Second, "store this gateway's counters and per-key replays in the database this often, for every admin page's totals (0 disables)")
	fs.BoolVar(&c.demo, "demo", false, "also start a built-in demo payments API and forward to it")
	fs.BoolVar(&c.requireKey, "require-key", false, "answer 400 to a guarded request without a key (default: pass it through)")
	fs.StringVar(&c.scopeHeader, "scope-header", "Authorization", "request `header` that scopes keys: Authorization (a keyed hash of its value), hmac:NAME (a keyed hash of header NAME, e.g. hmac:X-Api-Key), another header such as X-Tenant-ID (its value), client-cert (the client's TLS certificate; needs --client-ca), jwt:CLAIM (a claim of the verified bearer JWT, e.g. jwt:sub; needs --jwt-keys), or none (one shared scope)")
	fs.StringVar(&c.jwtKeys, "jwt-keys", "", "the JWK Set that bearer tokens are verified with for --scope-header jwt:CLAIM: an https:// `URL` (an issuer's jwks_uri, fetched at start, hourly, and for a key it lacks) or a file")
	fs.StringVar(&c.anonymousScope, "anonymous-scope", "refuse", "a guarded request with a key but without the scope header: refuse (400 scope-missing) or shared (one scope for all such callers; --demo sets it)")
	fs.StringVar(&c.keyFrom, "key-from", idemhttp.DefaultKeyFrom, "where the key is: header:NAME, json:/pointer, form:NAME, or fingerprint (the Idempotency-Key header, else the request fingerprint: identical keyless requests are done once; see --exclude)")
	fs.StringVar(&c.methods, "methods", "POST,PATCH", "comma-separated `methods` to guard; others pass through untouched")
	fs.DurationVar(&c.lease, "lease", idem.DefaultLease, "how long a claim holds after the gateway stops heartbeating it (crash, upstream timeout)")
	fs.DurationVar(&c.retention, "retention", idem.DefaultRetention, "how long a stored response is replayed")
	fs.Var(&c.maxBody, "max-body", "largest request body accepted (`size`, e.g. 1MiB); larger gets 413")
	fs.Var(&c.maxResponse, "max-response", "largest response stored for replay (`size`); larger is delivered, not stored. A held response keeps 64KiB in memory and the rest in a temporary file in $TMPDIR")
	fs.StringVar(&c.onConflict, "on-conflict", "reject", "while the same key is in flight: reject (409) or wait (then replay)")
	fs.DurationVar(&c.waitTimeout, "wait-timeout", idemhttp.DefaultWaitTimeout, "longest wait under --on-conflict wait")
	fs.StringVar(&c.on5xx, "on-5xx", "release", "upstream 5xx: release (retry forwards again), store (replayed like Stripe) or hold (until the lease ends)")
	fs.StringVar(&c.releaseStatus, "release-status", "401,403,408,425,429", "comma-separated 4xx `statuses` passed through unstored that release the key (\"nothing done\": refused, or try later), or none")
	fs.StringVar(&c.stale, "stale", "redo", "a claim whose holder vanished: redo (forward again with the same key) or park (wait for an operator)")
	fs.StringVar(&c.allowHeaders, "allow-headers", "", "comma-separated response `headers` to store besides Content-Type, Content-Language, Content-Disposition, Location, Content-Location, ETag, Last-Modified, Link and the CORS fields Access-Control-Allow-Origin, -Allow-Credentials, -Expose-Headers")
	fs.StringVar(&c.exclude, "exclude", "", "comma-separated JSON `pointers` left out of the body fingerprint (e.g. /sent_at)")
	fs.DurationVar(&c.timeout, "upstream-timeout", gateway.DefaultTimeout, "bound on a guarded upstream call; a sent call that times out gets 504 and keeps its claim")
	fs.DurationVar(&c.readTimeout, "read-timeout", 30*time.Second, "bound on reading a whole request, body included; a stalled body is cut off (408)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection stays open (gateway and admin)")
	fs.Var(&c.memoryLimit, "memory-limit", "soft limit on the memory Go manages (`size`; GOMEMLIMIT's semantics): the collector runs more often as it nears it, rather than letting the heap grow to twice what is live, at some CPU cost; it is not a cap (SQLite's cache, the program's code and what is live stay). Off by default; GOMEMLIMIT still applies")
	fs.IntVar(&c.maxInFlight, "max-inflight", 256, "most guarded requests handled at once (each may hold --max-body); past it 503 too-busy with Retry-After")
	fs.DurationVar(&c.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long to let in-flight requests finish")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM `file` of the gateway's TLS certificate (chain): serve HTTPS, and HTTP/2, on --listen; needs --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM `file` of the private key of --tls-cert")
	fs.StringVar(&c.clientCA, "client-ca", "", "PEM `file` of the CAs whose client certificates the gateway accepts (mutual TLS), for --scope-header client-cert; needs --tls-cert")
	fs.StringVar(&c.cors, "cors-origins", "", "comma-separated `origins` (https://shop.example, or *) of the pages that may read the gateway's own answers (409, 422, …) across origins; the upstream's answers keep its own CORS fields")
	fs.BoolVar(&c.preserveHost, "preserve-host", false, "send the upstream the Host the client asked for, not the upstream's own (the connection still goes to --upstream)")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", "", "comma-separated `addresses` (IPs or CIDRs, e.g. 10.0.0.0/8) of the load balancers in front of the gateway: from them X-Forwarded-For is appended to and X-Forwarded-Host, -Proto and Forwarded are passed on; from any other peer the gateway sets them itself")
	fs.StringVar(&c.configFile, "config", "", "YAML `file` of per-route policies (docs/http.md#per-route-policies); the flags are the defaults routes inherit; SIGHUP reloads it")
	fs.BoolVar(&c.checkOnly, "check", false, "check the flags and --config file, then exit: 0 if valid, 2 if not (--upstream not needed)")
	c.log = addLogFlags(fs, "info")
	return fs, c
}

// envName is the environment variable that sets a flag: --max-body is
// IDEM_MAX_BODY.
func envName(flagName string) string {
	return "IDEM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets every flag whose variable is set; flags given on the
// command line override it. A bad value is named by its variable.
func applyEnv(fs *flag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && strings.TrimSpace(v) != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("$%s=%q: %v", envName(f.Name), v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func runServe(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, c := serveFlags(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s\n\nPuts Idempotency-Key semantics in front of an HTTP API (docs/http.md).\nEvery flag can also be set by environment variable: --max-body as IDEM_MAX_BODY, and so on.\n\nFlags:\n", serveUsage)
		fs.PrintDefaults()
	}
	if err := applyEnv(fs); err != nil {
		fmt.Fprintf(stderr, "idem serve: %v\n", err)
		return 2
	}
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { c.dbSet = c.dbSet || f.Name == "db" })
	errs := c.check()
	if len(errs) == 0 && c.configFile != "" {
		c.routes, errs = loadRoutes(fs, c.configFile)
	}
	if len(errs) > 0 {
		for _, err := range errs {
			usageError(fs, stderr, "%v", err)
		}
		return 2
	}
	if c.checkOnly {
		fmt.Fprintf(stdout, "idem serve: configuration valid (%d routes from %s)\n", len(c.routes), cmp.Or(c.configFile, "flags only"))
		return 0
	}
	return c.run(ctx, fs, stdout, stderr)
}

// check validates the flags and builds the options, naming the flag of
// every problem.
func (c *serveConfig) check() []error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, &flagError{flag, fmt.Sprintf(format, args...)})
	}
	switch {
	case c.demo && c.upstream != "":
		bad("upstream", "give --upstream or --demo, not both")
	case !c.demo && c.upstream == "" && !c.checkOnly:
		bad("upstream", "required: the URL of the API to put idem in front of (or --demo to try it)")
	case c.upstream != "":
		u, err := url.Parse(c.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("upstream", "%q is not an http:// or https:// URL with a host", c.upstream)
		}
		c.upstreamURL = u
	}
	if c.demo && !c.dbSet {
		c.db = "sqlite:" + demoDB
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		bad("listen", "%q: %v", c.listen, err)
	}
	if c.admin != "" {
		if _, _, err := net.SplitHostPort(c.admin); err != nil {
			bad("admin", "%q: %v", c.admin, err)
		} else if err := c.adminOptions().Validate(); err != nil {
			bad("admin", "%s", strings.TrimPrefix(err.Error(), "admin: "))
		}
	} else {
		if c.adminToken != "" {
			bad("admin-token", "needs --admin (the address of the admin page it protects)")
		}
		if c.adminWrite {
			bad("admin-write", "needs --admin (the address of the admin page it enables writes on)")
		}
	}
	if cfg, err := c.serverTLS(); err != nil {
		errs = append(errs, err)
	} else {
		c.tlsConfig = cfg
	}
	c.corsOrigins = splitList(c.cors)
	if err := gateway.CheckCORSOrigins(c.corsOrigins); err != nil {
		bad("cors-origins", "%v", err)
	}
	if trusted, err := parseProxies(c.trustedProxies); err != nil {
		bad("trusted-proxies", "%v", err)
	} else {
		c.trusted = trusted
	}
	if open, u, err := openURL(c.db); err != nil {
		errs = append(errs, err) // says --db, never the password
	} else {
		c.openDB, c.driver = open, u.Driver
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"upstream-timeout", c.timeout}, {"drain-timeout", c.drain}, {"read-timeout", c.readTimeout}, {"idle-timeout", c.idleTimeout}} {
		if d.v <= 0 {
			bad(d.name, "%v is not positive", d.v)
		}
	}
	errs = append(errs, c.policy()...)
	c.ledgerOpts.Stale = c.idemOpts.Stale
	if _, err := c.log.logger(io.Discard); err != nil {
		errs = append(errs, err)
	}
	c.ledgerOpts.Lease, c.ledgerOpts.Retention = c.lease, c.retention
	return errs
}

// policy checks the flags that make a route's policy (the defaults, or a
// --config route's flags over them) and builds c.idemOpts from them.
func (c *serveConfig) policy() []error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, &flagError{flag, fmt.Sprintf(format, args...)})
	}
	if c.lease < time.Millisecond || c.lease > 7*24*time.Hour {
		bad("lease", "%v is outside [1ms, 168h]", c.lease)
	}
	if c.retention < time.Millisecond {
		bad("retention", "%v is too short", c.retention)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"wait-timeout", c.waitTimeout}} {
		if d.v <= 0 {
			bad(d.name, "%v is not positive", d.v)
		}
	}

	o := &c.idemOpts
	o.RequireKey, o.KeyFrom, o.Lease, o.Retention, o.WaitTimeout = c.requireKey, c.keyFrom, c.lease, c.retention, c.waitTimeout
	o.MaxBody, o.MaxResponse = int64(c.maxBody), int64(c.maxResponse)
	o.MaxInFlight = c.maxInFlight
	if c.maxInFlight < 1 {
		bad("max-inflight", "%d is not positive", c.maxInFlight)
	}
	o.Methods, o.AllowHeaders, o.Exclude = splitList(c.methods), splitList(c.allowHeaders), splitList(c.exclude)
	switch c.anonymousScope {
	case "refuse":
		o.AnonymousScope = idemhttp.AnonymousRefuse
	case "shared":
		o.AnonymousScope = idemhttp.AnonymousShared
	default:
		bad("anonymous-scope", "%q: want refuse or shared", c.anonymousScope)
	}
	if c.demo {
		o.AnonymousScope = idemhttp.AnonymousShared // the README's curls send no credential
	}
	hmacHeader, keyed := strings.CutPrefix(c.scopeHeader, "hmac:")
	switch {
	case strings.EqualFold(c.scopeHeader, "authorization"):
		o.Scope = idemhttp.ScopeAuthorization
	case strings.EqualFold(c.scopeHeader, "client-cert"):
		o.Scope = idemhttp.ScopeClientCertificate
		if c.clientCA == "" {
			bad("scope-header", "client-cert needs --tls-cert, --tls-key and --client-ca (the CAs whose client certificates to accept)")
		}
	case len(c.scopeHeader) > 4 && strings.EqualFold(c.scopeHeader[:4], "jwt:"):
		if c.jwtKeys == "" {
			bad("scope-header", "%s needs --jwt-keys (the issuer's JWK Set: its jwks_uri, or a file)", c.scopeHeader)
		} else if keys, err := jwtKeySet(c.jwtKeys); err != nil {
			bad("jwt-keys", "%v", err)
		} else {
			o.Scope = keys.scope(c.scopeHeader[4:])
		}
	case strings.EqualFold(c.scopeHeader, "none") || c.scopeHeader == "":
		o.Scope = idemhttp.ScopeNone
		o.AnonymousScope = idemhttp.AnonymousShared // one scope for everybody is what none asks for
	case strings.ContainsAny(c.scopeHeader, " \t") || strings.Contains(hmacHeader, ":") || hmacHeader == "":
		bad("scope-header", "%q is not a header name, hmac:NAME, jwt:CLAIM, client-cert or none", c.scopeHeader)
	case keyed:
		name := http.CanonicalHeaderKey(hmacHeader)
		label := strings.ToLower(name)
		o.Scope = func(r *http.Request) string { return idemhttp.ScopeHMAC(r, label, r.Header.Get(name)) }
	default:
		o.Scope = idemhttp.ScopeHeader(c.scopeHeader)
	}
	switch c.onConflict {
	case "reject":
		o.OnConflict = idemhttp.Reject
	case "wait":
		o.OnConflict = idemhttp.Wait
	default:
		bad("on-conflict", "%q: want reject or wait", c.onConflict)
	}
	switch c.on5xx {
	case "release":
		o.ServerErrors = idemhttp.Release5xx
	case "store":
		o.ServerErrors = idemhttp.Store5xx
	case "hold":
		o.ServerErrors = idemhttp.Hold5xx
	default:
		bad("on-5xx", "%q: want release, store or hold", c.on5xx)
	}
	o.ReleaseStatus = []int{}
	if !strings.EqualFold(strings.TrimSpace(c.releaseStatus), "none") {
		for _, f := range splitList(c.releaseStatus) {
			code, err := strconv.Atoi(f)
			if err != nil {
				bad("release-status", "%q is not a status code", f)
				continue
			}
			o.ReleaseStatus = append(o.ReleaseStatus, code)
		}
	}
	switch c.stale {
	case "redo":
		o.Stale = idem.StaleRedo
	case "park":
		o.Stale = idem.StalePark
	default:
		bad("stale", "%q: want redo or park", c.stale)
	}
	if err := o.Validate(); err != nil {
		for _, e := range joined(err) {
			var ie *idem.InputError
			if errors.As(e, &ie) && optionFlags[ie.Field] != "" {
				bad(optionFlags[ie.Field], "%s", ie.Reason)
			} else {
				errs = append(errs, e)
			}
		}
	}
	return errs
}

// flagError is a bad flag value (or a --config route's value for it).
type flagError struct{ flag, reason string }

func (e *flagError) Error() string { return "--" + e.flag + ": " + e.reason }

// adminOptions are the admin page's options that come from flags.
func (c *serveConfig) adminOptions() *admin.Options {
	return &admin.Options{Addr: c.admin, Token: c.adminToken, Write: c.adminWrite}
}

// optionFlags names the flag behind each idemhttp.Options field that a
// flag sets, for the errors Validate reports by field.
var optionFlags = map[string]string{
	"KeyFrom": "key-from", "Methods": "methods", "AllowHeaders": "allow-headers", "Exclude": "exclude",
	"MaxBody": "max-body", "MaxResponse": "max-response", "ReleaseStatus": "release-status",
	"MaxInFlight": "max-inflight", "Lease": "lease", "Retention": "retention", "WaitTimeout": "wait-timeout",
	"OnConflict": "on-conflict", "ServerErrors": "on-5xx", "AnonymousScope": "anonymous-scope",
}

// joined lists the errors errors.Join gathered in err (err itself if it
// joins none).
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (c *serveConfig) run(ctx context.Context, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	log, _ := c.log.logger(stderr) // checked in check
	c.ledgerOpts.Logger, c.ledgerOpts.HashKeysInLogs = log, c.log.hashKeys
	m := metrics.New(c.driver)
	c.ledgerOpts.Observer = m.FaceObserver(metrics.FaceGateway)
	var rep *admin.Reporter
	if c.reportEvery > 0 {
		rep = admin.NewReporter(&admin.ReporterOptions{Every: c.reportEvery, Logger: log})
		c.ledgerOpts.Observer = idem.Observers(c.ledgerOpts.Observer, rep.Observer())
	}
	// withRuntime gives a policy what the process has: its log and metrics.
	withRuntime := func(o *idemhttp.Options) {
		o.Logger = log
		o.RecordFailed = func() { m.ResponseUnrecorded(metrics.FaceGateway) }
	}
	withRuntime(&c.idemOpts)
	for _, rt := range c.routes {
		if rt.Options != nil {
			withRuntime(rt.Options)
		}
	}

	if c.demo && !c.dbSet {
		// The demo API's charges live in memory and start from zero; its
		// ledger starts empty with them, or the first curl of a second run
		// would already be a replay of a charge the demo no longer knows.
		for _, f := range []string{demoDB, demoDB + "-wal", demoDB + "-shm"} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(stderr, "idem serve: --demo: %v\n", err)
				return 1
			}
		}
	}
	if c.memoryLimit > 0 {
		debug.SetMemoryLimit(int64(c.memoryLimit))
		if held := int64(c.maxInFlight) * int64(c.maxBody+c.maxResponse); held > int64(c.memoryLimit) {
			log.Warn("idem serve: --memory-limit is below what --max-inflight requests may hold (--max-body plus --max-response each); near it the collector runs continuously",
				"memory_limit", c.memoryLimit.String(), "in_flight_bound", (*byteSize)(&held).String())
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	l, err := dburl.Open(openCtx, c.openDB, &c.ledgerOpts)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "idem serve: %v\n", err)
		return 1
	}
	defer l.Close()
	m.CountFrom(l, nil)
	if rep != nil {
		if err := rep.Start(l); err != nil {
			log.Warn("idem serve: the admin page's totals will not include this gateway", "err", err)
		} else {
			defer rep.Close() // before l.Close: the last flush
		}
	}
	if c.pruneEvery > 0 {
		pctx, stopPrune := context.WithCancel(ctx)
		defer stopPrune()
		go pruneLoop(pctx, l, c.pruneEvery, log)
	}

	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	if c.demo {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(stderr, "idem serve: demo API: %v\n", err)
			return 1
		}
		demo := &http.Server{Handler: demo.New(), ReadHeaderTimeout: 10 * time.Second}
		go demo.Serve(ln)
		closers = append(closers, func() { demo.Close() })
		c.upstreamURL = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	}

	gw, err := gateway.New(l, &gateway.Config{Upstream: c.upstreamURL, Options: &c.idemOpts, Timeout: c.timeout, ReadTimeout: c.readTimeout,
		Logger: log, AddedLatency: m.GatewayAdded, Routes: c.routes, TrustedProxies: c.trusted, PreserveHost: c.preserveHost, CORSOrigins: c.corsOrigins})
	if err != nil {
		fmt.Fprintf(stderr, "idem serve: %v\n", err)
		return 2
	}
	if c.configFile != "" {
		// SIGHUP reloads the file: all of it or, if anything in it is
		// wrong, none of it.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
				}
				routes, errs := loadRoutes(fs, c.configFile)
				for _, rt := range routes {
					if rt.Options != nil {
						withRuntime(rt.Options)
					}
				}
				if len(errs) == 0 {
					if err := gw.SetRoutes(&c.idemOpts, routes); err != nil {
						errs = append(errs, err)
					}
				}
				if len(errs) > 0 {
					log.Error("idem serve: --config not reloaded; the previous policies stay", "file", c.configFile, "err", errors.Join(errs...))
					continue
				}
				log.Info("idem serve: --config reloaded", "file", c.configFile, "routes", len(routes))
			}
		}()
	}
	startJWTKeySets(ctx, log)
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "idem serve: --listen: %v\n", err)
		return 1
	}
	headerTimeout := min(10*time.Second, c.readTimeout)
	// The gateway bounds bodies itself (gateway.Config.ReadTimeout): the
	// server's own ReadTimeout would also cancel slow upstream answers.
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: headerTimeout, IdleTimeout: c.idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Protocols: listenProtocols()}
	failed := make(chan error, 2)
	scheme := "http"
	serve := func() error { return srv.Serve(ln) }
	if c.tlsConfig != nil {
		srv.TLSConfig, scheme = c.tlsConfig, "https"
		serve = func() error { return srv.ServeTLS(ln, "", "") } // HTTP/2 too
	}
	go func() { failed <- serve() }()

	var adminSrv *http.Server
	if c.admin != "" {
		aln, err := net.Listen("tcp", c.admin)
		if err != nil {
			srv.Close()
			fmt.Fprintf(stderr, "idem serve: --admin: %v\n", err)
			return 1
		}
		ao := c.adminOptions()
		ao.Metrics, ao.Logger, ao.DeadJobs = m, log, admin.LedgerDeadJobs(l)
		ao.JobQueues, ao.PauseQueue, ao.HashKeys = admin.LedgerJobQueues(l), admin.LedgerPauseQueue(l), c.log.hashKeys
		ah, err := admin.New(l, ao)
		if err != nil {
			srv.Close()
			aln.Close()
			fmt.Fprintf(stderr, "idem serve: %v\n", err) // admin's errors name their flag
			return 2
		}
		adminSrv = &http.Server{Handler: ah, ReadHeaderTimeout: headerTimeout, ReadTimeout: c.readTimeout, IdleTimeout: c.idleTimeout,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { failed <- adminSrv.Serve(aln) }()
		fmt.Fprintf(stderr, "idem serve: admin on http://%s (/, /healthz, /metrics)\n", aln.Addr())
	}

	addr := ln.Addr().String()
	if c.demo {
		base, curl := addr, "curl"
		if c.tlsConfig != nil {
			base, curl = "https://"+addr, "curl --cacert "+c.tlsCert
		}
		fmt.Fprintf(stdout, "idem serve: a demo payments API runs on %s behind the gateway on %s://%s\n\n", c.upstreamURL.Redacted(), scheme, addr)
		fmt.Fprintf(stdout, "Try, in another terminal:\n")
		fmt.Fprintf(stdout, "  %s -si -X POST %s/charges -H 'Idempotency-Key: order-42' -d '{\"amount\":1000}'   # 201, charged once\n", curl, base)
		fmt.Fprintf(stdout, "  %s -si -X POST %s/charges -H 'Idempotency-Key: order-42' -d '{\"amount\":1000}'   # the same 201, Idempotent-Replayed: true\n", curl, base)
		fmt.Fprintf(stdout, "  %s -si -X POST %s/charges -H 'Idempotency-Key: order-42' -d '{\"amount\":999}'    # 422: key reused with a different request\n", curl, base)
		fmt.Fprintf(stdout, "  %s -si -X POST %s/charges -H 'Idempotency-Key: slow-1' -H 'Demo-Delay: 5s' -d '{\"amount\":5}' & sleep 1\n", curl, base)
		fmt.Fprintf(stdout, "  %s -si -X POST %s/charges -H 'Idempotency-Key: slow-1' -d '{\"amount\":5}'                    # 409 while the first runs\n", curl, base)
		fmt.Fprintf(stdout, "  %s -s %s/charges                                                               # charges per key\n\n", curl, base)
	}

	anon := ""
	if c.demo {
		anon = "; --demo: callers without Authorization share one scope"
		if !c.dbSet {
			anon += "; the demo's ledger " + demoDB + " was emptied on start"
		}
	}
	if c.configFile != "" {
		anon += fmt.Sprintf("; %d routes from %s, SIGHUP reloads it", len(c.routes), c.configFile)
	}
	fmt.Fprintf(stderr, "idem serve: listening on %s://%s, forwarding to %s, ledger %s (lease %v, retention %v%s)\n",
		scheme, addr, c.upstreamURL.Redacted(), dburl.Redact(c.db), c.lease, c.retention, anon)
	select {
	case <-ctx.Done():
	case err := <-failed:
		fmt.Fprintf(stderr, "idem serve: %v\n", err)
		return 1
	}
	// Drain: stop accepting, let in-flight requests finish (each records
	// its response and ends its claim), then close.
	log.Info("idem serve: draining", "timeout", c.drain)
	dctx, cancel := context.WithTimeout(context.Background(), c.drain)
	defer cancel()
	err = srv.Shutdown(dctx)
	if adminSrv != nil {
		adminSrv.Shutdown(dctx)
	}
	if err != nil {
		log.Warn("idem serve: drain timed out; unfinished requests keep their claims until their leases end", "err", err)
		srv.Close()
		return 1
	}
	log.Info("idem serve: stopped")
	return 0
}

// listenProtocols are what the gateway's listener speaks: HTTP/1.1, and
// HTTP/2 both over TLS and in the clear with prior knowledge (h2c), as
// proxies and platforms in front of it speak it to their backends (Envoy,
// Cloud Run's end-to-end HTTP/2).
func listenProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// pruneLoop runs the retention sweep every interval until ctx ends. Safe
// beside other gateways and `idem prune`: batches skip rows others hold.
func pruneLoop(ctx context.Context, l *idem.Ledger, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			st, err := l.Prune(ctx, nil)
			if err != nil && ctx.Err() == nil {
				log.Warn("idem serve: prune failed", "err", err)
				continue
			}
			if st.Tombstoned+st.Deleted > 0 {
				log.Info("idem serve: pruned", "tombstoned", st.Tombstoned, "deleted", st.Deleted, "batches", st.Batches)
			}
		}
	}
}

// byteSize is a flag value in bytes, written as 1048576, 512KiB, 1MiB,
// 2MB (decimal) or 1GiB.
type byteSize int64

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		s string
		n int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.s)) {
			s, mult = strings.TrimSpace(s[:len(s)-len(u.s)]), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return errors.New("want a positive size such as 1048576, 512KiB or 1MiB")
	}
	*b = byteSize(n * mult)
	return nil
}

// parseProxies parses --trusted-proxies: IP addresses and CIDR prefixes,
// comma-separated.
func parseProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range splitList(list) {
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix such as 10.0.0.0/8", item)
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}

// serverTLS builds the gateway's TLS configuration from --tls-cert,
// --tls-key and --client-ca (nil without them), checking the files now so
// that --check and start-up name a bad one. Client certificates are asked
// for and verified against --client-ca when given; a client without one
// still connects, and its guarded requests have no scope under
// --scope-header client-cert (see --anonymous-scope).
func (c *serveConfig) serverTLS() (*tls.Config, error) {
	bad := func(flag, format string, args ...any) error {
		return &flagError{flag, fmt.Sprintf(format, args...)}
	}
	switch {
	case c.tlsCert == "" && c.tlsKey == "":
		if c.clientCA != "" {
			return nil, bad("client-ca", "needs --tls-cert and --tls-key (client certificates come with TLS)")
		}
		return nil, nil
	case c.tlsCert == "" || c.tlsKey == "":
		return nil, bad("tls-cert", "--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, bad("tls-cert", "%v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.clientCA != "" {
		pem, err := os.ReadFile(c.clientCA)
		if err != nil {
			return nil, bad("client-ca", "%v", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, bad("client-ca", "%s holds no PEM certificate", c.clientCA)
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}
