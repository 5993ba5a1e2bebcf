package idemhttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemdev/idem"
)

// Why a completed key has no replayable response.
const (
	notStoredTooLarge = "too-large" // the body exceeded MaxResponse
	notStoredStreamed = "streamed"  // text/event-stream, or flushed without a length
	notStoredHijacked = "hijacked"  // the handler took over the connection
)

// storedMeta is what idem.Result.Meta holds for an HTTP response: the
// allowed headers, or why the response was not stored. The status and body
// are Result.Status and Result.Body.
type storedMeta struct {
	V         int         `json:"v"`
	Header    http.Header `json:"h,omitempty"`
	NotStored string      `json:"not_stored,omitempty"`
}

// storedResult builds the ledger result for a response: status, the
// allow-listed headers, and the body.
func (c *config) storedResult(status int, h http.Header, body []byte) idem.Result {
	m := storedMeta{V: 1, Header: http.Header{}}
	for name, vals := range h {
		if name := http.CanonicalHeaderKey(name); c.allow[name] || name == "Content-Encoding" { // see encoding.go
			m.Header[name] = vals
		}
	}
	meta, _ := json.Marshal(m)
	return idem.Result{Status: status, Meta: meta, Body: body}
}

// notStoredResult records that the key completed with status but its
// response cannot be replayed.
func notStoredResult(status int, why string) idem.Result {
	meta, _ := json.Marshal(storedMeta{V: 1, NotStored: why})
	return idem.Result{Status: status, Meta: meta}
}

// writeReplay answers a retry from the ledger: the stored status and body
// byte for byte, the stored headers, Idempotent-Replayed: true and
// Cache-Control: no-store. A key whose response was not stored gets a 410
// problem instead; it is never handled twice. A body stored with a content
// coding r does not accept is sent decoded (see encoding.go).
func writeReplay(w http.ResponseWriter, r *http.Request, res idem.Result) {
	var m storedMeta
	if len(res.Meta) > 0 {
		_ = json.Unmarshal(res.Meta, &m) // a result stored by other means replays without headers
	}
	if m.NotStored != "" {
		WriteProblem(w, Problem{Type: ProblemResponseNotStored, Title: "Response not stored", Status: http.StatusGone,
			FirstStatus: res.Status,
			Detail: fmt.Sprintf("A request with this key was already handled (status %d), but its response was %s and not stored, so it cannot be replayed. It will not be handled again; use a new key for a new request.",
				res.Status, describeNotStored(m.NotStored))})
		return
	}
	h := w.Header()
	for name, vals := range m.Header {
		h[name] = vals
	}
	h.Set("Idempotent-Replayed", "true")
	h.Set("Cache-Control", "no-store")
	status := res.Status
	if status == 0 {
		status = http.StatusOK
	}
	if !bodyAllowed(status) {
		w.WriteHeader(status)
		return
	}
	if dec := decodeForClient(r, h, res.Body); dec != nil {
		defer dec.Close()
		h.Del("Content-Length")
		w.WriteHeader(status)
		io.Copy(w, dec)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(res.Body)))
	w.WriteHeader(status)
	w.Write(res.Body)
}

func describeNotStored(why string) string {
	switch why {
	case notStoredTooLarge:
		return "larger than the gateway stores"
	case notStoredStreamed:
		return "streamed"
	case notStoredHijacked:
		return "sent over a hijacked connection"
	}
	return why
}
