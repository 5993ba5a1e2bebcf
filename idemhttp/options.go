package idemhttp

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/fingerprint"
)

// Defaults used where Options leave a field zero.
const (
	DefaultMaxBody     = 1 << 20 // bytes of request body read and fingerprinted
	DefaultMaxResponse = 1 << 20 // bytes of response body stored for replay
	DefaultWaitTimeout = 10 * time.Second
	DefaultKeyFrom     = "header:Idempotency-Key"
	// DefaultDocsURL is where a 400 for a missing key points the client.
	DefaultDocsURL = "https://idem.dev/docs/http"
)

// Upper bounds on the size options: a stored response is one database row.
const (
	maxMaxBody     = 1 << 30
	maxMaxResponse = 64 << 20
)

// DefaultMethods are the methods the middleware guards unless told
// otherwise: the ones that are not idempotent by definition (RFC 9110 §9.2.2).
var DefaultMethods = []string{http.MethodPost, http.MethodPatch}

// DefaultReleaseStatus are the answers that say "nothing was done": 401
// Unauthorized and 403 Forbidden (refused before anything ran: fix the
// credentials or the permission, then retry), 408 Request Timeout, 425
// Too Early and 429 Too Many Requests ("try later"). They are passed
// through unstored and release the key, like a 5xx under Release5xx, so a
// retry with the same key is handled again. Stored, a 401 would be
// replayed to the retry that carries a refreshed token (where keys are not
// scoped by Authorization) until the key expired.
var DefaultReleaseStatus = []int{http.StatusUnauthorized, http.StatusForbidden,
	http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests}

// DefaultAllowHeaders are the response headers stored and replayed besides
// the ones in Options.AllowHeaders: what describes the body (its type,
// language, file name, location, version), links, and the CORS fields.
// Without the first answer's Access-Control-Allow-Origin a browser
// refuses its page the replay, and a double submit's second fetch fails as
// if the network had; without its Content-Disposition a report made by a
// POST is saved under another name the second time.
var DefaultAllowHeaders = []string{"Content-Type", "Content-Language", "Content-Disposition", "Location", "Content-Location",
	"ETag", "Last-Modified", "Link",
	"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Expose-Headers"}

// neverStored are response headers that carry credentials or describe the
// connection; they are never stored, whatever AllowHeaders says.
var neverStored = []string{
	"Set-Cookie", "Set-Cookie2", "Cookie", "Authorization", "Proxy-Authorization",
	"WWW-Authenticate", "Proxy-Authenticate",
	"Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Trailer", "Te",
	"Content-Length", "Idempotent-Replayed",
}

// ConflictPolicy says what a request gets while another request with the
// same key (and scope) is still being handled.
type ConflictPolicy int

const (
	// Reject answers 409 application/problem+json with Retry-After at once.
	// The default: the client's own retry loop decides how long to wait.
	Reject ConflictPolicy = iota
	// Wait holds the request for up to Options.WaitTimeout until the first
	// one finishes, then answers as a retry would: the stored response, or,
	// if the first released the key, by handling the request itself. After
	// the timeout it answers 409 like Reject.
	Wait
)

// ServerErrorPolicy says what becomes of a key whose handler (or upstream)
// answered 5xx.
type ServerErrorPolicy int

const (
	// Release5xx passes the 5xx through without storing it and releases the
	// key, so the client's retry (with the same key) is handled again. The
	// default: a payments client retries a 502 or 503 and expects progress,
	// not the same error replayed for 24 hours; the key is forwarded, so an
	// upstream that deduplicates on it keeps a retry from doubling an effect
	// that happened before the 5xx.
	Release5xx ServerErrorPolicy = iota
	// Store5xx stores and replays a 5xx like any other response, as Stripe
	// does ("including 500 errors"): a retry never reaches the handler
	// again, and the client must use a new key to try again.
	Store5xx
	// Hold5xx treats a 5xx as an unknown outcome: passed through, not
	// stored, and the claim is left to its lease; after that the stale-claim
	// policy decides (Redo by default: handled again with the same key).
	// In transaction-bound mode it acts as Release5xx, since the handler's
	// effects are rolled back.
	Hold5xx
)

