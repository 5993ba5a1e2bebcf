package idemhttp_test

import (
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
)

// TestKeyFromFingerprint: without a client key, identical work is one
// operation; a body differing only in an excluded field is the same work;
// a body differing elsewhere is new work.
func TestKeyFromFingerprint(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := newCounter()
		url := guarded(t, l, &idemhttp.Options{KeyFrom: idemhttp.KeyFromFingerprint, Exclude: []string{"/sent_at", "/request_id"}}, h)

		first := do(t, "POST", url+"/hooks", `{"event":"paid","id":"ev_1","sent_at":"10:00","request_id":"a"}`)
		if first.status != 201 || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %d %v %q", first.status, first.header, first.body)
		}
		again := do(t, "POST", url+"/hooks", `{"id":"ev_1", "event":"paid","sent_at":"10:00","request_id":"a"}`)
		if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("identical work: %d %v %q, want the replay of %q", again.status, again.header, again.body, first.body)
		}
		redelivered := do(t, "POST", url+"/hooks", `{"event":"paid","id":"ev_1","sent_at":"10:05","request_id":"b"}`)
		if redelivered.header.Get("Idempotent-Replayed") != "true" || redelivered.body != first.body {
			t.Fatalf("differing only in excluded fields: %d %v %q, want a replay", redelivered.status, redelivered.header, redelivered.body)
		}
		if n := h.total(); n != 1 {
			t.Fatalf("handler ran %d times for one piece of work", n)
		}
		other := do(t, "POST", url+"/hooks", `{"event":"paid","id":"ev_2","sent_at":"10:00","request_id":"a"}`)
		if other.status != 201 || other.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("other work: %d %v %q, want a second execution", other.status, other.header, other.body)
		}
		if n := h.total(); n != 2 {
			t.Fatalf("handler ran %d times for two pieces of work", n)
		}
		recs := records(t, l)
		if len(recs) != 2 || !strings.HasPrefix(recs[0].Key, idemhttp.FingerprintScheme) || recs[0].Key != recs[0].Fingerprint {
			t.Fatalf("records: %+v, want two keyed by their fingerprints", recs)
		}
		for _, rec := range recs {
			if n := h.count(rec.Key); n != 1 {
				t.Errorf("the handler got the derived key %s %d times, want 1 (it is passed on as Idempotency-Key)", rec.Key, n)
			}
		}

		// A client key still wins: the same body under a key of its own is
		// handled again, and its key is the one forwarded.
		keyed := do(t, "POST", url+"/hooks", `{"event":"paid","id":"ev_1"}`, "Idempotency-Key: k1")
		if keyed.status != 201 || keyed.header.Get("Idempotent-Replayed") != "" || h.count("k1") != 1 {
			t.Fatalf("keyed: %d %v %q", keyed.status, keyed.header, keyed.body)
		}
	})
}

// TestKeyFromFingerprintNeedsScope: a derived key is a key like any other;
// without a credential the request is refused unless the operator shares
// one scope.
func TestKeyFromFingerprintNeedsScope(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	url := guarded(t, l, &idemhttp.Options{KeyFrom: idemhttp.KeyFromFingerprint}, newCounter())
	wantProblem(t, do(t, "POST", url+"/hooks", `{"id":1}`, "Authorization:"), 400, idemhttp.ProblemScopeMissing)
}

func TestKeyFromBad(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"fingerprints", "fingerprint:x", "query:k"} {
		if err := (&idemhttp.Options{KeyFrom: s}).Validate(); err == nil || !strings.Contains(err.Error(), "fingerprint") {
			t.Errorf("KeyFrom %q: %v, want an error that names fingerprint among the sources", s, err)
		}
	}
}
