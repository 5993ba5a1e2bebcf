package idemhttp

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemdev/idem/fingerprint"
)

// FingerprintScheme prefixes every request fingerprint the middleware
// stores: fingerprint.HTTP computes them, over method, escaped path, raw
// query and the body's fingerprint (see fingerprint.HTTPInput), with
// Options.Exclude applied to JSON and form bodies. JSON that differs only in
// white space, key order or number spelling is the same request. `idem
// fingerprint --http` prints the same fingerprint and its input.
const FingerprintScheme = fingerprint.HTTPScheme

// errBadBody marks a body that cannot be read or fingerprinted as declared.
var errBadBody = errors.New("bad request body")

// mediaType returns the request's media type, lower case, without
// parameters; "" when absent or unparsable.
func mediaType(r *http.Request) string {
	return parseMediaType(r.Header.Get("Content-Type"))
}

// parseMediaType is mime.ParseMediaType's media type, "" on any error. A
// bare lower-case type/subtype, what most clients send, is returned as it
// is: parsing it would allocate a map for parameters it does not have.
func parseMediaType(v string) string {
	if plainMediaType(v) {
		return v
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mt
}

// plainMediaType reports whether v is type/subtype in lower-case letters,
// digits and the token marks media types use, with nothing around it.
func plainMediaType(v string) bool {
	typ, sub, ok := strings.Cut(v, "/")
	return ok && lowerToken(typ) && lowerToken(sub)
}

func lowerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&-^_.+", c) >= 0) {
			return false
		}
	}
	return true
}

// The body media types the middleware reads fields from.
const (
	formType      = fingerprint.FormMediaType
	multipartType = fingerprint.MultipartMediaType
)

// requestFingerprint hashes what makes r the request it is: method, path,
// query and body (form is the body parsed as a form, or nil; coding the
// content coding the body is still in, or "").
func (c *config) requestFingerprint(r *http.Request, body []byte, coding, mt string, form url.Values) (string, error) {
	fp, err := c.fingerprint.Sum(fingerprint.Request{
		Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
		MediaType: mt, Body: body, Form: form, Coding: coding,
	})
	if err != nil {
		return "", fmt.Errorf("%w: %v", errBadBody, err)
	}
	return fp, nil
}
