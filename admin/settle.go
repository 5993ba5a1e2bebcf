package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemhttp"
	"github.com/idemdev/idem/idemtype"
)

// Settlement is an operator's decision about a claim whose outcome idem
// does not know, as the admin page's form and idem reconcile take it. Its
// Resolution method checks it against the record it is for: the same
// rules hold on the page and in the CLI.
type Settlement struct {
	// As is StateSucceeded, StateFailed or StateReleased.
	As idemtype.State
	// Status is the HTTP status (or, for a record not made by the HTTP
	// layer, any number 0…999) stored with the result.
	Status int
	// Header holds response headers to replay (Content-Type and the
	// like); only for records made by the HTTP layer.
	Header http.Header
	// Body is the result body stored and replayed.
	Body []byte
	// Force resolves a claim under a live lease, fencing its holder out.
	Force bool
}

// notReplayable are headers an operator may not store: they describe one
// connection or one encoding of the body (which is stored decoded), or
// they carry credentials, which are never replayed.
var notReplayable = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Upgrade": true, "Trailer": true, "Te": true,
	"Content-Length": true, "Content-Encoding": true,
	"Set-Cookie": true, "Www-Authenticate": true, "Proxy-Authenticate": true, "Authorization": true, "Proxy-Authorization": true,
	"Idempotent-Replayed": true,
}

// IsHTTPRecord reports whether rec was claimed by the HTTP layer (idemhttp
// or idem serve): its fingerprint has idemhttp's scheme, so a retry is
// answered with the stored status, headers and body.
func IsHTTPRecord(rec idemtype.Record) bool {
	return strings.HasPrefix(rec.Fingerprint, idemhttp.FingerprintScheme+":")
}

// Resolution checks s for rec and returns what idem.Ledger.Resolve takes.
// A release stores nothing. For a record made by the HTTP layer a result
// needs an HTTP status (100…599, because the gateway replays it to every
// retry: status 0 would replay as an empty 200), may carry headers, and a
// body needs a Content-Type; the headers are stored as idemhttp stores a
// response's, so the replay carries them. Other records take no headers.
// The error says what to change.
func (s Settlement) Resolution(rec idemtype.Record) (idem.Resolution, error) {
	r := idem.Resolution{As: s.As, Force: s.Force}
	switch s.As {
	case idemtype.StateReleased:
		if s.Status != 0 || len(s.Header) > 0 || len(s.Body) > 0 {
			return r, errors.New("a release stores no result: give no status, headers or body")
		}
		return r, nil
	case idemtype.StateSucceeded, idemtype.StateFailed:
	default:
		return r, fmt.Errorf("%q: want succeeded, failed or release", s.As)
	}
	if !IsHTTPRecord(rec) {
		if len(s.Header) > 0 {
			return r, errors.New("headers are stored only for records made by the HTTP layer (idem serve, idemhttp); this one was not")
		}
		if s.Status < 0 || s.Status > 999 {
			return r, fmt.Errorf("status %d: want 0…999", s.Status)
		}
		r.Result = idem.Result{Status: s.Status, Body: s.Body}
		return r, nil
	}
	if s.Status < 100 || s.Status > 599 {
		if s.Status == 0 {
			return r, errors.New("a status is required: this record was made by the HTTP layer, and every retry is answered with the status stored (give the upstream's, such as 201)")
		}
		return r, fmt.Errorf("status %d: want an HTTP status, 100…599", s.Status)
	}
	h := http.Header{}
	for name, vals := range s.Header {
		c := http.CanonicalHeaderKey(strings.TrimSpace(name))
		if c == "" || strings.ContainsAny(c, " \t:\r\n") {
			return r, fmt.Errorf("header %q: not a header name", name)
		}
		if notReplayable[c] {
			return r, fmt.Errorf("header %s cannot be stored: it describes a connection or an encoding, or carries a credential", c)
		}
		for _, v := range vals {
			if strings.ContainsAny(v, "\r\n") {
				return r, fmt.Errorf("header %s: a value cannot hold a line break", c)
			}
			h.Add(c, strings.TrimSpace(v))
		}
	}
	if len(s.Body) > 0 && h.Get("Content-Type") == "" {
		return r, errors.New("a body needs a Content-Type header (such as application/json), or retries get whatever their client guesses")
	}
	r.Result = idem.Result{Status: s.Status, Body: s.Body, Meta: httpMeta(h)}
	return r, nil
}

// httpMeta encodes headers as idemhttp stores a response's in Result.Meta
// (its storedMeta, version 1). idemhttp does not export its encoder; the
// round trip is tested (TestSettlementReplaysThroughMiddleware), so a
// change there fails here.
func httpMeta(h http.Header) []byte {
	m := struct {
		V      int         `json:"v"`
		Header http.Header `json:"h,omitempty"`
	}{V: 1, Header: h}
	b, _ := json.Marshal(m)
	return b
}
