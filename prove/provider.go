package prove

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// providerMode is what an external provider can do for a caller that
// crashed after calling it.
type providerMode string

const (
	// keyed honours Idempotency-Key: a second call with a key it has seen
	// returns the first answer and does nothing.
	keyed providerMode = "keyed"
	// lookup does not deduplicate, but can be asked by key what happened
	// (GET /lookup), so a Reconciler can resolve a stale claim.
	lookup providerMode = "lookup"
	// blind can do neither: every call is an effect, and nobody can ask.
	blind providerMode = "blind"
)

// provider is an external service on loopback, in the prover's process,
// that counts its effects per key. POST /effect performs one (or, keyed,
// replays); GET /lookup answers by key (lookup mode only).
type provider struct {
	mode providerMode
	url  string
	srv  *http.Server

	mu      sync.Mutex
	seq     int
	calls   int
	effects map[string][]string // key → the answer of each effect
}

func startProvider(mode providerMode) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	p := &provider{mode: mode, url: "http://" + ln.Addr().String(), effects: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /effect", p.effect)
	mux.HandleFunc("GET /lookup", p.lookup)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *provider) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		p.srv.Close()
	}
}

// delayHeader asks the provider to take that many milliseconds before it
// answers (after it has performed the effect, as a slow API would).
const delayHeader = "X-Prove-Delay"

func (p *provider) effect(w http.ResponseWriter, r *http.Request) {
	if ms, err := strconv.Atoi(r.Header.Get(delayHeader)); err == nil && ms > 0 {
		defer time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.calls++
	if prev := p.effects[key]; p.mode == keyed && len(prev) > 0 {
		p.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.Write([]byte(prev[0]))
		return
	}
	p.seq++
	answer := fmt.Sprintf(`{"charge":"ch_%d","key":%q}`, p.seq, key)
	p.effects[key] = append(p.effects[key], answer)
	p.mu.Unlock()
	w.Write([]byte(answer))
}

func (p *provider) lookup(w http.ResponseWriter, r *http.Request) {
	if p.mode != lookup {
		http.Error(w, "this provider cannot be asked", http.StatusNotImplemented)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	prev := p.effects[key]
	p.mu.Unlock()
	if len(prev) == 0 {
		http.NotFound(w, r)
		return
	}
	w.Write([]byte(prev[0]))
}

// effectsIn returns the effects for the keys of scope (forwarded as
// providerKey(scope, key)): key → answers.
func (p *provider) effectsIn(scope string) map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	for k, v := range p.effects {
		if key, ok := strings.CutPrefix(k, providerKey(scope, "")); ok {
			out[key] = append([]string(nil), v...)
		}
	}
	return out
}
