package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// MetadataKey is the incoming and outgoing metadata key that carries the
// idempotency key.
const MetadataKey = "idempotency-key"

// ReplayedHeader is the response header a replayed answer carries, with the
// value "true".
const ReplayedHeader = "idempotent-replayed"

// Options configure UnaryServerInterceptor. The zero value (or nil) means
// the defaults, except that a keyed call is refused until the caller says
// where its scope comes from: set Scope, or SharedScope.
type Options struct {
	// Scope returns who owns the call's key: the authenticated principal or
	// tenant, taken from the call's context (a peer certificate, a verified
	// token your auth interceptor put there). Keys never match across
	// scopes, so one caller can never receive another's stored response.
	// At most 255 bytes of printable text. An error refuses the call: its
	// gRPC status if it has one, else Unauthenticated.
	//
	// There is no default. gRPC has no standard credential header that
	// idemgrpc could hash the way idemhttp hashes Authorization, and a
	// silent shared scope would hand one caller's stored response to any
	// other caller who guesses or replays its key. Without Scope (and
	// without SharedScope) a call with a key is refused with
	// FailedPrecondition naming this option.
	Scope func(ctx context.Context) (string, error)
	// SharedScope puts every call in one scope, shared by all callers. Only
	// for single-tenant services, where every caller may see every other's
	// answers. It may not be combined with Scope.
	SharedScope bool
	// RequireKey refuses a call without a key (InvalidArgument). By default
	// such a call passes through unguarded.
	RequireKey bool
	// KeyFromFingerprint derives a missing key from the work: a call
	// without metadata idempotency-key gets its request fingerprint
	// (method and deterministic encoding of the request message, Exclude
	// cleared) as its key, so identical calls within Retention are handled
	// once, for callers that send no key. A call with a key uses it. Never
	// use it for work that must run again on the same input (a model call
	// sampled with temperature > 0 whose caller wants a fresh answer each
	// time): the second call gets the first one's stored answer.
	KeyFromFingerprint bool
	// Exclude names fields of request messages left out of the
	// fingerprint: what changes between deliveries of one piece of work
	// (timestamps, request ids, a key field). Each is a dot-separated path
	// of proto field names ("sent_at", "meta.request_id"); a path a
	// message does not have is skipped for that message.
	Exclude []string
	// Methods, if set, reports whether a method (its full name,
	// "/pkg.Service/Method") is guarded. Unguarded methods pass through
	// untouched, key and all. Nil guards every unary method the
	// interceptor is installed on.
	Methods func(fullMethod string) bool
	// Lease overrides the ledger's lease for guarded calls; zero means the
	// ledger's. The claim is heartbeated every third of it while the handler
	// runs. Negative is an error.
	Lease time.Duration
	// Retention overrides how long a recorded answer is replayed; zero means
	// the ledger's. Negative is an error.
	Retention time.Duration
	// Logger receives one line per notable event (replay, mismatch, release,
	// a failed record). Nil means slog.Default. Keys are logged by
	// idem.KeyHash, never by value.
	Logger *slog.Logger
}

// config is Options checked and with defaults filled.
type config struct {
	scope     func(ctx context.Context) (string, error)
	shared    bool
	require   bool
	methods   func(string) bool
	lease     time.Duration
	retention time.Duration
	derive    bool
	exclude   [][]string // field name paths
	log       *slog.Logger
}

// ErrBadOptions is matched by every error New returns for bad options.
var ErrBadOptions = errors.New("idemgrpc: bad options")

func (o *Options) config() (config, error) {
	if o == nil {
		o = &Options{}
	}
	c := config{scope: o.Scope, shared: o.SharedScope, require: o.RequireKey, methods: o.Methods,
		lease: o.Lease, retention: o.Retention, derive: o.KeyFromFingerprint, log: o.Logger}
	for _, p := range o.Exclude {
		path := strings.Split(p, ".")
		if slices.Contains(path, "") {
			return c, fmt.Errorf("%w: Exclude %q is not a dot-separated path of field names", ErrBadOptions, p)
		}
		c.exclude = append(c.exclude, path)
	}
	switch {
	case o.Scope != nil && o.SharedScope:
		return c, fmt.Errorf("%w: Scope and SharedScope are exclusive", ErrBadOptions)
	case o.Lease < 0:
		return c, fmt.Errorf("%w: Lease %v is negative", ErrBadOptions, o.Lease)
	case o.Retention < 0:
		return c, fmt.Errorf("%w: Retention %v is negative", ErrBadOptions, o.Retention)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}
