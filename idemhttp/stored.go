package idemhttp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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
// allow-listed headers, and the body. Its meta is what json.Marshal makes of
// a storedMeta (appendMeta), without the map and the reflection.
func (c *config) storedResult(status int, h http.Header, body []byte) idem.Result {
	var stack [16]metaHeader // most responses keep a few headers: no allocation
	kept := stack[:0]
	size := len(`{"v":1,"h":{}}`)
	for name, vals := range h {
		canon := http.CanonicalHeaderKey(name)
		if !c.allow[canon] && canon != "Content-Encoding" { // see encoding.go
			continue
		}
		kept = append(kept, metaHeader{name: canon, raw: name, vals: vals})
		size += len(canon) + 6
		for _, v := range vals {
			size += len(v) + 3
		}
	}
	return idem.Result{Status: status, Meta: appendMeta(make([]byte, 0, size), kept, ""), Body: body}
}

// notStoredResult records that the key completed with status but its
// response cannot be replayed.
func notStoredResult(status int, why string) idem.Result {
	return idem.Result{Status: status, Meta: appendMeta(nil, nil, why)}
}

// metaHeader is one stored header: its canonical name, the name it had in
// the response's map, and its values.
type metaHeader struct {
	name, raw string
	vals      []string
}

// appendMeta appends to dst the bytes json.Marshal gives for
// storedMeta{V: 1, Header: h, NotStored: notStored}, where h maps each
// name in hs to its values: the names sorted, every string escaped as
// encoding/json escapes it (HTML characters, invalid UTF-8, U+2028 and
// U+2029 included). Two entries of hs with one name (a map with "foo" and
// "Foo") are one header, as in an http.Header built from them; the one
// under its canonical spelling wins. hs is sorted in place.
func appendMeta(dst []byte, hs []metaHeader, notStored string) []byte {
	dst = append(dst, `{"v":1`...)
	if len(hs) > 0 {
		slices.SortFunc(hs, func(a, b metaHeader) int {
			if c := strings.Compare(a.name, b.name); c != 0 {
				return c
			}
			// Of two spellings of one name, the canonical one first.
			switch ac, bc := a.raw == a.name, b.raw == b.name; {
			case ac && !bc:
				return -1
			case bc && !ac:
				return 1
			}
			return strings.Compare(a.raw, b.raw)
		})
		dst = append(dst, `,"h":{`...)
		for i, e := range hs {
			if i > 0 && hs[i-1].name == e.name {
				continue
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, e.name)
			dst = append(dst, ':')
			if e.vals == nil {
				dst = append(dst, "null"...)
				continue
			}
			dst = append(dst, '[')
			for j, v := range e.vals {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendJSONString(dst, v)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	if notStored != "" {
		dst = append(dst, `,"not_stored":`...)
		dst = appendJSONString(dst, notStored)
	}
	return append(dst, '}')
}

// appendJSONString appends s quoted as encoding/json quotes a string: \"
// and \\ escaped, control characters as \b \f \n \r \t or \u00XX, <, >
// and & as \u003c \u003e \u0026, each invalid UTF-8 byte as \ufffd, and
// U+2028, U+2029 as \u2028, \u2029. Its equality with json.Marshal is
// fuzzed (FuzzAppendMeta).
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
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
	if h.Get("Access-Control-Allow-Origin") != "" {
		// A page may read the fields a CORS answer exposes, and no other:
		// Idempotent-Replayed is exposed too (a new slice: the stored one
		// is the record's).
		h["Access-Control-Expose-Headers"] = append(slices.Clip(h["Access-Control-Expose-Headers"]), "Idempotent-Replayed")
	}
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
