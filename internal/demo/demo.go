// Package demo is the payments API that `idem serve --demo` starts behind
// the gateway.
package demo

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// API is the small payments API that `idem serve --demo` starts behind the
// gateway, so that a newcomer can see replays, 409 and 422 with curl alone.
// It does not deduplicate anything itself: it charges every request it
// gets and counts the charges per Idempotency-Key, so a count above one
// would be a double charge the gateway let through.
//
//	POST /charges   {"amount": 1000, "currency": "eur"}  → 201 with the charge
//	GET  /charges                                        → the counts per key
//
// Request headers make it misbehave: Demo-Delay: 5s answers slowly (to
// see 409 from a concurrent retry), Demo-Fail: 503 fails with that status
// before charging.
type API struct {
	mu     sync.Mutex
	seq    int
	perKey map[string]int
}

// New returns an API with no charges.
func New() *API { return &API{perKey: map[string]int{}} }

// Charges returns how many charges the demo made for key.
func (d *API) Charges(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.perKey[key]
}

// ServeHTTP serves the demo API.
func (d *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/charges" {
		demoJSON(w, http.StatusNotFound, map[string]string{"error": "not found: try POST /charges or GET /charges"})
		return
	}
	switch r.Method {
	case http.MethodGet:
		d.mu.Lock()
		out := map[string]any{"charges": d.seq, "charges_per_key": d.perKey}
		b, _ := json.Marshal(out)
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	case http.MethodPost:
		d.charge(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		demoJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}
}

func (d *API) charge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, 1<<20)
	switch strings.ToLower(r.Header.Get("Content-Encoding")) {
	case "", "identity":
	case "gzip", "x-gzip": // as clients that compress their uploads send
		zr, err := gzip.NewReader(body)
		if err != nil {
			demoJSON(w, http.StatusBadRequest, map[string]string{"error": "Content-Encoding gzip, but the body is not gzip"})
			return
		}
		body = io.LimitReader(zr, 1<<20)
	default:
		w.Header().Set("Accept-Encoding", "gzip")
		demoJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "send the body plain or gzip"})
		return
	}
	if err := json.NewDecoder(body).Decode(&in); err != nil || in.Amount <= 0 {
		demoJSON(w, http.StatusBadRequest, map[string]string{"error": `want a JSON body like {"amount": 1000, "currency": "eur"}`})
		return
	}
	if in.Currency == "" {
		in.Currency = "eur"
	}
	if d, err := time.ParseDuration(r.Header.Get("Demo-Delay")); err == nil && d > 0 {
		select {
		case <-time.After(min(d, time.Minute)):
		case <-r.Context().Done():
			return
		}
	}
	if code, err := strconv.Atoi(r.Header.Get("Demo-Fail")); err == nil && code >= 400 && code <= 599 {
		demoJSON(w, code, map[string]string{"error": fmt.Sprintf("failing with %d as asked (Demo-Fail); nothing was charged", code)})
		return
	}
	key := r.Header.Get("Idempotency-Key")
	d.mu.Lock()
	d.seq++
	id := fmt.Sprintf("ch_%06d", d.seq)
	d.perKey[key]++
	n := d.perKey[key]
	d.mu.Unlock()
	w.Header().Set("Location", "/charges/"+id)
	demoJSON(w, http.StatusCreated, map[string]any{
		"id": id, "amount": in.Amount, "currency": in.Currency,
		"idempotency_key": key, "charges_for_this_key": n,
		"created": time.Now().UTC().Format(time.RFC3339Nano),
	})
}

func demoJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
