package idemhttp

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/idemdev/idem"
)

// ScopeAuthorization scopes keys by a keyed hash (HMAC-SHA256) of the
// Authorization header value, so two credentials never share a key, the
// credential itself is never stored, and the scope in the ledger and in
// logs cannot be turned back into a weak credential (a Basic password, a
// short token) by guessing offline: the hash key is a random secret
// created once per database and kept in it. A request without
// Authorization has no scope (see AnonymousScope). The default.
//
// It works inside the middleware, which hands it the database's secret;
// called anywhere else it finds no secret and returns "" (no scope).
func ScopeAuthorization(r *http.Request) string {
	return ScopeHMAC(r, "authorization", r.Header.Get("Authorization"))
}

// ScopeHMAC is the scope for a credential value: label, then the
// HMAC-SHA256 of value under the database's secret, in hex. An empty value
// (no credential) is the empty scope. Use it in an Options.Scope function
// for a credential that arrives elsewhere, say an X-Api-Key header:
//
//	Scope: func(r *http.Request) string { return idemhttp.ScopeHMAC(r, "api-key", r.Header.Get("X-Api-Key")) }
//
// Like ScopeAuthorization it needs the secret the middleware puts in the
// request's context, and returns "" without it.
func ScopeHMAC(r *http.Request, label, value string) string {
	key, _ := r.Context().Value(scopeSecretKey{}).([]byte)
	return scopeHMAC(key, label, value)
}

// scopeHMAC is ScopeHMAC with the secret given.
func scopeHMAC(key []byte, label, value string) string {
	if value == "" || len(key) == 0 {
		return ""
	}
	km, _ := macs.Get().(*keyedMAC)
	if km == nil || !bytes.Equal(km.key, key) {
		km = &keyedMAC{key: key, mac: hmac.New(sha256.New, key)}
	} else {
		km.mac.Reset()
	}
	defer macs.Put(km)
	return km.scope(label, value)
}

// scope is label-hmac: and the HMAC of value, in hex: with km's buffers
// warm, the string returned is its one allocation.
func (km *keyedMAC) scope(label, value string) string {
	km.in = append(km.in[:0], value...) // the HMAC takes bytes: a string would be copied anew
	km.mac.Write(km.in)
	clear(km.in) // a credential: not left in the pool
	if cap(km.in) > 4<<10 {
		km.in = nil // a huge one's room is not kept either
	}
	const infix = "-hmac:"
	var buf [64 + len(infix) + 2*sha256.Size]byte // room for most labels: the string is the one allocation
	out := append(append(buf[:0], label...), infix...)
	return string(hex.AppendEncode(out, km.mac.Sum(km.sum[:0])))
}

// macs keeps HMACs keyed with a scope secret for reuse: a new one costs
// more than the hashing it does. A process has one secret per database.
var macs sync.Pool

// keyedMAC is an HMAC-SHA256 under key.
type keyedMAC struct {
	key []byte
	mac hash.Hash
	sum [sha256.Size]byte
	in  []byte // the value hashed, copied
}

// ScopeHeader scopes keys by the value of the named request header (for
// example X-Tenant-ID, set by an authenticating proxy in front), stored as
// is. A request without the header has no scope (see AnonymousScope). Use
// it only where clients cannot set the header themselves, and not for a
// secret (use ScopeHMAC).
func ScopeHeader(name string) func(*http.Request) string {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// ScopeNone puts every key in one scope: any client that knows a key gets
// its stored response. Only for single-tenant APIs, and only with
// AnonymousScope set to AnonymousShared (it returns the empty scope, which
// is refused otherwise).
func ScopeNone(*http.Request) string { return "" }

// ScopeClientCertificate scopes keys by the SHA-256 of the client's TLS
// certificate (mutual TLS); a certificate is public, so a plain digest
// gives nothing away. A request without one has no scope (see
// AnonymousScope).
func ScopeClientCertificate(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
	return "client-cert-sha256:" + hex.EncodeToString(sum[:])
}

// AnonymousPolicy says what becomes of a guarded request with a key but no
// scope: the Scope function returned "", because the request carries no
// credential it knows (no Authorization header, say, behind an API that
// authenticates by cookie or X-Api-Key).
type AnonymousPolicy int

const (
	// AnonymousRefuse answers such a request 400 scope-missing, naming the
	// fix, and claims nothing: without a scope, one caller could receive
	// another's stored response for the same (guessable) key. The default.
	AnonymousRefuse AnonymousPolicy = iota
	// AnonymousShared handles every such request in one shared scope: any
	// caller without a credential who sends a key another used gets that
	// caller's stored response. Only for single-tenant APIs and demos.
	AnonymousShared
)

// scopeSecretName names the database secret ScopeHMAC keys with.
const scopeSecretName = "idemhttp-scope-hmac"

type scopeSecretKey struct{}

// scopeSecret loads the ledger's scope secret once, creating it if the
// database has none. A failure is not cached: the next request tries again.
type scopeSecret struct {
	key atomic.Pointer[[]byte] // set once loaded: every later request reads it without a lock
	mu  sync.Mutex             // one load at a time
}

// get returns the secret, loading it on r's behalf (detached from the
// client) only the first time.
func (s *scopeSecret) get(r *http.Request, l *idem.Ledger) ([]byte, error) {
	if k := s.key.Load(); k != nil {
		return *k, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.key.Load(); k != nil {
		return *k, nil
	}
	ctx, cancel := detached(r)
	defer cancel()
	fresh := make([]byte, 32)
	rand.Read(fresh)
	key, err := l.Driver().Secret(ctx, scopeSecretName, fresh)
	if err != nil {
		return nil, fmt.Errorf("idemhttp: scope secret: %w", err)
	}
	s.key.Store(&key)
	return key, nil
}
