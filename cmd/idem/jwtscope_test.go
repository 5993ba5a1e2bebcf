package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// issuer signs test tokens with Ed25519 keys and publishes their JWK Set.
type issuer struct {
	mu   sync.Mutex
	keys map[string]ed25519.PrivateKey // by kid
	pub  []map[string]string           // the published JWKs
}

func newIssuer(t *testing.T, kids ...string) *issuer {
	is := &issuer{keys: map[string]ed25519.PrivateKey{}}
	for _, kid := range kids {
		is.addKey(t, kid, true)
	}
	return is
}

// addKey makes a key; published, it goes into the JWK Set.
func (is *issuer) addKey(t *testing.T, kid string, published bool) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys[kid] = priv
	if published {
		is.pub = append(is.pub, map[string]string{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": kid,
			"x": base64.RawURLEncoding.EncodeToString(pub)})
	}
}

func (is *issuer) jwks() []byte {
	is.mu.Lock()
	defer is.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"keys": is.pub})
	return b
}

// file writes the JWK Set to a file, for --jwt-keys.
func (is *issuer) file(t *testing.T) string {
	keys := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(keys, is.jwks(), 0o600); err != nil {
		t.Fatal(err)
	}
	return keys
}

// countingUpstream answers 201 with the number of requests it has had.
func countingUpstream(t *testing.T) (string, *atomic.Int64) {
	effects := new(atomic.Int64)
	return upstreamServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, effects.Add(1))
	})), effects
}

// token signs claims with the key kid.
func (is *issuer) token(t *testing.T, kid string, claims jwt.MapClaims) string {
	is.mu.Lock()
	key := is.keys[kid]
	is.mu.Unlock()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// authorization is the Authorization value of token: Bearer unless it
// names its scheme.
func authorization(token string) string {
	if strings.HasPrefix(token, "DPoP ") {
		return token
	}
	return "Bearer " + token
}

// --scope-header jwt:sub scopes keys by the verified token's subject: a
// token refreshed between a request and its retry gets the replay, as does
// one expired since (its expiry is the API's to judge); another subject's
// request with the same key is its own; a token signed by a key the
// issuer does not publish, an unsigned one or none at all gives no scope
// (400 scope-missing). One effect per scope.
func TestServeScopeJWT(t *testing.T) {
	t.Parallel()
	is := newIssuer(t, "k1")
	is.addKey(t, "forger", false)
	keys := is.file(t)
	up, effects := countingUpstream(t)
	gw := startGateway(t, nil, "--upstream", up, "--db", testDB(t, "sqlite"), "--scope-header", "jwt:sub", "--jwt-keys", keys)
	const iss = "https://issuer.example"
	now := time.Now()
	alice := func(iat time.Time) string {
		return is.token(t, "k1", jwt.MapClaims{"iss": iss, "sub": "alice", "iat": iat.Unix(), "exp": iat.Add(time.Hour).Unix()})
	}
	unsigned, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": iss, "sub": "alice"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, tt := range []struct {
		name, token string
		status      int
		body        string // "" for a problem
		replayed    string
	}{
		{"alice's first token", alice(now), 201, "1", ""},
		{"alice's refreshed token", alice(now.Add(time.Minute)), 201, "1", "true"},
		{"alice's token, expired", alice(now.Add(-2 * time.Hour)), 201, "1", "true"},
		{"alice's DPoP-bound token", "DPoP " + alice(now.Add(2*time.Minute)), 201, "1", "true"},
		{"bob, the same key", is.token(t, "k1", jwt.MapClaims{"iss": iss, "sub": "bob"}), 201, "2", ""},
		{"bob of another issuer", is.token(t, "k1", jwt.MapClaims{"iss": "https://other.example", "sub": "bob"}), 201, "3", ""},
		{"a token signed by a key not published", is.token(t, "forger", jwt.MapClaims{"iss": iss, "sub": "alice"}), 400, "", ""},
		{"an unsigned token", unsigned, 400, "", ""},
		{"no subject", is.token(t, "k1", jwt.MapClaims{"iss": iss}), 400, "", ""},
		{"not a JWT", "opaque-token", 400, "", ""},
	} {
		r, err := send(context.Background(), client, gw.url+"/charges", `{"amount":1}`, "Idempotency-Key: jwt-1", "Authorization: "+authorization(tt.token))
		if err != nil {
			t.Fatal(err)
		}
		if r.status != tt.status || (tt.body != "" && r.body != tt.body) || (tt.body == "" && !strings.Contains(r.body, "scope-missing")) ||
			r.header.Get("Idempotent-Replayed") != tt.replayed {
			t.Errorf("%s: %d %q, Idempotent-Replayed %q; want %d %q %q", tt.name, r.status, r.body, r.header.Get("Idempotent-Replayed"), tt.status, tt.body, tt.replayed)
		}
	}
	if n := effects.Load(); n != 3 {
		t.Errorf("%d effects, want 3 (alice, bob, the other issuer's bob)", n)
	}
}

