package outbox_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// receiver is a webhook endpoint that honours Idempotency-Key: it counts
// every request per key, and applies the effect of a key once.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	calls   map[string]int      // requests per key
	effects map[string]int      // effects per key: must never exceed 1
	seen    map[string][]string // recipients applied, per key
	// fail, if set, answers call n of key with the status it returns (0:
	// handle it), or with no answer at all (dropConnection).
	fail func(key string, call int) int
}

// dropConnection, returned by receiver.fail, closes the connection
// without an answer.
const dropConnection = -1

func newReceiver(t *testing.T) *receiver {
	r := &receiver{calls: map[string]int{}, effects: map[string]int{}, seen: map[string][]string{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(req.Body)
	if err != nil {
		// The request never arrived whole (the sender gave up mid-body, as
		// a relay under load whose call timed out does): no call, no
		// effect, as a real receiver would not act on half a request.
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[key]++
	if r.fail != nil {
		switch status := r.fail(key, r.calls[key]); status {
		case 0:
		case dropConnection:
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		default:
			w.WriteHeader(status)
			return
		}
	}
	if key == "" {
		http.Error(w, "no key", http.StatusBadRequest)
		return
	}
	if r.effects[key] == 0 {
		r.effects[key]++
		var chunk struct{ Recipients []string }
		if json.Unmarshal(body, &chunk) == nil {
			r.seen[key] = chunk.Recipients
		}
	}
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(`{"ok":true}`))
}

func (r *receiver) snapshot() (calls, effects map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls, effects = map[string]int{}, map[string]int{}
	for k, v := range r.calls {
		calls[k] = v
	}
	for k, v := range r.effects {
		effects[k] = v
	}
	return calls, effects
}
