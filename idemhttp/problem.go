package idemhttp

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// ProblemBase prefixes the type URI of every problem the middleware and the
// gateway answer with. Each type is documented in docs/http.md.
const ProblemBase = "https://idem.dev/problems/"

// Problem type URIs, one per answer that is not the handler's own.
const (
	ProblemKeyMissing        = ProblemBase + "key-missing"               // 400: a key is required
	ProblemKeyInvalid        = ProblemBase + "key-invalid"               // 400: empty, too long, not printable, malformed
	ProblemScopeInvalid      = ProblemBase + "scope-invalid"             // 400: the scope value cannot be stored
	ProblemScopeMissing      = ProblemBase + "scope-missing"             // 400: a key but no credential to scope it (AnonymousRefuse)
	ProblemBodyInvalid       = ProblemBase + "body-invalid"              // 400: unreadable, or declared JSON that is not
	ProblemBodyTooLarge      = ProblemBase + "body-too-large"            // 413: over MaxBody (as sent or decoded); nothing claimed
	ProblemBodyEncoding      = ProblemBase + "body-encoding-unsupported" // 415: a key in a body whose Content-Encoding is not decoded
	ProblemInFlight          = ProblemBase + "request-in-flight"         // 409: the first request with the key is running
	ProblemKeyMismatch       = ProblemBase + "key-mismatch"              // 422: the key was used for a different request
	ProblemResponseNotStored = ProblemBase + "response-not-stored"       // 410: done, but too large or streamed to store
	ProblemKeyExpired        = ProblemBase + "key-expired"               // 410: done long ago; only a tombstone is left
	ProblemParked            = ProblemBase + "operation-parked"          // 409: outcome unknown, waits for an operator
	ProblemLedgerUnavailable = ProblemBase + "ledger-unavailable"        // 503: the database did not answer; nothing ran
	ProblemTooBusy           = ProblemBase + "too-busy"                  // 503: MaxInFlight guarded requests already running; nothing ran
	ProblemBodyTimeout       = ProblemBase + "body-timeout"              // 408: the body did not arrive in time; nothing claimed
	ProblemLeaseLost         = ProblemBase + "lease-lost"                // 503: the claim was taken over; effects rolled back
	ProblemOutcomeUnknown    = ProblemBase + "outcome-unknown"           // 503: the commit may or may not have happened
	ProblemUpstreamDown      = ProblemBase + "upstream-unreachable"      // 502: nothing was sent upstream; key released
	ProblemUpstreamUnknown   = ProblemBase + "upstream-outcome-unknown"  // 504: sent, no answer; key held until its lease ends
)

// Problem is an RFC 9457 problem details object, written as
// application/problem+json.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// FirstStatus is, for a response-not-stored problem, the status the
	// first request was answered with.
	FirstStatus int `json:"first_status,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int `json:"-"`
	// Help, when set, is sent as a Link header with rel="help".
	Help string `json:"-"`
	// AcceptEncoding, when set, is sent as the Accept-Encoding header:
	// the content codings a request body may have had (RFC 9110, section
	// 15.5.16), on a 415.
	AcceptEncoding string `json:"-"`
}

// RequestCodings are the content codings of a request body the middleware
// decodes to fingerprint it (and read a key from it), as an Accept-Encoding
// value. A body in another coding is fingerprinted as the bytes it is.
const RequestCodings = "gzip, deflate, br, zstd"

// WriteProblem writes p with Content-Type application/problem+json and
// Cache-Control no-store.
//
// The document also carries the problem as two extension members, as an
// OAuth 2.0 error response has them (RFC 6749, section 5.2): "error", the
// type's last segment (key-mismatch), and "error_description", the detail
// (the title when there is none). Clients that tell an error by its body
// rather than its status see one: Stripe's Node SDK resolves any JSON
// answer without an "error" member as the object it asked for, whatever
// the status, so a 422 key-mismatch came back to its caller as a created
// payment intent. A string, not Stripe's error object: stripe-go retries
// an error body it cannot read as its own (a 409 request-in-flight, a 503
// too-busy) and returns one it can read to its caller at once.
func WriteProblem(w http.ResponseWriter, p Problem) {
	b, _ := json.Marshal(struct {
		Problem
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}{p, p.Type[strings.LastIndexByte(p.Type, '/')+1:], cmp.Or(p.Detail, p.Title)})
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.Help != "" {
		h.Set("Link", "<"+p.Help+`>; rel="help"`)
	}
	if p.AcceptEncoding != "" {
		h.Set("Accept-Encoding", p.AcceptEncoding)
	}
	w.WriteHeader(p.Status)
	w.Write(b)
}
