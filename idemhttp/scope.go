package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
)

// ScopeAuthorization scopes keys by the SHA-256 of the Authorization header
// value, so two credentials never share a key and the credential itself is
// never stored. Requests without Authorization share the empty scope. The
// default.
func ScopeAuthorization(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(v))
	return "authorization-sha256:" + hex.EncodeToString(sum[:])
}

// ScopeHeader scopes keys by the value of the named request header (for
// example X-Tenant-ID, set by an authenticating proxy in front), stored as
// is. Requests without the header share the empty scope. Use it only where
// clients cannot set the header themselves.
func ScopeHeader(name string) func(*http.Request) string {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// ScopeNone puts every key in one scope: any client that knows a key gets
// its stored response. Only for single-tenant APIs.
func ScopeNone(*http.Request) string { return "" }

// ScopeClientCertificate scopes keys by the SHA-256 of the client's TLS
// certificate (mutual TLS). Requests without one share the empty scope.
func ScopeClientCertificate(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
	return "client-cert-sha256:" + hex.EncodeToString(sum[:])
}
