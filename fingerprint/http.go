package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/url"
	"strings"
)

// HTTPScheme names how the fingerprint of an HTTP request is computed: the
// SHA-256 of the text HTTPInput returns. It prefixes every fingerprint from
// HTTP; package idemhttp (and so the gateway, idem serve) stores and logs
// these.
const HTTPScheme = "http-sha256"

// FormMediaType is the media type of an HTML form body.
const FormMediaType = "application/x-www-form-urlencoded"

// Request is what makes an HTTP request the request it is, for its
// fingerprint: method, path, query and body. Headers other than the
// media type never count.
type Request struct {
	// Method is the request method, such as "POST".
	Method string
	// Path is the escaped path, as url.URL.EscapedPath returns it.
	Path string
	// RawQuery is the query as sent, without '?': its order counts.
	RawQuery string
	// MediaType is the media type of the Content-Type header, lower case
	// and without parameters (mime.ParseMediaType); "" when absent.
	MediaType string
	// Body is the request body.
	Body []byte
	// Form is Body parsed as a form, or nil. When Form is nil and
	// MediaType is FormMediaType, HTTPInput parses Body itself; set Form
	// to treat a body with another media type as a form.
	Form url.Values
	// Coding is the content coding Body is still in (its Content-Encoding,
	// lower case, codings separated by ", "), when the caller could not
	// remove it; "" for a body as its media type says. The caller decodes
	// the codings it can: a request sent compressed is then the same
	// request as one sent plain. A body still in a coding is only bytes.
	Coding string
}

// HTTPInput returns the text whose SHA-256 is the fingerprint of r:
//
//	"idemhttp/v1\n" method "\n" escaped path "\n" raw query "\n" body fingerprint
//
// The body fingerprint is "empty" for an empty body; Sum of a JSON body
// (media type application/json or *+json, or any body shaped like a JSON
// object or array that parses) with the exclude pointers applied;
// "form-sha256:" and the hex SHA-256 of a form body with its fields sorted
// and the fields named by top-level pointers ("/name") left out;
// MultipartScheme ("multipart-sha256:") of a multipart/form-data body's
// parts without its boundary, those named by top-level pointers left out
// (each part's field name, file name, media type and content hashed, the
// parts' hashes ordered by field name and hashed again); and Bytes of any
// other body. A body whose media type is JSON but which is not JSON
// is an error. A body still in a content coding (Request.Coding) is
// "coded " followed by the coding, a space and Bytes of the body, whatever
// its media type.
//
// exclude holds RFC 6901 JSON Pointers, as for Exclude; an invalid one is
// an error wrapping ErrInvalidPointer. The format is versioned
// ("idemhttp/v1"): stored fingerprints depend on it.
func HTTPInput(r Request, exclude []string) (string, error) {
	h, err := NewHTTP(exclude)
	if err != nil {
		return "", err
	}
	return h.Input(r)
}

// HTTP returns the fingerprint of r: HTTPScheme, a colon and the lowercase
// hex SHA-256 of HTTPInput(r, exclude).
func HTTP(r Request, exclude []string) (string, error) {
	h, err := NewHTTP(exclude)
	if err != nil {
		return "", err
	}
	return h.Sum(r)
}

// HTTPHasher fingerprints HTTP requests under one set of exclusions,
// checked and parsed once: a server makes one at start and uses it for
// every request (HTTP and HTTPInput make one per call). It is safe for
// concurrent use.
type HTTPHasher struct {
	opts       []Option // the JSON exclusions
	cfg        *config  // opts applied, and their pointers: read only
	ptrs       []pointer
	formFields map[string]bool // form fields the top-level pointers name
}

// NewHTTP checks exclude (RFC 6901 JSON Pointers, as for Exclude; an
// invalid one is an error wrapping ErrInvalidPointer) and returns a hasher
// for it.
func NewHTTP(exclude []string) (*HTTPHasher, error) {
	h := &HTTPHasher{formFields: map[string]bool{}}
	for _, s := range exclude {
		h.opts = append(h.opts, Exclude(s))
		// A top-level pointer ("/name", with RFC 6901 escapes; "/*" names a
		// field literally named "*": form fields have no wildcard) also
		// names a form field.
		if p, err := parsePointer(s, nil); err == nil && len(p) == 1 {
			h.formFields[p[0].name] = true
		}
	}
	var err error
	if h.cfg, h.ptrs, err = compile(h.opts); err != nil {
		return nil, err // a bad pointer is an error whatever the body
	}
	return h, nil
}