// Options configures the middleware. A nil *Options means all defaults.
type Options struct {
	// Methods the middleware guards; others pass through untouched.
	// Default POST and PATCH.
	Methods []string
	// RequireKey answers 400 to a guarded request without a key. By
	// default such a request passes through unguarded.
	RequireKey bool
	// KeyFrom says where the key is: "header:NAME" (default
	// "header:Idempotency-Key"), "json:/pointer" (a string field of a JSON
	// body, RFC 6901 pointer, as Square's idempotency_key) or "form:NAME"
	// (a field of an application/x-www-form-urlencoded body, as an OAuth
	// authorization code, or of a multipart/form-data one, as an HTML
	// form's hidden field next to a file input). A header key is forwarded
	// unchanged.
	//
	// KeyFromFingerprint ("fingerprint") derives the key from the work:
	// a request without an Idempotency-Key header is keyed by its request
	// fingerprint (method, path, query and canonical body, Exclude left
	// out), so identical requests within Retention are handled once, for
	// webhook receivers and model-call proxies whose callers send no key.
	// The derived key is set as the request's Idempotency-Key, so the
	// handler (or upstream) sees it as it would a client's.
	// Exclude what changes between deliveries of one piece of work
	// (timestamps, request ids, a key field in the body). Never use it for
	// work that must run again on the same input (a model call sampled with
	// temperature > 0 whose caller wants a fresh answer each time): the
	// second request gets the first one's stored response.
	KeyFrom string
	// Scope names who owns a key; keys never match across scopes. Default
	// ScopeAuthorization. The result must be at most 255 bytes without
	// control characters, or the request gets 400. "" means the request
	// has no scope: see AnonymousScope.
	Scope func(*http.Request) string
	// AnonymousScope is what a guarded request with a key but no scope
	// gets. Default AnonymousRefuse: 400 scope-missing, so that a caller
	// without a credential never receives another caller's response.
	AnonymousScope AnonymousPolicy
	// Lease is how long a claim is trusted without a heartbeat. The
	// middleware heartbeats while the handler runs, so this only bounds how
	// long a key stays blocked after the process dies (or after an upstream
	// timeout). In transaction-bound mode it bounds the handler's whole run.
	// Default: the ledger's (30s).
	Lease time.Duration
	// Retention is how long a stored response is replayed. Default: the
	// ledger's (24h).
	Retention time.Duration
	// Stale overrides the ledger's stale-claim policy for these requests.
	Stale idem.StalePolicy
	// MaxBody is the largest request body accepted, in bytes; larger gets
	// 413 before anything is claimed. Default 1 MiB, at most 1 GiB.
	MaxBody int64
	// MaxResponse is the largest response body stored, in bytes. A larger
	// response still reaches the client, and the key records that its
	// response cannot be replayed. Default 1 MiB, at most 64 MiB.
	MaxResponse int64
	// SpillDir is where the bytes of a held response body past its first
	// 64 KiB wait while it is recorded and sent: in a temporary file,
	// removed at once (as a reverse proxy buffers large responses), so
	// that many large responses in flight hold little memory. Default
	// os.TempDir(). New refuses a SpillDir that is not a directory; if no
	// file can be made or written there later, the body is held in memory,
	// and a warning says so once a minute at most.
	SpillDir string
	// OnConflict is what a request gets while the same key is in flight.
	// Default Reject.
	OnConflict ConflictPolicy
	// MaxInFlight bounds how many guarded requests are handled at once
	// (each may hold up to MaxBody of request body in memory). Past it a
	// request to a guarded method gets 503 too-busy with Retry-After,
	// before its body is read or anything is claimed; one that turns out
	// to carry no key gives its place back before it is passed through.
	// 0 means no bound.
	MaxInFlight int
	// WaitTimeout bounds a wait under OnConflict Wait. Default 10s.
	WaitTimeout time.Duration
	// ServerErrors is what becomes of a 5xx answer. Default Release5xx.
	ServerErrors ServerErrorPolicy
	// ReleaseStatus lists 4xx statuses that are passed through unstored
	// and release the key, as answers that mean "nothing was done" (5xx
	// answers follow ServerErrors). nil means
	// DefaultReleaseStatus; an empty non-nil slice releases none.
	ReleaseStatus []int
	// AllowHeaders are response headers stored and replayed in addition to
	// DefaultAllowHeaders. Credentials (Set-Cookie, Authorization,
	// WWW-Authenticate, …) and hop-by-hop headers cannot be allowed.
	AllowHeaders []string
	// Exclude lists JSON Pointers (RFC 6901, "*" matches every element)
	// of body fields left out of the fingerprint: timestamps, request ids.
	// For form bodies, "/name" leaves out the field name.
	Exclude []string
	// DocsURL is linked from the 400 for a missing key. Default
	// DefaultDocsURL.
	DocsURL string
	// RecordFailed, when set, is called once for every response that
	// reached its client but could not be recorded (the ledger write failed:
	// disk full, database gone; a lost lease does not count). The key stays
	// claimed until its lease ends, then the stale-claim policy applies: by
	// default a retry is handled again with the same key. Each call is
	// also logged as an error. metrics.Collector.ResponseUnrecorded fits.
	RecordFailed func()
	// AddedLatency, when set, is told for every guarded request that a
	// Forwarder (NewProxy) sent upstream how long the middleware took
	// beyond the upstream call itself: claim, fingerprint, recording.
	// metrics.Collector.GatewayAdded fits.
	AddedLatency func(time.Duration)
	// Logger receives a line for every notable decision, carrying scope,
	// a hash of the key, fingerprint and attempt. Default slog.Default().
	Logger *slog.Logger
}

