package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
}

// HTTPInput returns the text whose SHA-256 is the fingerprint of r:
//
//	"idemhttp/v1\n" method "\n" escaped path "\n" raw query "\n" body fingerprint
//
// The body fingerprint is "empty" for an empty body; Sum of a JSON body
// (media type application/json or *+json, or any body shaped like a JSON
// object or array that parses) with the exclude pointers applied;
// "form-sha256:" and the hex SHA-256 of a form body with its fields sorted
// and the fields named by top-level pointers ("/name") left out; and Bytes
// of any other body. A body whose media type is JSON but which is not JSON
// is an error.
//
// exclude holds RFC 6901 JSON Pointers, as for Exclude; an invalid one is
// an error wrapping ErrInvalidPointer. The format is versioned
// ("idemhttp/v1"): stored fingerprints depend on it.
func HTTPInput(r Request, exclude []string) (string, error) {
	body, err := httpBody(r, exclude)
	if err != nil {
		return "", err
	}
	return "idemhttp/v1\n" + r.Method + "\n" + r.Path + "\n" + r.RawQuery + "\n" + body, nil
}

// HTTP returns the fingerprint of r: HTTPScheme, a colon and the lowercase
// hex SHA-256 of HTTPInput(r, exclude).
func HTTP(r Request, exclude []string) (string, error) {
	in, err := HTTPInput(r, exclude)
	if err != nil {
		return "", err
	}
	return digest(HTTPScheme, []byte(in)), nil
}

// httpBody returns the body fingerprint of HTTPInput.
func httpBody(r Request, exclude []string) (string, error) {
	opts := make([]Option, len(exclude))
	for i, p := range exclude {
		opts[i] = Exclude(p)
	}
	if len(opts) > 0 {
		if _, err := Canonicalize([]byte("{}"), opts...); err != nil {
			return "", err // a bad pointer is an error whatever the body
		}
	}
	if len(r.Body) == 0 {
		return "empty", nil
	}
	mt := r.MediaType
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		fp, err := Sum(r.Body, opts...)
		if err != nil {
			return "", fmt.Errorf("Content-Type is %s but the body is not JSON: %w", mt, err)
		}
		return fp, nil
	}
	// Clients (curl -d, for one) often send JSON labelled as a form or as
	// nothing; JSON is recognised by its shape, so white space and key
	// order still do not matter.
	if t := bytes.TrimLeft(r.Body, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		if fp, err := Sum(r.Body, opts...); err == nil {
			return fp, nil
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
			if !excludesField(exclude, k) {
				vals[k] = v
			}
		}
		sum := sha256.Sum256([]byte(vals.Encode()))
		return "form-sha256:" + hex.EncodeToString(sum[:]), nil
	}
	return Bytes(r.Body), nil
}

// excludesField reports whether one of the pointers names the top-level
// form field name: "/name", with RFC 6901 escapes ("/*" names a field
// literally named "*": form fields have no wildcard).
func excludesField(exclude []string, name string) bool {
	for _, s := range exclude {
		if p, err := parsePointer(s, nil); err == nil && len(p) == 1 && p[0].name == name {
			return true
		}
	}
	return false
}