// Input returns the text whose SHA-256 is the fingerprint of r (see
// HTTPInput).
func (h *HTTPHasher) Input(r Request) (string, error) {
	in, err := h.appendInput(nil, r)
	if err != nil {
		return "", err
	}
	return string(in), nil
}

// Sum returns the fingerprint of r (see HTTP).
func (h *HTTPHasher) Sum(r Request) (string, error) {
	// Input, built on the stack when it fits (it is short but for a long
	// path or query): the fingerprint is then the only allocation.
	var buf [512]byte
	in, err := h.appendInput(buf[:0], r)
	if err != nil {
		return "", err
	}
	return format(HTTPScheme, sha256.Sum256(in)), nil
}

// appendInput appends Input.
func (h *HTTPHasher) appendInput(dst []byte, r Request) ([]byte, error) {
	dst = append(dst, "idemhttp/v1\n"...)
	for _, s := range [...]string{r.Method, r.Path, r.RawQuery} {
		dst = append(append(dst, s...), '\n')
	}
	return h.appendBody(dst, r)
}

// appendBody appends the body fingerprint of Input.
func (h *HTTPHasher) appendBody(dst []byte, r Request) ([]byte, error) {
	if len(r.Body) == 0 {
		return append(dst, "empty"...), nil
	}
	if r.Coding != "" {
		dst = append(append(append(dst, "coded "...), r.Coding...), ' ')
		return appendFormat(dst, RawScheme, sha256.Sum256(r.Body)), nil
	}
	mt := r.MediaType
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		// A byte order mark, which some Windows clients write, is not
		// part of the document (RFC 8259, section 8.1, lets a parser
		// ignore it; .NET's and Python's do).
		out, err := h.appendJSON(dst, bytes.TrimPrefix(r.Body, utf8BOM))
		if err != nil {
			return nil, fmt.Errorf("Content-Type is %s but the body is not JSON: %w", mt, err)
		}
		return out, nil
	}
	// Clients (curl -d, for one) often send JSON labelled as a form or as
	// nothing; JSON is recognised by its shape, so white space and key
	// order still do not matter.
	if t := bytes.TrimLeft(r.Body, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		if out, err := h.appendJSON(dst, r.Body); err == nil {
			return out, nil
		}
	}
	if mt == MultipartMediaType {
		if sum, ok := multipartSum(r.Body, h.formFields); ok {
			return appendFormat(dst, MultipartScheme, sum), nil
		}
	}
	form := r.Form
	if form == nil && mt == FormMediaType {
		if f, err := url.ParseQuery(string(r.Body)); err == nil {
			form = f
		}
	}
	if form != nil {
		vals := url.Values{}
		for k, v := range form {
			if !h.formFields[k] {
				vals[k] = v
			}
		}
		return appendFormat(dst, "form-sha256", sha256.Sum256([]byte(vals.Encode()))), nil
	}
	return appendFormat(dst, RawScheme, sha256.Sum256(r.Body)), nil
}

// utf8BOM is the UTF-8 byte order mark.
var utf8BOM = []byte("\xef\xbb\xbf")

// noOptions is the config of no options.
var noOptions config

// appendJSON appends Sum(body, h.opts...), the body's canonical form built
// on the stack when it fits.
func (h *HTTPHasher) appendJSON(dst, body []byte) ([]byte, error) {
	cfg := h.cfg
	if cfg == nil { // a zero HTTPHasher: no exclusions
		cfg = &noOptions
	}
	var buf [1024]byte
	canon, err := cfg.appendCanonical(buf[:0], body, h.ptrs)
	if err != nil {
		return nil, err
	}
	return appendFormat(dst, Scheme, sha256.Sum256(canon)), nil
}