// config is Options checked and filled with defaults.
type config struct {
	methods      map[string]bool
	requireKey   bool
	key          keySource
	scope        func(*http.Request) string // nil: ScopeAuthorization's, computed without copying the request
	anonymous    AnonymousPolicy
	lease        time.Duration
	retention    time.Duration
	stale        idem.StalePolicy
	maxBody      int64
	maxResponse  int64
	spillDir     string
	onConflict   ConflictPolicy
	waitTimeout  time.Duration
	maxInFlight  int
	serverErrors ServerErrorPolicy
	release      map[int]bool            // statuses that release the key
	allow        map[string]bool         // canonical header names
	fingerprint  *fingerprint.HTTPHasher // Exclude, parsed once
	docsURL      string
	recordFailed func()
	addedLatency func(time.Duration)
	log          *slog.Logger
}

func newConfig(opts *Options) (*config, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	c := &config{
		requireKey:   o.RequireKey,
		scope:        o.Scope,
		anonymous:    o.AnonymousScope,
		lease:        o.Lease,
		retention:    o.Retention,
		stale:        o.Stale,
		maxBody:      cmp.Or(o.MaxBody, DefaultMaxBody),
		maxResponse:  cmp.Or(o.MaxResponse, DefaultMaxResponse),
		spillDir:     o.SpillDir,
		onConflict:   o.OnConflict,
		waitTimeout:  cmp.Or(o.WaitTimeout, DefaultWaitTimeout),
		maxInFlight:  o.MaxInFlight,
		serverErrors: o.ServerErrors,
		docsURL:      cmp.Or(o.DocsURL, DefaultDocsURL),
		recordFailed: o.RecordFailed,
		addedLatency: o.AddedLatency,
		log:          cmp.Or(o.Logger, slog.Default()),
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &idem.InputError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	c.methods = map[string]bool{}
	methods := o.Methods
	if len(methods) == 0 {
		methods = DefaultMethods
	}
	for _, m := range methods {
		m = strings.ToUpper(strings.TrimSpace(m))
		if m == "" || strings.ContainsAny(m, " \t\r\n") {
			bad("Methods", "%q is not a method", m)
			continue
		}
		c.methods[m] = true
	}
	var err error
	if c.key, err = parseKeyFrom(cmp.Or(o.KeyFrom, DefaultKeyFrom)); err != nil {
		bad("KeyFrom", "%v", err)
	}
	if c.lease < 0 {
		bad("Lease", "%v is negative", c.lease)
	}
	if c.retention < 0 {
		bad("Retention", "%v is negative", c.retention)
	}
	if c.maxBody < 0 || c.maxBody > maxMaxBody {
		bad("MaxBody", "%d is outside [1, %d]", c.maxBody, maxMaxBody)
	}
	if c.maxResponse < 0 || c.maxResponse > maxMaxResponse {
		bad("MaxResponse", "%d is outside [1, %d]", c.maxResponse, maxMaxResponse)
	}
	if c.anonymous != AnonymousRefuse && c.anonymous != AnonymousShared {
		bad("AnonymousScope", "unknown policy %d", c.anonymous)
	}
	if c.onConflict != Reject && c.onConflict != Wait {
		bad("OnConflict", "unknown policy %d", c.onConflict)
	}
	if c.maxInFlight < 0 {
		bad("MaxInFlight", "%d is negative", c.maxInFlight)
	}
	if c.spillDir != "" {
		if fi, err := os.Stat(c.spillDir); err != nil {
			bad("SpillDir", "%v", err)
		} else if !fi.IsDir() {
			bad("SpillDir", "%s is not a directory", c.spillDir)
		}
	}
	if c.waitTimeout < 0 {
		bad("WaitTimeout", "%v is negative", c.waitTimeout)
	}
	if c.serverErrors < Release5xx || c.serverErrors > Hold5xx {
		bad("ServerErrors", "unknown policy %d", c.serverErrors)
	}
	c.release = map[int]bool{}
	release := o.ReleaseStatus
	if release == nil {
		release = DefaultReleaseStatus
	}
	for _, code := range release {
		if code < 400 || code > 499 {
			bad("ReleaseStatus", "%d is not a 4xx status (5xx answers follow ServerErrors)", code)
		}
		c.release[code] = true
	}
	c.allow = map[string]bool{}
	for _, h := range append(append([]string(nil), DefaultAllowHeaders...), o.AllowHeaders...) {
		name := http.CanonicalHeaderKey(strings.TrimSpace(h))
		if name == "" {
			continue
		}
		for _, never := range neverStored {
			if name == http.CanonicalHeaderKey(never) { // "WWW-Authenticate" is "Www-Authenticate" to net/http
				bad("AllowHeaders", "%s is never stored", name)
			}
		}
		c.allow[name] = true
	}
	if c.fingerprint, err = fingerprint.NewHTTP(o.Exclude); err != nil {
		bad("Exclude", "%v", err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// op builds the ledger operation for a prepared request.
func (c *config) op(p *prepared) idem.Op {
	return idem.Op{Scope: p.scope, Key: p.key, Fingerprint: p.fingerprint, Lease: c.lease, Retention: c.retention, Stale: c.stale}
}

// Validate reports every problem New would refuse o for, without a
// ledger: for command lines that check their flags before opening a
// database.
//
// Each bad option is an *idem.InputError whose Field names the Options
// field (errors.Join gathers them), so a caller can say which of its own
// settings was wrong.
func (o *Options) Validate() error {
	_, err := newConfig(o)
	return err
}
