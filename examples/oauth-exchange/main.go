// Command oauth-exchange is a toy OAuth 2.0 authorization server whose
// token endpoint survives a double exchange of one authorization code.
//
// An authorization code is single-use (RFC 6749 §4.1.2): the second
// exchange of a code fails with invalid_grant, and a careful server even
// revokes the tokens of the first. A client whose first exchange succeeded
// but whose response was lost (a mobile network, a double-submitted
// callback) then loses its login. With idemhttp in front of the token
// endpoint, keyed on the code and fingerprinted on the whole request
// (code_verifier, redirect_uri and client_id included), a retry within 60
// seconds gets the first token response byte for byte, and a replay with a
// different verifier gets 422, never a token.
//
//	go run ./examples/oauth-exchange            # prints a fresh code and the curl to exchange it
//
// The token response sits in the ledger for its retention (60 s) and until
// the next prune; this server prunes every 30 seconds.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemhttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	db := flag.String("db", "sqlite:oauth-exchange.db", "ledger database URL")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	l, err := dburl.Open(ctx, *db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go pruneEvery(ctx, l, 30*time.Second)

	as := newAuthServer()
	code, verifier := as.issue("demo-client", "http://127.0.0.1/callback")
	fmt.Printf("token endpoint: http://%s/token\n\nexchange the code (run it twice: the same token both times):\n", *listen)
	fmt.Printf("  curl -s http://%s/token -H 'Content-Type: application/json' -d '{\"grant_type\":\"authorization_code\",\"code\":\"%s\",\"code_verifier\":\"%s\",\"client_id\":\"demo-client\",\"redirect_uri\":\"http://127.0.0.1/callback\"}'\n\n", *listen, code, verifier)
	fmt.Printf("a new code: curl -s -X POST http://%s/codes\n", *listen)

	srv := &http.Server{Addr: *listen, Handler: newHandler(l, as), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// newHandler routes /token through idemhttp and /codes (a stand-in for the
// authorization step) around it.
func newHandler(l *idem.Ledger, as *authServer) http.Handler {
	exchange := idemhttp.Middleware(l, &idemhttp.Options{
		KeyFrom:    "json:/code", // the code is the key; the whole body is the fingerprint
		RequireKey: true,
		Retention:  60 * time.Second, // a code lives about that long anyway
		// Public clients (PKCE) send no credential. The key is the code, an
		// unguessable one-time secret, so one shared scope gives nothing away.
		AnonymousScope: idemhttp.AnonymousShared,
	})
	mux := http.NewServeMux()
	mux.Handle("POST /token", exchange(http.HandlerFunc(as.token)))
	mux.HandleFunc("POST /codes", func(w http.ResponseWriter, r *http.Request) {
		code, verifier := as.issue("demo-client", "http://127.0.0.1/callback")
		writeJSON(w, http.StatusCreated, map[string]string{"code": code, "code_verifier": verifier})
	})
	return mux
}

// authServer keeps codes in memory. A real one keeps them in its database.
type authServer struct {
	mu    sync.Mutex
	codes map[string]*grant
}

type grant struct {
	clientID, redirectURI, challenge string
	expires                          time.Time
	used                             bool
}

func newAuthServer() *authServer { return &authServer{codes: map[string]*grant{}} }

// issue makes a code as the authorization step would, with a PKCE (S256)
// challenge, and returns the code and the verifier the client keeps.
func (as *authServer) issue(clientID, redirectURI string) (code, verifier string) {
	code, verifier = random(), random()
	sum := sha256.Sum256([]byte(verifier))
	as.mu.Lock()
	as.codes[code] = &grant{clientID: clientID, redirectURI: redirectURI,
		challenge: base64.RawURLEncoding.EncodeToString(sum[:]), expires: time.Now().Add(60 * time.Second)}
	as.mu.Unlock()
	return code, verifier
}

// token is the plain, strict token endpoint: a code works once.
func (as *authServer) token(w http.ResponseWriter, r *http.Request) {
	var in struct {
		GrantType    string `json:"grant_type"`
		Code         string `json:"code"`
		CodeVerifier string `json:"code_verifier"`
		ClientID     string `json:"client_id"`
		RedirectURI  string `json:"redirect_uri"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.GrantType != "authorization_code" {
		oauthError(w, "invalid_request", "want a JSON authorization_code grant")
		return
	}
	sum := sha256.Sum256([]byte(in.CodeVerifier))
	as.mu.Lock()
	g, ok := as.codes[in.Code]
	valid := ok && !g.used && time.Now().Before(g.expires) && g.clientID == in.ClientID && g.redirectURI == in.RedirectURI &&
		g.challenge == base64.RawURLEncoding.EncodeToString(sum[:])
	if ok {
		g.used = true // single use, even when the attempt was wrong
	}
	as.mu.Unlock()
	if !valid {
		oauthError(w, "invalid_grant", "the code is unknown, expired, already used, or does not match")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": random(), "token_type": "Bearer", "expires_in": 3600, "refresh_token": random(),
	})
}

func oauthError(w http.ResponseWriter, code, desc string) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code, "error_description": desc})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func random() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// pruneEvery drops stored token responses past their retention.
func pruneEvery(ctx context.Context, l *idem.Ledger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := l.Prune(ctx, nil); err != nil {
				log.Printf("prune: %v", err)
			}
		}
	}
}
