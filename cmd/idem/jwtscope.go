package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/idemdev/idem/idemhttp"
)

// --scope-header jwt:CLAIM scopes keys by who a request's bearer token
// names rather than by the token itself: the claim CLAIM (sub, say) of the
// JWT in "Authorization: Bearer …" (or "DPoP …"), with its issuer, once
// the token's signature verifies against the keys of --jwt-keys. A client
// whose access token is refreshed between a request and its retry keeps
// its scope. The
// token's expiry is not checked: as with the default scope (the
// Authorization header's own hash), a retry with a token that has expired
// since gets the stored answer, and a new request reaches the API, which
// decides whether the token is still good. A token that does not verify,
// or lacks the claim, gives no scope (see --anonymous-scope).

// jwtAlgorithms are the signature algorithms a token may use: every one a
// JWK can hold a key for, "none" never.
var jwtAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}

// jwtKeys is one --jwt-keys source: a JWK Set in a file, read once, or at
// an http(s) URL, fetched when the gateway starts, again every hour, and
// when a token names a key it does not hold (at most every five minutes:
// keys rotated at the issuer are picked up).
type jwtKeys struct {
	source string
	shown  string // source as logs and errors name it: a URL without its password
	url    bool
	parser *jwt.Parser

	once sync.Once
	keys keyfunc.Keyfunc // set by load (a file) or start (a URL)
}

// jwtKeySets are the sources the policies named, one key set per source,
// shared by every route that scopes by a token.
var jwtKeySets struct {
	sync.Mutex
	m map[string]*jwtKeys
}

// jwtKeySet returns the key set of source, reading a file now so that a
// bad one is named before the gateway starts; a URL is fetched by start.
func jwtKeySet(source string) (*jwtKeys, error) {
	jwtKeySets.Lock()
	defer jwtKeySets.Unlock()
	if k := jwtKeySets.m[source]; k != nil {
		return k, nil
	}
	k := &jwtKeys{source: source, shown: source, parser: jwt.NewParser(jwt.WithValidMethods(jwtAlgorithms), jwt.WithoutClaimsValidation(), jwt.WithJSONNumber())}
	if u, err := url.Parse(source); err == nil && (u.Scheme == "https" || u.Scheme == "http") {
		k.shown = u.Redacted()
		if u.Host == "" {
			return nil, fmt.Errorf("%q: a URL without a host", k.shown)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); u.Scheme == "http" && u.Hostname() != "localhost" && (err != nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("%q: fetch keys over https (plain http only from this host): whoever can change them in transit can sign tokens for any caller", k.shown)
		}
		k.url = true
	} else if err := k.load(); err != nil {
		return nil, err
	}
	if jwtKeySets.m == nil {
		jwtKeySets.m = map[string]*jwtKeys{}
	}
	jwtKeySets.m[source] = k
	return k, nil
}

// load reads a file's JWK Set.
func (k *jwtKeys) load() error {
	b, err := os.ReadFile(k.source)
	if err != nil {
		return fmt.Errorf("%v (want a JWK Set file or an https:// URL)", err)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		return fmt.Errorf("%s: not a JWK Set (want {\"keys\": [...]} with at least one key)", k.source)
	}
	kf, err := keyfunc.NewJWKSetJSON(b)
	if err != nil {
		return fmt.Errorf("%s: %v", k.source, err)
	}
	k.keys = kf
	return nil
}

// startJWTKeySets fetches the key sets at URLs, for the life of ctx. A
// fetch that fails is logged and tried again later; meanwhile tokens do
// not verify.
func startJWTKeySets(ctx context.Context, log *slog.Logger) {
	jwtKeySets.Lock()
	sets := slices.Collect(maps.Values(jwtKeySets.m))
	jwtKeySets.Unlock() // the first fetches wait for the network: not under the lock
	for _, k := range sets {
		if k.url {
			k.start(ctx, log)
		}
	}
}

// start begins fetching a URL's key set, once.
func (k *jwtKeys) start(ctx context.Context, log *slog.Logger) {
	k.once.Do(func() {
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{k.source}, keyfunc.Override{
			HTTPTimeout: 10 * time.Second,
			// A token naming a key the set lacks refetches it at most every
			// five minutes (the default limit); a request that would wait
			// for the limit fails at once instead of holding its slot,
			// so tokens with made-up key ids cannot stall the gateway.
			RateLimitWaitMax: time.Second,
			RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
				return func(_ context.Context, err error) {
					log.Warn("idem serve: --jwt-keys: fetching the key set failed; bearer tokens do not verify until it succeeds", "url", k.shown, "err", err)
				}
			},
		})
		if err != nil {
			log.Error("idem serve: --jwt-keys", "url", k.shown, "err", err)
			return
		}
		k.keys = kf
	})
}

// scope returns the Options.Scope of --scope-header jwt:claim.
func (k *jwtKeys) scope(claim string) func(*http.Request) string {
	return func(r *http.Request) string {
		scheme, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		if !strings.EqualFold(scheme, "Bearer") && !strings.EqualFold(scheme, "DPoP") { // RFC 6750, RFC 9449
			return ""
		}
		return idemhttp.ScopeHMAC(r, "jwt", k.principal(strings.TrimSpace(token), claim))
	}
}

// principal is who token names by claim, with the claim's name and the
// token's issuer so that no two issuers or claims share a scope, or "" if
// the token does not verify or has no such claim.
func (k *jwtKeys) principal(token, claim string) string {
	if k.keys == nil || token == "" {
		return ""
	}
	claims := jwt.MapClaims{}
	if _, err := k.parser.ParseWithClaims(token, claims, k.keys.Keyfunc); err != nil {
		return ""
	}
	var v string
	switch c := claims[claim].(type) {
	case string:
		v = c
	case json.Number:
		v = c.String()
	}
	if v == "" {
		return ""
	}
	iss, _ := claims["iss"].(string)
	return claim + "\x00" + iss + "\x00" + v
}