// From an issuer's jwks_uri the key set is fetched when the gateway
// starts, and again when a token names a key it does not hold: a key
// rotated in at the issuer verifies without a restart.
func TestServeScopeJWTFromURL(t *testing.T) {
	t.Parallel()
	is := newIssuer(t, "k1")
	var fetches atomic.Int64
	jwks := upstreamServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(is.jwks())
	}))
	up := upstreamServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	gw := startGateway(t, nil, "--upstream", up, "--db", testDB(t, "sqlite"), "--scope-header", "jwt:sub", "--jwt-keys", jwks+"/.well-known/jwks.json")
	post := func(kid, key string) int {
		r, err := send(context.Background(), client, gw.url+"/charges", `{}`, "Idempotency-Key: "+key,
			"Authorization: Bearer "+is.token(t, kid, jwt.MapClaims{"iss": "https://issuer.example", "sub": "alice"}))
		if err != nil {
			t.Fatal(err)
		}
		return r.status
	}
	if got := post("k1", "url-1"); got != 201 {
		t.Fatalf("a token of the published key: %d", got)
	}
	is.addKey(t, "k2", true) // rotated in at the issuer
	if got := post("k2", "url-2"); got != 201 {
		t.Fatalf("a token of the key rotated in: %d (the key set was fetched %d times)", got, fetches.Load())
	}
}

// jwt:CLAIM without --jwt-keys, or with a file that holds no key set, is
// refused before the gateway starts; a password in the key set's URL is
// never shown.
func TestServeScopeJWTChecked(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(empty, []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--scope-header", "jwt:sub"}, "--scope-header: jwt:sub needs --jwt-keys"},
		{[]string{"--scope-header", "jwt:sub", "--jwt-keys", filepath.Join(t.TempDir(), "missing.json")}, "--jwt-keys: open"},
		{[]string{"--scope-header", "jwt:sub", "--jwt-keys", empty}, "not a JWK Set"},
		{[]string{"--scope-header", "jwt:sub", "--jwt-keys", "http://issuer.example/jwks.json"}, "fetch keys over https"},
		{[]string{"--scope-header", "jwt:sub", "--jwt-keys", "http://user:s3cret@issuer.example/jwks.json"}, "user:xxxxx@issuer.example"},
	} {
		out, err := exec.Command(idemBin, append([]string{"serve", "--check", "--upstream", "http://127.0.0.1:1"}, tt.args...)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) || strings.Contains(string(out), "s3cret") {
			t.Errorf("%v: %v\n%s", tt.args, err, out)
		}
	}
}

// A --config route may scope by another claim of the same tokens: under
// jwt:org_id two members of one organisation share its keys, where the
// default policy (jwt:sub) keeps them apart. The key set is --jwt-keys,
// which routes inherit.
func TestServeScopeJWTRoute(t *testing.T) {
	t.Parallel()
	is := newIssuer(t, "k1")
	keys := is.file(t)
	up, _ := countingUpstream(t)
	cfg := writeConfig(t, "routes:\n  - route: \"POST /orgs/\"\n    scope-header: jwt:org_id\n")
	gw := startGateway(t, nil, "--upstream", up, "--db", testDB(t, "sqlite"), "--scope-header", "jwt:sub", "--jwt-keys", keys, "--config", cfg)
	member := func(sub string) string {
		return "Authorization: Bearer " + is.token(t, "k1", jwt.MapClaims{"iss": "https://issuer.example", "sub": sub, "org_id": "org_7"})
	}
	for _, tt := range []struct{ path, sub, want string }{
		{"/orgs/7/invoices", "alice", "1"},
		{"/orgs/7/invoices", "bob", "1"}, // the organisation's key: the replay
		{"/charges", "alice", "2"},
		{"/charges", "bob", "3"}, // scoped by subject: bob's own
	} {
		r, err := send(context.Background(), client, gw.url+tt.path, `{}`, "Idempotency-Key: route-1", member(tt.sub))
		if err != nil {
			t.Fatal(err)
		}
		if r.status != 201 || r.body != tt.want {
			t.Errorf("%s as %s: %d %q, want 201 %q", tt.path, tt.sub, r.status, r.body, tt.want)
		}
	}
}

// A key set that cannot be fetched is logged, without the password of
// its URL, and the gateway serves: tokens do not verify meanwhile (400).
func TestServeScopeJWTUnreachable(t *testing.T) {
	t.Parallel()
	is := newIssuer(t, "k1")
	up, effects := countingUpstream(t)
	gw := startGateway(t, nil, "--upstream", up, "--db", testDB(t, "sqlite"), "--scope-header", "jwt:sub",
		"--jwt-keys", "http://user:s3cret@127.0.0.1:1/jwks.json")
	r, err := send(context.Background(), client, gw.url+"/charges", `{}`, "Idempotency-Key: unreachable-1",
		"Authorization: Bearer "+is.token(t, "k1", jwt.MapClaims{"sub": "alice"}))
	if err != nil || r.status != 400 || !strings.Contains(r.body, "scope-missing") || effects.Load() != 0 {
		t.Fatalf("%d %q %v, %d effects; want 400 scope-missing and none", r.status, r.body, err, effects.Load())
	}
	if out := gw.out.String(); !strings.Contains(out, "fetching the key set failed") || !strings.Contains(out, "user:xxxxx@127.0.0.1:1") || strings.Contains(out, "s3cret") {
		t.Fatalf("the gateway's log:\n%s", out)
	}
}
